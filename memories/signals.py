"""Signals and receivers that keep memories consistent with tenancy changes.

`working_memory_written` lets a higher app (the lifecycle pipeline) react to working-memory
writes without the memories app importing it (imports flow tenants <- memories <- lifecycle).
"""

from __future__ import annotations

import logging
from typing import Any

import django.dispatch
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from tenants.models import Agent

logger = logging.getLogger(__name__)

# Sent after a working-memory item is stored: kwargs team (Team), agent_id (str).
working_memory_written = django.dispatch.Signal()

# Sent by the working store *before* it removes the items the per-agent cap pushes out: kwargs
# team_id (str), agent_id (str), items (list of memories.working.WorkingItem, oldest first). A
# receiver keeps them (the lifecycle archives them, restorable). If a receiver raises, the store
# keeps the items — working memory stays above its cap until a later write hands them over — so
# an item is never lost between the two.
working_memory_evicting = django.dispatch.Signal()


@receiver(pre_delete, sender=Agent)
def _delete_agents_personal_memories(sender: type[Agent], instance: Agent, **kwargs: Any) -> None:
    # Inside the deleting transaction: the agent and its personal memories go together.
    from .services import purge_agent

    purge_agent(team=instance.team, agent_id=instance.agent_id)


def purge_team_outside_db(team_id: str) -> None:
    """After a team's rows are deleted: its working memory and this process's indexes."""
    from .retrieval.index import registry
    from .working import get_working_store

    registry.drop_team(team_id)
    get_working_store().purge_team(team_id=team_id)


def purge_agent_outside_db(team_id: str, agent_id: str) -> None:
    from .models import Memory
    from .retrieval.index import registry, scope_key
    from .working import get_working_store

    registry.drop(scope_key(team_id, Memory.SCOPE_PERSONAL, agent_id))
    get_working_store().purge_agent(team_id=team_id, agent_id=agent_id)
