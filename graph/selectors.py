"""Reads of the knowledge graph. Every read takes the caller's team explicitly.

Visibility (the agent-scoped key rule of memories, applied to the graph): a team-wide key sees every entity of its team; an
agent-scoped key sees its own agent's entities and the team-wide ones (`agent_id` ""). Another
agent's entity is `403 FORBIDDEN` when named by id (it exists in the caller's team, so hiding it
would protect nothing) and simply absent from lists and traversals. A relation is visible when
both its ends are.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar, cast

from django.db.models import Q, QuerySet

from core.errors import Forbidden, NotFound
from tenants.models import Team

from .models import Entity, EntityIdentity, EntityMention, Relation

if TYPE_CHECKING:
    from memories.models import Memory

T = TypeVar("T")


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
    "source_conversation_id",
    "source_message_id",
    "identity_id",
    "access_count",
    "last_accessed_at",
    "created_at",
    "updated_at",
)


class EntityRow(TypedDict):
    """An entity as plain values (`.values(*ENTITY_ROW_FIELDS)`): the traversal reads thousands
    of them, and building model instances was a third of its time (docs/graph.md)."""

    id: str  # canonical dashed form, str(uuid)
    team_id: str
    agent_id: str
    name: str
    entity_type: str
    description: str
    properties: dict[str, Any]
    source_memory_id: int | None
    source_conversation_id: str
    source_message_id: str
    identity_id: uuid.UUID | None  # shown to team-wide callers only (presenters)
    access_count: int
    last_accessed_at: datetime | None
    created_at: datetime
    updated_at: datetime


def entity_row(e: Entity) -> EntityRow:
    row = cast(EntityRow, {f: getattr(e, f) for f in ENTITY_ROW_FIELDS})
    row["id"] = str(e.pk)
    return row


RELATION_ROW_FIELDS = (
    "id",
    "team_id",
    "source_id",
    "target_id",
    "relation_type",
    "description",
    "properties",
    "source_memory_id",
    "source_conversation_id",
    "source_message_id",
    "created_at",
    "updated_at",
)


class RelationRow(TypedDict):
    """A relation as plain values (`.values(*RELATION_ROW_FIELDS)`), like EntityRow."""

    id: str  # the three ids in canonical dashed form, str(uuid)
    team_id: str
    source_id: str
    target_id: str
    relation_type: str
    description: str
    properties: dict[str, Any]
    source_memory_id: int | None
    source_conversation_id: str
    source_message_id: str
    created_at: datetime
    updated_at: datetime


def relation_row(r: Relation) -> RelationRow:
    row = cast(RelationRow, {f: getattr(r, f) for f in RELATION_ROW_FIELDS})
    row["id"] = str(r.pk)
    row["source_id"] = str(r.source_id)
    row["target_id"] = str(r.target_id)
    return row


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


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list, and the size of the whole list."""

    items: list[T]
    total: int
    page: int
    page_size: int


@dataclass(frozen=True)
class ScoredEntity:
    entity: Entity
    score: float | None = None  # the search score; None in a plain (newest first) list


def entity_list(
    *,
    team: Team,
    acting_agent: str | None,
    agent_id: str | None = None,
    entity_type: str | None = None,
    q: str = "",
    page: int = 1,
    page_size: int = 20,
) -> Page[ScoredEntity]:
    """Entities newest first; with `q`, the matches best first (each with its `score`)."""
    qs = entities_visible(
        team=team, acting_agent=acting_agent, agent_id=agent_id, entity_type=entity_type
    )
    start = (page - 1) * page_size
    if not q.strip():
        total = qs.count()
        rows = list(qs.order_by("-created_at", "id")[start : start + page_size])
        return Page([ScoredEntity(e) for e in rows], total, page, page_size)
    from .search import rank_entities

    ranked = rank_entities(
        team=team, q=q, acting_agent=acting_agent, agent_id=agent_id, entity_type=entity_type
    )
    picked = ranked[start : start + page_size]
    # By primary key, the team checked per row (see entities_get).
    by_id = Entity.objects.defer("embedding").in_bulk([pk for pk, _ in picked])
    items = [
        ScoredEntity(by_id[pk], score)
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
) -> Page[Relation]:
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
    return Page(rows, total, page, page_size)


def _visible_ends(qs: QuerySet[Relation], acting_agent: str | None) -> QuerySet[Relation]:
    if acting_agent is None:
        return qs
    return qs.filter(visible_q(acting_agent, "source__"), visible_q(acting_agent, "target__"))


def relations_visible(*, team: Team, acting_agent: str | None) -> QuerySet[Relation]:
    return _visible_ends(Relation.objects.filter(team=team), acting_agent)


@dataclass(frozen=True)
class EntityDetail:
    entity: Entity
    outgoing: list[Relation]
    incoming: list[Relation]


def entity_detail(*, entity: Entity, acting_agent: str | None) -> EntityDetail:
    """The entity with all its outgoing and incoming (visible) relations, unpaged."""
    # The entity is the team's, so its relations are; filtering on the entity alone lets the
    # database use the source/target indexes rather than the team's whole relation index.
    qs = _visible_ends(Relation.objects.all(), acting_agent).order_by("created_at", "id")
    return EntityDetail(entity, list(qs.filter(source=entity)), list(qs.filter(target=entity)))


def entities_for_memories(
    *, team: Team, memory_ids: list[int], acting_agent: str | None = None
) -> dict[int, list[Entity]]:
    """The entities read from each of these memories (extraction mentions and source links),
    by name.

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
    out: dict[int, list[Entity]] = {}
    for m in mentions:
        out.setdefault(m.memory_id, []).append(m.entity)
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


@dataclass(frozen=True)
class IdentityGroup:
    """A team-level identity as the team view draws it: its label and the drawn members."""

    id: str
    name: str
    entity_type: str
    members: list[str]  # entity ids, in the order drawn


def identity_groups(*, team: Team, entities: list[EntityRow]) -> list[IdentityGroup]:
    """The identities that join two or more of these entities (a team-wide view's rows). One
    query; an identity of another team is never read (and can never be linked, graph.identity).
    """
    members: dict[str, list[str]] = {}
    for row in entities:
        if row["identity_id"] is not None:
            members.setdefault(str(row["identity_id"]), []).append(row["id"])
    shared = {pk: ids for pk, ids in members.items() if len(ids) > 1}
    if not shared:
        return []
    labels = EntityIdentity.objects.filter(team=team, pk__in=list(shared)).values_list(
        "id", "name", "entity_type"
    )
    groups = [IdentityGroup(str(pk), name, t, shared[str(pk)]) for pk, name, t in labels]
    return sorted(groups, key=lambda g: (g.name, g.id))


def identity_members(*, team: Team, entity: Entity) -> list[Entity]:
    """The other entities of the team sharing `entity`'s identity (team-wide views only: an
    agent must not learn what another agent's graph holds). Oldest first."""
    if entity.identity_id is None:
        return []
    return list(
        Entity.objects.filter(team=team, identity_id=entity.identity_id)
        .exclude(pk=entity.pk)
        .only("id", "team_id", "agent_id", "name", "entity_type")
        .order_by("created_at", "id")
    )


SOURCE_MEMORIES_LIMIT = 50
SOURCE_SNIPPET_CHARS = 400


@dataclass(frozen=True)
class EntityConsoleDetail:
    detail: EntityDetail
    ends: dict[str, Entity]  # the other end of each relation, by id (the team's only)
    source_memories: list[Memory]  # newest first, at most SOURCE_MEMORIES_LIMIT
    source_memories_total: int


def entity_console_detail(
    *, team: Team, entity: Entity, acting_agent: str | None = None
) -> EntityConsoleDetail:
    """`entity_detail` plus what a reviewer needs to follow it: the other end of each relation,
    and the memories the entity was read from (newest first, at most SOURCE_MEMORIES_LIMIT; the
    presenter cuts their content to SOURCE_SNIPPET_CHARS). Five queries whatever the number of
    relations and mentions.
    """
    from memories.models import Memory

    detail = entity_detail(entity=entity, acting_agent=acting_agent)
    me = entity.pk
    others = {
        r.target_id if r.source_id == me else r.source_id
        for r in [*detail.outgoing, *detail.incoming]
    }
    # By primary key, the team checked per row (see entities_get).
    ends = Entity.objects.only("id", "team_id", "name", "entity_type", "agent_id").in_bulk(
        list(others)
    )
    memory_ids = set(
        EntityMention.objects.filter(entity=entity).values_list("memory_id", flat=True)
    )
    if entity.source_memory_id is not None:
        memory_ids.add(entity.source_memory_id)
    rows = (
        Memory.objects.filter(team=team, pk__in=memory_ids)
        .order_by("-created_at", "-id")
        .only("id", "team_id", "scope", "agent_id", "content", "category", "created_at")[
            :SOURCE_MEMORIES_LIMIT
        ]
    )
    return EntityConsoleDetail(
        detail=detail,
        ends={str(pk): e for pk, e in ends.items() if e.team_id == team.id},
        source_memories=list(rows),
        source_memories_total=len(memory_ids),
    )


def entities_needing_embedding(
    *,
    team: Team | None,
    model_name: str,
    everything: bool = False,
    matches: Callable[[str, str], bool] | None = None,
) -> list[uuid.UUID]:
    """Ids of the entities to embed again: without a vector or with another model's (all with
    `everything`); with `matches`, those whose (name, description) it accepts instead (a test
    SQL cannot make: "the embedding reads this text differently now"). Read in chunks."""
    qs = Entity.objects.all()
    if team is not None:
        qs = qs.filter(team=team)
    if matches is not None:
        rows = qs.order_by("id").values_list("id", "name", "description").iterator(2000)
        return [pk for pk, name, description in rows if matches(name, description)]
    if not everything:
        qs = qs.exclude(Q(embedding_model=model_name) & Q(embedding__isnull=False))
    return list(qs.order_by("id").values_list("id", flat=True))
