"""/api/docs/ is self-contained: Swagger UI and the signing helper come from our static files.

The page must work offline and load no third-party script that could read what is typed into
it (the signing helper holds an API secret), so every asset it references is a local static
file that the static-files finders (runserver, the live server) and `collectstatic` (production,
served from STATIC_ROOT) both provide. The signing itself is checked in a browser:
tests/browser/test_api_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

_ASSET_RE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


def _assets(html: str) -> list[str]:
    return _ASSET_RE.findall(html)


def _page() -> str:
    r = Client().get("/api/docs/")
    assert r.status_code == 200
    return r.content.decode()


def test_the_docs_page_references_only_local_assets():
    html = _page()
    assets = _assets(html)
    assert assets, "no script or stylesheet found"
    remote = [a for a in assets if re.match(r"^(https?:)?//", a)]
    assert remote == []
    assert "cdn." not in html.lower() and "unpkg" not in html.lower()
    # No inline script either: everything the page runs is a reviewed static file.
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    for needed in (
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
        "/static/tenants/apidocs-signing.js",
        "/static/tenants/apidocs.js",
    ):
        assert needed in assets


def test_every_asset_of_the_docs_page_is_a_static_file_that_exists():
    for asset in _assets(_page()):
        assert asset.startswith("/static/"), asset
        found = finders.find(asset.removeprefix("/static/"))
        assert found, f"{asset} is not a static file"
        assert Path(found).stat().st_size > 0


def test_collectstatic_ships_the_docs_assets_for_production(tmp_path):
    with override_settings(STATIC_ROOT=tmp_path):
        call_command("collectstatic", interactive=False, verbosity=0)
        for asset in _assets(_page()):
            assert (tmp_path / asset.removeprefix("/static/")).is_file(), asset
