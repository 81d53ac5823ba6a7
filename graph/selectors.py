"""Reads of the knowledge graph. Every read takes the caller's team explicitly.

Visibility (the agent-scoped key rule of memories, applied to the graph): a team-wide key sees every entity of its team; an
agent-scoped key sees its own agent's entities and the team-wide ones (`agent_id` ""). Another
agent's entity is `403 FORBIDDEN` when named by id (it exists in the caller's team, so hiding it
would protect nothing) and simply absent from lists and traversals. A relation is visible when
both its ends are.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from core.dates import iso
from core.errors import Forbidden, NotFound
from tenants.models import Team

from .models import Entity, EntityMention, Relation


def parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, AttributeError, TypeError):
        return None


ENTITY_ROW_FIELDS = (
    "id",
    "team_id",
    "agent_id",
    "name",
    "entity_type",
    "description",
    "properties",
    "source_memory_id",
    "access_count",
    "last_accessed_at",
    "created_at",
    "updated_at",
)


def entity_row_to_dict(row: dict[str, Any], *, score: float | None = None) -> dict[str, Any]:
    """An entity read with `.values(*ENTITY_ROW_FIELDS)` (traversal: no model instances)."""
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
    if score is not None:
        data["score"] = round(float(score), 4)
    return data


def entity_row(e: Entity) -> dict[str, Any]:
    return {f: getattr(e, f) for f in ENTITY_ROW_FIELDS}


def entity_to_dict(e: Entity, *, score: float | None = None) -> dict[str, Any]:
    return entity_row_to_dict(entity_row(e), score=score)


RELATION_ROW_FIELDS = (
    "id",
    "team_id",
    "source_id",
    "target_id",
    "relation_type",
    "description",
    "properties",
    "source_memory_id",
    "created_at",
    "updated_at",
)


def relation_row_to_dict(row: dict[str, Any]) -> dict[str, Any]:
    """A relation read with `.values(*RELATION_ROW_FIELDS)` (traversal: no model instances)."""
    return {
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


def relation_to_dict(r: Relation) -> dict[str, Any]:
    return relation_row_to_dict({f: getattr(r, f) for f in RELATION_ROW_FIELDS})


def visible_q(acting_agent: str | None, prefix: str = "") -> Q:
    """Entities an agent-scoped key may see (everything for a team-wide key)."""
    if acting_agent is None:
        return Q()
    return Q(**{f"{prefix}agent_id__in": [acting_agent, ""]})


def can_see(entity_agent_id: str, acting_agent: str | None) -> bool:
    return acting_agent is None or entity_agent_id in ("", acting_agent)


def check_entity_access(*, entity: Entity, acting_agent: str | None) -> None:
    if not can_see(entity.agent_id, acting_agent):
        raise Forbidden("this entity belongs to another agent")


def entity_get(*, team: Team, entity_id: str, acting_agent: str | None = None) -> Entity:
    """An entity of the caller's team; a malformed id or another team's id is 404 like a missing one."""
    pk = parse_uuid(entity_id)
    if pk is None:
        raise NotFound("entity")
    entity = Entity.objects.filter(team=team, pk=pk).first()
    if entity is None:
        raise NotFound("entity")
    check_entity_access(entity=entity, acting_agent=acting_agent)
    return entity


def entities_get(
    *, team: Team, entity_ids: list[str], acting_agent: str | None = None
) -> list[Entity]:
    """Several entities of the caller's team in one query, in the order asked; any missing is 404."""
    pks = [parse_uuid(i) for i in entity_ids]
    if any(pk is None for pk in pks):
        raise NotFound("entity")
    # By primary key, the team checked per row: an IN list next to `team_id = ?` can send
    # SQLite (no statistics) down the team's whole index.
    rows = Entity.objects.defer("embedding").in_bulk(pks)
    found = {pk: e for pk, e in rows.items() if e.team_id == team.id}
    if len(found) < len(set(pks)):
        raise NotFound("entity")
    entities = [found[pk] for pk in pks if pk is not None]
    for entity in entities:
        check_entity_access(entity=entity, acting_agent=acting_agent)
    return entities


def relation_get(*, team: Team, relation_id: str, acting_agent: str | None = None) -> Relation:
    pk = parse_uuid(relation_id)
    if pk is None:
        raise NotFound("relation")
    relation = (
        Relation.objects.filter(team=team, pk=pk)
        .select_related("source", "target")
        .only("id", "team_id", "source__agent_id", "target__agent_id")
        .first()
    )
    if relation is None:
        raise NotFound("relation")
    if not (
        can_see(relation.source.agent_id, acting_agent)
        and can_see(relation.target.agent_id, acting_agent)
    ):
        raise Forbidden("this relation touches another agent's entity")
    return relation


def entities_visible(
    *,
    team: Team,
    acting_agent: str | None,
    agent_id: str | None = None,
    entity_type: str | None = None,
) -> QuerySet[Entity]:
    qs = Entity.objects.filter(team=team).filter(visible_q(acting_agent))
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    if entity_type:
        qs = qs.filter(entity_type=entity_type)
    return qs


@dataclass
class Page:
    items: list[dict[str, Any]]
    total: int
    page: int
    page_size: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "total": self.total,
            "page": self.page,
            "page_size": self.page_size,
        }


def entity_list(
    *,
    team: Team,
    acting_agent: str | None,
    agent_id: str | None = None,
    entity_type: str | None = None,
    q: str = "",
    page: int = 1,
    page_size: int = 20,
) -> Page:
    """Entities newest first; with `q`, the matches best first (each with its `score`)."""
    qs = entities_visible(
        team=team, acting_agent=acting_agent, agent_id=agent_id, entity_type=entity_type
    )
    start = (page - 1) * page_size
    if not q.strip():
        total = qs.count()
        rows = list(qs.order_by("-created_at", "id")[start : start + page_size])
        return Page([entity_to_dict(e) for e in rows], total, page, page_size)
    from .search import rank_entities

    ranked = rank_entities(
        team=team, q=q, acting_agent=acting_agent, agent_id=agent_id, entity_type=entity_type
    )
    picked = ranked[start : start + page_size]
    # By primary key, the team checked per row (see entities_get).
    by_id = Entity.objects.defer("embedding").in_bulk([pk for pk, _ in picked])
    items = [
        entity_to_dict(by_id[pk], score=score)
        for pk, score in picked
        if pk in by_id and by_id[pk].team_id == team.id
    ]
    return Page(items, len(ranked), page, page_size)


def relation_list(
    *,
    team: Team,
    acting_agent: str | None,
    entity: Entity | None = None,
    relation_type: str | None = None,
    page: int = 1,
    page_size: int = 20,
) -> Page:
    if entity is not None:
        # The entity is the team's (selectors.entity_get): see entity_detail on the team filter.
        qs = _visible_ends(
            Relation.objects.filter(Q(source=entity) | Q(target=entity)), acting_agent
        )
    else:
        qs = relations_visible(team=team, acting_agent=acting_agent)
    if relation_type:
        qs = qs.filter(relation_type=relation_type)
    total = qs.count()
    start = (page - 1) * page_size
    rows = list(qs.order_by("-created_at", "id")[start : start + page_size])
    return Page([relation_to_dict(r) for r in rows], total, page, page_size)


def _visible_ends(qs: QuerySet[Relation], acting_agent: str | None) -> QuerySet[Relation]:
    if acting_agent is None:
        return qs
    return qs.filter(visible_q(acting_agent, "source__"), visible_q(acting_agent, "target__"))


def relations_visible(*, team: Team, acting_agent: str | None) -> QuerySet[Relation]:
    return _visible_ends(Relation.objects.filter(team=team), acting_agent)


def entity_detail(*, entity: Entity, acting_agent: str | None) -> dict[str, Any]:
    """The entity with all its outgoing and incoming (visible) relations, unpaged."""
    # The entity is the team's, so its relations are; filtering on the entity alone lets the
    # database use the source/target indexes rather than the team's whole relation index.
    qs = _visible_ends(Relation.objects.all(), acting_agent).order_by("created_at", "id")
    outgoing = [relation_to_dict(r) for r in qs.filter(source=entity)]
    incoming = [relation_to_dict(r) for r in qs.filter(target=entity)]
    return {
        "entity": entity_to_dict(entity),
        "outgoing_relations": outgoing,
        "incoming_relations": incoming,
    }


def entities_for_memories(
    *, team: Team, memory_ids: list[int], acting_agent: str | None = None
) -> dict[int, list[dict[str, Any]]]:
    """The entities read from each of these memories (extraction mentions and source links).

    One query whatever the number of memories; memory ids of another team find nothing.
    """
    if not memory_ids:
        return {}
    mentions = (
        EntityMention.objects.filter(team=team, memory_id__in=memory_ids)
        .filter(visible_q(acting_agent, "entity__"))
        .select_related("entity")
        .order_by("memory_id", "entity__name", "entity_id")
    )
    out: dict[int, list[dict[str, Any]]] = {}
    for m in mentions:
        e = m.entity
        out.setdefault(m.memory_id, []).append(
            {
                "id": str(e.pk),
                "name": e.name,
                "entity_type": e.entity_type,
                "description": e.description or None,
            }
        )
    return out


# --- console (review pages) reads --------------------------------------------------------------


def graph_agent_ids(*, team: Team) -> list[str]:
    """The agents owning at least one entity of the team (the console's agent selector)."""
    rows = (
        Entity.objects.filter(team=team)
        .exclude(agent_id="")
        .values_list("agent_id", flat=True)
        .distinct()
        .order_by("agent_id")
    )
    return list(rows)


SOURCE_MEMORIES_LIMIT = 50
SOURCE_SNIPPET_CHARS = 400


def entity_console_detail(
    *, team: Team, entity: Entity, acting_agent: str | None = None
) -> dict[str, Any]:
    """`entity_detail` plus what a reviewer needs to follow it: the name and type of the other
    end of each relation, and the memories the entity was read from (newest first, at most
    SOURCE_MEMORIES_LIMIT, content cut to SOURCE_SNIPPET_CHARS). Five queries whatever the
    number of relations and mentions.
    """
    from memories.models import Memory

    detail = entity_detail(entity=entity, acting_agent=acting_agent)
    me = str(entity.pk)
    relations = detail["outgoing_relations"] + detail["incoming_relations"]
    others = {
        r["target_entity_id"] if r["source_entity_id"] == me else r["source_entity_id"]
        for r in relations
    }
    # By primary key, the team checked per row (see entities_get).
    ends = Entity.objects.only("id", "team_id", "name", "entity_type", "agent_id").in_bulk(
        [parse_uuid(i) for i in others]
    )
    names = {str(pk): e for pk, e in ends.items() if e.team_id == team.id}
    for r in relations:
        other_id = r["target_entity_id"] if r["source_entity_id"] == me else r["source_entity_id"]
        other = names.get(other_id)
        r["other"] = {
            "id": other_id,
            "name": other.name if other else None,
            "entity_type": other.entity_type if other else None,
        }
    memory_ids = set(
        EntityMention.objects.filter(entity=entity).values_list("memory_id", flat=True)
    )
    if entity.source_memory_id is not None:
        memory_ids.add(entity.source_memory_id)
    rows = (
        Memory.objects.filter(team=team, pk__in=memory_ids)
        .order_by("-created_at", "-id")
        .values("id", "scope", "agent_id", "content", "category", "created_at")[
            :SOURCE_MEMORIES_LIMIT
        ]
    )
    detail["source_memories"] = [
        {
            "id": m["id"],
            "scope": m["scope"],
            "agent_id": m["agent_id"] or None,
            "category": m["category"],
            "content": m["content"][:SOURCE_SNIPPET_CHARS],
            "truncated": len(m["content"]) > SOURCE_SNIPPET_CHARS,
            "created_at": iso(m["created_at"]),
        }
        for m in rows
    ]
    detail["source_memories_total"] = len(memory_ids)
    return detail
