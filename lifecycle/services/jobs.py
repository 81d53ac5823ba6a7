"""Job records, their leases, and the conditional updates that keep two workers off one job.

Leases. Every job carries `lease_expires_at`: while queued, the deadline for a worker to pick it
up (LIFECYCLE_JOB_QUEUED_TIMEOUT_SECONDS); while running, a deadline (LIFECYCLE_JOB_LEASE_SECONDS)
that a heartbeat thread of the running worker pushes back every quarter lease, so a long LLM call
keeps its job as long as its process lives. A `kill -9`, an OOM kill or a lost broker message
leaves the job `queued`/`running` with its lease running out; it is then *reclaimed*
(`job_reclaim`): marked `abandoned`, its `active_key`/`claim_key` released, and retried once as a
new job (`retry_of`) — by beat (`jobs_reclaim_expired`), by the next trigger that wants the same
`active_key` (`job_create`), by the next consumer of the same working memory (`claim_acquire`), or,
for a Celery redelivery of the same message, by `job_claim` taking the expired job over.

Every transition locks the job row, checks its state and updates it (`_transition`), so of two
reclaimers, or a reclaimer and a redelivery, exactly one wins; `lease_token` names the holder, so
a worker that lost its job (it was slow, not dead) can neither commit its work (`claim_confirm`)
nor overwrite the record (`job_finish`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core.errors import DomainError, ErrorCode
from core.metrics import JOB_LATENCY, JOBS
from lifecycle.models import JobRun, JobStatus
from lifecycle.services.dispatch import enqueue
from llm import Usage
from tenants.models import Team

R = TypeVar("R")  # what a job's operation returns

logger = logging.getLogger(__name__)

# Beat reclaims at most this many jobs per run; the next run takes the rest.
RECLAIM_BATCH = 100


def lease_seconds() -> float:
    return float(settings.LIFECYCLE_JOB_LEASE_SECONDS)


def _running_deadline(now: datetime) -> datetime:
    return now + timedelta(seconds=lease_seconds())


def queued_deadline(now: datetime, *, delay_seconds: float = 0) -> datetime:
    """When a job queued now (to start after `delay_seconds`) counts as never picked up."""
    return now + timedelta(seconds=delay_seconds + settings.LIFECYCLE_JOB_QUEUED_TIMEOUT_SECONDS)


def _token() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Lease:
    """Who holds a running job: its id and the token its claim was given."""

    job_id: int
    token: str


def lease_of(job: JobRun) -> Lease:
    return Lease(job_id=job.pk, token=job.lease_token)


def _locked(job_id: int) -> JobRun | None:
    """The job row, locked FOR UPDATE until the transaction ends (SQLite: the IMMEDIATE
    transaction is the lock).

    Rows are locked and updated by primary key *only*, the conditions checked in between: with
    the lease columns in the WHERE, MariaDB may range-scan the `job_lease` index instead and lock
    its entries before the row — the opposite order to a primary-key lookup, which deadlocked a
    reclaimer against a claim in the concurrency tests."""
    return JobRun.objects.select_for_update().filter(pk=job_id).first()


def _transition(job_id: int, allowed: Callable[[JobRun], bool], **changes: Any) -> bool:
    """Applies `changes` to the job if `allowed(job)` holds, atomically; True when it did."""
    with transaction.atomic():
        job = _locked(job_id)
        if job is None or not allowed(job):
            return False
        JobRun.objects.filter(pk=job_id).update(**changes)
        return True


def _expired(job: JobRun, now: datetime) -> bool:
    return job.lease_expires_at is not None and job.lease_expires_at < now


def _held(job: JobRun, lease: Lease) -> bool:
    return job.status == JobStatus.RUNNING and job.lease_token == lease.token


def _insert(
    *,
    team: Team,
    kind: str,
    trigger: str,
    agent_id: str,
    params: dict[str, Any],
    active_key: str | None,
    retry_of_id: int | None,
    status: str,
    counts: dict[str, Any],
    engine: str,
) -> JobRun | None:
    """The one place a JobRun row is created; its lease fields follow from `status`."""
    now = timezone.now()
    lease: dict[str, Any]
    if status == JobStatus.QUEUED:
        lease = {"lease_expires_at": queued_deadline(now)}
    elif status == JobStatus.RUNNING:
        lease = {
            "started_at": now,
            "lease_token": _token(),
            "lease_expires_at": _running_deadline(now),
        }
    else:  # the record of work already done: nothing left to lease
        lease = {"started_at": now, "finished_at": now}
    try:
        with transaction.atomic():
            return JobRun.objects.create(
                team=team,
                agent_id=agent_id,
                kind=kind,
                trigger=trigger,
                params=params,
                active_key=active_key,
                retry_of_id=retry_of_id,
                status=status,
                counts=counts,
                engine=engine,
                **lease,
            )
    except IntegrityError:
        return None


def job_create(
    *,
    team: Team,
    kind: str,
    trigger: str,
    agent_id: str = "",
    params: dict[str, Any] | None = None,
    active_key: str | None = None,
    status: str = JobStatus.QUEUED,
    counts: dict[str, Any] | None = None,
    engine: str = "",
) -> JobRun | None:
    """A new job, queued by default; None when `active_key` says the same automatic job is
    already queued or running. A holder of the key whose lease has expired (its worker died) is
    abandoned and the new job takes its place, linked to it (`retry_of`).

    `status` running: a job that runs now in the calling process (`job_start`), created leased.
    `status` succeeded: the record of something already done (with its `counts` and `engine`),
    such as the working items the cap archived."""
    fields: dict[str, Any] = {
        "team": team,
        "kind": kind,
        "trigger": trigger,
        "agent_id": agent_id,
        "params": params or {},
        "active_key": active_key,
        "status": status,
        "counts": counts or {},
        "engine": engine,
    }
    job = _insert(**fields, retry_of_id=None)
    if job is not None or active_key is None:
        return job
    # The usual case is a live holder (a burst of writes): one indexed read, nothing else.
    stale = (
        JobRun.objects.filter(active_key=active_key, lease_expires_at__lt=timezone.now())
        .values_list("pk", flat=True)
        .first()
    )
    if stale is None or job_reclaim(job_id=stale, retry=False) is None:
        return None
    # None again if another trigger took the freed key first: that one does the work.
    return _insert(**fields, retry_of_id=stale)


def job_start(
    *, team: Team, kind: str, trigger: str, agent_id: str, params: dict[str, Any]
) -> JobRun:
    """A job that runs now in the calling process (API, command): created running, leased."""
    job = job_create(
        team=team,
        kind=kind,
        trigger=trigger,
        agent_id=agent_id,
        params=params,
        status=JobStatus.RUNNING,
    )
    if job is None:  # no active_key: only a vanished team refuses the row
        raise JobRun.DoesNotExist(f"could not record the {kind} job of team {team.pk}")
    return job


def job_claim(*, job_id: int) -> JobRun | None:
    """Moves a queued job to running, under a new lease; only one caller can win (a conditional
    UPDATE). A job still `running` whose lease has expired is taken over the same way: that is a
    Celery redelivery after its worker died. A running job with a live lease is left alone."""
    now = timezone.now()
    seen: list[str] = []

    def claimable(job: JobRun) -> bool:
        seen.append(job.status)
        return job.status == JobStatus.QUEUED or (
            job.status == JobStatus.RUNNING and _expired(job, now)
        )

    if not _transition(
        job_id,
        claimable,
        status=JobStatus.RUNNING,
        started_at=now,
        lease_token=_token(),
        lease_expires_at=_running_deadline(now),
        claim_key=None,  # a dead holder's claim on working memory lapses with its lease
    ):
        return None
    if seen == [JobStatus.RUNNING]:
        logger.warning("lifecycle job %s: lease expired while running; taken over", job_id)
    return JobRun.objects.select_related("team").get(pk=job_id)


@dataclass(frozen=True)
class Reclaimed:
    abandoned: JobRun
    retry: JobRun | None


def job_reclaim(*, job_id: int, retry: bool = True) -> Reclaimed | None:
    """Abandons a queued or running job whose lease has expired, releasing its keys, and (unless
    `retry` is False, or it already was a retry) queues it again once as a new job holding the
    same `active_key`. None when the job is not (or no longer) expired: someone else reclaimed,
    finished or took it over first."""

    now = timezone.now()
    with transaction.atomic():
        # Locked, then checked: of two reclaimers (or a reclaimer and a redelivery's job_claim)
        # only one sees it expired. (No join: on MariaDB FOR UPDATE would lock the team row too.)
        job = _locked(job_id)
        if job is None or job.status not in JobRun.ACTIVE_STATUSES or not _expired(job, now):
            return None
        why = (
            "no worker picked it up before its lease expired"
            if job.status == JobStatus.QUEUED
            else "its worker stopped renewing its lease (it died, or lost the database)"
        )
        JobRun.objects.filter(pk=job_id).update(
            status=JobStatus.ABANDONED,
            active_key=None,
            claim_key=None,
            lease_token="",
            finished_at=now,
            error=f"abandoned: {why}",
            # Its retry (below) is given the params as they were.
            params=params_released(job.params) or job.params,
        )
        JOBS.labels(kind=job.kind, status=JobStatus.ABANDONED).inc()
        logger.warning(
            "lifecycle job %s (%s, %s/%s) abandoned: %s",
            job.pk,
            job.kind,
            job.team_id,
            job.agent_id or "-",
            why,
        )
        active_key, params = job.active_key, job.params
        job = JobRun.objects.select_related("team").get(pk=job_id)
        if not retry or job.retry_of_id is not None:
            return Reclaimed(abandoned=job, retry=None)
        again = _insert(
            team=job.team,
            kind=job.kind,
            trigger=job.trigger,
            agent_id=job.agent_id,
            params=params,
            active_key=active_key,
            retry_of_id=job.pk,
            status=JobStatus.QUEUED,
            counts={},
            engine="",
        )
        if again is not None:
            transaction.on_commit(partial(enqueue, again))
    return Reclaimed(abandoned=job, retry=again)


def jobs_reclaim_expired(*, limit: int = RECLAIM_BATCH) -> list[Reclaimed]:
    """Reclaims every queued or running job whose lease has expired (beat; idempotent)."""
    expired = list(
        JobRun.objects.filter(
            status__in=JobRun.ACTIVE_STATUSES, lease_expires_at__lt=timezone.now()
        )
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    done = [job_reclaim(job_id=pk) for pk in expired]
    return [r for r in done if r is not None]


def lease_renew(*, lease: Lease) -> bool:
    """Pushes the lease back; False when this holder no longer has the job."""
    return _transition(
        lease.job_id,
        lambda job: _held(job, lease),
        lease_expires_at=_running_deadline(timezone.now()),
    )


@contextmanager
def lease_kept(lease: Lease) -> Iterator[None]:
    """Renews the lease from a heartbeat thread while the block runs (one UPDATE per quarter
    lease). The thread dies with its process, which is the point: a dead worker's lease runs out."""
    stop = threading.Event()
    interval = max(lease_seconds() / 4, 0.05)

    def beat() -> None:
        try:
            while not stop.wait(interval):
                try:
                    if not lease_renew(lease=lease):
                        return  # finished, or taken over: nothing left to keep
                except Exception as exc:
                    # Transient (the database restarting): the next beat tries again; three
                    # more beats fit in the lease before anyone may reclaim the job.
                    logger.warning("lease of job %s not renewed: %s", lease.job_id, exc)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"lease-{lease.job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _lease_lost(lease: Lease) -> DomainError:
    return DomainError(
        ErrorCode.CONFLICT,
        f"lifecycle job {lease.job_id} lost its lease (it was taken over after it expired); "
        "nothing was committed",
    )


def claim_acquire(*, lease: Lease, key: str) -> int | None:
    """Takes the claim `key` (an agent's working memory) for this job. None on success, else the
    id of the live job that holds it. A holder whose lease has expired is reclaimed first.

    The claim is a unique column on the job row, so it is the same on SQLite and MariaDB and
    whichever backend holds working memory; it lapses with the job's lease, and the items stay
    in working memory (untouched) until the consumer's results are committed."""
    holder: int | None = None
    for _ in range(3):
        try:
            taken = _transition(lease.job_id, lambda job: _held(job, lease), claim_key=key)
        except IntegrityError:
            row = (
                JobRun.objects.filter(claim_key=key)
                .values_list("pk", "status", "lease_expires_at")
                .first()
            )
            if row is None:
                continue  # released meanwhile
            holder, status, expires = row
            now = timezone.now()
            if status in JobRun.ACTIVE_STATUSES and expires is not None and expires >= now:
                return holder
            if job_reclaim(job_id=holder) is None:
                # Not reclaimable although stale: a finished job that kept its claim (cannot
                # happen through job_finish) — release it.
                _transition(
                    holder,
                    lambda job: job.claim_key == key and job.status not in JobRun.ACTIVE_STATUSES,
                    claim_key=None,
                )
            holder = None
            continue
        if not taken:
            raise _lease_lost(lease)
        return None
    if holder is None:  # the claim kept changing hands: extremely busy, let the caller retry
        raise DomainError(
            ErrorCode.CONFLICT, "this agent's working memory is being consumed; try again"
        )
    return holder


def claim_confirm(*, lease: Lease, key: str) -> None:
    """Inside the transaction that commits a consumer's results: checks this job still holds
    its lease and claim, and pushes the lease back so nobody can reclaim it before the items are
    removed. Raises CONFLICT (and so rolls the transaction back) when it lost them.

    On MariaDB the row stays locked until commit, so a reclaimer blocks and then sees the renewed
    lease; on SQLite the IMMEDIATE transaction serialises the two."""
    if not _transition(
        lease.job_id,
        lambda job: _held(job, lease) and job.claim_key == key,
        lease_expires_at=_running_deadline(timezone.now()),
    ):
        raise _lease_lost(lease)


def claim_release(*, lease: Lease, key: str) -> None:
    _transition(
        lease.job_id,
        lambda job: job.lease_token == lease.token and job.claim_key == key,
        claim_key=None,
    )


def params_released(params: dict[str, Any]) -> dict[str, Any] | None:
    """A job's params once it no longer runs, or None when they stay as they are. An ingest's
    messages are what it was given to work on: kept while it may run (a retry of an abandoned
    job is given them), then only in the archive where the ingest put them (WorkingArchive,
    under ARCHIVE_RETENTION_DAYS, erased with the agent). A copy left on the job would outlive
    both and show on the console's job page; the job keeps how many it was given."""
    given = params.get("messages")
    if not isinstance(given, list):
        return None
    return {**params, "messages": len(given)}


def job_finish(
    *,
    job: JobRun,
    counts: dict[str, Any],
    usage: Usage,
    engine: str,
    error: str = "",
    result: dict[str, Any] | None = None,
) -> None:
    """Records the outcome (`result`: the API body, for GET /jobs/<id>), releasing the job's keys;
    only while this holder still has it (a job abandoned or taken over meanwhile keeps the record
    its new owner writes)."""
    outcome: dict[str, Any] = {
        "status": JobStatus.FAILED if error else JobStatus.SUCCEEDED,
        "counts": counts,
        "result": result,
        "error": error[:4000],
        "engine": engine,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "finished_at": timezone.now(),
        "active_key": None,
        "claim_key": None,
        "lease_expires_at": None,
    }
    released = params_released(job.params)
    if released is not None:
        outcome["params"] = released
    # The caller's object shows the outcome even when the row no longer is this holder's.
    for field, value in outcome.items():
        setattr(job, field, value)
    recorded = _transition(job.pk, lambda row: _held(row, lease_of(job)), **outcome)
    if recorded:
        JOBS.labels(kind=job.kind, status=outcome["status"]).inc()
        if job.duration_seconds is not None:
            JOB_LATENCY.labels(kind=job.kind).observe(job.duration_seconds)
        logger.info(
            "lifecycle job %s (%s, %s/%s) %s in %.2f s",
            job.pk,
            job.kind,
            job.team_id,
            job.agent_id or "-",
            outcome["status"],
            job.duration_seconds or 0.0,
        )
    else:
        logger.warning(
            "lifecycle job %s lost its lease before finishing; outcome not recorded (%s)",
            job.pk,
            error or counts,
        )


def job_requeue(*, job_id: int, delay_seconds: float) -> bool:
    """A failed job back to `queued` for a retry after `delay_seconds` (transient failures)."""
    return _transition(
        job_id,
        lambda job: job.status == JobStatus.FAILED,
        status=JobStatus.QUEUED,
        lease_expires_at=queued_deadline(timezone.now(), delay_seconds=delay_seconds),
    )


def job_execute(
    *,
    job: JobRun,
    operation: Callable[[], tuple[R, Usage, str]],
    counts: Callable[[R], dict[str, Any]],
    body: Callable[[R], dict[str, Any]] | None = None,
) -> R:
    """Runs a claimed (or started) job's operation under its lease, recording its outcome
    (`counts(result)`, lifecycle.presenters.job_counts, and `body(result)`, the API body);
    re-raises failures for the caller.
    Which operation a job kind runs is the pipeline's business (`pipeline.job_run`); this is
    only the lease and the record around it."""
    try:
        with lease_kept(lease_of(job)):
            result, usage, engine = operation()
    except DomainError as exc:
        job_finish(job=job, counts={}, usage=Usage(), engine="", error=f"{exc.code}: {exc.message}")
        raise
    except Exception as exc:
        logger.exception("lifecycle job %s (%s) failed", job.pk, job.kind)
        job_finish(
            job=job, counts={}, usage=Usage(), engine="", error=f"{type(exc).__name__}: {exc}"
        )
        raise
    job_finish(
        job=job,
        counts=counts(result),
        usage=usage,
        engine=engine,
        result=body(result) if body is not None else None,
    )
    return result
