"""Keeps the graph consistent with tenancy changes.

Deleting an agent deletes its own entities (and so their relations), as it deletes its personal
memories; team-wide entities stay. Deleting a team cascades in the database.
"""

from __future__ import annotations

from typing import Any

from tenants.models import Agent


def delete_agents_entities(sender: type[Agent], instance: Agent, **kwargs: Any) -> None:
    # Inside the deleting transaction: the agent and its entities go together.
    from .services import purge_agent

    purge_agent(team=instance.team, agent_id=instance.agent_id)
