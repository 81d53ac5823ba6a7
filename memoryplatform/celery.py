"""The Celery app. Without CELERY_BROKER_URL tasks run eagerly in-process (embedded mode)."""

from __future__ import annotations

import os

from celery import Celery
from celery.schedules import crontab

# A fallback for `celery -A memoryplatform` when nothing chose the settings. This module runs on
# every import of the package, before memoryplatform.wsgi: the flag lets wsgi.py apply its own
# (production) default instead of inheriting this one.
SETTINGS_DEFAULTED = "DJANGO_SETTINGS_MODULE" not in os.environ
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")

app = Celery("memoryplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    # Cleanup for every enabled team, per its pipeline config (docs/lifecycle.md).
    "lifecycle-cleanups": {"task": "lifecycle.schedule_cleanups", "schedule": crontab(minute=5)},
    # Jobs whose lease expired (worker killed, message lost): abandoned and retried once.
    "lifecycle-reclaim-jobs": {"task": "lifecycle.reclaim_jobs", "schedule": 60.0},
    # Index change rows are only needed until every process has applied them.
    "prune-index-changes": {"task": "memories.prune_index_changes", "schedule": crontab(minute=17)},
    # Expired working-memory rows of the database backend (Redis expires its own keys).
    "purge-expired-working-items": {
        "task": "memories.purge_expired_working_items",
        "schedule": crontab(minute="*/10"),
    },
    # Search/write counters kept in the cache -> tenants.UsageDay (the console dashboard).
    "flush-usage-counters": {"task": "tenants.flush_usage", "schedule": 60.0},
    # Purged memories past TRASH_RETENTION_DAYS (console purge trash, memories.purge).
    "empty-expired-trash": {"task": "memories.empty_expired_trash", "schedule": crontab(minute=41)},
}
