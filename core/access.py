"""What an agent-scoped API key may do: the one policy every app asks.

An API key either speaks for its whole team (`acting_agent` is None) or is scoped to one agent
of it. An agent-scoped key may act only for its own agent and never on the team as a whole; a
team-wide key may do anything within its team. Tenant isolation (the team) is checked before
this, by authentication and by every selector taking the team explicitly.
"""

from __future__ import annotations

from enum import StrEnum

from .errors import Forbidden


class AgentResource(StrEnum):
    """What the request touches; it picks the message of the 403."""

    PERSONAL_MEMORIES = "personal memories"
    ENTITIES = "entities"
    PROFILE = "profile"
    TEAM = "team"


_DENIED = {
    AgentResource.PERSONAL_MEMORIES: (
        "an agent-scoped key can only use its own agent's personal memories"
    ),
    AgentResource.ENTITIES: "an agent-scoped key can only use its own agent's entities",
    AgentResource.PROFILE: "an agent-scoped key can only use its own agent's profile",
    AgentResource.TEAM: "an agent-scoped key cannot change the team",
}


def may_act_for(acting_agent: str | None, agent_id: str) -> bool:
    """The rule itself: a team-wide key acts for every agent, an agent key for its own."""
    return acting_agent is None or acting_agent == agent_id


def require_agent(resource: AgentResource, *, acting_agent: str | None, agent_id: str) -> None:
    """The request names `agent_id` (a personal scope, an owner): the key must act for it."""
    if not may_act_for(acting_agent, agent_id):
        raise Forbidden(_DENIED[resource])


def require_agent_filter(
    resource: AgentResource, *, acting_agent: str | None, agent_id: str
) -> None:
    """An optional agent filter: empty names no agent (allowed to any key), else as require_agent."""
    if agent_id:
        require_agent(resource, acting_agent=acting_agent, agent_id=agent_id)


def require_team_wide(
    *, acting_agent: str | None, resource: AgentResource = AgentResource.TEAM
) -> None:
    """Operations on the team as a whole (or on every agent) need a team-wide key."""
    if acting_agent is not None:
        raise Forbidden(_DENIED[resource])
