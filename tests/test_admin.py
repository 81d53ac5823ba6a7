"""Admin scoping: a lead of team A gets nothing of team B by any admin URL."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from tenants import services
from tenants.models import Agent, ApiKey, Team, TeamMembership

from .factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(team, other_team):
    a_agent = Agent.objects.create(team=team, agent_id="a_agent", name="A agent")
    b_agent = Agent.objects.create(team=other_team, agent_id="b_agent", name="B agent")
    a_key = services.api_key_issue(team=team, label="a-key")
    b_key = services.api_key_issue(team=other_team, label="b-key")
    lead = UserFactory(username="lead_a")
    MembershipFactory(user=lead, team=team, role="lead")
    viewer = UserFactory(username="viewer_a")
    MembershipFactory(user=viewer, team=team, role="viewer")
    b_user = UserFactory(username="lead_b")
    b_membership = MembershipFactory(user=b_user, team=other_team, role="lead")
    return {
        "a_agent": a_agent,
        "b_agent": b_agent,
        "a_key": a_key,
        "b_key": b_key,
        "lead": lead,
        "viewer": viewer,
        "b_membership": b_membership,
    }


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def b_object_urls(world, other_team) -> list[str]:
    urls = []
    for model, pk in (
        (Team, other_team.pk),
        (Agent, world["b_agent"].pk),
        (ApiKey, world["b_key"].api_key.pk),
        (TeamMembership, world["b_membership"].pk),
    ):
        info = (model._meta.app_label, model._meta.model_name)
        for view in ("change", "delete", "history"):
            urls.append(reverse(f"admin:{info[0]}_{info[1]}_{view}", args=[pk]))
    return urls


def test_a_lead_gets_404_for_every_object_url_of_another_team(world, other_team):
    c = login(world["lead"])
    for url in b_object_urls(world, other_team):
        r = c.get(url)
        assert r.status_code == 404, url
        r = c.post(url, {"post": "yes"})
        assert r.status_code in (403, 404), url
    assert Team.objects.filter(id="team_b").exists()
    assert Agent.objects.filter(pk=world["b_agent"].pk).exists()


def test_changelists_show_only_the_leads_teams(world):
    c = login(world["lead"])
    for name, visible, hidden in (
        ("tenants_team", "team_a", "team_b"),
        ("tenants_agent", "a_agent", "b_agent"),
        ("tenants_apikey", world["a_key"].key_id, world["b_key"].key_id),
        ("tenants_teammembership", "lead_a", "lead_b"),
    ):
        r = c.get(reverse(f"admin:{name}_changelist"))
        assert r.status_code == 200, name
        body = r.content.decode()
        assert visible in body, name
        assert hidden not in body, name


def test_changelist_filters_cannot_widen_the_scope(world):
    c = login(world["lead"])
    for query in ("?team__id__exact=team_b", "?q=b_agent", "?team=team_b"):
        body = c.get(reverse("admin:tenants_agent_changelist") + query).content.decode()
        assert "B agent" not in body, query
        assert "Team B" not in body, query
    for name in ("tenants_agent", "tenants_apikey", "tenants_teammembership"):
        body = c.get(reverse(f"admin:{name}_changelist")).content.decode()
        assert "team_b" not in body, name  # not even in the filter sidebar


def test_bulk_actions_on_another_teams_ids_do_nothing(world):
    c = login(world["lead"])
    b_key = world["b_key"].api_key
    c.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [b_key.pk]},
    )
    b_key.refresh_from_db()
    assert b_key.revoked_at is None
    c.post(
        reverse("admin:tenants_agent_changelist"),
        {"action": "delete_selected", "_selected_action": [world["b_agent"].pk], "post": "yes"},
    )
    assert Agent.objects.filter(pk=world["b_agent"].pk).exists()


def test_the_issue_form_offers_only_the_leads_teams_and_agents(world):
    c = login(world["lead"])
    r = c.get(reverse("admin:tenants_apikey_add"))
    body = r.content.decode()
    assert "team_a" in body and "team_b" not in body
    assert "b_agent" not in body
    r = c.post(reverse("admin:tenants_apikey_add"), {"team": "team_b", "label": "x"})
    assert r.status_code == 200  # form error, nothing issued
    assert not ApiKey.objects.filter(team_id="team_b", label="x").exists()


def test_issuing_a_key_shows_the_secret_once(world):
    c = login(world["lead"])
    r = c.post(
        reverse("admin:tenants_apikey_add"),
        {"team": "team_a", "agent": world["a_agent"].pk, "label": "from admin"},
    )
    assert r.status_code == 200
    assert "no-store" in r["Cache-Control"]
    body = r.content.decode()
    secret = re.search(r'<code class="secret">([^<]+)</code>', body).group(1)
    key_id = re.search(r'<code class="key-id">([^<]+)</code>', body).group(1)
    key = ApiKey.objects.get(key_id=key_id)
    assert (key.team_id, key.agent_id) == ("team_a", world["a_agent"].pk)
    from tenants.services import api_key_secrets

    assert api_key_secrets(api_key=key) == [secret]
    # Nowhere else: not on the change page, not in the list.
    assert (
        secret not in c.get(reverse("admin:tenants_apikey_change", args=[key.pk])).content.decode()
    )
    assert secret not in c.get(reverse("admin:tenants_apikey_changelist")).content.decode()


def test_rotate_and_revoke_actions(world):
    c = login(world["lead"])
    key = world["a_key"].api_key
    r = c.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "rotate_keys", "_selected_action": [key.pk]},
    )
    assert r.status_code == 200
    new_secret = re.search(r'<code class="secret">([^<]+)</code>', r.content.decode()).group(1)
    from tenants.services import api_key_secrets

    key.refresh_from_db()
    assert api_key_secrets(api_key=key) == [new_secret, world["a_key"].secret]
    c.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [key.pk]},
    )
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_a_viewer_can_look_but_not_change(world, team):
    c = login(world["viewer"])
    assert c.get(reverse("admin:tenants_agent_changelist")).status_code == 200
    r = c.get(reverse("admin:tenants_agent_change", args=[world["a_agent"].pk]))
    assert r.status_code == 200
    assert b'type="submit"' not in r.content or b"_save" not in r.content
    r = c.post(
        reverse("admin:tenants_agent_change", args=[world["a_agent"].pk]),
        {"name": "hacked", "role": "", "config": "{}"},
    )
    assert r.status_code == 403
    world["a_agent"].refresh_from_db()
    assert world["a_agent"].name == "A agent"
    assert c.get(reverse("admin:tenants_apikey_add")).status_code == 403
    r = c.post(
        reverse("admin:tenants_apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [world["a_key"].api_key.pk]},
    )
    world["a_key"].api_key.refresh_from_db()
    assert world["a_key"].api_key.revoked_at is None


def test_a_lead_cannot_create_or_delete_teams(world):
    c = login(world["lead"])
    assert c.get(reverse("admin:tenants_team_add")).status_code == 403
    assert (
        c.post(reverse("admin:tenants_team_delete", args=["team_a"]), {"post": "yes"}).status_code
        == 403
    )
    assert Team.objects.filter(id="team_a").exists()


def test_a_staff_user_without_membership_sees_nothing(world):
    nobody = UserFactory(username="nobody")
    c = login(nobody)
    r = c.get(reverse("admin:index"))
    assert r.status_code == 200
    assert "team_a" not in r.content.decode()
    for name in ("tenants_team", "tenants_agent", "tenants_apikey", "tenants_teammembership"):
        assert c.get(reverse(f"admin:{name}_changelist")).status_code == 403


def test_membership_user_choices_do_not_leak_other_teams_users(world):
    c = login(world["lead"])
    body = c.get(reverse("admin:tenants_teammembership_add")).content.decode()
    assert "lead_a" in body and "lead_b" not in body


def test_a_superuser_sees_everything(world):
    admin_user = UserFactory(username="root", is_superuser=True)
    c = login(admin_user)
    body = c.get(reverse("admin:tenants_agent_changelist")).content.decode()
    assert "a_agent" in body and "b_agent" in body
    assert c.get(reverse("admin:tenants_team_change", args=["team_b"])).status_code == 200


def test_autocomplete_is_scoped(world):
    c = login(world["lead"])
    r = c.get(
        reverse("admin:autocomplete"),
        {"app_label": "tenants", "model_name": "apikey", "field_name": "team", "term": "team"},
    )
    assert "team_b" not in r.content.decode()


def test_lifecycle_records_are_scoped_and_read_only(world, team, other_team):
    from lifecycle.models import JobRun

    a_job = JobRun.objects.create(team=team, kind="compress", trigger="api", agent_id="a_agent")
    b_job = JobRun.objects.create(
        team=other_team, kind="cleanup", trigger="beat", agent_id="b_agent_job"
    )
    c = login(world["lead"])
    body = c.get(reverse("admin:lifecycle_jobrun_changelist")).content.decode()
    assert "a_agent" in body and "b_agent_job" not in body
    assert c.get(reverse("admin:lifecycle_jobrun_change", args=[b_job.pk])).status_code == 404
    r = c.post(reverse("admin:lifecycle_jobrun_change", args=[a_job.pk]), {"status": "failed"})
    assert r.status_code == 403
    a_job.refresh_from_db()
    assert a_job.status == "queued"
