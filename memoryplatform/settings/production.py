"""Production settings: everything in base, plus refusal to start insecurely."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import INSECURE_DEV_SECRET_KEY, SECRET_KEY, env

DEBUG = env.bool("DEBUG", default=False)

if (
    SECRET_KEY == INSECURE_DEV_SECRET_KEY
    or SECRET_KEY.startswith("django-insecure")
    or len(SECRET_KEY) < 50
    or len(set(SECRET_KEY)) < 5
):
    raise ImproperlyConfigured(
        "SECRET_KEY is missing or insecure: set a random value of at least 50 characters "
        "(python -c 'import secrets; print(secrets.token_urlsafe(64))')."
    )

SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
