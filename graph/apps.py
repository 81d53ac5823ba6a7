from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import pre_delete


class GraphConfig(AppConfig):
    name = "graph"

    def ready(self) -> None:
        from memories.retrieval import search
        from tenants.models import Agent
        from tenants.services import register_team_purge_hook

        from . import presenters, signals
        from . import search as graph_search

        pre_delete.connect(
            signals.delete_agents_entities, sender=Agent, dispatch_uid="graph.agent_purge"
        )
        # A deleted team's vectors leave this process's cache at once (not only when LRU).
        register_team_purge_hook(graph_search.forget_team)
        # Search's `include_entities` asks the graph through a hook, so memories never imports
        # graph (imports flow tenants <- memories <- graph <- lifecycle). Called directly: a
        # renamed hook must fail at start-up, not silently drop the entities from search.
        search.register_entities_provider(presenters.memory_entities_body)
        # A purged memory's graph links go to the review console's trash and come back with it.
        from memories.purge import register_trash_extension

        from . import services

        register_trash_extension(
            "graph", save=services.trash_save_links, restore=services.trash_restore_links
        )
