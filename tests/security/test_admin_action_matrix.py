"""Every admin action and object view, per role of the user in the OBJECT's team.

The cases are generated from what is registered: each ModelAdmin in admin.site._registry, its
own actions and the site-wide ones (delete_selected), its change, delete and add views. A new
action is covered without editing this file; a new team-scoped admin fails here until it is
given an object to act on (OBJECTS_OF_B) and an add payload (ADD_PAYLOADS).

Roles, always about team B, the team of the object acted on:

* ``lead``: lead of B: allowed, whenever the admin offers the action to a lead at all;
* ``viewer``: viewer of B only: refused, object unchanged;
* ``lead_elsewhere``: lead of A only: refused, B's rows are not even visible (404);
* ``lead_a_viewer_b``: lead of A and viewer of B: refused, object unchanged. This is the
  escalation that was found: bulk actions checked "may this user change anything?" (yes, in A)
  instead of "may this user change this row?" (no, only a viewer of B).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django import forms
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Model
from django.test import Client, RequestFactory
from django.urls import reverse

from lifecycle.models import JobRun, Persona, Scenario
from tenants.admin import TeamScopedAdminMixin
from tenants.models import Agent, ApiKey, Team, TeamMembership, TeamRole
from tenants.services import api_key_issue, api_key_secrets
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.helpers import SignedClient, ok_data
from tests.security._roles import role_matrix_users

pytestmark = pytest.mark.django_db

ROLES = ("lead", "viewer", "lead_elsewhere", "lead_a_viewer_b")

# One object of team B per team-scoped admin model.
OBJECTS_OF_B: dict[str, Callable[[Team], Model]] = {
    "tenants.team": lambda b: b,
    "tenants.agent": lambda b: Agent.objects.create(team=b, agent_id="b_agent", name="B agent"),
    "tenants.apikey": lambda b: api_key_issue(team=b, label="b-key").api_key,
    "tenants.teammembership": lambda b: MembershipFactory(
        user=UserFactory(username="member_b"), team=b, role=TeamRole.VIEWER
    ),
    "lifecycle.jobrun": lambda b: JobRun.objects.create(
        team=b, kind="cleanup", trigger="api", agent_id="b_agent"
    ),
    "lifecycle.scenario": lambda b: Scenario.objects.create(
        team=b, agent_id="b_agent", name="B scenario", summary="B's plans"
    ),
    "lifecycle.persona": lambda b: Persona.objects.create(
        team=b, agent_id="b_agent", summary="B's persona"
    ),
}


def _registered() -> list[tuple[str, admin.ModelAdmin[Any]]]:
    return sorted(
        ((model._meta.label_lower, ma) for model, ma in admin.site._registry.items()),
        key=lambda pair: pair[0],
    )


SCOPED = [label for label, ma in _registered() if isinstance(ma, TeamScopedAdminMixin)]
UNSCOPED = [label for label, ma in _registered() if not isinstance(ma, TeamScopedAdminMixin)]
# Every action a ModelAdmin has before per-request filtering: its own and the site-wide ones.
ACTIONS = [
    (label, name)
    for label, ma in _registered()
    if label in SCOPED
    for _, name, _ in ma._get_base_actions()
]


@dataclass
class World:
    a: Team
    b: Team
    users: dict[str, AbstractBaseUser]
    superuser: AbstractBaseUser

    def client(self, role: str) -> Client:
        c = Client()
        c.force_login(self.users[role])
        return c

    def request(self, user: AbstractBaseUser) -> Any:
        request = RequestFactory().get("/admin/")
        request.user = user
        return request


@pytest.fixture
def world() -> World:
    a = TeamFactory(id="team_a", name="Team A")
    b = TeamFactory(id="team_b", name="Team B")

    users = role_matrix_users(a, b)
    return World(a=a, b=b, users=users, superuser=UserFactory(username="root", is_superuser=True))


def _admin(label: str) -> admin.ModelAdmin[Any]:
    return admin.site._registry[apps.get_model(label)]


def _snapshot(obj: Model) -> dict[str, Any] | None:
    """The object's row as stored now (None once deleted)."""
    return type(obj)._default_manager.filter(pk=obj.pk).values().first()


def _url(label: str, view: str, *args: Any) -> str:
    app_label, model_name = label.split(".")
    return reverse(f"admin:{app_label}_{model_name}_{view}", args=args)


def test_every_team_scoped_admin_has_an_object_to_act_on():
    assert set(SCOPED) == set(OBJECTS_OF_B), "teach OBJECTS_OF_B how to make the new model"
    assert set(SCOPED) == set(ADD_PAYLOADS), "teach ADD_PAYLOADS how to add the new model"
    assert ("tenants.apikey", "rotate_keys") in ACTIONS
    assert ("tenants.apikey", "delete_selected") in ACTIONS


# --- actions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("label", "action"), ACTIONS, ids=[f"{lab}:{a}" for lab, a in ACTIONS])
def test_an_admin_action_needs_the_lead_role_in_the_objects_team(world, label, action, role):
    ma = _admin(label)
    obj = OBJECTS_OF_B[label](world.b)
    before = _snapshot(obj)
    user = world.users[role]
    offered = action in ma.get_actions(world.request(user))

    response = world.client(role).post(
        _url(label, "changelist"),
        {"action": action, "_selected_action": [str(obj.pk)], "index": "0", "post": "yes"},
    )

    after = _snapshot(obj)
    if role == "lead" and offered:
        assert response.status_code in (200, 302), response.status_code
        assert after != before, f"{action} did nothing for a lead of the object's team"
    else:
        assert after == before, f"{role} changed {label} through {action}"
        if role == "lead_a_viewer_b" and offered:
            # Offered (the user leads team A) but refused on B's row, as a whole.
            assert response.status_code == 403


def test_a_lead_of_a_and_viewer_of_b_cannot_rotate_bs_key(world):
    """The reproduced escalation: rotate_keys on B's key by a user who only views B."""
    issued = api_key_issue(team=world.b, label="b-key")
    key = issued.api_key
    old_client = SignedClient(Client(), issued.key_id, issued.secret)
    c = world.client("lead_a_viewer_b")
    for action in ("rotate_keys", "revoke_keys"):
        response = c.post(
            _url("tenants.apikey", "changelist"),
            {"action": action, "_selected_action": [str(key.pk)], "index": "0"},
        )
        assert response.status_code == 403, action
        assert b'class="secret"' not in response.content
    key.refresh_from_db()
    assert (key.revoked_at, key.rotated_at) == (None, None)
    assert api_key_secrets(api_key=key) == [issued.secret]  # no new secret exists
    assert ok_data(old_client.get("/stats")) is not None  # and the old one still works

    # The same user still rotates the keys of the team they lead.
    a_key = api_key_issue(team=world.a, label="a-key").api_key
    response = c.post(
        _url("tenants.apikey", "changelist"),
        {"action": "rotate_keys", "_selected_action": [str(a_key.pk)], "index": "0"},
    )
    assert response.status_code == 200
    new_secret = re.search(r'<code class="secret">([^<]+)</code>', response.content.decode())
    assert new_secret is not None
    a_key.refresh_from_db()
    assert api_key_secrets(api_key=a_key)[0] == new_secret.group(1)


def test_a_mixed_selection_is_refused_whole(world):
    """One row of a team the user only views spoils the batch: nothing is done to any row."""
    a_key = api_key_issue(team=world.a, label="a-key").api_key
    b_key = api_key_issue(team=world.b, label="b-key").api_key
    response = world.client("lead_a_viewer_b").post(
        _url("tenants.apikey", "changelist"),
        {"action": "revoke_keys", "_selected_action": [str(a_key.pk), str(b_key.pk)], "index": "0"},
    )
    assert response.status_code == 403
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()
    # "Select all" across the changelist reaches B's rows too, and is refused the same way.
    response = world.client("lead_a_viewer_b").post(
        _url("tenants.apikey", "changelist"),
        {
            "action": "revoke_keys",
            "_selected_action": [str(a_key.pk)],
            "select_across": "1",
            "index": "0",
        },
    )
    assert response.status_code == 403
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()


def test_a_superuser_keeps_every_action(world):
    b_key = api_key_issue(team=world.b, label="b-key").api_key
    c = Client()
    c.force_login(world.superuser)
    response = c.post(
        _url("tenants.apikey", "changelist"),
        {"action": "revoke_keys", "_selected_action": [str(b_key.pk)], "index": "0"},
    )
    assert response.status_code == 302
    b_key.refresh_from_db()
    assert b_key.revoked_at is not None


# --- change, delete and add views ---------------------------------------------------------------


def _change_data(world: World, label: str, obj: Model) -> dict[str, Any]:
    """The object's own change form, filled with its values, with one field changed."""
    ma = _admin(label)
    form = ma.get_form(world.request(world.superuser), obj, change=True)(instance=obj)
    data: dict[str, Any] = {}
    for name in form.fields:
        value = form[name].value()
        if value is not None and value is not False:
            data[name] = value
    for name, field in form.fields.items():
        if isinstance(field, forms.CharField) and not isinstance(field, forms.JSONField):
            data[name] = f"{data.get(name, '')}-changed"
            return data
        if isinstance(field, forms.ChoiceField) and not isinstance(field, forms.ModelChoiceField):
            other = [v for v, _ in field.choices if v and str(v) != str(data.get(name))]
            data[name] = other[0]
            return data
    return data  # a read-only admin: the POST is refused before the form is read


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("label", SCOPED)
def test_the_change_view_needs_the_lead_role_in_the_objects_team(world, label, role):
    ma = _admin(label)
    obj = OBJECTS_OF_B[label](world.b)
    data = _change_data(world, label, obj)
    before = _snapshot(obj)
    may = ma.has_change_permission(world.request(world.users[role]), obj)

    response = world.client(role).post(_url(label, "change", obj.pk), data)

    if role == "lead" and may:
        assert response.status_code == 302, getattr(response, "context_data", {}).get("errors")
        assert _snapshot(obj) != before
    else:
        assert not may
        assert _snapshot(obj) == before
        assert response.status_code == (404 if role == "lead_elsewhere" else 403)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("label", SCOPED)
def test_the_delete_view_needs_the_lead_role_in_the_objects_team(world, label, role):
    ma = _admin(label)
    obj = OBJECTS_OF_B[label](world.b)
    before = _snapshot(obj)
    may = ma.has_delete_permission(world.request(world.users[role]), obj)

    response = world.client(role).post(_url(label, "delete", obj.pk), {"post": "yes"})

    if role == "lead" and may:
        assert response.status_code == 302
        assert _snapshot(obj) is None
    else:
        assert _snapshot(obj) == before
        assert response.status_code == (404 if role == "lead_elsewhere" else 403)


# label -> (the add form's data, whether a lead of B may add it). A lead adds memberships only
# for users already in one of their teams; the payload names a user of team A only (lead_a), so
# it is refused even for the lead of B: what matters is that nobody but a lead of B gets a
# membership of B (lead_a_viewer_b would otherwise make a team-A colleague lead of B).
ADD_PAYLOADS: dict[str, tuple[Callable[[World], dict[str, Any]], bool]] = {
    "tenants.team": (lambda w: {"id": "team_new", "name": "New"}, False),
    "tenants.agent": (
        lambda w: {"team": "team_b", "agent_id": "added", "name": "Added", "config": "{}"},
        True,
    ),
    "tenants.apikey": (lambda w: {"team": "team_b", "label": "added"}, True),
    "tenants.teammembership": (
        lambda w: {"user": w.users["lead_elsewhere"].pk, "team": "team_b", "role": "lead"},
        False,
    ),
    "lifecycle.jobrun": (
        lambda w: {"team": "team_b", "kind": "cleanup", "trigger": "api", "status": "queued"},
        False,
    ),
    "lifecycle.scenario": (
        lambda w: {"team": "team_b", "agent_id": "x", "name": "x", "summary": "x"},
        False,
    ),
    "lifecycle.persona": (lambda w: {"team": "team_b", "agent_id": "x"}, False),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("label", SCOPED)
def test_the_add_view_adds_only_to_teams_the_user_leads(world, label, role):
    model = apps.get_model(label)
    payload, lead_may_add = ADD_PAYLOADS[label]
    count = model._default_manager.count()

    response = world.client(role).post(_url(label, "add"), payload(world))

    if role == "lead" and lead_may_add:
        assert response.status_code in (200, 302)
        assert model._default_manager.count() == count + 1
    else:
        assert model._default_manager.count() == count
        # 403 without the right to add at all; else the form refuses team B (200, errors).
        assert response.status_code in (200, 403)
        if response.status_code == 200:
            context = response.context
            form = context["adminform"].form if "adminform" in context else context["form"]
            assert form.errors


def test_a_lead_of_a_cannot_move_their_membership_into_team_b(world):
    """Changing the team of a row of A to B is refused too (the form offers only A)."""
    user = world.users["lead_a_viewer_b"]
    membership = TeamMembership.objects.get(user=user, team=world.a)
    response = world.client("lead_a_viewer_b").post(
        _url("tenants.teammembership", "change", membership.pk),
        {"user": user.pk, "team": "team_b", "role": "lead"},
    )
    assert response.status_code == 200  # the form error
    assert TeamMembership.objects.get(user=user, team=world.b).role == "viewer"
    membership.refresh_from_db()
    assert membership.team_id == "team_a"


# --- admins that are not team-scoped ------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("label", UNSCOPED)
def test_an_admin_that_is_not_team_scoped_is_closed_to_team_members(world, label, role):
    """Users, groups, login-attempt records: only a superuser (or explicit Django permissions,
    which team members do not have) may see them; their actions are never offered."""
    ma = _admin(label)
    request = world.request(world.users[role])
    assert not ma.has_view_permission(request)
    assert not ma.has_change_permission(request)
    assert not ma.has_delete_permission(request)
    assert world.client(role).get(_url(label, "changelist")).status_code == 403
