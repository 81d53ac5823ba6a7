"""Reads for memories. Every read takes the caller's team explicitly."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet

from memoryplatform.errors import Forbidden, NotFound
from tenants.models import Team

from .models import Memory, MemoryRevision, MemoryShare

READ = "read"
WRITE = "write"
DELETE = "delete"


def iso(dt: datetime | None) -> str | None:
    """ISO 8601 the way DRF renders it (UTC as "Z")."""
    if dt is None:
        return None
    value = dt.isoformat()
    return value[:-6] + "Z" if value.endswith("+00:00") else value


def memory_to_dict(
    m: Memory, *, score: float | None = None, content: str | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": m.pk,
        "team_id": m.team_id,
        "agent_id": m.agent_id or None,
        "scope": m.scope,
        "content": m.content if content is None else content,
        "importance": m.importance,
        "category": m.category,
        "metadata": m.metadata,
        "pinned": m.pinned,
        "created_at": iso(m.created_at),
        "updated_at": iso(m.updated_at),
        "last_accessed": iso(m.last_accessed),
        "access_count": m.access_count,
    }
    if m.superseded_by_id is not None:
        data["superseded_by"] = m.superseded_by_id
    if score is not None:
        data["score"] = round(float(score), 4)
    return data


def memory_get(*, team: Team, memory_id: int, scope: str | None = None) -> Memory:
    """A memory of the caller's team; another team's id is 404 exactly like a missing one."""
    if not 0 < memory_id < 2**63:
        raise NotFound("memory")
    qs = Memory.objects.filter(team=team, pk=memory_id)
    if scope is not None:
        qs = qs.filter(scope=scope)
    memory = qs.first()
    if memory is None:
        raise NotFound("memory")
    return memory


def share_permission(*, memory: Memory, agent_id: str) -> str | None:
    return (
        MemoryShare.objects.filter(memory=memory, agent_id=agent_id)
        .values_list("permission", flat=True)
        .first()
    )


def check_memory_access(*, memory: Memory, acting_agent: str | None, action: str) -> None:
    """API.md §3.3. `acting_agent` is the agent an agent-scoped key is bound to (None = team-wide key)."""
    if acting_agent is None or memory.scope == Memory.SCOPE_TEAM:
        return
    if memory.agent_id == acting_agent:
        return
    if action == DELETE:
        raise Forbidden("only the owning agent may delete a personal memory")
    permission = share_permission(memory=memory, agent_id=acting_agent)
    if permission == WRITE or (permission == READ and action == READ):
        return
    raise Forbidden("this personal memory belongs to another agent and is not shared with yours")


def check_scope_access(*, acting_agent: str | None, agent_id: str) -> None:
    """An agent-scoped key may only read or write its own agent's personal scope."""
    if acting_agent is not None and acting_agent != agent_id:
        raise Forbidden("an agent-scoped key can only use its own agent's personal memories")


def memory_recent(*, team: Team, scope: str, agent_id: str, limit: int) -> list[Memory]:
    qs = Memory.objects.filter(team=team, scope=scope, superseded_by__isnull=True)
    if scope == Memory.SCOPE_PERSONAL:
        qs = qs.filter(agent_id=agent_id)
    return list(qs.order_by("-created_at", "-id")[:limit])


def memory_counts(*, team: Team) -> dict[str, int]:
    """Long-term memories per scope for the team."""
    rows = Memory.objects.filter(team=team).values("scope").annotate(n=Count("id"))
    return {r["scope"]: r["n"] for r in rows}


def shared_memory_ids(*, team: Team, agent_id: str) -> list[int]:
    return list(
        MemoryShare.objects.filter(team=team, agent_id=agent_id).values_list("memory_id", flat=True)
    )


def memory_revisions(*, team: Team, memory: Memory) -> QuerySet[MemoryRevision]:
    return MemoryRevision.objects.filter(team=team, memory=memory).order_by("-created_at", "-id")


def memories_needing_embedding(
    *, team: Team | None, model_name: str, everything: bool = False
) -> list[int]:
    qs = Memory.objects.all()
    if team is not None:
        qs = qs.filter(team=team)
    if not everything:
        qs = qs.exclude(embedding_model=model_name)
    return list(qs.order_by("id").values_list("id", flat=True))
