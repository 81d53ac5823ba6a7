"""Job records and the conditional claim that keeps two workers off the same job."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from lifecycle.models import JobRun
from lifecycle.schemas import Usage
from memoryplatform.errors import DomainError
from tenants.models import Team

logger = logging.getLogger(__name__)


def job_create(
    *,
    team: Team,
    kind: str,
    trigger: str,
    agent_id: str = "",
    params: dict[str, Any] | None = None,
    active_key: str | None = None,
) -> JobRun | None:
    """A queued job; None when `active_key` says the same automatic job is already queued or running."""
    try:
        with transaction.atomic():
            return JobRun.objects.create(
                team=team,
                agent_id=agent_id,
                kind=kind,
                trigger=trigger,
                params=params or {},
                active_key=active_key,
            )
    except IntegrityError:
        return None


def job_claim(*, job_id: int) -> JobRun | None:
    """Moves a queued job to running; only one caller can win (a conditional UPDATE)."""
    claimed = JobRun.objects.filter(pk=job_id, status=JobRun.STATUS_QUEUED).update(
        status=JobRun.STATUS_RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return None
    return JobRun.objects.select_related("team").get(pk=job_id)


def job_finish(
    *, job: JobRun, counts: dict[str, Any], usage: Usage, engine: str, error: str = ""
) -> None:
    job.status = JobRun.STATUS_FAILED if error else JobRun.STATUS_SUCCEEDED
    job.counts = counts
    job.error = error[:4000]
    job.engine = engine
    job.prompt_tokens = usage.prompt_tokens
    job.completion_tokens = usage.completion_tokens
    job.total_tokens = usage.total_tokens
    job.finished_at = timezone.now()
    job.active_key = None
    job.save()


def run_job(
    job: JobRun, operation: Callable[[], tuple[dict[str, Any], Usage, str]]
) -> dict[str, Any]:
    """Runs a claimed job's operation, recording its outcome; re-raises failures for the caller."""
    try:
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
    counts = {k: v for k, v in result.items() if isinstance(v, int | float | bool) or v is None}
    job_finish(job=job, counts=counts, usage=usage, engine=engine)
    return result
