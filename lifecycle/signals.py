"""Keeps the lifecycle's rows consistent with tenancy changes: deleting an agent erases what the
lifecycle holds of it (services.erasure); deleting a team cascades in the database."""

from __future__ import annotations

from typing import Any

from tenants.models import Agent


def delete_agents_lifecycle_rows(sender: type[Agent], instance: Agent, **kwargs: Any) -> None:
    # Inside the deleting transaction: the agent and its scenarios, personas and archive go
    # together.
    from .services.erasure import purge_agent

    purge_agent(team=instance.team, agent_id=instance.agent_id)
