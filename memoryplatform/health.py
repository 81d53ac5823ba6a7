"""Health of the parts the service depends on; used by /health/ready and /stats."""

from __future__ import annotations

import logging
from dataclasses import dataclass

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
    from memories.embeddings import embedding_health

    ok, detail = embedding_health()
    return Check(ok, detail)


def readiness() -> dict[str, Check]:
    return {
        "database": check_database(),
        "redis": check_redis(),
        "broker": check_broker(),
        "embedding": check_embedding(),
    }
