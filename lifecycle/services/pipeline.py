"""The automatic pipeline (docs/lifecycle.md): per-team config, compress on working-memory writes,
periodic cleanup, and auto-run; and how a job runs.

Running a job. `HANDLERS` maps each job kind to its operation; `job_run` is the one way a job's
operation is run (under the job's lease, its outcome recorded). Around it:

* `run` — now, in this process (API, commands): creates the job running, then `job_run`;
* `run_later` — queued for a worker (console "run now"), handed over after commit;
* `run_queued` — what a worker does with a queued job id: claim it, then `job_run`
  (`lifecycle.tasks.run_job_task` is the Celery task around it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.localcache import TTLCache
from core.rows import assign_given
from graph.extraction import graph_extract
from lifecycle.models import JobKind, JobRun, JobStatus, Persona, PipelineConfig
from llm import Usage
from memories.models import Memory, MemoryScope
from memories.working import WorkingItem, get_working_store, max_items_per_agent
from tenants.idempotency import IdempotencyKey, Replayed
from tenants.models import Agent, Team
from tenants.services import agent_ensure

from ..presenters import job_counts, result_body
from ..results import AutoRunAction, AutoRunSummary, JobReplayed, JobResult, JobSkipped
from . import bundle, ingest, jobs, operations
from .dispatch import enqueue

logger = logging.getLogger(__name__)

CONFIG_FIELDS = (
    "compress_every_n",
    "compress_target_count",
    "cleanup_idle_days",
    "cleanup_min_importance",
    "enabled",
    "warmup_max_memories",
    "warmup_compress_every_n",
    "extract_graph",
    "warmup_doubling",
    "idle_extract_seconds",
    "scenario_min_interval_seconds",
    "persona_every_n",
    "excluded_agents",
    "max_memories_per_run",
    "consolidate_min_fragments",
    "recall_timeout_ms",
)

# The idle scan (beat) queues at most this many compresses per run; the next run takes the rest.
IDLE_SCAN_BATCH = 200


def config_get(*, team: Team) -> PipelineConfig:
    """The team's saved config, or an unsaved one holding the defaults.

    Automation is opt-in: nothing runs automatically for a team until it saves its config once
    (POST /lifecycle/auto-config or the admin): configuring the pipeline is a last, explicit
    step. Until then its working memory stays exactly as the agent wrote it.
    """
    return PipelineConfig.objects.filter(team=team).first() or PipelineConfig(team=team)


# The config read by every working-memory write (on_working_memory_written): cached per process
# for PIPELINE_CONFIG_CACHE_SECONDS; a save through this process is seen at once, one through
# another worker within that time.
_config_cache: TTLCache[str, PipelineConfig] = TTLCache(
    ttl_seconds=settings.PIPELINE_CONFIG_CACHE_SECONDS
)


def config_get_cached(*, team: Team) -> PipelineConfig:
    """config_get for the write path; read-only use only (the object is shared).

    Only a saved config is cached: a team that has none yet is read from the database each time
    (one primary-key query), so the first save — "turn automation on, then write" — is seen by
    every process at once, not PIPELINE_CONFIG_CACHE_SECONDS later. (Searches read the config
    too, for the recall timeout: an earlier search through another process must not hide a
    config saved since.) Later changes of a saved config are seen within the cache's TTL."""
    config = _config_cache.get(team.id)
    if config is None:
        config = config_get(team=team)
        if config_is_saved(config):
            _config_cache.set(team.id, config)
    return config


def config_is_saved(config: PipelineConfig) -> bool:
    return not config._state.adding


def config_update(*, team: Team, **fields: Any) -> PipelineConfig:
    """Saves the fields given (the first save turns automation on).

    Only those fields are written, on the row locked afresh: two updates of different fields at
    once both hold (each wrote back every other field as it had read it, so "enabled: false"
    could be undone by a change of an unrelated setting), and two first saves at once make one
    row (the second was a duplicate-key 500)."""
    if "warmup_compress_every_n" in fields and "warmup_doubling" not in fields:
        # A team that sets the fixed warm-up step (the older field) keeps it: doubling would
        # silently ignore it (docs/lifecycle.md, precedence).
        fields = {**fields, "warmup_doubling": False}
    changed = {name: value for name, value in fields.items() if name in CONFIG_FIELDS}
    with transaction.atomic():
        # Django retries a lost insert race as a read (READ COMMITTED on MariaDB).
        PipelineConfig.objects.get_or_create(team=team)
        config = PipelineConfig.objects.select_for_update().get(team=team)
        config.save(update_fields=assign_given(config, **changed))
    _config_cache.pop(team.id)
    return config


def is_excluded(config: PipelineConfig, agent_id: str) -> bool:
    """The agent matches one of the config's `excluded_agents` globs: no automatic job for it
    (manual operations still run)."""
    return any(fnmatchcase(agent_id, pattern) for pattern in config.excluded_agents or ())


def _doubled_step(*, config: PipelineConfig, team: Team, agent_id: str, run_id: str) -> int:
    """The warm-up step by doubling: 1 item before the session's first compress, then 2, 4, …,
    never above compress_every_n.

    The session is the run when the write named one (`run_id`): only the agent's compresses
    triggered in that run count, so every new run of an agent warms up again from 1. Without a
    run id the session is the agent, and all its compresses count.

    The step is computed from the agent's compress jobs (JobRun, indexed by team, agent and kind;
    the run is the job's `params.run_id`) rather than kept in a counter of its own: nothing more
    to write on the hot path, nothing to drift from what really ran, and the count stops at the
    few jobs that matter (a LIMITed subquery). The run filter reads the agent's compress rows
    within that index; it only runs while the session warms up, whose jobs are few."""
    needed = max(config.compress_every_n - 1, 0).bit_length()  # doublings that reach the cap
    jobs_done = JobRun.objects.filter(
        team=team, agent_id=agent_id, kind=JobKind.COMPRESS, status=JobStatus.SUCCEEDED
    ).filter(counts__compressed__gt=0)
    if run_id:
        jobs_done = jobs_done.filter(params__run_id=run_id)
    done = jobs_done.values("pk")[:needed].count()
    return min(2**done, config.compress_every_n)


def compress_threshold(
    *, config: PipelineConfig, team: Team, agent_id: str, run_id: str = ""
) -> int:
    """How many working items trigger a compress for this agent (0 = never).

    While the session has fewer than `warmup_max_memories` personal memories it is warming up,
    so a new session gets long-term memory fast: with `warmup_doubling` its compresses come after
    1, 2, 4, … items (`_doubled_step`), else every `warmup_compress_every_n` items; afterwards
    every `compress_every_n`. The session is the run (`run_id`, its memories being those whose
    `run_id` it is) when the triggering write named one, else the agent. Never above the
    working-memory cap: an agent that reaches the cap is compressed rather than have its oldest
    items pushed out (into the archive, see lifecycle.services.archive).
    """
    if not config.enabled or config.compress_every_n == 0:
        return 0
    threshold = config.compress_every_n
    warmup = config.warmup_doubling or config.warmup_compress_every_n > 0
    if config.warmup_max_memories > 0 and warmup:
        personal = Memory.objects.filter(
            team=team, scope=MemoryScope.PERSONAL, agent_id=agent_id, superseded_by__isnull=True
        )
        if run_id:
            personal = personal.filter(run_id=run_id)
        if personal.values("pk")[: config.warmup_max_memories].count() < config.warmup_max_memories:
            threshold = (
                _doubled_step(config=config, team=team, agent_id=agent_id, run_id=run_id)
                if config.warmup_doubling
                else config.warmup_compress_every_n
            )
    cap = max_items_per_agent()
    return min(threshold, cap) if cap > 0 else threshold


def _compress_params(config: PipelineConfig, run_id: str) -> dict[str, Any]:
    """An automatic compress's params: the run it was triggered in, when there is one, is kept
    on the job — that is what the run's warm-up counts (`_doubled_step`)."""
    params: dict[str, Any] = {"target_count": config.compress_target_count}
    if run_id:
        params["run_id"] = run_id
    return params


def _newest_run(items: list[WorkingItem]) -> str:
    """The session an agent is in now, as far as its working memory says: its newest item's."""
    return max(items, key=lambda i: i.created_at).run_id if items else ""


def on_working_memory_written(*, team: Team, agent_id: str, run_id: str = "") -> JobRun | None:
    """After a working-memory write: queue one compress when the threshold is reached.

    Fast on purpose (a config read, two counts): the job itself runs elsewhere (a Celery worker,
    or a background thread in embedded mode). A unique `active_key` makes a burst of writes queue
    one job, not many. `run_id` is the session the write named: the threshold is that session's
    and the job records it.
    """
    config = config_get_cached(team=team)
    if not config_is_saved(config):
        return None  # automation is opt-in (see config_get)
    if is_excluded(config, agent_id):
        return None
    threshold = compress_threshold(config=config, team=team, agent_id=agent_id, run_id=run_id)
    if threshold <= 0:
        return None
    if get_working_store().count(team_id=team.id, agent_id=agent_id) < threshold:
        return None
    job = jobs.job_create(
        team=team,
        kind=JobKind.COMPRESS,
        trigger="auto",
        agent_id=agent_id,
        params=_compress_params(config, run_id),
        active_key=f"compress:{team.id}:{agent_id}",
    )
    if job is not None:
        # The write registered its agent through this process's cache of known agents, which
        # misses a deletion made by another worker for AGENT_CACHE_SECONDS when the processes
        # share no cache (tenants.services._known_agents): the job would then fail 404
        # (locks.job_agent_check) for an agent the caller has just written for. Registered here
        # without the cache: a query per job queued, not per write.
        agent_ensure(team=team, agent_id=agent_id)
        transaction.on_commit(lambda: enqueue(job))
    return job


def auto_run(*, team: Team, trigger: str = "api") -> list[AutoRunAction]:
    """Runs now, for the team, every action its config calls for; one result entry per action."""
    config = config_get(team=team)
    results: list[AutoRunAction] = []
    if not config.enabled:
        return results
    store = get_working_store()
    for agent_id in (
        Agent.objects.filter(team=team).order_by("agent_id").values_list("agent_id", flat=True)
    ):
        if is_excluded(config, agent_id):
            continue
        # Listed rather than counted: the newest item says which session the agent is in.
        items = store.list(team_id=team.id, agent_id=agent_id)
        run_id = _newest_run(items)
        threshold = compress_threshold(config=config, team=team, agent_id=agent_id, run_id=run_id)
        if threshold <= 0 or len(items) < threshold:
            continue
        result = run(
            team=team,
            kind=JobKind.COMPRESS,
            trigger=trigger,
            agent_id=agent_id,
            params=_compress_params(config, run_id),
        )
        results.append(AutoRunAction("compress", agent_id, result))
    if config.cleanup_idle_days > 0:
        result = run(
            team=team,
            kind=JobKind.CLEANUP,
            trigger=trigger,
            agent_id="",
            params={
                "max_age_days": config.cleanup_idle_days,
                "min_importance": config.cleanup_min_importance,
                # The trash says auto-run removed these, whatever started the run.
                "removed_by": "auto",
            },
        )
        results.append(AutoRunAction("cleanup", None, result))
    return results


def agent_extracts_graph(*, config: PipelineConfig, team: Team, agent_id: str) -> bool:
    """Whether the graph step follows this agent's fact extractions: the agent's own switch
    (`"extract_graph": true|false` in its config, POST /agents) when it has one, else the
    team's `extract_graph`."""
    agent_config = (
        Agent.objects.filter(team=team, agent_id=agent_id).values_list("config", flat=True).first()
    )
    own = agent_config.get("extract_graph") if isinstance(agent_config, dict) else None
    return own if isinstance(own, bool) else config.extract_graph


def _maybe_extract_graph(*, team: Team, agent_id: str, facts: int) -> None:
    """The optional graph step after fact extraction (config `extract_graph`, or the agent's
    own switch), as its own job."""
    config = config_get(team=team)
    if not facts or not config_is_saved(config) or not config.enabled:
        return
    if not agent_extracts_graph(config=config, team=team, agent_id=agent_id):
        return
    try:
        run(
            team=team,
            kind=JobKind.EXTRACT_GRAPH,
            trigger="auto",
            agent_id=agent_id,
            params={"max_memories": facts},
        )
    except Exception:
        # Recorded as a failed job; the facts are committed and stay.
        logger.exception("graph step after fact extraction failed for %s/%s", team.id, agent_id)


def follow_ups(*, team: Team, agent_id: str, new_memories: int, extraction: bool) -> list[JobRun]:
    """After a job wrote `new_memories` personal memories for the agent: queues the L2 and L3
    steps the team's config calls for (each its own automatic job, one active per agent).

    * aggregate-scenes, after a fact extraction (`extraction`: extract-facts or ingest), unless
      one was created for the agent within `scenario_min_interval_seconds` (whatever its
      trigger or outcome: a failing LLM is not asked again before the interval);
    * consolidate, after a fact extraction, when `consolidate_min_fragments` is set (≥ 2);
    * generate-persona, once the agent has `persona_every_n` personal memories newer than its
      latest persona (all of them for a first persona).

    Opt-in like every automatic job: nothing for an unsaved or disabled config, or an agent the
    config excludes."""
    config = config_get(team=team)
    if (
        new_memories <= 0
        or not config_is_saved(config)
        or not config.enabled
        or is_excluded(config, agent_id)
    ):
        return []
    wanted: list[str] = []
    params: dict[str, dict[str, Any]] = {}
    if extraction and config.consolidate_min_fragments >= 2:
        # Before the scenes: they then group the consolidated facts, not their fragments.
        wanted.append(JobKind.CONSOLIDATE)
        params[JobKind.CONSOLIDATE] = {"min_fragments": config.consolidate_min_fragments}
    if extraction and config.scenario_min_interval_seconds > 0:
        since = timezone.now() - timedelta(seconds=config.scenario_min_interval_seconds)
        if not JobRun.objects.filter(
            team=team, agent_id=agent_id, kind=JobKind.AGGREGATE_SCENES, created_at__gte=since
        ).exists():
            wanted.append(JobKind.AGGREGATE_SCENES)
    if config.persona_every_n > 0:
        newer = Memory.objects.filter(
            team=team, scope=MemoryScope.PERSONAL, agent_id=agent_id, superseded_by__isnull=True
        )
        last = (
            Persona.objects.filter(team=team, agent_id=agent_id)
            .order_by("-created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        if last is not None:
            newer = newer.filter(created_at__gt=last)
        if newer.values("pk")[: config.persona_every_n].count() >= config.persona_every_n:
            wanted.append(JobKind.GENERATE_PERSONA)
    queued: list[JobRun] = []
    for kind in wanted:
        job = jobs.job_create(
            team=team,
            kind=kind,
            trigger="auto",
            agent_id=agent_id,
            params=params.get(kind, {}),
            active_key=f"{kind}:{team.id}:{agent_id}",
        )
        if job is not None:
            transaction.on_commit(partial(enqueue, job))
            queued.append(job)
    return queued


def schedule_idle_compresses(
    *, trigger: str = "beat", limit: int = IDLE_SCAN_BATCH, now: datetime | None = None
) -> int:
    """Queues a compress for every agent whose working memory has items and no write for the
    team's `idle_extract_seconds` (Celery beat, every minute): a conversation that stopped short
    of the threshold still reaches long-term memory.

    Idempotent: the job holds the same `active_key` as a write-triggered compress, so an agent
    has at most one queued or running, and a compressed agent has nothing left to find. Bounded:
    at most `limit` jobs per run (the next run takes the rest). Its trigger is `beat`, so the
    worker runs it whatever the threshold (only automatic write-triggered compresses are
    skipped below it). `now` lets tests look from the future instead of sleeping."""
    store = get_working_store()
    now = now or timezone.now()
    queued = 0
    for config in (
        PipelineConfig.objects.filter(enabled=True, idle_extract_seconds__gt=0)
        .select_related("team")
        .order_by("team_id")
    ):
        idle_since = now - timedelta(seconds=config.idle_extract_seconds)
        for agent_id in (
            Agent.objects.filter(team=config.team)
            .order_by("agent_id")
            .values_list("agent_id", flat=True)
        ):
            if is_excluded(config, agent_id) or not store.count(
                team_id=config.team_id, agent_id=agent_id
            ):
                continue
            items = store.list(team_id=config.team_id, agent_id=agent_id)
            if not items or max(i.created_at for i in items) > idle_since:
                continue
            job = jobs.job_create(
                team=config.team,
                kind=JobKind.COMPRESS,
                trigger=trigger,
                agent_id=agent_id,
                params=_compress_params(config, _newest_run(items)),
                active_key=f"compress:{config.team_id}:{agent_id}",
            )
            if job is None:
                continue  # one is queued or running already
            transaction.on_commit(partial(enqueue, job))
            queued += 1
            if queued >= limit:
                return queued
    return queued


# --- the job kinds' operations ----------------------------------------------------------------


@dataclass(frozen=True)
class JobContext:
    """What a job's operation gets: the job's team, agent and params, its id (recorded on what it
    writes) and lease (the operations that consume working memory claim it under that lease)."""

    team: Team
    agent_id: str
    params: dict[str, Any]
    job_id: int | None
    lease: jobs.Lease | None


Outcome = tuple[JobResult, Usage, str]  # (result, usage, engine name)
JobHandler = Callable[[JobContext], Outcome]


def _compress(c: JobContext) -> Outcome:
    # `run_id` only records the session that triggered the job (for its warm-up): the compress
    # itself takes the agent's whole working memory, whatever session each item came from.
    params = {k: v for k, v in c.params.items() if k != "run_id"}
    outcome = operations.compress(
        team=c.team, agent_id=c.agent_id, job_id=c.job_id, lease=c.lease, **params
    )
    follow_ups(
        team=c.team, agent_id=c.agent_id, new_memories=len(outcome[0].memory_ids), extraction=False
    )
    return outcome


def _extract_facts(c: JobContext) -> Outcome:
    outcome = operations.extract_facts(
        team=c.team, agent_id=c.agent_id, job_id=c.job_id, lease=c.lease, **c.params
    )
    _maybe_extract_graph(team=c.team, agent_id=c.agent_id, facts=len(outcome[0].facts))
    follow_ups(
        team=c.team, agent_id=c.agent_id, new_memories=len(outcome[0].facts), extraction=True
    )
    return outcome


def _aggregate_scenes(c: JobContext) -> Outcome:
    return operations.aggregate_scenes(
        team=c.team, agent_id=c.agent_id, job_id=c.job_id, **c.params
    )


def _generate_persona(c: JobContext) -> Outcome:
    return operations.generate_persona(
        team=c.team, agent_id=c.agent_id, job_id=c.job_id, **c.params
    )


def _cleanup(c: JobContext) -> Outcome:
    return operations.cleanup(team=c.team, agent_id=c.agent_id or None, job_id=c.job_id, **c.params)


def _extract_graph(c: JobContext) -> Outcome:
    return graph_extract(team=c.team, agent_id=c.agent_id, job_id=c.job_id, **c.params)


def _ingest(c: JobContext) -> Outcome:
    # A retry of a job whose first run committed (and then died before recording it) must not
    # ingest again: the first run recorded its answer under the job's own key.
    first = c.job_id
    if c.job_id is not None:
        first = (
            JobRun.objects.filter(pk=c.job_id).values_list("retry_of_id", flat=True).first()
            or c.job_id
        )
    p = c.params
    given = p.get("idempotency")
    key = (
        # A synchronous request's own Idempotency-Key: its answer is the job's.
        IdempotencyKey(endpoint="ingest", key=given["key"], request_hash=given["hash"])
        if given
        else IdempotencyKey(endpoint="ingest-job", key=str(first), request_hash="")
    )
    try:
        outcome = ingest.ingest(
            team=c.team,
            agent_id=c.agent_id,
            messages=[
                ingest.IngestMessage(
                    role=m["role"],
                    content=m["content"],
                    at=parse_datetime(m["at"]) if m.get("at") else None,
                    name=m.get("name", ""),
                )
                for m in p["messages"]
            ],
            run_id=p.get("run_id", ""),
            infer=p.get("infer", True),
            fact_roles=p.get("fact_roles", ingest.DEFAULT_FACT_ROLES),
            max_memories_per_run=config_get(team=c.team).max_memories_per_run,
            job_id=c.job_id,
            idempotency=key,
        )
    except Replayed as replayed:
        return JobReplayed(body=replayed.body, status_code=replayed.status_code), Usage(), ""
    new = sum(1 for d in outcome[0].facts if d.decision != "NOOP")
    follow_ups(team=c.team, agent_id=c.agent_id, new_memories=new, extraction=True)
    return outcome


def _propose_procedures(c: JobContext) -> Outcome:
    return operations.propose_procedures(
        team=c.team, agent_id=c.agent_id, job_id=c.job_id, **c.params
    )


def _consolidate(c: JobContext) -> Outcome:
    return operations.consolidate(team=c.team, agent_id=c.agent_id, job_id=c.job_id, **c.params)


def _auto_run(c: JobContext) -> Outcome:
    return _auto_run_outcome(team=c.team, job_id=c.job_id)


def _export(c: JobContext) -> Outcome:
    if c.job_id is None:
        raise ValueError("an export is stored under its job: it runs as a recorded job only")
    result = bundle.export_run(team=c.team, agent_id=c.agent_id or None, job_id=c.job_id)
    return result, Usage(), "bundle"


# Every kind a job can run. (JobKind.CAP_ARCHIVE is only a record: it never runs.)
HANDLERS: dict[str, JobHandler] = {
    JobKind.COMPRESS: _compress,
    JobKind.EXTRACT_FACTS: _extract_facts,
    JobKind.AGGREGATE_SCENES: _aggregate_scenes,
    JobKind.GENERATE_PERSONA: _generate_persona,
    JobKind.CLEANUP: _cleanup,
    JobKind.EXTRACT_GRAPH: _extract_graph,
    JobKind.AUTO_RUN: _auto_run,
    JobKind.INGEST: _ingest,
    JobKind.PROPOSE_PROCEDURES: _propose_procedures,
    JobKind.CONSOLIDATE: _consolidate,
    JobKind.EXPORT: _export,
}


def dispatch(
    *,
    team: Team,
    kind: str,
    agent_id: str,
    params: dict[str, Any],
    job_id: int | None,
    lease: jobs.Lease | None = None,
) -> Outcome:
    """Calls the operation of `kind` (`HANDLERS`) with its parameters."""
    handler = HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown job kind {kind!r}")
    return handler(
        JobContext(team=team, agent_id=agent_id, params=params, job_id=job_id, lease=lease)
    )


# --- running jobs ------------------------------------------------------------------------------


def job_run(*, job: JobRun) -> JobResult:
    """Runs a claimed or started job's operation under its lease and records the outcome (the
    one way any job runs); re-raises the operation's failure for the caller."""
    return jobs.job_execute(
        job=job,
        counts=job_counts,
        body=result_body,
        operation=partial(
            dispatch,
            team=job.team,
            kind=job.kind,
            agent_id=job.agent_id,
            params=job.params,
            job_id=job.pk,
            lease=jobs.lease_of(job),
        ),
    )


def run(*, team: Team, kind: str, trigger: str, agent_id: str, params: dict[str, Any]) -> JobResult:
    """Runs an operation now in this process, recorded as a job (leased like a queued one)."""
    job = jobs.job_start(team=team, kind=kind, trigger=trigger, agent_id=agent_id, params=params)
    return job_run(job=job)


def run_queued(*, job_id: int) -> JobResult | JobSkipped | None:
    """Runs a queued job if this caller wins the claim; None when someone else has it (or it is gone)."""
    job = jobs.job_claim(job_id=job_id)
    if job is None:
        return None
    if job.kind == JobKind.COMPRESS and job.trigger == "auto":
        # A job queued by a burst of writes may find the work done by the time it runs (an
        # earlier job or a manual compress consumed the items): nothing to do then.
        config = config_get(team=job.team)
        threshold = compress_threshold(
            config=config,
            team=job.team,
            agent_id=job.agent_id,
            run_id=str(job.params.get("run_id", "")),
        )
        if (
            threshold <= 0
            or get_working_store().count(team_id=job.team_id, agent_id=job.agent_id) < threshold
        ):
            jobs.job_finish(job=job, counts={"skipped": 1}, usage=Usage(), engine="")
            return JobSkipped()
    return job_run(job=job)


def schedule_cleanups(*, trigger: str = "beat") -> int:
    """Queues a cleanup job for every enabled team whose config asks for one (Celery beat)."""
    queued = 0
    for config in PipelineConfig.objects.filter(
        enabled=True, cleanup_idle_days__gt=0
    ).select_related("team"):
        job = jobs.job_create(
            team=config.team,
            kind=JobKind.CLEANUP,
            trigger=trigger,
            params={
                "max_age_days": config.cleanup_idle_days,
                "min_importance": config.cleanup_min_importance,
            },
            active_key=f"cleanup:{config.team_id}",
        )
        if job is not None:
            transaction.on_commit(partial(enqueue, job))
            queued += 1
    return queued


# --- Queued runs (the review console's "run now") ---------------------------------------------


def _auto_run_outcome(*, team: Team, job_id: int | None) -> Outcome:
    """The whole pipeline as one recorded job: each action it runs is its own job, with the
    same trigger as this one, and records its own counts and tokens."""
    trigger = "auto"
    if job_id is not None:
        trigger = (
            JobRun.objects.filter(pk=job_id).values_list("trigger", flat=True).first() or trigger
        )
    results = auto_run(team=team, trigger=trigger)
    summary = AutoRunSummary(
        actions=len(results),
        compress_runs=sum(1 for r in results if r.action == "compress"),
        cleanup_runs=sum(1 for r in results if r.action == "cleanup"),
    )
    return summary, Usage(), "pipeline"


def run_later(
    *, team: Team, kind: str, trigger: str, agent_id: str, params: dict[str, Any]
) -> JobRun:
    """Queues an operation as a recorded job, handed to its worker once the caller's transaction
    commits: the same dispatch as `run`, but the request does not wait for an LLM. In embedded
    mode the job runs in a background thread (inline under LIFECYCLE_INLINE, as in tests)."""
    if kind not in JobKind.values:
        raise ValueError(f"unknown job kind {kind!r}")
    job = jobs.job_create(team=team, kind=kind, trigger=trigger, agent_id=agent_id, params=params)
    assert job is not None  # no active_key, so never refused as a duplicate

    transaction.on_commit(partial(enqueue, job))
    return job
