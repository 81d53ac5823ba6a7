"""How memories look in the API: the JSON bodies built from models and typed results.

Selectors and services return models and dataclasses; the views (and whatever else answers in
the API's shape, e.g. a lifecycle cleanup listing its candidates) render them here. The bodies
are the API contract down to the key order (existing clients see the same bytes), so each is
built field by field in the documented order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from core.dates import iso

from .models import (
    Memory,
    MemoryShare,
    Procedure,
    ProcedureRevision,
    ProfileField,
    ProfileRevision,
    TrashedMemory,
)
from .retrieval.search import SearchHit
from .selectors import MemoryHistory
from .working import WorkingItem


def memory_body(
    memory: Memory, *, score: float | None = None, content: str | None = None
) -> dict[str, Any]:
    """The memory object (`MemoryOutputSerializer`); `content` replaces the stored text (a search
    hit cut to its character budget), `score` is added for search hits only."""
    m = memory
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
        "tier": m.tier,
    }
    if m.superseded_by_id is not None:
        data["superseded_by"] = m.superseded_by_id
    if m.run_id:
        data["run_id"] = m.run_id
    if m.expires_at is not None:
        data["expires_at"] = iso(m.expires_at)
    if score is not None:
        data["score"] = round(float(score), 4)
    return data


def search_hit_body(hit: SearchHit) -> dict[str, Any]:
    body = memory_body(hit.memory, score=hit.score, content=hit.content)
    if hit.entities is not None:
        body["entities"] = hit.entities
    return body


def shares_body(memory: Memory, shares: list[MemoryShare]) -> dict[str, Any]:
    return {
        "memory_id": memory.pk,
        "shares": [{"agent_id": s.agent_id, "permission": s.permission} for s in shares],
    }


def trashed_body(item: TrashedMemory) -> dict[str, Any]:
    """A trashed memory: its snapshot's fields plus when, by whom and why it was removed."""
    snap = item.snapshot or {}
    created = snap.get("created_at")
    return {
        "id": item.memory_id,
        "team_id": item.team_id,
        "agent_id": item.agent_id or None,
        "scope": item.scope,
        "content": item.content,
        "importance": snap.get("importance", 0.0),
        "category": snap.get("category", ""),
        "metadata": snap.get("metadata") or {},
        "pinned": bool(snap.get("pinned", False)),
        "created_at": iso(datetime.fromisoformat(created)) if created else None,
        "removed_at": iso(item.purged_at),
        "removed_by": item.removed_by,
        "reason": item.reason,
        "expires_at": iso(item.expires_at),
    }


def working_item_body(item: WorkingItem) -> dict[str, str]:
    body = {
        "id": item.id,
        "agent_id": item.agent_id,
        "content": item.content,
        "created_at": iso(item.created_at.astimezone(UTC)),
        "expires_at": iso(item.expires_at.astimezone(UTC)),
    }
    if item.run_id:  # as on a memory: only when the write named a session
        body["run_id"] = item.run_id
    return body


def memory_detail_body(memory: Memory) -> dict[str, Any]:
    """`GET /memories/<id>`: the memory object, with `superseded_by` (null when current) and its
    `source` (metadata.source: `compression`, `extraction`, `demo`…; null when written directly)."""
    body = memory_body(memory)
    body["superseded_by"] = memory.superseded_by_id
    source = (memory.metadata or {}).get("source")
    body["source"] = source if isinstance(source, str) else None
    return body


def memory_history_body(history: MemoryHistory) -> dict[str, Any]:
    return {
        "revisions": [
            {
                "at": iso(r.created_at),
                "by": r.actor,
                "change": r.action,
                "before": r.before,
                "after": r.after,
            }
            for r in history.revisions
        ],
        "supersedes": history.supersedes,
        "superseded_by": history.memory.superseded_by_id,
    }


def episode_body(memory: Memory, *, score: float | None = None) -> dict[str, Any]:
    """An episode (a personal memory of category `episode`) as the episodes endpoints show it."""
    meta = memory.metadata or {}
    body: dict[str, Any] = {
        "id": memory.pk,
        "agent_id": memory.agent_id,
        "task": memory.content,
        "outcome": meta.get("outcome"),
        "steps": meta.get("steps", []),
        "lesson": meta.get("lesson", ""),
        "importance": memory.importance,
        "created_at": iso(memory.created_at),
    }
    if memory.run_id:
        body["run_id"] = memory.run_id
    if score is not None:
        body["score"] = round(float(score), 4)
    return body


def procedure_body(p: Procedure) -> dict[str, Any]:
    return {
        "id": p.pk,
        "agent_id": p.agent_id,
        "rule": p.rule,
        "status": p.status,
        "source": p.source,
        "evidence": p.evidence,
        "created_at": iso(p.created_at),
        "updated_at": iso(p.updated_at),
    }


def profile_body(
    agent_id: str, fields: list[ProfileField], *, changed: list[str] | None = None
) -> dict[str, Any]:
    """`GET /profile/<agent_id>` (and PUT's answer, with the keys it `changed`)."""
    body: dict[str, Any] = {
        "agent_id": agent_id,
        "fields": {
            f.key: {
                "value": f.value,
                "updated_at": iso(f.updated_at),
                "source": f.source,
                "source_memory_id": f.source_memory_id,
            }
            for f in fields
        },
    }
    if changed is not None:
        body["changed"] = changed
    return body


def procedure_revision_body(r: ProcedureRevision) -> dict[str, Any]:
    # "" is how the row says "unchanged" (a status decided, a text reworded).
    return {
        "procedure_id": r.procedure_id,
        "change": r.change,
        "rule": r.rule,
        "rule_before": r.rule_before or None,
        "status": r.status,
        "status_before": r.status_before or None,
        "by": r.by,
        "at": iso(r.at),
    }


def profile_revision_body(r: ProfileRevision) -> dict[str, Any]:
    # "" is how the row says "no value" (a new key's before, a deleted key's after).
    return {
        "key": r.key,
        "before": r.before or None,
        "after": r.after or None,
        "source": r.source,
        "source_memory_id": r.source_memory_id,
        "by": r.by,
        "at": iso(r.at),
    }


def profile_hit_body(field: ProfileField, score: float) -> dict[str, Any]:
    """A profile field in a search answer (`include_profile`): told apart from memories by
    `kind: "profile"` and `id: null`; `content` reads as "key: value"."""
    return {
        "kind": "profile",
        "id": None,
        "team_id": field.team_id,
        "agent_id": field.agent_id,
        "scope": "profile",
        "key": field.key,
        "value": field.value,
        "content": f"{field.key}: {field.value}",
        "source": field.source,
        "updated_at": iso(field.updated_at),
        "score": round(float(score), 4),
    }
