"""Login throttling hooks for django-axes: who the client is, and the page a locked-out login gets.

The admin and the console share the admin's login form, so one throttle covers both (settings:
LOGIN_FAILURE_LIMIT, LOGIN_COOLOFF_MINUTES, LOGIN_TRUSTED_PROXY_COUNT; docs in base.py).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_ip(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or the one the trusted proxies saw.

    Each of LOGIN_TRUSTED_PROXY_COUNT proxies appends the address it received the request from
    to X-Forwarded-For, so the client is that many entries from the right; whatever stands
    further left was sent by the client itself and proves nothing.
    """
    remote = str(request.META.get("REMOTE_ADDR") or "")
    count = settings.LOGIN_TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    # Fewer entries than proxies: the request did not come through them all; do not guess.
    return hops[-count] if len(hops) >= count else remote


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """429 with a page that says what happened, for how long, and who can unlock."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    minutes = settings.LOGIN_COOLOFF_MINUTES
    response = render(
        request,
        "admin/locked_out.html",
        {
            "title": "Too many failed logins",
            "username": username,
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "minutes": minutes,
        },
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    return response
