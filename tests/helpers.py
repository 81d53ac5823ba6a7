"""A signing wrapper around Django's test client: real HMAC, real auth class, no mocks."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from django.test import Client


def sign(secret: str, ts: str, body: bytes = b"") -> str:
    return hmac.new(secret.encode(), ts.encode() + body, hashlib.sha256).hexdigest()


@dataclass
class SignedClient:
    client: Client
    key_id: str
    secret: str

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        ensure_ascii: bool = True,
        ts: int | str | None = None,
        headers: dict[str, str] | None = None,
        omit: tuple[str, ...] = (),
        secret: str | None = None,
    ):
        method = method.upper()
        if raw is None:
            raw = (
                b"" if body is None else json.dumps(body, ensure_ascii=ensure_ascii).encode("utf-8")
            )
        ts_str = str(int(time.time())) if ts is None else str(ts)
        signed_body = raw if method in ("POST", "PUT", "PATCH") else b""
        all_headers = {
            "X-API-Key": self.key_id,
            "X-Timestamp": ts_str,
            "X-Signature": sign(secret or self.secret, ts_str, signed_body),
        }
        all_headers.update(headers or {})
        for name in omit:
            all_headers.pop(name, None)
        return self.client.generic(
            method, path, data=raw, content_type="application/json", headers=all_headers
        )

    def get(self, path: str, **kw: Any):
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any):
        return self.call("POST", path, body if body is not None or "raw" in kw else {}, **kw)

    def put(self, path: str, body: Any = None, **kw: Any):
        return self.call("PUT", path, body, **kw)

    def delete(self, path: str, **kw: Any):
        return self.call("DELETE", path, **kw)


def ok_data(response) -> Any:
    payload = response.json()
    assert payload["ok"] is True, payload
    return payload["data"]


def error_code(response) -> str:
    payload = response.json()
    assert payload["ok"] is False, payload
    return payload["code"]


def inside_one_rate_window(seconds_needed: float = 10.0) -> None:
    """Waits, if need be, until the rate limiter's current fixed window (tenants.ratelimit:
    API_RATE_LIMIT_WINDOW_SECONDS) has `seconds_needed` left, so the requests a test counts all
    fall in one window: requests that straddle its boundary are counted in two and none is
    refused."""
    from django.conf import settings

    window = float(settings.API_RATE_LIMIT_WINDOW_SECONDS)
    left = window - time.time() % window
    if left < seconds_needed:
        time.sleep(left + 0.05)


def long_cold(*ids: int) -> None:
    """Puts memories in the cold tier since longer than CLEANUP_COLD_GRACE_DAYS: the ladder's
    last step, so a cleanup that finds them candidates moves them to the trash (docs/lifecycle.md,
    "Tiers")."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from memories.models import Memory, MemoryTier

    since = timezone.now() - timedelta(days=settings.CLEANUP_COLD_GRACE_DAYS + 1)
    Memory.objects.filter(pk__in=ids).update(tier=MemoryTier.COLD, tier_changed_at=since)
