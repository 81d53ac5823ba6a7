"""HMAC signing as a `requests` auth: it signs the prepared request, so the bytes signed are the
bytes sent, whoever serialised the body (schemathesis, the SDK, a test)."""

from __future__ import annotations

import itertools
import secrets
import time
from urllib.parse import urlsplit

import requests

from memoryplatform.client import sign, sign_v2

BODY_SIGNED = ("POST", "PUT", "PATCH")


class HmacAuth(requests.auth.AuthBase):
    """Signs with v1, v2, or each in turn (`versions=(1, 2)`)."""

    def __init__(self, key_id: str, secret: str, *, versions: tuple[int, ...] = (1,)) -> None:
        self.key_id = key_id
        self.secret = secret
        self._versions = itertools.cycle(versions)

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        method = (r.method or "GET").upper()
        body = r.body or b""
        if isinstance(body, str):
            body = body.encode("utf-8")
        version = next(self._versions)
        if version == 1 and method not in BODY_SIGNED:
            body = b""  # v1 signs a GET's or DELETE's timestamp alone; v2 covers any body
        ts = str(int(time.time()))
        r.headers["X-API-Key"] = self.key_id
        r.headers["X-Timestamp"] = ts
        if version == 2:
            # v2 covers the request target exactly as sent (percent-encoding included).
            url = urlsplit(r.url or "")
            full_path = url.path + (f"?{url.query}" if url.query else "")
            nonce = secrets.token_urlsafe(18)
            r.headers["X-Signature-Version"] = "2"
            r.headers["X-Nonce"] = nonce
            r.headers["X-Signature"] = sign_v2(self.secret, ts, nonce, method, full_path, body)
        else:
            r.headers["X-Signature"] = sign(self.secret, ts, body)
        return r


class TakingTurns(requests.auth.AuthBase):
    """Each request signed by the next of several auths (keys, signature versions) in turn."""

    def __init__(self, *auths: requests.auth.AuthBase) -> None:
        self._auths = itertools.cycle(auths)

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return next(self._auths)(r)
