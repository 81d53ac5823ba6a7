"""Console API keys: a lead issues (secret shown once, no-store), rotates (grace period) and
revokes keys through tenants.services; viewers only look; other teams' keys are 404."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tenants.models import ApiKey
from tenants.services import api_key_issue

from .factories import AgentFactory
from .helpers import SignedClient

pytestmark = pytest.mark.django_db


def keys_url(team_id: str, rest: str = "") -> str:
    return f"/review/{team_id}/keys/{rest}"


def issue(client: Client, team_id: str, **data: str):
    response = client.post(keys_url(team_id, "issue/"), data)
    assert response.status_code == 200, response.content.decode()[:1000]
    return response, response.context["issued"]


def api_status(key_id: str, secret: str) -> int:
    return SignedClient(Client(), key_id, secret).get("/lifecycle/auto-config").status_code


class TestIssue:
    def test_the_secret_is_shown_once_on_a_no_store_page_and_the_key_works(self, team, lead):
        response, issued = issue(lead, team.id, label="ci bot", rate_limit="120")
        body = response.content.decode()
        assert issued.secret in body and issued.key_id in body
        assert "no-store" in response["Cache-Control"]
        api_key = ApiKey.objects.get(key_id=issued.key_id)
        assert (api_key.team_id, api_key.label, api_key.rate_limit, api_key.agent) == (
            "team_a",
            "ci bot",
            120,
            None,
        )
        # Never again: not on the list, not in a message, not in the session.
        listing = lead.get(keys_url(team.id))
        assert issued.key_id in listing.content.decode()
        assert issued.secret not in listing.content.decode()
        assert not list(listing.context["messages"])
        assert issued.secret not in str(dict(lead.session.items()))
        assert issued.secret not in str(lead.cookies)
        # The key authenticates against the API, and its use shows up as "last used".
        assert api_status(issued.key_id, issued.secret) == 200
        api_key.refresh_from_db()
        assert api_key.last_used_at is not None

    def test_the_secret_is_never_logged(self, team, lead, caplog):
        caplog.set_level("DEBUG")
        _, issued = issue(lead, team.id)
        assert issued.secret not in caplog.text and issued.key_id in caplog.text

    def test_an_agent_bound_key_with_an_expiry(self, team, lead):
        agent = AgentFactory(team=team, agent_id="coder")
        _, issued = issue(lead, team.id, agent="coder", expires_in_days="7")
        api_key = ApiKey.objects.get(key_id=issued.key_id)
        assert api_key.agent == agent
        assert api_key.expires_at is not None
        assert timedelta(days=6) < api_key.expires_at - timezone.now() <= timedelta(days=7)
        page = lead.get(keys_url(team.id)).content.decode()
        assert "coder" in page

    def test_an_agent_of_another_team_or_bad_values_re_render_the_form(
        self, team, other_team, lead
    ):
        AgentFactory(team=other_team, agent_id="their_agent")
        for data in (
            {"agent": "their_agent"},
            {"rate_limit": "-1"},
            {"expires_in_days": "0"},
            {"expires_in_days": "soon"},
        ):
            response = lead.post(keys_url(team.id, "issue/"), data)
            assert response.status_code == 400, data
            assert response.context["form"].errors, data
        assert not ApiKey.objects.filter(team=team).exists()

    def test_the_list_shows_the_columns(self, team, lead):
        key = api_key_issue(team=team, label="shown", rate_limit=0).api_key
        page = lead.get(keys_url(team.id)).content.decode()
        for text in (key.key_id, "shown", "(team-wide)", "active", "never", "unlimited"):
            assert text in page


class TestRotateAndRevoke:
    def test_rotate_shows_the_new_secret_once_and_keeps_the_old_for_the_grace(self, team, lead):
        old = api_key_issue(team=team, label="rotating")
        page = lead.get(keys_url(team.id, f"{old.key_id}/rotate/"))
        assert page.status_code == 200 and "grace" in page.content.decode()
        response = lead.post(keys_url(team.id, f"{old.key_id}/rotate/"), {"grace_hours": "2"})
        assert response.status_code == 200 and "no-store" in response["Cache-Control"]
        new = response.context["issued"]
        assert new.key_id == old.key_id and new.secret != old.secret
        assert new.secret in response.content.decode()
        assert new.secret not in lead.get(keys_url(team.id)).content.decode()
        assert api_status(old.key_id, new.secret) == 200
        assert api_status(old.key_id, old.secret) == 200  # still within the grace period
        api_key = ApiKey.objects.get(key_id=old.key_id)
        assert (
            timedelta(minutes=119)
            < api_key.previous_secret_expires_at - timezone.now()
            <= timedelta(hours=2)
        )

    def test_rotating_again_within_the_grace_keeps_the_original_and_says_so(self, team, lead):
        old = api_key_issue(team=team, label="rotated twice")
        url = keys_url(team.id, f"{old.key_id}/rotate/")
        first = lead.post(url, {"grace_hours": "2"}).context["issued"]
        response = lead.post(url, {"grace_hours": "1"})
        second = response.context["issued"]
        assert "1 older secret still in its own grace too" in response.content.decode()
        for secret in (old.secret, first.secret, second.secret):
            assert api_status(old.key_id, secret) == 200
        page = lead.get(keys_url(team.id)).content.decode()
        row = page.split(f'data-key-id="{old.key_id}"')[1].split("</tr>")[0]
        assert "2 old secrets, the last until" in row

    def test_rotate_without_grace_stops_the_old_secret_at_once(self, team, lead):
        old = api_key_issue(team=team)
        response = lead.post(keys_url(team.id, f"{old.key_id}/rotate/"), {"grace_hours": "0"})
        new = response.context["issued"]
        assert api_status(old.key_id, old.secret) == 401
        assert api_status(old.key_id, new.secret) == 200

    def test_a_bad_grace_re_renders_the_form(self, team, lead):
        old = api_key_issue(team=team)
        response = lead.post(keys_url(team.id, f"{old.key_id}/rotate/"), {"grace_hours": "-3"})
        assert response.status_code == 400 and response.context["form"].errors
        assert api_status(old.key_id, old.secret) == 200

    def test_revoke_asks_first_then_the_key_gets_401(self, team, lead):
        _, issued = issue(lead, team.id, label="to revoke")
        assert api_status(issued.key_id, issued.secret) == 200
        confirm = lead.get(keys_url(team.id, f"{issued.key_id}/revoke/"))
        assert confirm.status_code == 200 and "Revoke this key" in confirm.content.decode()
        assert ApiKey.objects.get(key_id=issued.key_id).revoked_at is None  # GET changes nothing
        response = lead.post(keys_url(team.id, f"{issued.key_id}/revoke/"), follow=True)
        assert response.status_code == 200
        assert f"Key {issued.key_id} revoked" in response.content.decode()
        assert ApiKey.objects.get(key_id=issued.key_id).revoked_at is not None
        assert api_status(issued.key_id, issued.secret) == 401
        # A revoked key cannot be rotated back to life.
        lead.post(keys_url(team.id, f"{issued.key_id}/rotate/"), {})
        assert api_status(issued.key_id, issued.secret) == 401


class TestScoping:
    def test_a_viewer_sees_the_list_but_gets_403_on_every_change(self, team, viewer):
        key = api_key_issue(team=team, label="viewable")
        page = viewer.get(keys_url(team.id))
        assert page.status_code == 200
        body = page.content.decode()
        assert key.key_id in body and 'id="issue-form"' not in body and "Rotate" not in body
        assert viewer.post(keys_url(team.id, "issue/"), {"label": "x"}).status_code == 403
        for action in ("rotate", "revoke"):
            assert viewer.get(keys_url(team.id, f"{key.key_id}/{action}/")).status_code == 403
            assert viewer.post(keys_url(team.id, f"{key.key_id}/{action}/"), {}).status_code == 403
        assert ApiKey.objects.filter(team=team).count() == 1
        api_key = ApiKey.objects.get(key_id=key.key_id)
        assert api_key.revoked_at is None and api_key.rotated_at is None

    def test_keys_of_another_team_answer_404_and_are_never_listed(self, team, other_team, lead):
        theirs = api_key_issue(team=other_team, label="secret project")
        body = lead.get(keys_url(team.id)).content.decode()
        assert theirs.key_id not in body and "secret project" not in body
        for action in ("rotate", "revoke"):
            url = keys_url(team.id, f"{theirs.key_id}/{action}/")
            assert lead.get(url).status_code == 404
            assert lead.post(url, {}).status_code == 404
            # and through the other team's own URLs, which this lead cannot see at all
            url = keys_url(other_team.id, f"{theirs.key_id}/{action}/")
            assert lead.get(url).status_code == 404
            assert lead.post(url, {}).status_code == 404
        assert lead.get(keys_url(other_team.id)).status_code == 404
        assert lead.post(keys_url(other_team.id, "issue/"), {"label": "x"}).status_code == 404
        api_key = ApiKey.objects.get(key_id=theirs.key_id)
        assert api_key.revoked_at is None and api_key.rotated_at is None
        assert not ApiKey.objects.filter(team=other_team, label="x").exists()
        assert api_status(theirs.key_id, theirs.secret) == 200

    def test_issue_only_accepts_post(self, team, lead):
        assert lead.get(keys_url(team.id, "issue/")).status_code == 405


def test_the_key_list_does_not_query_per_key(team, lead):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert lead.get(keys_url(team.id)).status_code == 200
        return len(ctx.captured_queries)

    agent = AgentFactory(team=team, agent_id="bound")
    api_key_issue(team=team, agent=agent)
    few = queries()
    for _ in range(10):
        api_key_issue(team=team, agent=agent, label="more")
    assert queries() == few


class TestMcpTokens:
    """The page's MCP token section (docs/mcp.md): issue (shown once, no-store), revoke."""

    def test_issue_shows_the_token_once_and_it_opens_mcp(self, team, lead):
        from tenants.authentication import mcp_token_authenticate
        from tenants.models import McpToken

        AgentFactory(team=team, agent_id="bot")
        response = lead.post(
            keys_url(team.id, "mcp/issue/"), {"mcp-label": "cursor", "mcp-agent": "bot"}
        )
        assert response.status_code == 200, response.content.decode()[:1000]
        issued = response.context["issued"]
        body = response.content.decode()
        assert issued.token in body and "no-store" in response["Cache-Control"]
        assert '"url": "http://testserver/mcp"' in body
        stored = McpToken.objects.get(team=team)
        assert (stored.label, stored.agent.agent_id) == ("cursor", "bot")
        assert issued.token not in stored.token_hash
        assert mcp_token_authenticate(issued.token).agent_id == "bot"
        listing = lead.get(keys_url(team.id)).content.decode()
        assert str(stored) in listing and issued.token not in listing

    def test_revoke_asks_first_and_viewers_and_other_teams_cannot(
        self, team, other_team, lead, viewer
    ):
        from tenants.services import mcp_token_issue

        mine = mcp_token_issue(team=team).mcp_token
        theirs = mcp_token_issue(team=other_team).mcp_token
        url = keys_url(team.id, f"mcp/{mine.token_id}/revoke/")
        assert viewer.post(url, {}).status_code == 403
        assert viewer.post(keys_url(team.id, "mcp/issue/"), {}).status_code == 403
        assert lead.post(keys_url(team.id, f"mcp/{theirs.token_id}/revoke/")).status_code == 404
        assert "Revoke this token" in lead.get(url).content.decode()
        mine.refresh_from_db()
        assert mine.revoked_at is None  # GET changes nothing
        assert lead.post(url).status_code == 302
        mine.refresh_from_db()
        theirs.refresh_from_db()
        assert mine.status == "revoked" and theirs.status == "active"
