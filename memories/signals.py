"""Receivers that keep memories consistent with tenancy changes. The working-memory signals
other apps listen to are defined in `memories.working.events`."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from tenants.models import Agent

from .models import MemoryScope

logger = logging.getLogger(__name__)


@receiver(pre_delete, sender=Agent)
def _delete_agents_personal_memories(sender: type[Agent], instance: Agent, **kwargs: Any) -> None:
    # Inside the deleting transaction: the agent and its personal memories go together.
    from .services import purge_agent

    purge_agent(team=instance.team, agent_id=instance.agent_id)


def purge_team_outside_db(team_id: str) -> None:
    """After a team's rows are deleted: its working memory and this process's indexes."""
    from .retrieval.backends import get_backend
    from .working import get_working_store

    get_backend().purge_team(team_id)
    get_working_store().purge_team(team_id=team_id)


def purge_agent_outside_db(team_id: str, agent_id: str) -> None:
    from .retrieval.index import registry, scope_key
    from .working import get_working_store

    registry.drop(scope_key(team_id, MemoryScope.PERSONAL, agent_id))
    get_working_store().purge_agent(team_id=team_id, agent_id=agent_id)
