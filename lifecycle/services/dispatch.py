"""Sends a queued job to whoever runs it: a Celery worker, or (embedded mode, no broker) a
background thread of this process running the same task — so a working-memory write never waits
for it; tests set LIFECYCLE_INLINE to run it synchronously.

The task is looked up by its registered name (`lifecycle.tasks` is imported by the app config),
so that services do not import the task module that imports them.
"""

from __future__ import annotations

import contextvars
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from celery import current_app
from celery.app.task import Task
from django.conf import settings
from django.db import OperationalError, connection

from core.middleware import request_id_var

from ..models import LLM_JOB_KINDS, JobRun

logger = logging.getLogger(__name__)

RUN_JOB_TASK = "lifecycle.run_job"
_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lifecycle")


def _run_job_task() -> Task:
    return current_app.tasks[RUN_JOB_TASK]


# SQLite answers "table is locked" when another connection of the server process writes at the
# same moment. Trying again is safe: the claim is conditional, so a job that a failed attempt
# left queued is claimed now, and one it had already claimed is not run a second time.
_ATTEMPTS = 5


def _run_in_thread(job_id: int) -> None:
    try:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                _run_job_task().apply(args=[job_id])
                return
            except OperationalError:
                if attempt == _ATTEMPTS:
                    raise
                time.sleep(0.2 * attempt)
    except Exception:
        logger.exception("lifecycle job %s failed in the background", job_id)
    finally:
        connection.close()


def enqueue(job: JobRun) -> None:
    """Sends a queued job to its worker (call after commit)."""
    queue = "llm" if job.kind in LLM_JOB_KINDS else "maintenance"
    if settings.CELERY_TASK_ALWAYS_EAGER:
        if settings.LIFECYCLE_INLINE:
            _run_job_task().apply(args=[job.pk])
        else:
            # A copy of this context: the job's log lines keep the request id that queued it.
            _executor.submit(contextvars.copy_context().run, _run_in_thread, job.pk)
        return
    # The worker puts the request id back in its context (memoryplatform.celery).
    _run_job_task().apply_async(
        args=[job.pk], queue=queue, headers={"request_id": request_id_var.get()}
    )
