"""The pages a person reaches first: `/`, the favicon, the admin's branding and the links
between the admin and the review console."""

from __future__ import annotations

import pytest
from django.test import Client

from .factories import MembershipFactory, UserFactory


@pytest.mark.django_db
def test_the_root_is_a_landing_page_linking_console_admin_docs_and_health(settings):
    settings.API_DOCS_PUBLIC = True
    r = Client().get("/")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/html")
    body = r.content.decode()
    for href in ('href="/review/"', 'href="/admin/"', 'href="/api/docs/"', 'href="/health"'):
        assert href in body


@pytest.mark.django_db
def test_the_landing_page_hides_the_docs_link_when_the_docs_are_staff_only(settings):
    settings.API_DOCS_PUBLIC = False
    body = Client().get("/").content.decode()
    assert 'href="/api/docs/"' not in body and 'href="/review/"' in body


@pytest.mark.django_db
def test_api_paths_still_answer_the_api_404():
    r = Client().get("/no-such-endpoint")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


def test_the_favicon_is_served():
    r = Client().get("/favicon.ico")
    assert r.status_code == 301
    icon = Client().get(r["Location"])
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content)


@pytest.mark.django_db
def test_admin_is_branded_and_links_to_the_console_and_back():
    staff = UserFactory(is_staff=True, is_superuser=True)
    MembershipFactory(user=staff)
    client = Client()
    client.force_login(staff)
    admin_page = client.get("/admin/").content.decode()
    assert "Memory platform admin" in admin_page and 'href="/review/"' in admin_page
    console_page = client.get("/review/", follow=True).content.decode()
    assert 'href="/admin/"' in console_page and "favicon.svg" in console_page


@pytest.mark.django_db
def test_console_page_titles_name_the_team(lead):
    for path in ("dashboard/", "graph/", "keys/", "lifecycle/"):
        page = lead.get(f"/review/team_a/{path}").content.decode()
        assert "· Team A · Memory platform</title>" in page, path
