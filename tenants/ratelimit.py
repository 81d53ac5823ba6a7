"""Per-key fixed-window rate limit kept in the cache (shared across processes with Redis).

`ApiKeyRateThrottle` is DRF's throttle hook (REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]): DRF
calls it after authentication and permissions, so authenticating a request stays free of side
effects other than the key's own bookkeeping, and a view can opt out with `throttle_classes`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from core.errors import DomainError, ErrorCode

from .models import ApiKey, McpToken

logger = logging.getLogger(__name__)

# When the cache is unreachable the limiter lets requests through rather than failing the whole
# API; this remembers the outage briefly so each request does not pay a connect timeout.
_cache_down_until = 0.0
_CACHE_RETRY_SECONDS = 5.0


def check_rate_limit(api_key: ApiKey | McpToken) -> None:
    """Counts one request for the key (or MCP token); raises RATE_LIMITED (429 + Retry-After)
    over the limit."""
    global _cache_down_until
    limit = api_key.rate_limit if api_key.rate_limit is not None else settings.API_RATE_LIMIT
    if not limit:
        return
    now = time.time()
    if now < _cache_down_until:
        return
    window = settings.API_RATE_LIMIT_WINDOW_SECONDS
    bucket = int(now // window)
    # MCP tokens count apart from keys: their primary keys come from another table.
    kind = "mcp:" if isinstance(api_key, McpToken) else ""
    key = f"rl:{kind}{api_key.pk}:{bucket}"
    try:
        # add() is atomic and sets the expiry once; incr() is atomic in Redis and LocMem.
        cache.add(key, 0, timeout=window + 1)
        count = cache.incr(key)
    except ValueError:
        # The key expired between add and incr (window boundary): start a new count.
        cache.set(key, 1, timeout=window + 1)
        count = 1
    except Exception:
        _cache_down_until = now + _CACHE_RETRY_SECONDS
        logger.warning(
            "rate limiter cache unreachable; not limiting for %s s", _CACHE_RETRY_SECONDS
        )
        return
    if count > limit:
        retry_after = max(1, int((bucket + 1) * window - now + 0.999))
        raise DomainError(
            ErrorCode.RATE_LIMITED,
            f"rate limit of {limit} requests per {window} s exceeded",
            headers={"Retry-After": str(retry_after)},
        )


class ApiKeyRateThrottle(BaseThrottle):
    """Counts each request authenticated by an API key against that key's limit.

    Over the limit it raises RATE_LIMITED itself (429 in the API's envelope, with Retry-After)
    instead of returning False, so the answer is the same as every other domain error.
    """

    def allow_request(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            check_rate_limit(request.auth)
        return True
