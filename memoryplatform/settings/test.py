"""Test settings: base, with fast password hashing and generous limits tests set themselves."""

from __future__ import annotations

from .base import *  # noqa: F403
from .base import ALLOWED_HOSTS, env

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Django's test client sends Host: testserver; no deployment needs to accept it.
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]
# Tests that exercise the limiter set their own number; everything else must not trip it.
API_RATE_LIMIT = env.int("API_RATE_LIMIT", default=0)
# Tests fail instead of skipping when a service they need is unreachable (CI sets it).
REQUIRE_SERVICES = env.bool("REQUIRE_SERVICES", default=False)
# Automatic lifecycle jobs run synchronously in tests without a broker (deterministic).
LIFECYCLE_INLINE = env.bool("LIFECYCLE_INLINE", default=True)
