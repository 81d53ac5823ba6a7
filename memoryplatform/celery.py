"""The Celery app. Without CELERY_BROKER_URL tasks run eagerly in-process (embedded mode)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")

app = Celery("memoryplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
