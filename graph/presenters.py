"""How the graph looks in the API (and the console's graph view): JSON bodies built from the
models, rows and typed results the selectors, traversal and extraction return.

The bodies are the API contract down to the key order (existing clients see the same bytes), so
each is built field by field in the documented order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from core.dates import iso
from tenants.models import Team

from .extraction import GraphExtraction
from .models import Entity, Relation
from .selectors import (
    SOURCE_SNIPPET_CHARS,
    EntityConsoleDetail,
    EntityDetail,
    EntityRow,
    Page,
    RelationRow,
    ScoredEntity,
    entities_for_memories,
    entity_row,
    relation_row,
)
from .traversal import Subgraph

T = TypeVar("T")


def entity_row_body(
    row: EntityRow, *, score: float | None = None, with_identity: bool = False
) -> dict[str, Any]:
    """The entity object (`EntityOutputSerializer`) from its plain values.

    `with_identity`: the caller sees the whole team (a team-wide key, the console's team view),
    so the entity's team-level identity is shown when it has one. Never to an agent-scoped
    caller: the link says that another agent's memories name the same thing.
    """
    data: dict[str, Any] = {
        "id": str(row["id"]),
        "team_id": row["team_id"],
        "agent_id": row["agent_id"] or None,
        "name": row["name"],
        "entity_type": row["entity_type"],
        "description": row["description"] or None,
        "properties": row["properties"],
        "source_memory_id": row["source_memory_id"],
        "access_count": row["access_count"],
        "last_accessed_at": iso(row["last_accessed_at"]),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }
    _with_message_source(data, row["source_conversation_id"], row["source_message_id"])
    if with_identity and row["identity_id"] is not None:
        data["identity_id"] = str(row["identity_id"])
    if score is not None:
        data["score"] = round(float(score), 4)
    return data


def entity_body(
    entity: Entity, *, score: float | None = None, with_identity: bool = False
) -> dict[str, Any]:
    return entity_row_body(entity_row(entity), score=score, with_identity=with_identity)


def scored_entity_body(item: ScoredEntity, *, with_identity: bool = False) -> dict[str, Any]:
    return entity_body(item.entity, score=item.score, with_identity=with_identity)


def _with_message_source(data: dict[str, Any], conversation: str, message: str) -> None:
    # Only when set: an entity or relation not read from an ingested conversation keeps the
    # body it always had, byte for byte.
    if conversation:
        data["source_conversation_id"] = conversation
    if message:
        data["source_message_id"] = message


def relation_row_body(row: RelationRow) -> dict[str, Any]:
    """The relation object (`RelationOutputSerializer`) from its plain values."""
    data: dict[str, Any] = {
        "id": str(row["id"]),
        "team_id": row["team_id"],
        "source_entity_id": str(row["source_id"]),
        "target_entity_id": str(row["target_id"]),
        "relation_type": row["relation_type"],
        "description": row["description"] or None,
        "properties": row["properties"],
        "source_memory_id": row["source_memory_id"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }
    _with_message_source(data, row["source_conversation_id"], row["source_message_id"])
    return data


def relation_body(relation: Relation) -> dict[str, Any]:
    return relation_row_body(relation_row(relation))


def page_body(page: Page[T], render: Callable[[T], dict[str, Any]]) -> dict[str, Any]:
    return {
        "items": [render(item) for item in page.items],
        "total": page.total,
        "page": page.page,
        "page_size": page.page_size,
    }


def entity_detail_body(detail: EntityDetail, *, with_identity: bool = False) -> dict[str, Any]:
    return {
        "entity": entity_body(detail.entity, with_identity=with_identity),
        "outgoing_relations": [relation_body(r) for r in detail.outgoing],
        "incoming_relations": [relation_body(r) for r in detail.incoming],
    }


def subgraph_body(graph: Subgraph, *, with_identity: bool = False) -> dict[str, Any]:
    return {
        "entities": [entity_row_body(e, with_identity=with_identity) for e in graph.entities],
        "relations": [relation_row_body(r) for r in graph.relations],
        "truncated": graph.truncated,
    }


def extraction_body(result: GraphExtraction) -> dict[str, Any]:
    """What `POST /lifecycle/extract-graph` answers (and, its numbers, what its job records)."""
    entities = result.entities
    body: dict[str, Any] = {
        "entities": [{**entity_body(w.entity), "created": w.created} for w in entities],
        "relations": [relation_body(r) for r in result.relations],
        "entity_count": len(entities),
        "relation_count": len(result.relations),
        "entities_created": sum(w.created for w in entities),
        "entities_merged": sum(not w.created for w in entities),
        "relations_created": result.relations_created,
        "memories": result.memories,
    }
    if result.job_id is not None:
        body["job_id"] = result.job_id
    return body


def entity_ref_body(entity: Entity) -> dict[str, Any]:
    """The short form of an entity attached to a search hit (`include_entities`)."""
    return {
        "id": str(entity.pk),
        "name": entity.name,
        "entity_type": entity.entity_type,
        "description": entity.description or None,
    }


def memory_entities_body(
    *, team: Team, memory_ids: list[int], acting_agent: str | None = None
) -> dict[int, list[dict[str, Any]]]:
    """Search's entities hook (registered in apps.py): memories cannot render graph entities
    (it may not import graph), so the hook hands them over already in the API's shape."""
    found = entities_for_memories(team=team, memory_ids=memory_ids, acting_agent=acting_agent)
    return {mid: [entity_ref_body(e) for e in entities] for mid, entities in found.items()}


def entity_console_body(
    detail: EntityConsoleDetail, *, with_identity: bool = False
) -> dict[str, Any]:
    """The console's entity side panel: `entity_detail_body` with the name and type of the
    other end of each relation, and snippets of the memories the entity was read from."""
    me = str(detail.detail.entity.pk)
    body = entity_detail_body(detail.detail, with_identity=with_identity)
    for r in body["outgoing_relations"] + body["incoming_relations"]:
        other_id = r["target_entity_id"] if r["source_entity_id"] == me else r["source_entity_id"]
        other = detail.ends.get(other_id)
        r["other"] = {
            "id": other_id,
            "name": other.name if other else None,
            "entity_type": other.entity_type if other else None,
        }
    body["source_memories"] = [
        {
            "id": m.pk,
            "scope": m.scope,
            "agent_id": m.agent_id or None,
            "category": m.category,
            "content": m.content[:SOURCE_SNIPPET_CHARS],
            "truncated": len(m.content) > SOURCE_SNIPPET_CHARS,
            "created_at": iso(m.created_at),
        }
        for m in detail.source_memories
    ]
    body["source_memories_total"] = detail.source_memories_total
    return body
