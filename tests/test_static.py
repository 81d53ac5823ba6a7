"""Static files (admin, console, API docs) are served by the app itself (WhiteNoise): under the
test client with DEBUG off, and under gunicorn — `make run` and production — with no
collectstatic step and no proxy rule."""

from __future__ import annotations

import pytest
import requests
from django.test import Client

from .livestack import live_stack

ASSETS = [
    "/static/admin/css/base.css",
    "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
    "/static/tenants/apidocs-signing.js",
]


@pytest.mark.parametrize("path", ASSETS)
def test_static_assets_are_served_with_debug_off(path: str) -> None:
    r = Client().get(path)
    assert r.status_code == 200
    assert b"".join(r.streaming_content)  # type: ignore[attr-defined]


def test_a_missing_static_file_is_a_404() -> None:
    assert Client().get("/static/admin/css/no-such-file.css").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_gunicorn_serves_the_admin_styles(tmp_path) -> None:
    with live_stack(tmp_path, servers=1) as stack:
        for path in ASSETS:
            r = requests.get(stack.urls[0] + path, timeout=10)
            assert r.status_code == 200, path
            assert len(r.content) > 100
        assert (
            "text/css"
            in requests.get(stack.urls[0] + ASSETS[0], timeout=10).headers["Content-Type"]
        )
