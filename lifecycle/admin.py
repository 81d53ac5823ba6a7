"""Read-only admin views of lifecycle records, scoped to the user's teams like every admin page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from tenants.admin import TeamScopedAdminMixin

from .models import JobRun, Persona, Scenario


class ReadOnlyScopedAdmin(TeamScopedAdminMixin, admin.ModelAdmin):
    """Lifecycle rows are written by jobs only; people read them here."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyScopedAdmin):
    list_display = (
        "id",
        "team",
        "agent_id",
        "kind",
        "trigger",
        "status",
        "created_at",
        "duration_seconds",
        "total_tokens",
        "engine",
    )
    list_filter = ("kind", "status", "trigger", ("team", admin.RelatedOnlyFieldListFilter))
    search_fields = ("agent_id", "error")
    ordering = ("-created_at",)


@admin.register(Scenario)
class ScenarioAdmin(ReadOnlyScopedAdmin):
    list_display = ("name", "team", "agent_id", "created_at")
    list_filter = (("team", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("name", "summary", "agent_id")


@admin.register(Persona)
class PersonaAdmin(ReadOnlyScopedAdmin):
    list_display = ("id", "team", "agent_id", "created_at")
    list_filter = (("team", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("agent_id", "summary")
