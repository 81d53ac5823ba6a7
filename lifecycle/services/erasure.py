"""What the lifecycle holds of an agent, erased with the agent (`DELETE /agents/<team>/<id>`).

An agent's deletion is final (docs/api.md): its personal memories, profile and rules go in the
memories app, its own entities in the graph app, and here what the lifecycle derived from them
or kept of its working memory — scenarios, personas, the working-memory archive — and what its
jobs hold of it: their results (summaries, personas, facts) and the messages an ingest was
given. The job rows stay, with their counts: the log says what ran and when, not what it read or
produced. A job still queued for the agent is not run (it would write for an agent that is
gone); a job already running writes nothing once its agent is deleted (it checks under the
agent's write lock, which the deletion takes first: memories.locks.job_agent_check; a graph
extraction checks at each entity or relation it writes: graph.extraction._fenced). An agent
created again with the same id starts from nothing.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from tenants.idempotency import idempotency_rewrite
from tenants.models import Team

from ..models import JobKind, JobRun, JobStatus, Persona, Scenario, WorkingArchive
from .jobs import params_released

AGENT_DELETED = "its agent was deleted before it ran"


def purge_agent(*, team: Team, agent_id: str) -> None:
    """In the agent's deleting transaction (lifecycle.signals): the agent and what the
    lifecycle holds of it go together."""
    Scenario.objects.filter(team=team, agent_id=agent_id).delete()
    Persona.objects.filter(team=team, agent_id=agent_id).delete()
    WorkingArchive.objects.filter(team=team, agent_id=agent_id).delete()
    jobs = JobRun.objects.filter(team=team, agent_id=agent_id)
    # A queued job is failed here, its keys released; a worker's claim then finds it not queued
    # and leaves it (jobs.job_claim).
    jobs.filter(status=JobStatus.QUEUED).update(
        status=JobStatus.FAILED,
        error=AGENT_DELETED,
        finished_at=timezone.now(),
        active_key=None,
        claim_key=None,
        lease_expires_at=None,
    )
    done = jobs.exclude(status=JobStatus.RUNNING)
    done.update(result=None)
    _ingest_answers_forget(team=team, ingests=jobs.filter(kind=JobKind.INGEST))
    # A finished job let go of its messages already (jobs.params_released); the failed-here
    # queued ones have not.
    given = []
    for job in done.filter(kind=JobKind.INGEST).only("id", "params"):
        released = params_released(job.params)
        if released is not None:
            job.params = released
            given.append(job)
    JobRun.objects.bulk_update(given, ["params"], batch_size=500)


def _without_profile(body: Any) -> Any | None:
    if isinstance(body, dict) and "profile" in body:
        return {k: v for k, v in body.items() if k != "profile"}
    return None


def _ingest_answers_forget(*, team: Team, ingests: QuerySet[JobRun]) -> None:
    """The agent's ingests' answers kept for retries (tenants.idempotency) stop showing the
    profile values they learnt: the profile is erased with the agent. (Their memories are
    forgotten by the memories app, as for any erasure.) A synchronous ingest answers under its
    request's key, a job's own run under its first job's id (pipeline._ingest)."""
    keys: list[tuple[str, str]] = []
    for job_id, retry_of, params in ingests.values_list("id", "retry_of_id", "params"):
        keys.append(("ingest-job", str(retry_of or job_id)))
        given = params.get("idempotency") if isinstance(params, dict) else None
        if isinstance(given, dict) and isinstance(given.get("key"), str):
            keys.append(("ingest", given["key"]))
    idempotency_rewrite(
        team_id=team.id, endpoint_prefixes=("ingest",), rewrite=_without_profile, keys=keys
    )
