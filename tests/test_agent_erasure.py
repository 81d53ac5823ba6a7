"""Deleting an agent erases what the service holds of it, and only of it: its rules and their
history, the lifecycle's scenarios, personas and working-memory archive, and what its jobs hold
(their results, the messages an ingest was given). An agent created again with that id starts
from nothing; the team's other agents and another team's agent of the same id keep everything."""

from __future__ import annotations

import pytest

from lifecycle.models import JobRun, Persona, Scenario, WorkingArchive
from lifecycle.services.erasure import AGENT_DELETED
from lifecycle.services.jobs import job_claim
from memories.models import Procedure, ProcedureRevision
from tenants.models import Agent

from .factories import JobRunFactory
from .helpers import error_code, ok_data
from .test_lifecycle_api import RESEARCH_NOTES

pytestmark = pytest.mark.django_db

BACKTESTS = [
    "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩",
    "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今",
]
SAID = "I keep the deploy keys in the vault and rotate them every Friday."


def _hold(api, team, agent_id: str) -> None:
    """What an agent comes to hold through the API: a rule, an ingest (archived messages),
    scenarios and a persona from its memories; and an ingest job abandoned before it ran, which
    still holds the messages it was given (its retry reads them)."""
    api.post("/lifecycle/auto-config", {"enabled": False})
    assert api.post(f"/procedures/{agent_id}", {"rule": "Answer briefly."}).status_code == 201
    body = {"agent_id": agent_id, "messages": [{"role": "user", "content": SAID}]}
    ok_data(api.post("/memories/ingest", body))
    for note in RESEARCH_NOTES:
        ok_data(api.post("/memories/working", {"agent_id": agent_id, "content": note}))
    ok_data(api.post("/lifecycle/extract-facts", {"agent_id": agent_id}))
    for note in BACKTESTS:
        ok_data(api.post("/memories/personal", {"agent_id": agent_id, "content": note}))
    ok_data(api.post("/lifecycle/aggregate-scenes", {"agent_id": agent_id, "max_memories": 50}))
    ok_data(api.post("/lifecycle/generate-persona", {"agent_id": agent_id}))
    JobRunFactory(
        team=team,
        agent_id=agent_id,
        kind="ingest",
        status="abandoned",
        params={"messages": [{"role": "user", "content": SAID}]},
    )


def _held(team, agent_id: str) -> dict[str, int]:
    jobs = JobRun.objects.filter(team=team, agent_id=agent_id)
    return {
        "rules": Procedure.objects.filter(team=team, agent_id=agent_id).count(),
        "rule changes": ProcedureRevision.objects.filter(team=team, agent_id=agent_id).count(),
        "scenarios": Scenario.objects.filter(team=team, agent_id=agent_id).count(),
        "personas": Persona.objects.filter(team=team, agent_id=agent_id).count(),
        "archived": WorkingArchive.objects.filter(team=team, agent_id=agent_id).count(),
        "results": sum(1 for j in jobs if j.result is not None),
        "messages": sum(1 for j in jobs if isinstance(j.params.get("messages"), list)),
    }


def test_deleting_an_agent_erases_what_it_held_and_nothing_else(team, api, other_team, other_api):
    for agent_id in ("researcher", "coder"):
        _hold(api, team, agent_id)
    _hold(other_api, other_team, "researcher")
    queued = JobRunFactory(team=team, agent_id="researcher", status="queued", active_key="k1")
    full = _held(team, "researcher")
    assert all(full.values()), full
    assert api.delete(f"/agents/{team.id}/researcher").status_code == 200
    assert _held(team, "researcher") == dict.fromkeys(full, 0)
    # The job log keeps that the agent's jobs ran, not what they read or produced; a job still
    # queued for it will not run: a worker's claim leaves it.
    jobs = JobRun.objects.filter(team=team, agent_id="researcher").exclude(pk=queued.pk)
    assert sorted(jobs.values_list("kind", "status")) == [
        ("aggregate-scenes", "succeeded"),
        ("extract-facts", "succeeded"),
        ("generate-persona", "succeeded"),
        ("ingest", "abandoned"),
        ("ingest", "succeeded"),
    ]
    queued.refresh_from_db()
    assert (queued.status, queued.error, queued.active_key) == ("failed", AGENT_DELETED, None)
    assert job_claim(job_id=queued.pk) is None
    # The team's other agent, and another team's agent of the same id, keep everything.
    assert _held(team, "coder") == full
    assert _held(other_team, "researcher") == full
    # Created again, the agent starts from nothing.
    assert api.post("/agents", {"agent_id": "researcher", "name": "new"}).status_code == 201
    assert ok_data(api.get("/procedures/researcher")) == {"procedures": []}
    assert ok_data(api.get("/lifecycle/scenarios/researcher")) == []
    assert error_code(api.get("/lifecycle/persona/researcher")) == "NOT_FOUND"
    assert Agent.objects.filter(team=team, agent_id="researcher").count() == 1


def test_the_memories_app_is_the_first_to_act_on_an_agents_deletion():
    """Its receiver takes the agent's write lock before any row of the agent is deleted, so the
    deleting transaction holds nothing a writer under that lock may wait for (a deadlock)."""
    from django.db.models.signals import pre_delete

    from memories.signals import _delete_agents_personal_memories

    sync_receivers, _ = pre_delete._live_receivers(Agent)
    assert sync_receivers[0] is _delete_agents_personal_memories
