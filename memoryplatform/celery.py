"""The Celery app. Without CELERY_BROKER_URL tasks run eagerly in-process (embedded mode)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.schedules import crontab
from celery.signals import task_postrun, task_prerun, worker_init, worker_process_shutdown
from celery.states import FAILURE, SUCCESS

from core.metrics import record_periodic_run
from core.middleware import request_id_var

# A fallback for `celery -A memoryplatform` when nothing chose the settings. This module runs on
# every import of the package, before memoryplatform.wsgi: the flag lets wsgi.py apply its own
# (production) default instead of inheriting this one.
SETTINGS_DEFAULTED = "DJANGO_SETTINGS_MODULE" not in os.environ
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")

app = Celery("memoryplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Read through app.conf only where Celery runs: reading app.conf loads Django's settings, which
# must not happen on import (memoryplatform.wsgi chooses them after importing this module).
BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    # Cleanup for every enabled team, per its pipeline config (docs/lifecycle.md).
    "lifecycle-cleanups": {"task": "lifecycle.schedule_cleanups", "schedule": crontab(minute=5)},
    # Agents whose working memory has items and no write for idle_extract_seconds: compressed.
    "lifecycle-idle-compresses": {
        "task": "lifecycle.schedule_idle_compresses",
        "schedule": 60.0,
    },
    # Jobs whose lease expired (worker killed, message lost): abandoned and retried once.
    "lifecycle-reclaim-jobs": {"task": "lifecycle.reclaim_jobs", "schedule": 60.0},
    # Index change rows are only needed until every process has applied them.
    "prune-index-changes": {"task": "memories.prune_index_changes", "schedule": crontab(minute=17)},
    # SEARCH_BACKEND=milvus: the change log shipped to the engine (each write also queues a
    # ship; this catches up after an engine or broker outage). A no-op on the local backend.
    "ship-search-changes": {"task": "memories.ship_search_changes", "schedule": 30.0},
    # Expired working-memory rows of the database backend (Redis expires its own keys).
    "purge-expired-working-items": {
        "task": "memories.purge_expired_working_items",
        "schedule": crontab(minute="*/10"),
    },
    # Search/write counters kept in the cache -> tenants.UsageDay (the console dashboard).
    "flush-usage-counters": {"task": "tenants.flush_usage", "schedule": 60.0},
    # Idempotency keys past IDEMPOTENCY_TTL_HOURS (POST /memories/ingest retries).
    "prune-idempotency-keys": {
        "task": "lifecycle.prune_idempotency_keys",
        "schedule": crontab(minute=29),
    },
    # Purged memories past TRASH_RETENTION_DAYS (console purge trash, memories.purge).
    "empty-expired-trash": {"task": "memories.empty_expired_trash", "schedule": crontab(minute=41)},
    # Hot / warm / cold tiers by idleness, importance and recalls (memories.tiers).
    "retier-memories": {"task": "memories.retier_memories", "schedule": crontab(minute=47)},
    # Export bundles (ExportChunk rows) past EXPORT_RETENTION_HOURS (docs/export.md).
    "prune-exports": {"task": "lifecycle.prune_exports", "schedule": crontab(minute=29)},
    # Archive rows (L0) past ARCHIVE_RETENTION_DAYS; nothing while it is 0 (keep forever).
    "prune-archive": {"task": "lifecycle.prune_archive", "schedule": crontab(minute=53)},
    # Team identities a member's deletion left with a single scope (graph.identity).
    "prune-identities": {"task": "graph.prune_identities", "schedule": crontab(minute=23)},
}
app.conf.beat_schedule = BEAT_SCHEDULE


# The request id of the API call that queued a job is on every log line the job writes (sent as a
# message header by lifecycle.services.dispatch; the task's own id otherwise, e.g. beat's).
_request_tokens: dict[str, Any] = {}


@task_prerun.connect
def _bind_request_id(task_id: str, task: Any, **kwargs: Any) -> None:
    request = task.request
    rid = getattr(request, "request_id", None) or (request.headers or {}).get("request_id")
    if not rid:
        # Run eagerly inside a request (embedded mode): keep that request's id.
        current = request_id_var.get()
        rid = current if current != "-" else task_id
    _request_tokens[task_id] = request_id_var.set(rid)


@task_postrun.connect
def _unbind_request_id(task_id: str, **kwargs: Any) -> None:
    token = _request_tokens.pop(task_id, None)
    if token is not None:
        request_id_var.reset(token)


# Each task of the schedule is in one entry (tests check it), so a task names its entry.
_ENTRY_OF_TASK = {entry["task"]: name for name, entry in BEAT_SCHEDULE.items()}


@task_postrun.connect
def _count_periodic_run(task: Any, state: str, **kwargs: Any) -> None:
    """A run of the schedule's task from beat's message counted as the embedded beat counts its
    own (core.metrics.PERIODIC_RUNS), so that an operator alerts on one series whichever runs
    the schedule. Only beat's messages (Celery's `celery_beat_task` header): the same task sent
    by other code (each write queues a `ship_search_changes`) is not a periodic run. A run that
    asked to be retried (RETRY) has no outcome yet."""
    entry = _ENTRY_OF_TASK.get(task.name)
    request = task.request
    from_beat = getattr(request, "celery_beat_task", None) or (request.headers or {}).get(
        "celery_beat_task"
    )
    if entry is not None and from_beat and state in (SUCCESS, FAILURE):
        record_periodic_run(entry, ok=state == SUCCESS)


@worker_init.connect
def _serve_worker_metrics(sender: Any, **kwargs: Any) -> None:
    """WORKER_METRICS_BIND: the worker's main process answers `GET /metrics` (docs/metrics.md),
    for a worker on a machine or in a container with no web process to ask."""
    from memoryplatform.worker_metrics import serve_from_settings

    serve_from_settings(str(getattr(sender, "pool_cls", "")))


@worker_process_shutdown.connect
def _mark_pool_process_dead(pid: int, **kwargs: Any) -> None:
    """A pool process that ends (recycled, the worker stopping) stops counting in the "live"
    gauges of the next scrape, as gunicorn.conf.py does for a web worker."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
