from __future__ import annotations

from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "lifecycle"
