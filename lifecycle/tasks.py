"""Thin Celery tasks: they take ids, claim their job, call the services.

Queues: `llm` for the operations that may call an LLM, `maintenance` for cleanup. Transient
failures (LLM or Redis unavailable) are retried with backoff and jitter; anything else fails the
job, which records the error. Jobs are sent here by `services.dispatch.enqueue` (by task name:
services never import this module).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from core.errors import DomainError, ErrorCode

from .models import JobRun

logger = logging.getLogger(__name__)

TRANSIENT = {
    ErrorCode.LLM_UNAVAILABLE,
    ErrorCode.WORKING_MEMORY_UNAVAILABLE,
    ErrorCode.EMBEDDING_UNAVAILABLE,
}


@shared_task(
    bind=True,
    name="lifecycle.run_job",
    acks_late=True,
    max_retries=3,
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
)
def run_job_task(self: Any, job_id: int) -> dict[str, Any] | None:
    """A queued job, run by a worker: `pipeline.run_queued` plus the retries of transient
    failures. Kept under this name (and the task name "lifecycle.run_job"): queued broker
    messages name it, so renaming it would strand the jobs already in the queue."""
    from .presenters import result_body
    from .services.pipeline import run_queued

    try:
        result = run_queued(job_id=job_id)
        # The task's own result (the result backend's JSON): the body the API would answer.
        return None if result is None else result_body(result)
    except DomainError as exc:
        if exc.code in TRANSIENT and self.request.retries < self.max_retries:
            from .services.jobs import job_requeue

            # Back to the queue for the retry (the failure stays in `error` until it succeeds),
            # with a fresh pick-up deadline that allows for the countdown.
            countdown = min(600, 30 * 2**self.request.retries)
            job_requeue(job_id=job_id, delay_seconds=countdown)
            raise self.retry(exc=exc, countdown=countdown) from exc
        return None
    except JobRun.DoesNotExist:
        return None  # the team (and its jobs) was deleted meanwhile


@shared_task(name="lifecycle.schedule_cleanups", ignore_result=True)
def schedule_cleanups_task() -> int:
    from .services.pipeline import schedule_cleanups

    return schedule_cleanups(trigger="beat")


@shared_task(name="lifecycle.schedule_idle_compresses", ignore_result=True)
def schedule_idle_compresses_task() -> int:
    """A compress for every agent whose working memory went idle (pipeline config)."""
    from .services.pipeline import schedule_idle_compresses

    return schedule_idle_compresses(trigger="beat")


@shared_task(name="lifecycle.reclaim_jobs", ignore_result=True)
def reclaim_jobs_task() -> int:
    """Abandons (and retries once) jobs whose lease expired: their worker died or lost them."""
    from .services.jobs import jobs_reclaim_expired

    return len(jobs_reclaim_expired())


@shared_task(name="lifecycle.prune_idempotency_keys", ignore_result=True)
def prune_idempotency_keys_task() -> int:
    """Forgets the answers kept for Idempotency-Key retries once their TTL passed."""
    from tenants.idempotency import idempotency_prune

    return idempotency_prune()


@shared_task(name="lifecycle.prune_exports", ignore_result=True)
def prune_exports_task() -> int:
    """Removes export bundles older than EXPORT_RETENTION_HOURS (their jobs stay recorded)."""
    from .services.bundle import exports_prune

    return exports_prune()


@shared_task(name="lifecycle.prune_archive", ignore_result=True)
def prune_archive_task() -> int:
    """Deletes archive rows older than ARCHIVE_RETENTION_DAYS (none while it is 0)."""
    from .services.archive import archive_prune

    return archive_prune()
