"""Every console URL, POSTed per role of the user in the team it names, and across teams.

The URL list is enumerated from console.urls, so a new console page is covered the day it is
added; it must also be classified here (WRITES with the lead's payload and what it changes, or
READS), or test_every_console_url_is_classified fails.

Roles, always about team B: ``lead`` (lead of B), ``viewer`` (viewer of B), ``lead_elsewhere``
(lead of A only) and ``lead_a_viewer_b`` (lead of A, viewer of B). The last one also posts to
team A's URLs with team B's ids, in the path and in the form (selected rows, share grants,
preview tokens): the console resolves every id inside the team of the URL, so B is untouched.
"Untouched" is checked on every row of every model that belongs to team B.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import models
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse
from django.utils import timezone

import console.urls
from graph.models import ENTITY_TYPES, Entity
from lifecycle.models import JobRun, Persona, Scenario, WorkingArchive
from memories import purge
from memories.models import Memory, MemoryRevision, Procedure, PurgeRun, TrashedMemory
from memories.services import (
    Actor,
    memory_create,
    memory_share,
    memory_update,
    procedure_create,
    procedure_delete,
)
from tenants.models import ApiKey, McpToken, Team
from tenants.services import agent_ensure, api_key_issue, mcp_token_issue
from tests.factories import TeamFactory
from tests.security._roles import role_matrix_users

pytestmark = pytest.mark.django_db

ROLES = ("lead", "viewer", "lead_elsewhere", "lead_a_viewer_b")


def _console_urls(
    patterns: list[Any], params: tuple[str, ...] = ()
) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(url name, path parameters) of every console URL, includes followed."""
    for p in patterns:
        names = (*params, *p.pattern.converters)
        if isinstance(p, URLResolver):
            yield from _console_urls(p.url_patterns, names)
        elif isinstance(p, URLPattern) and p.name:
            yield p.name, names


URLS = dict(_console_urls(console.urls.urlpatterns))
TEAM_URLS = sorted(name for name, params in URLS.items() if "team_id" in params)


@dataclass
class Objects:
    """One of each thing a console page can name, in one team."""

    team: Team
    memory: Memory
    revision: MemoryRevision
    stale: Memory
    token: str
    trashed: TrashedMemory
    run: PurgeRun
    key: ApiKey
    mcp: McpToken
    job: JobRun
    persona: Persona
    scenario: Scenario
    entity: Entity
    procedure: Procedure
    removed_procedure_id: int
    archived: WorkingArchive
    ids: dict[str, Any] = field(default_factory=dict)


def _objects(team: Team, owner: AbstractBaseUser) -> Objects:
    for agent in ("owner", "peer", "peer2"):
        agent_ensure(team=team, agent_id=agent)
    memory, _ = memory_create(
        team=team,
        scope="personal",
        agent_id="owner",
        content=f"{team.id}: the owner's notes about the merger.",
        enable_dedup=False,
    )
    memory = memory_update(memory=memory, actor=Actor.for_user(owner), importance=0.7)
    revision = MemoryRevision.objects.filter(memory=memory).latest("pk")
    memory_share(memory=memory, agent_ids=["peer"], permission="read")

    def old(content: str) -> Memory:
        m, _ = memory_create(
            team=team,
            scope="personal",
            agent_id="owner",
            content=content,
            importance=0.1,
            enable_dedup=False,
        )
        Memory.objects.filter(pk=m.pk).update(
            created_at=timezone.now() - timedelta(days=90), last_accessed=None
        )
        return m

    criteria = purge.PurgeCriteria(idle_days=30, importance_below=0.3)
    old(f"{team.id}: a forgotten detail, purged already.")
    outcome = purge.purge_confirm(
        team=team, token=purge.purge_preview(team=team, criteria=criteria).token, user=owner
    )
    stale = old(f"{team.id}: another forgotten detail, to purge.")
    token = purge.purge_preview(team=team, criteria=criteria).token
    assert token
    removed = procedure_create(team=team, agent_id="owner", rule="Hedge.", source="agent")
    procedure_delete(procedure=removed, actor=Actor())
    return Objects(
        team=team,
        memory=memory,
        revision=revision,
        stale=stale,
        token=token,
        trashed=TrashedMemory.objects.get(team=team, purge_run=outcome.run),
        run=outcome.run,
        key=api_key_issue(team=team, label="console").api_key,
        mcp=mcp_token_issue(team=team, label="console").mcp_token,
        job=JobRun.objects.create(team=team, kind="cleanup", trigger="api", agent_id="owner"),
        persona=Persona.objects.create(team=team, agent_id="owner", summary="a persona"),
        scenario=Scenario.objects.create(
            team=team, agent_id="owner", name="a scenario", summary="s"
        ),
        entity=Entity.objects.create(
            team=team, name="Acme", normalized_name="acme", entity_type=ENTITY_TYPES[0]
        ),
        procedure=procedure_create(
            team=team,
            agent_id="owner",
            rule="Answer briefly.",
            source="lifecycle",
            status="proposed",
        ),
        removed_procedure_id=removed.pk,
        archived=WorkingArchive.objects.create(
            team=team,
            agent_id="owner",
            item_id=f"{team.id}item".ljust(32, "0")[:32],
            content="an archived message",
            item_created_at=timezone.now(),
            reason="ingested",
            role="user",
        ),
    )


def _path_values(o: Objects) -> dict[str, Any]:
    return {
        "memory_id": o.memory.pk,
        "revision_id": o.revision.pk,
        "key_id": o.key.key_id,
        "token_id": o.mcp.token_id,
        "item_id": o.trashed.pk,
        "run_id": o.run.pk,
        "kind": "cleanup",
        "job_id": o.job.pk,
        "persona_id": o.persona.pk,
        "scenario_id": o.scenario.pk,
        "entity_id": str(o.entity.pk),
        "procedure_id": o.procedure.pk,
        "archive_item_id": o.archived.item_id,
    }


@dataclass
class World:
    a: Objects
    b: Objects
    users: dict[str, AbstractBaseUser]

    def client(self, role: str) -> Client:
        c = Client()
        c.force_login(self.users[role])
        return c


@pytest.fixture
def world() -> World:
    team_a = TeamFactory(id="team_a", name="Team A")
    team_b = TeamFactory(id="team_b", name="Team B")

    users = role_matrix_users(team_a, team_b)
    return World(
        a=_objects(team_a, users["lead_elsewhere"]), b=_objects(team_b, users["lead"]), users=users
    )


def _team_models() -> list[type[models.Model]]:
    found = []
    for model in apps.get_models():
        for f in model._meta.concrete_fields:
            if f.name == "team" and f.is_relation and f.related_model is Team:
                found.append(model)
    return sorted(found, key=lambda m: m._meta.label)


def _state(team: Team) -> dict[str, Any]:
    """Every row of every model that belongs to `team`, and the team's own row."""
    state: dict[str, Any] = {"team": Team.objects.filter(pk=team.pk).values().first()}
    for model in _team_models():
        state[model._meta.label] = list(model._default_manager.filter(team=team).values())
    return state


# What each writing URL is given by a lead, built from the objects named in the form (for the
# cross-team case these are team B's while the URL names team A).
Payload = Callable[[Objects], dict[str, Any]]
WRITES: dict[str, Payload] = {
    "memories-bulk": lambda o: {"ids": [o.memory.pk, o.stale.pk], "action": "pin"},
    "memory-detail": lambda o: {
        "content": "Corrected by the matrix.",
        "importance": "0.4",
        "category": "general",
    },
    "memory-quick": lambda o: {"importance": "0.95"},
    "memory-revert": lambda o: {},
    "memory-promote": lambda o: {},
    "memory-share": lambda o: {"agents": ["peer2"], "permission": "write"},
    "memory-unshare": lambda o: {"agent": "peer"},
    "purge-confirm": lambda o: {"token": o.token},
    "purge-restore-item": lambda o: {},
    "purge-restore-run": lambda o: {},
    "lifecycle": lambda o: {
        "compress_every_n": "4",
        "compress_target_count": "2",
        "cleanup_idle_days": "60",
        "cleanup_min_importance": "0.3",
        "enabled": "on",
        "warmup_max_memories": "5",
        "warmup_compress_every_n": "1",
    },
    "lifecycle-run": lambda o: {"cleanup-dry_run": "true"},
    "lifecycle-procedure-decide": lambda o: {"decision": "accept"},
    "lifecycle-procedure-edit": lambda o: {"rule": "Corrected by the matrix."},
    "lifecycle-procedure-restore": lambda o: {},
    "keys-issue": lambda o: {"label": "from the matrix"},
    "keys-rotate": lambda o: {"grace_hours": "0"},
    "keys-revoke": lambda o: {},
    "keys-mcp-issue": lambda o: {"mcp-label": "from the matrix"},
    "keys-mcp-revoke": lambda o: {},
    # A fact for the team's own agent, as a Zep export; an export job of the whole team.
    "transfer-import": lambda o: {
        "file": SimpleUploadedFile(
            "zep.json",
            json.dumps(
                {"user_id": "owner", "edges": [{"fact": f"{o.team.id}: imported by the matrix."}]}
            ).encode(),
        ),
        "source": "zep",
        "on_conflict": "skip",
        "agent_from": "user_id",
    },
    "transfer-export": lambda o: {"agent": ""},
}
# Pages that only read: a POST to them must change nothing, whoever sends it.
READS = {
    "team-home",
    "dashboard",
    "memories",
    "purge",
    "purge-trash",
    "purge-trash-item",
    "lifecycle-jobs",
    "lifecycle-job",
    "lifecycle-personas",
    "lifecycle-persona",
    "lifecycle-scenario",
    "lifecycle-sources",
    "lifecycle-procedures",
    "lifecycle-procedure-history",
    "lifecycle-profiles",
    "lifecycle-archive-item",
    "graph",
    "graph-data",
    "graph-entity",
    "keys",
    "transfer",
    "transfer-download",
}


# The URLs that name another object of the same path parameter: a restore names a removed rule.
PATH_VALUES_FOR: dict[str, Callable[[Objects], dict[str, Any]]] = {
    "lifecycle-procedure-restore": lambda o: {"procedure_id": o.removed_procedure_id},
}


def _url(name: str, team_id: str, objects: Objects) -> str:
    values = {**_path_values(objects), **PATH_VALUES_FOR.get(name, lambda o: {})(objects)}
    kwargs = {p: team_id if p == "team_id" else values[p] for p in URLS[name]}
    return reverse(f"console:{name}", kwargs=kwargs)


def test_every_console_url_is_classified():
    assert set(TEAM_URLS) == set(WRITES) | READS, "classify the new console URL here"
    assert not set(WRITES) & READS
    assert set(URLS) - set(TEAM_URLS) == {"index"}  # the team list, not about any team


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", TEAM_URLS)
def test_a_console_post_needs_the_lead_role_in_the_urls_team(world, name, role):
    payload = WRITES.get(name, lambda o: {"anything": "1"})(world.b)
    before = _state(world.b.team)

    response = world.client(role).post(_url(name, "team_b", world.b), payload)

    after = _state(world.b.team)
    if role == "lead":
        if name in WRITES:
            assert response.status_code in (200, 302), (name, response.status_code)
            assert after != before, f"{name} changed nothing for a lead"
        else:
            assert response.status_code in (200, 302, 405), (name, response.status_code)
            assert after == before, f"a POST to the read page {name} wrote"
    else:
        assert after == before, f"{role} changed team B through {name}"
        assert response.status_code == (404 if role == "lead_elsewhere" else 403)


@pytest.mark.parametrize("name", sorted(WRITES))
def test_team_b_ids_posted_to_team_a_pages_touch_nothing_of_b(world, name):
    """Lead of A, viewer of B: B's ids in A's URLs and forms are not found in A, never used."""
    before = _state(world.b.team)
    response = world.client("lead_a_viewer_b").post(
        _url(name, "team_a", world.b), WRITES[name](world.b)
    )
    assert response.status_code < 500
    assert _state(world.b.team) == before, f"{name} on team A's page changed team B"


def test_the_lead_of_a_and_viewer_of_b_still_works_in_a(world):
    """The refusals above are about the team, not the user: in A the same user is a lead."""
    before = _state(world.a.team)
    response = world.client("lead_a_viewer_b").post(
        _url("keys-revoke", "team_a", world.a), WRITES["keys-revoke"](world.a)
    )
    assert response.status_code == 302
    assert _state(world.a.team) != before
    world.a.key.refresh_from_db()
    assert world.a.key.revoked_at is not None
