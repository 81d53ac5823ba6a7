"""Production settings: everything in base, plus refusal to start insecurely."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import INSECURE_DEV_SECRET_KEY, REDIS_URL, SECRET_KEY, env

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

# Replay protection (v2 nonces) and the per-key rate limits live in the cache. Without REDIS_URL
# the cache is per process: a nonce used on one gunicorn worker is accepted again by the next, and
# every worker counts its own limit (measured: 2 workers let 8 of 60 replays and 10 of 20
# requests over a limit of 5 through). Refuse that rather than degrade quietly; a deployment
# that really runs a single process says so.
ALLOW_PER_PROCESS_CACHE = env.bool("ALLOW_PER_PROCESS_CACHE", default=False)
if not REDIS_URL and not ALLOW_PER_PROCESS_CACHE:
    raise ImproperlyConfigured(
        "REDIS_URL is not set: replay protection and rate limits would be per process, so a "
        "request replayed to another worker would be accepted. Set REDIS_URL (a Redis shared by "
        "every process), or ALLOW_PER_PROCESS_CACHE=1 if this deployment runs exactly one process."
    )

SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
# TLS is terminated by a proxy (nginx) that sets this header: "HEADER,value", empty = no proxy.
# Only safe when the proxy overwrites the header a client sends (nginx: proxy_set_header).
_proxy_ssl_header = env.list("SECURE_PROXY_SSL_HEADER", default=["HTTP_X_FORWARDED_PROTO", "https"])
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise ImproperlyConfigured(
        "SECURE_PROXY_SSL_HEADER must be 'HEADER,value' (e.g. HTTP_X_FORWARDED_PROTO,https) or empty"
    )
SECURE_PROXY_SSL_HEADER = (
    (_proxy_ssl_header[0], _proxy_ssl_header[1]) if _proxy_ssl_header else None
)
# Plain HTTP is redirected to HTTPS, except the probes a load balancer or an orchestrator sends
# to the process directly (no TLS there), and /metrics: a Prometheus on the same host scrapes
# gunicorn's port over plain HTTP (METRICS_ALLOWED_IPS, docs/metrics.md) and got a 301 to an
# https:// URL gunicorn cannot answer. The exemption exposes nothing: a scraper's token is sent
# with its first request, before any redirect could have helped.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^health/ready$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
# Preloading is a commitment of the whole registered domain (hstspreload.org), not of this
# service: off unless chosen, and then `check --deploy` need not remind of it.
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SECURE_CONTENT_TYPE_NOSNIFF = True
# New teams accept only v2 signatures (method and path signed, single-use nonce); a team with
# legacy v1 clients is switched back in the admin, where the risk is spelled out.
NEW_TEAMS_REQUIRE_SIGNATURE_V2 = env.bool("NEW_TEAMS_REQUIRE_SIGNATURE_V2", default=True)
# The OpenAPI schema and the docs page: staff only unless deliberately published.
API_DOCS_PUBLIC = env.bool("API_DOCS_PUBLIC", default=False)
