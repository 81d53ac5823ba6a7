"""Writes of the knowledge graph: create-or-merge, update, delete, relate, touch.

Embeddings are computed before the transaction (a model call must not hold row locks), as in
memories.services.
"""

from __future__ import annotations

import logging
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.errors import DomainError, ErrorCode
from core.rows import rows_restamp
from memories.models import Memory
from memories.retrieval.embeddings import embed_passages, get_embedder, to_bytes
from tenants.models import Team
from tenants.services import agent_ensure

from .models import Entity, EntityIdentity, EntityMention, Relation
from .resolution import normalise_name

logger = logging.getLogger(__name__)


def embedding_text(name: str, description: str) -> str:
    """What an entity's vector is made from: its name, then what is known about it."""
    return f"{name}\n{description}" if description else name


def name_key(name: str) -> str:
    """What `same_name` compares: the name without case and width ("ＰＹＴＨＯＮ" -> "python")."""
    return unicodedata.normalize("NFKC", name).casefold()


def same_name(a: str, b: str) -> bool:
    """Names are the same entity name regardless of case and width ("Python" = "ＰＹＴＨＯＮ").

    Case-insensitive on purpose: MariaDB's utf8mb4_unicode_ci unique index treats them as equal
    anyway, and SQLite must behave the same.
    """
    return name_key(a) == name_key(b)


def _merge_description(old: str, new: str) -> str:
    # Appended, but the same sentence twice adds nothing: a re-sent create, or the
    # same fact extracted again, leaves the description as it is.
    new = new.strip()
    if not new or new in old:
        return old
    return f"{old}\n{new}" if old else new


def entity_find(*, team: Team, agent_id: str, name: str, entity_type: str) -> Entity | None:
    """The entity `(name, entity_type)` of this scope, if any (names compared case-insensitively)."""
    # Many names share one resolution key ("Sprint 12", "Sprint 13" -> "sprint"): compare the
    # candidates' names only, and load the one row that matches, not every candidate's vector.
    candidates = (
        Entity.objects.filter(
            team=team,
            agent_id=agent_id,
            entity_type=entity_type,
            normalized_name=normalise_name(name, entity_type),
        )
        .order_by("created_at", "id")
        .values_list("pk", "name")
    )
    found = next((pk for pk, candidate in candidates if same_name(candidate, name)), None)
    return None if found is None else Entity.objects.filter(pk=found).first()


# `metadata.source` of a memory written from an ingested conversation (lifecycle's ingest).
INGEST_SOURCE = "ingest"


def message_source(memory: Memory | None) -> tuple[str, str]:
    """`(conversation id, message id)` of a memory that came from an ingested conversation: its
    `run_id` and the first archived message of `metadata.source_items`; `("", "")` for any
    other memory (written directly, compressed from working memory) or none."""
    if memory is None:
        return "", ""
    metadata = memory.metadata if isinstance(memory.metadata, dict) else {}
    if metadata.get("source") != INGEST_SOURCE:
        return "", ""
    items = metadata.get("source_items")
    first = items[0] if isinstance(items, list) and items else ""
    message = str(first)[:32] if isinstance(first, str | int) else ""
    return memory.run_id, message


def _source_fields(memory: Memory | None) -> dict[str, str]:
    conversation, message = message_source(memory)
    return {"source_conversation_id": conversation, "source_message_id": message}


def entity_create_or_merge(
    *,
    team: Team,
    name: str,
    entity_type: str,
    agent_id: str = "",
    description: str = "",
    properties: dict[str, Any] | None = None,
    source_memory: Memory | None = None,
) -> tuple[Entity, bool]:
    """Creates the entity, or merges into the existing `(name, entity_type)` of the same scope.

    Merge: description appended, properties merged key by key (new values win),
    embedding refreshed. Returns (entity, created).
    """
    properties = properties or {}
    description = (description or "").strip()
    if agent_id:
        agent_ensure(team=team, agent_id=agent_id)
    existing = entity_find(team=team, agent_id=agent_id, name=name, entity_type=entity_type)
    if existing is not None:
        return entity_merge(
            entity=existing,
            description=description,
            properties=properties,
            source_memory=source_memory,
        ), False
    vector = embed_passages([embedding_text(name, description)])[0]
    try:
        with transaction.atomic():
            entity = Entity.objects.create(
                team=team,
                agent_id=agent_id,
                name=name,
                entity_type=entity_type,
                description=description,
                properties=properties,
                normalized_name=normalise_name(name, entity_type),
                embedding=to_bytes(vector),
                embedding_model=get_embedder().model_name,
                source_memory=source_memory,
                **_source_fields(source_memory),
            )
            if source_memory is not None:
                entity_mention(entity=entity, memory=source_memory)
    except IntegrityError:
        # A concurrent create won, or the database's collation calls two names equal that
        # Python does not (MariaDB: "café" = "cafe"): merge into the row the database has.
        existing = (
            Entity.objects.filter(team=team, agent_id=agent_id, entity_type=entity_type, name=name)
            .order_by("created_at", "id")
            .first()
        )
        if existing is None:
            raise
        return entity_merge(
            entity=existing,
            description=description,
            properties=properties,
            source_memory=source_memory,
        ), False
    return entity, True


def entity_merge(
    *,
    entity: Entity,
    description: str = "",
    properties: dict[str, Any] | None = None,
    source_memory: Memory | None = None,
) -> Entity:
    """Merges what is newly known into an entity: description appended, properties merged."""
    properties = properties or {}
    planned = embedding_text(entity.name, _merge_description(entity.description, description))
    vector = None
    if planned != embedding_text(entity.name, entity.description) or entity.embedding is None:
        vector = embed_passages([planned])[0]  # outside the transaction, as read
    with transaction.atomic():
        entity = Entity.objects.select_for_update().get(pk=entity.pk)
        # Re-read under the lock: a merge racing this one must not lose its description.
        merged = _merge_description(entity.description, description)
        vector = _vector_for(entity, entity.name, merged, planned, vector)
        entity.description = merged
        entity.properties = {**entity.properties, **properties}
        if vector is not None:
            entity.embedding = to_bytes(vector)
            entity.embedding_model = get_embedder().model_name
        if entity.source_memory_id is None and source_memory is not None:
            entity.source_memory = source_memory
            for name, value in _source_fields(source_memory).items():
                setattr(entity, name, value)
        entity.save()
        if source_memory is not None:
            entity_mention(entity=entity, memory=source_memory)
    return entity


def entities_reembed(*, entity_ids: list[Any]) -> int:
    """Embeds these entities again with the current model and reading (a batch). `updated_at`
    moves, as when a merge embeds again, so every worker's vector cache of the team reloads
    (graph.search). An entity renamed or merged meanwhile has embedded its new text itself:
    it is left as it is."""
    rows = list(Entity.objects.filter(pk__in=entity_ids).only("id", "name", "description"))
    if not rows:
        return 0
    texts = {e.pk: embedding_text(e.name, e.description) for e in rows}
    vectors = dict(zip(texts, embed_passages(list(texts.values())), strict=True))
    model_name = get_embedder().model_name
    now = timezone.now()
    with transaction.atomic():
        # In id order, as memories_reembed: two runs at once lock their rows in one order.
        locked = list(Entity.objects.select_for_update().filter(pk__in=list(texts)).order_by("pk"))
        fresh = [e for e in locked if embedding_text(e.name, e.description) == texts[e.pk]]
        for entity in fresh:
            entity.embedding = to_bytes(vectors[entity.pk])
            entity.embedding_model = model_name
            entity.updated_at = now
        Entity.objects.bulk_update(
            fresh, ["embedding", "embedding_model", "updated_at"], batch_size=500
        )
    return len(fresh)


def entity_mention(*, entity: Entity, memory: Memory) -> None:
    """Records that `memory` mentions `entity` (idempotent)."""
    EntityMention.objects.get_or_create(
        entity=entity, memory=memory, defaults={"team_id": entity.team_id}
    )


def _vector_for(
    locked: Entity, name: str, description: str, planned: str, vector: np.ndarray | None
) -> np.ndarray | None:
    """The embedding an entity gets when its name and description become these, or None to keep
    its own: the vector computed before the row's lock if it is of this text, else computed now
    (another request changed the entity meanwhile; rare, a few ms under the lock)."""
    text = embedding_text(name, description)
    if text == embedding_text(locked.name, locked.description) and locked.embedding is not None:
        return None
    if vector is not None and text == planned:
        return vector
    return embed_passages([text])[0]


def entity_update(
    *,
    entity: Entity,
    name: str | None = None,
    description: str | None = None,
    properties: dict[str, Any] | None = None,
) -> Entity:
    """PUT semantics: None = unchanged; description replaces; properties merge.

    Renaming onto another entity's `(name, entity_type)` in the same scope is a 409 CONFLICT:
    merging two entities silently would rewire their relations behind the caller's back.
    """
    new_name = entity.name if name is None else name
    new_description = entity.description if description is None else description.strip()
    if name is not None and not same_name(name, entity.name):
        clash = entity_find(
            team=entity.team, agent_id=entity.agent_id, name=name, entity_type=entity.entity_type
        )
        if clash is not None and clash.pk != entity.pk:
            raise DomainError(
                ErrorCode.CONFLICT, "another entity of this scope already has this name and type"
            )
    planned = embedding_text(new_name, new_description)
    vector = None
    if new_name != entity.name or new_description != entity.description:
        vector = embed_passages([planned])[0]  # outside the transaction, as read
    try:
        with transaction.atomic():
            entity = Entity.objects.select_for_update().get(pk=entity.pk)
            # What the caller left out (None) is what the row holds now, not what it read: an
            # edit of the description must not write back a name another request just changed.
            new_name = entity.name if name is None else name
            new_description = entity.description if description is None else description.strip()
            vector = _vector_for(entity, new_name, new_description, planned, vector)
            unlinked = None
            if not same_name(new_name, entity.name):
                # Linked across agents by its old name: the new one may name something else
                # (graph.identity links it again at the next extraction or link run).
                unlinked, entity.identity = entity.identity_id, None
            entity.name = new_name
            entity.normalized_name = normalise_name(new_name, entity.entity_type)
            entity.description = new_description
            if properties is not None:
                entity.properties = {**entity.properties, **properties}
            if vector is not None:
                entity.embedding = to_bytes(vector)
                entity.embedding_model = get_embedder().model_name
            entity.save()
            if unlinked is not None:  # labelled with the old name, perhaps
                identities_relabel(team=entity.team, identity_ids=[unlinked])
    except IntegrityError:
        raise DomainError(
            ErrorCode.CONFLICT, "another entity of this scope already has this name and type"
        ) from None
    return entity


def entities_update(
    *,
    team: Team,
    changes: list[tuple[Any, str | None, dict[str, Any] | None]],
    vectors: Mapping[str, bytes] | None = None,
) -> dict[Any, Entity]:
    """Sets the (description, properties) of many entities of `team` as entity_update would each
    without a rename (None: unchanged; a description replaces, properties merge), in one
    transaction: the rows locked by one query, the texts whose description changed embedded in
    one call (or taken from `vectors`, embedding_text -> bytes, computed before the caller's
    transaction), one UPDATE run for each row (`executemany`). What an overwrite import needs:
    one entity_update an entity was an embedding, a lock and a save each.

    Changes apply in order: an entity given twice ends as the second says, embedded again only
    if its text ends changed. One that already holds the values is not written; one another
    writer deleted, or of another team, is left out. The entities written, by id."""
    if not changes:
        return {}
    with transaction.atomic():
        rows: dict[Any, Entity] = {
            e.pk: e
            for e in Entity.objects.select_for_update()
            .filter(team=team, pk__in={pk for pk, _, _ in changes})
            .order_by("id")  # one lock order for every writer of several rows
        }
        described = {pk: e.description for pk, e in rows.items()}  # the text its vector is of
        written: dict[Any, Entity] = {}
        for pk, description, properties in changes:
            entity = rows.get(pk)
            if entity is None:
                continue  # deleted since the caller read it: as if deleted after
            new_description = entity.description if description is None else description.strip()
            new_properties = (
                entity.properties if properties is None else {**entity.properties, **properties}
            )
            if (new_description, new_properties) == (entity.description, entity.properties):
                continue
            entity.description, entity.properties = new_description, new_properties
            written[pk] = entity
        stale = [e for e in written.values() if e.description != described[e.pk]]
        texts = [embedding_text(e.name, e.description) for e in stale]
        known = vectors or {}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        computed = (
            dict(zip(missing, (to_bytes(v) for v in embed_passages(missing)), strict=True))
            if missing
            else {}
        )
        model_name = get_embedder().model_name
        for entity, text in zip(stale, texts, strict=True):
            entity.embedding = known.get(text) or computed[text]
            entity.embedding_model = model_name
        now = timezone.now()
        for entity in written.values():
            entity.updated_at = now  # auto_now, which only save() stamps
        rows_restamp(
            list(written.values()),
            fields=("description", "properties", "embedding", "embedding_model", "updated_at"),
        )
    return written


def entity_delete(*, entity: Entity) -> int:
    """Deletes the entity and every relation that starts or ends at it; returns that count."""
    with transaction.atomic():
        relations = Relation.objects.filter(Q(source=entity) | Q(target=entity)).count()
        identity = entity.identity_id
        entity.delete()  # relations and mentions go with it (on_delete=CASCADE)
        identities_relabel(team=entity.team, identity_ids=[identity])
    return relations


def identities_relabel(*, team: Team, identity_ids: Iterable[Any]) -> None:
    """In the transaction that deleted or renamed members of these identities: each is labelled
    again from the members it has left (the team-wide member's name, else the oldest member's)
    when none of them carries its label any more, and removed when it has none. An identity is
    labelled with a member's name, so without this the name a deleted agent (whose deletion is
    final), a deleted entity or a renamed one gave a thing stayed on the team's views.

    Only the identity's own row is written, after its lock: the linker locks the entities it
    joins and then the identity (graph.identity.TeamLinker._join), and touching members' rows
    here, while the caller holds the deleted entities' rows, could wait for a linker that waits
    for those. So an identity left with the members of a single scope stays, labelled from them,
    until it is pruned (graph.identity.prune_identities: hourly by beat, and `link_team_entities`)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("identities are relabelled inside the deleting transaction")
    ids = sorted({str(pk) for pk in identity_ids if pk is not None})
    locked = list(
        EntityIdentity.objects.select_for_update().filter(team=team, pk__in=ids).order_by("pk")
    )
    # One query for the members of all of them (a deleted agent's entities can be linked to
    # hundreds), read under the identities' locks, as the linker reads them.
    members_of: dict[Any, list[tuple[str, str, datetime]]] = defaultdict(list)
    rows = Entity.objects.filter(team=team, identity__in=[i.pk for i in locked]).values_list(
        "identity_id", "agent_id", "name", "created_at"
    )
    for identity_id, agent_id, name, created_at in rows:
        members_of[identity_id].append((agent_id, name, created_at))
    for identity in locked:
        members = members_of.get(identity.pk)
        if not members:
            identity.delete()
            continue
        if identity.name in {name for _, name, _ in members}:
            continue
        _, identity.name, _ = min(members, key=lambda m: (m[0] != "", m[2]))
        identity.save(update_fields=["name", "updated_at"])


def relation_create(
    *,
    source: Entity,
    target: Entity,
    relation_type: str,
    description: str = "",
    properties: dict[str, Any] | None = None,
    source_memory: Memory | None = None,
) -> tuple[Relation, bool]:
    """The relation `source -relation_type-> target`; an existing one is returned unchanged.

    Both ends must be entities of one team: callers fetch them with the caller's team
    (selectors.entity_get), and this is checked again here because a relation across teams would
    leak one team's graph into another's traversal.
    """
    if source.team_id != target.team_id:
        raise ValueError("a relation cannot join entities of two teams")
    existing = Relation.objects.filter(
        source=source, target=target, relation_type=relation_type
    ).first()
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            relation = Relation.objects.create(
                team_id=source.team_id,
                source=source,
                target=target,
                relation_type=relation_type,
                description=(description or "").strip(),
                properties=properties or {},
                source_memory=source_memory,
                **_source_fields(source_memory),
            )
    except IntegrityError:
        # Created concurrently: idempotent all the same.
        return Relation.objects.get(
            source=source, target=target, relation_type=relation_type
        ), False
    return relation, True


def relation_delete(*, relation: Relation) -> None:
    relation.delete()


def entities_touch(*, entity_ids: list[Any]) -> datetime:
    """Marks entities as recalled: one UPDATE for all of them, `updated_at` left alone.

    Returns the time recorded."""
    now = timezone.now()
    if entity_ids:
        Entity.objects.filter(pk__in=entity_ids).update(
            access_count=F("access_count") + 1, last_accessed_at=now
        )
    return now


def purge_agent(*, team: Team, agent_id: str) -> int:
    """Deletes an agent's own entities (and so their relations): the agent is being deleted."""
    if not agent_id:
        return 0
    entities = Entity.objects.filter(team=team, agent_id=agent_id)
    identities = list(entities.exclude(identity=None).values_list("identity_id", flat=True))
    count = entities.count()
    entities.delete()
    # Not labelled with the agent's names any more: its deletion is final.
    identities_relabel(team=team, identity_ids=identities)
    return count


# --- the review console's trash (memories.purge) ------------------------------------------------


def trash_save_links(memory_ids: list[int]) -> dict[int, Any]:
    """What of the graph points at these memories and would be lost with them: the mentions, and
    the entities and relations that name one as their source. Three queries for any number."""
    out: dict[int, dict[str, list[str]]] = {}

    def slot(mid: int) -> dict[str, list[str]]:
        return out.setdefault(mid, {"mentions": [], "entity_sources": [], "relation_sources": []})

    for mid, eid in EntityMention.objects.filter(memory_id__in=memory_ids).values_list(
        "memory_id", "entity_id"
    ):
        slot(mid)["mentions"].append(str(eid))
    for mid, eid in Entity.objects.filter(source_memory_id__in=memory_ids).values_list(
        "source_memory_id", "id"
    ):
        slot(mid)["entity_sources"].append(str(eid))
    for mid, rid in Relation.objects.filter(source_memory_id__in=memory_ids).values_list(
        "source_memory_id", "id"
    ):
        slot(mid)["relation_sources"].append(str(rid))
    return out


def trash_restore_links(team: Team, memory_id: int, data: Any) -> list[str]:
    """Puts the links back for the entities and relations that still exist in the team."""
    mentions = data.get("mentions", [])
    alive = {
        str(e)
        for e in Entity.objects.filter(team=team, id__in=mentions).values_list("id", flat=True)
    }
    EntityMention.objects.bulk_create(
        [EntityMention(team=team, entity_id=eid, memory_id=memory_id) for eid in sorted(alive)],
        ignore_conflicts=True,
    )
    # A source set since the purge (a newer memory) is kept: only empty ones are filled back.
    Entity.objects.filter(
        team=team, id__in=data.get("entity_sources", []), source_memory__isnull=True
    ).update(source_memory_id=memory_id)
    Relation.objects.filter(
        team=team, id__in=data.get("relation_sources", []), source_memory__isnull=True
    ).update(source_memory_id=memory_id)
    lost = len(set(mentions) - alive)
    return [f"graph entities it mentioned that no longer exist: {lost}."] if lost else []
