from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "memories"

    def ready(self) -> None:
        from django.conf import settings

        from core import allocator
        from tenants.services import register_agent_purge_hook, register_team_purge_hook

        from . import checks, signals, tasks  # noqa: F401  (checks registers itself)
        from .retrieval.index import set_ship_hook

        # Before any index is loaded: this process will hold them (core.allocator says why).
        allocator.configure(settings.ALLOCATOR_MMAP_THRESHOLD)
        register_team_purge_hook(signals.purge_team_outside_db)
        register_agent_purge_hook(signals.purge_agent_outside_db)
        set_ship_hook(tasks.queue_search_ship)
