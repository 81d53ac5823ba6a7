"""Behaviour that needs the production cache: Redis shared by several processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from .helpers import error_code, inside_one_rate_window

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent


@override_settings(API_RATE_LIMIT=3, API_RATE_LIMIT_WINDOW_SECONDS=60)
def test_the_rate_limit_is_shared_across_processes(redis_required, api, issued):
    # Another process (think: another gunicorn worker) spends the key's whole quota...
    code = (
        "import django; django.setup()\n"
        "from tenants.models import ApiKey\n"
        "from tenants.ratelimit import check_rate_limit\n"
        f"key = ApiKey(pk={issued.api_key.pk})\n"
        "for _ in range(3): check_rate_limit(key)\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.test",
        "API_RATE_LIMIT": "3",
        "API_RATE_LIMIT_WINDOW_SECONDS": "60",
    }
    inside_one_rate_window(30.0)  # the other process takes seconds to start
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
    # ...so this process must refuse the next request.
    r = api.get("/stats")
    assert (r.status_code, error_code(r)) == (429, "RATE_LIMITED")
    assert int(r["Retry-After"]) >= 1


def test_stats_report_redis_down_when_it_is(redis_required, api, settings):
    from django.core.cache import caches

    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:1/0"}
    }
    caches._settings = None  # type: ignore[attr-defined]
    try:
        r = api.get("/stats")
        assert r.status_code == 200  # the API keeps working (rate limiter fails open)
        assert r.json()["data"]["redis_ok"] is False
    finally:
        caches._settings = None  # type: ignore[attr-defined]
