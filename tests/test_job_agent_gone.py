"""A job whose agent was deleted after it was queued writes nothing and fails saying so, on
every database (the race itself, a deletion landing during the job's engine call, is driven
across processes on MariaDB in test_agent_erasure_concurrent.py).

Here the deletion's end state is set up directly: the agent's row is gone while what the job
works on is still there. The control runs the same job with the agent kept and checks it does
write, so a job that had nothing to write cannot pass for one that was stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from core.errors import NotFound
from graph.models import Entity
from lifecycle.models import JobKind, JobRun, JobStatus, Persona, Scenario
from lifecycle.services import pipeline
from memories.models import Memory, Procedure
from tenants import services as tenant_services
from tenants.models import Agent

from .helpers import ok_data

pytestmark = pytest.mark.django_db

AGENT = "coder"

FEEDBACK = [
    "The user wants short answers without long explanations.",
    "The user asked again for shorter answers, no long explanations.",
    "The user prefers short answers and dislikes long explanations.",
]
FACTS = [
    "Alice Chen lives in Singapore and trades on Binance.",
    "Alice Chen works with Bob Smith at Acme Capital in Singapore.",
]


def _working(api) -> None:
    for text in FACTS:
        ok_data(api.post("/memories/working", {"agent_id": AGENT, "content": text}))


def _memories(texts: list[str], category: str = "fact") -> Callable[[Any], None]:
    def write(api) -> None:
        for text in texts:
            body = {"agent_id": AGENT, "content": text, "category": category}
            ok_data(api.post("/memories/personal", {**body, "enable_dedup": False}))

    return write


def _agent_row_gone(team) -> None:
    """The agent's row deleted, and only it: what the job reads stays in place. (The agent's
    deletion erases the rest too, through its pre_delete receivers, so it is bypassed.)"""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {Agent._meta.db_table} WHERE team_id = %s AND agent_id = %s",
            [team.id, AGENT],
        )


def _written(team) -> dict[str, int]:
    """What a job can write for the agent, counted."""
    return {
        "memories": Memory.objects.filter(team=team, agent_id=AGENT).count(),
        "scenarios": Scenario.objects.filter(team=team, agent_id=AGENT).count(),
        "personas": Persona.objects.filter(team=team, agent_id=AGENT).count(),
        "rules": Procedure.objects.filter(team=team, agent_id=AGENT).count(),
        "entities": Entity.objects.filter(team=team, agent_id=AGENT).count(),
    }


# Each kind of job that writes for its agent: what it needs to have something to write, its
# params, and what it writes then (with the offline engine, the default).
JOBS: dict[str, tuple[Callable[[Any], None], dict[str, Any], str]] = {
    JobKind.COMPRESS: (_working, {}, "memories"),
    JobKind.EXTRACT_FACTS: (_working, {}, "memories"),
    JobKind.AGGREGATE_SCENES: (_memories(FEEDBACK), {}, "scenarios"),
    JobKind.GENERATE_PERSONA: (_memories(FEEDBACK), {}, "personas"),
    JobKind.EXTRACT_GRAPH: (_memories(FACTS), {}, "entities"),
    JobKind.CONSOLIDATE: (_memories(FEEDBACK), {}, "memories"),
    JobKind.PROPOSE_PROCEDURES: (_memories(FEEDBACK, "preference"), {}, "rules"),
    JobKind.INGEST: (
        _memories(["Prefers tabs to spaces."]),
        {"messages": [{"role": "user", "content": text} for text in FACTS]},
        "memories",
    ),
}


@pytest.mark.parametrize("kind", list(JOBS))
@pytest.mark.parametrize("agent_kept", [True, False], ids=["agent kept", "agent gone"])
def test_a_job_writes_for_its_agent_only_while_the_agent_exists(api, team, kind, agent_kept):
    prepare, params, writes = JOBS[kind]
    prepare(api)  # registers the agent, as the API does
    before = _written(team)
    if agent_kept:
        pipeline.run(team=team, kind=kind, trigger="api", agent_id=AGENT, params=params)
        assert _written(team)[writes] > before[writes]
        return
    _agent_row_gone(team)
    with pytest.raises(NotFound):
        pipeline.run(team=team, kind=kind, trigger="api", agent_id=AGENT, params=params)
    assert _written(team) == before
    # Nothing registered the agent again, and the job's record says why it failed.
    assert not Agent.objects.filter(team=team, agent_id=AGENT).exists()
    job = JobRun.objects.get(team=team, kind=kind)
    assert job.status == JobStatus.FAILED and "agent" in str(job.error)


def test_a_direct_call_without_a_job_still_runs_for_an_unregistered_agent(api, team):
    """Only a job checks: a direct call (a shell, a script) has no job id and runs as before."""
    from lifecycle.services import operations

    _memories(FEEDBACK)(api)
    _agent_row_gone(team)
    persona, _, _ = operations.generate_persona(team=team, agent_id=AGENT, job_id=None)
    assert persona.pk and Persona.objects.filter(team=team, agent_id=AGENT).count() == 1


@pytest.mark.django_db(transaction=True)  # jobs are enqueued on commit (inline in tests)
def test_a_compress_queued_by_writes_that_missed_the_agents_deletion_registers_it_again(api, team):
    """A working-memory write registers its agent through this process's cache of known
    agents, which a deletion made by another worker does not clear when the processes share no
    cache (for AGENT_CACHE_SECONDS: they miss its notice). Queueing the compress those writes
    call for registers the agent without the cache: before, the job failed 404 on an agent the
    caller had just written for, and the items stayed."""
    ok_data(api.post("/lifecycle/auto-config", {"compress_every_n": 2, "warmup_max_memories": 0}))
    _working(api)  # registered, and compressed
    assert Memory.objects.filter(team=team, agent_id=AGENT).exists()
    assert api.delete(f"/agents/{team.id}/{AGENT}").status_code in (200, 204)
    # What another worker, which served the writes before and cannot read the deletion's
    # notice (no shared cache), still has in its cache: an entry made under the notice it sees.
    notice = tenant_services._deletion_notice(team.id, AGENT)
    assert notice is not None
    tenant_services._known_agents.set((team.id, AGENT), notice)
    _working(api)
    assert Agent.objects.filter(team=team, agent_id=AGENT).exists()
    job = JobRun.objects.filter(team=team, kind=JobKind.COMPRESS).latest("pk")
    assert job.status == JobStatus.SUCCEEDED and job.counts["compressed"] == len(FACTS)
    assert not ok_data(api.get(f"/memories/working/{AGENT}"))
