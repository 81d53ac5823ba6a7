"""Health of the parts the service depends on; used by /health/ready and /stats."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return Check(True, connection.vendor)
    except Exception as exc:
        return Check(False, f"{type(exc).__name__}: {exc}")


def check_redis() -> Check:
    """Redis when configured; in embedded mode there is none to check (working memory is in the DB)."""
    if not settings.REDIS_URL:
        return Check(True, "not configured (embedded mode)")
    try:
        from django_redis import get_redis_connection

        get_redis_connection("default").ping()
        return Check(True, "ok")
    except Exception as exc:
        return Check(False, f"{type(exc).__name__}: {exc}")


def check_broker() -> Check:
    if not settings.CELERY_BROKER_URL:
        return Check(True, "not configured (jobs run in-process)")
    try:
        from kombu import Connection

        with Connection(settings.CELERY_BROKER_URL, connect_timeout=1) as conn:
            conn.ensure_connection(max_retries=1, timeout=1)
        return Check(True, "ok")
    except Exception as exc:
        return Check(False, f"{type(exc).__name__}: {exc}")


def check_embedding() -> Check:
    from memories.retrieval.embeddings import embedding_health

    ok, detail = embedding_health()
    return Check(ok, detail)


def readiness() -> dict[str, Check]:
    return {
        "database": check_database(),
        "redis": check_redis(),
        "broker": check_broker(),
        "embedding": check_embedding(),
    }


# Headers a reverse proxy adds: a request carrying one came from elsewhere, even when the proxy
# runs on this host and connects over loopback.
_FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def may_scrape_metrics(request: Any) -> bool:
    """Whether this caller may read `GET /metrics`: with `Authorization: Bearer <METRICS_TOKEN>`
    (when one is set), or from an address in METRICS_ALLOWED_IPS (addresses or networks; default
    loopback) without proxy headers — a request relayed by a proxy is never "local"."""
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if (
        token
        and sent.startswith("Bearer ")
        and hmac.compare_digest(sent[7:].strip().encode(), token.encode())
    ):
        return True
    meta = request.META
    if any(meta.get(h) for h in _FORWARDING_HEADERS):
        return False
    try:
        address = ipaddress.ip_address(meta.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(
        address in ipaddress.ip_network(net, strict=False) for net in settings.METRICS_ALLOWED_IPS
    )


def may_see_details(request: Any) -> bool:
    """Whether /health/ready may show error texts and versions to this (unauthenticated) caller.

    Yes with the `X-Health-Token` header equal to HEALTH_DETAILS_TOKEN (when one is set), or from
    a loopback address without proxy headers (HEALTH_DETAILS_LOOPBACK, on by default: the
    operator on the host). Everyone else gets the names of the failing parts only.
    """
    token = settings.HEALTH_DETAILS_TOKEN
    sent = request.headers.get("X-Health-Token", "")
    if token and sent and hmac.compare_digest(sent.encode(), token.encode()):
        return True
    if not settings.HEALTH_DETAILS_LOOPBACK:
        return False
    meta = request.META
    if any(meta.get(h) for h in _FORWARDING_HEADERS):
        return False
    try:
        return ipaddress.ip_address(meta.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False
