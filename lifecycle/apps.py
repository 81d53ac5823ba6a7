from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "lifecycle"

    def ready(self) -> None:
        # Registers the Celery tasks, which services.dispatch sends by name.
        from django.db.models.signals import pre_delete

        from memories.working.events import working_memory_written
        from tenants.models import Agent

        from . import signals, tasks  # noqa: F401

        # An agent's deletion is final: what the lifecycle holds of it goes in the same
        # transaction.
        pre_delete.connect(
            signals.delete_agents_lifecycle_rows, sender=Agent, dispatch_uid="lifecycle.agent_purge"
        )

        working_memory_written.connect(_on_working_write, dispatch_uid="lifecycle.pipeline")

        from memories.working.events import working_memory_evicting

        from .services.archive import on_working_memory_evicting

        # Items the working-memory cap pushes out are archived, not lost (raises = kept).
        working_memory_evicting.connect(
            on_working_memory_evicting, dispatch_uid="lifecycle.archive"
        )

        from memories.retrieval import search

        # An agent's search reads the team's recall timeout through a hook, so memories never
        # imports lifecycle (imports flow tenants <- memories <- graph <- lifecycle).
        search.register_recall_timeout_provider(_recall_timeout_ms)


def _recall_timeout_ms(team: Any) -> int:
    """The team's `recall_timeout_ms`, saved or the default: a bound on waiting, not automation,
    so it holds before a team saves its config and whether the pipeline is enabled or not."""
    from .services.pipeline import config_get_cached

    return config_get_cached(team=team).recall_timeout_ms


def _on_working_write(
    sender: Any, team: Any, agent_id: str, run_id: str = "", **kwargs: Any
) -> None:
    import logging

    from .services.pipeline import on_working_memory_written

    try:
        on_working_memory_written(team=team, agent_id=agent_id, run_id=run_id)
    except Exception:
        # The item is stored; a failing trigger must not turn the write into an error. The next
        # write (or auto-run, or beat) tries again.
        logging.getLogger(__name__).exception(
            "pipeline trigger failed for %s/%s", team.id, agent_id
        )
