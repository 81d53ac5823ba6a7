from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The team leads' review console: HTML views over the same services as the API."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "console"
