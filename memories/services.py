"""Writes for long-term memories: create (with dedup), update (with revision), delete, share, touch."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Collection, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.dates import iso
from core.errors import DomainError, ErrorCode, NotFound, ValidationFailed
from core.metrics import SEARCH_LATENCY, WRITE_LATENCY, timed
from core.rows import assign_given, rows_restamp
from tenants.idempotency import HOLDS_ANY_MAX, idempotency_rewrite
from tenants.models import ApiKey, Team
from tenants.services import agent_ensure
from tenants.usage import KIND_SEARCH, usage_record

from . import locks, tiers
from .models import (
    Memory,
    MemoryRevision,
    MemoryScope,
    MemoryShare,
    MemoryTier,
    Procedure,
    ProcedureChange,
    ProcedureRevision,
    ProcedureStatus,
    ProfileField,
    ProfileRevision,
    ProfileSource,
    RevisionAction,
    TrashedMemory,
)
from .profile import MAX_FIELDS_PER_AGENT, key_error, value_error
from .retrieval import index
from .retrieval.backends import get_backend
from .retrieval.dedup import conflict_reason
from .retrieval.embeddings import embed_passages, get_embedder, to_bytes
from .retrieval.search import SearchQuery, SearchResults, attach_entities, memory_search
from .retrieval.text import content_hash, normalise, tokens_for_storage
from .selectors import memory_same_content_id

logger = logging.getLogger(__name__)

# Every change to these writes a MemoryRevision. The pin state is one of them: pinning decides
# what cleanup and purges may remove, so who (un)pinned a memory belongs in its history.
REVISED_FIELDS = ("content", "importance", "category", "metadata", "pinned", "expires_at")


class _Keep(Enum):
    KEEP = "keep"


# memory_update's "leave the expiry as it is": None there means "never expires".
KEEP = _Keep.KEEP


@dataclass(frozen=True)
class Actor:
    """Who made a change, for revisions: an API key, an admin user, or the system (lifecycle)."""

    api_key: ApiKey | None = None
    user: Any = None
    label: str = "system"

    @classmethod
    def for_key(cls, api_key: ApiKey) -> Actor:
        return cls(api_key=api_key, label=f"key {api_key.key_id}")

    @classmethod
    def for_user(cls, user: Any) -> Actor:
        return cls(user=user, label=f"user {user.get_username()}")


@dataclass(frozen=True)
class DedupHit:
    memory: Memory
    score: float


def memory_find_similar(
    *, team: Team, scope: str, agent_id: str, vector: np.ndarray, min_score: float, k: int = 5
) -> list[tuple[Memory, float]]:
    """The scope's memories that say about the same as `vector` (`same_score` >= min_score), best first."""
    embedder = get_embedder()
    nearest = get_backend().nearest(
        team_id=team.id, scope=scope, agent_id=agent_id, vector=vector, k=k
    )
    scored = [(mid, float(embedder.same_score(raw))) for mid, raw in nearest]
    scored = [(mid, score) for mid, score in scored if score >= min_score]
    if not scored:
        return []
    rows = Memory.objects.filter(team=team, scope=scope, superseded_by__isnull=True).in_bulk(
        [mid for mid, _ in scored]
    )
    return [(rows[mid], score) for mid, score in scored if mid in rows]


def _find_duplicate(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    content: str,
    chash: str,
    vector: np.ndarray,
    threshold: float,
    related: list[int],
) -> DedupHit | None:
    """The memory that already says everything `content` says, or None.

    Near memories (similarity >= threshold) that do not are appended to `related`: the new
    memory is stored and linked to them (`metadata.related_to`) for the lifecycle to consolidate.
    """
    exact_id = memory_same_content_id(team=team, scope=scope, agent_id=agent_id, chash=chash)
    if exact_id is not None:
        exact = _locked_unchanged(exact_id, content_hash=chash)
        if exact is not None:
            return DedupHit(exact, 1.0)
    reads = get_embedder().reads(content)
    for old, score in memory_find_similar(
        team=team, scope=scope, agent_id=agent_id, vector=vector, min_score=threshold
    ):
        reason = conflict_reason(content, old.content)
        if reason is None:
            if _locked_unchanged(old.pk, content_hash=old.content_hash) is not None:
                return DedupHit(old, score)
            logger.info("memory %s changed since it was compared: written as a new memory", old.pk)
            continue
        logger.info("not a duplicate of memory %s (%s): written as a new memory", old.pk, reason)
        if reads:  # in a script the model never learnt, every memory of that script is "near"
            related.append(old.pk)
    return None


def _locked_unchanged(memory_id: int, *, content_hash: str) -> Memory | None:
    """The memory a write is about to be skipped for, locked until the write's transaction ends,
    if it still holds the content the write was compared with and is live. Edits, supersessions
    and deletes lock the row but not the scope: one that committed since the comparison read
    (or commits while this waits) means the memory no longer says what the write says, and the
    write is stored instead of being lost."""
    return (
        Memory.objects.select_for_update()
        .filter(pk=memory_id, content_hash=content_hash, superseded_by__isnull=True)
        .first()
    )


def memory_write_prepare(*, team: Team, scope: str, agent_id: str, enable_dedup: bool) -> None:
    """What a write does before its transaction: registers the agent, creates the scope's lock
    row (in its own statement: see memories.locks) and loads a cold index (seconds at 100k).
    memory_create calls it; a caller that wraps writes in its own transaction (an idempotent
    request, an atomic batch) calls it first (memory_write_embed, batch_write_prepare), so that
    none of this runs inside that transaction.

    The agent is registered without the per-process cache of known agents (`agent_register`):
    that cache misses a deletion made through another worker when the processes share no cache,
    and a memory stored for an agent not registered again is not listed with its agent and
    cannot be erased with it (`DELETE /agents/...` answers 404). One indexed query, next to an
    embedding and a transaction of several; only the working-memory write path keeps the cache."""
    if agent_id:
        agent_ensure(team=team, agent_id=agent_id)
    if enable_dedup:
        locks.scope_lock_prepare(team_id=team.id, scope=scope, agent_id=agent_id)
        get_backend().warm(team_id=team.id, scope=scope, agent_id=agent_id)


def memory_write_embed(
    *, team: Team, scope: str, agent_id: str, content: str, enable_dedup: bool
) -> np.ndarray:
    """memory_write_prepare, and the content's embedding for memory_create's `vector`: the
    slow parts of a write, done before a caller's transaction (the embedding is 60-110 ms, and
    on SQLite a writing transaction holds the database's write lock)."""
    vector = embed_passages([content])[0]
    memory_write_prepare(team=team, scope=scope, agent_id=agent_id, enable_dedup=enable_dedup)
    return vector


def memory_create(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    content: str,
    importance: float = 0.5,
    category: str = "general",
    metadata: dict[str, Any] | None = None,
    enable_dedup: bool = True,
    dedup_threshold: float = 0.85,
    pinned: bool = False,
    run_id: str = "",
    expires_at: datetime | None = None,
    vector: np.ndarray | None = None,
) -> tuple[Memory, DedupHit | None]:
    """Writes a memory unless an existing one says the same thing (then returns that one).

    `agent_id` is the owner of a personal memory, the optional author of a team memory; an
    unknown agent is registered on first write. `vector` is the content's embedding when the
    caller already has it (a batch embeds all its contents in one call). `expires_at`: when the
    memory stops being true (None: never).
    """
    start = time.perf_counter()
    chash = content_hash(content)
    if vector is None:
        vector = embed_passages([content])[0]
    embedder = get_embedder()
    memory_write_prepare(team=team, scope=scope, agent_id=agent_id, enable_dedup=enable_dedup)
    metadata = dict(metadata or {})
    with transaction.atomic():
        if enable_dedup:
            # Check and insert under the scope's lock: a writer of the same content in another
            # process waits here and then finds this row (the database for exact duplicates, the
            # index synced from the change log for near ones) instead of inserting a second one.
            locks.scope_lock(team_id=team.id, scope=scope, agent_id=agent_id)
            related: list[int] = []
            hit = _find_duplicate(
                team=team,
                scope=scope,
                agent_id=agent_id,
                content=content,
                chash=chash,
                vector=vector,
                threshold=dedup_threshold,
                related=related,
            )
            if hit is not None and memory_outlives(expires_at, hit.memory.expires_at):
                # The stored memory says the same but stops being true sooner (or already
                # did): skipping would lose the rest of what this write says. Stored and linked.
                logger.info("memory %s expires sooner: written as a new memory", hit.memory.pk)
                related.append(hit.memory.pk)
                hit = None
            if hit is not None:
                if hit.memory.tier == MemoryTier.COLD:
                    # Said again (the exact text of a cold memory, which near-duplicate search
                    # cannot see): in use again, so back in everyday search — a skipped write
                    # must never leave what it said unfindable.
                    tiers.memories_promote(team=team, memory_ids=[hit.memory.pk])
                    hit.memory.refresh_from_db()
                WRITE_LATENCY.labels(outcome="dedup_skipped").observe(time.perf_counter() - start)
                return hit.memory, hit
            if related:
                # Near but not provably redundant: stored, and linked so that the lifecycle can
                # consolidate later. A caller's own list of links is kept and extended.
                given = metadata.get("related_to")
                if given is None or isinstance(given, list):
                    links = list(given or [])
                    metadata["related_to"] = links + [pk for pk in related if pk not in links]
        memory = Memory.objects.create(
            team=team,
            scope=scope,
            agent_id=agent_id,
            content=content,
            importance=importance,
            category=category or "general",
            metadata=metadata,
            embedding=to_bytes(vector),
            embedding_model=embedder.model_name,
            content_hash=chash,
            search_tokens=tokens_for_storage(content),
            pinned=pinned,
            run_id=run_id,
            expires_at=expires_at,
        )
        _index_changed(memory, deleted=False)
    WRITE_LATENCY.labels(outcome="created").observe(time.perf_counter() - start)
    return memory, None


def memory_outlives(new: datetime | None, stored: datetime | None) -> bool:
    """Whether a write expiring at `new` stays true longer than a stored memory expiring at
    `stored` (None: never expires)."""
    return stored is not None and (new is None or new > stored)


@dataclass(frozen=True)
class BatchItem:
    """One memory of a batch, already validated: memory_create's arguments."""

    agent_id: str
    content: str
    importance: float
    category: str
    metadata: dict[str, Any]
    enable_dedup: bool
    dedup_threshold: float
    pinned: bool
    run_id: str = ""
    expires_at: datetime | None = None


def batch_write_prepare(*, team: Team, scope: str, items: list[BatchItem]) -> np.ndarray:
    """The items' embeddings (one call) and memory_write_prepare for each agent of the batch:
    what is done before its transaction."""
    vectors = embed_passages([item.content for item in items])
    for agent_id, enable_dedup in {(item.agent_id, item.enable_dedup) for item in items}:
        memory_write_prepare(team=team, scope=scope, agent_id=agent_id, enable_dedup=enable_dedup)
    return vectors


def memories_create_batch(
    *,
    team: Team,
    scope: str,
    items: list[BatchItem],
    atomic: bool,
    vectors: np.ndarray | None = None,
) -> list[tuple[Memory, DedupHit | None]]:
    """Writes the items in order, embedded in one call. Each is deduplicated against what is
    stored and against the batch's earlier items (they are written first). `atomic`: all of
    them in one transaction, so an error leaves nothing written. `vectors`: what
    batch_write_prepare returned, when the caller ran it before its own transaction."""
    if not items:
        return []
    if vectors is None:
        vectors = batch_write_prepare(team=team, scope=scope, items=items)
    results: list[tuple[Memory, DedupHit | None]] = []
    with transaction.atomic() if atomic else nullcontext():
        for item, vector in zip(items, vectors, strict=True):
            # BatchItem's fields are memory_create's arguments, by name.
            results.append(memory_create(team=team, scope=scope, vector=vector, **asdict(item)))
    return results


def memories_insert(
    *,
    team: Team,
    memories: list[Memory],
    hashes: Mapping[str, str] | None = None,
    tokens: Mapping[str, str] | None = None,
) -> list[Memory]:
    """Inserts memories exactly as given, without dedup (an import: lifecycle.services.bundle).

    Each must carry its embedding (bytes and model). The derived columns (content hash, search
    tokens) are computed here, or taken from `hashes` / `tokens` (content -> what content_hash /
    tokens_for_storage return for it: an import computes them before its transaction opens, as
    they cost ~0.4 ms a memory inside it); `created_at` / `updated_at` as given are kept (Django
    would stamp the insert time); every index is told in the same transaction, like
    memory_create.
    """
    if not memories:
        return []
    stamps = [(m.created_at, m.updated_at) for m in memories]
    for m in memories:
        m.team = team
        known_hash = hashes.get(m.content) if hashes is not None else None
        known_tokens = tokens.get(m.content) if tokens is not None else None
        m.content_hash = known_hash if known_hash is not None else content_hash(m.content)
        m.search_tokens = (
            known_tokens if known_tokens is not None else tokens_for_storage(m.content)
        )
    with transaction.atomic():
        if connection.features.can_return_rows_from_bulk_insert:
            Memory.objects.bulk_create(memories, batch_size=500)
        else:  # the ids are needed: one INSERT each where the backend cannot return them
            for m in memories:
                m.save(force_insert=True)
        for m, (created_at, updated_at) in zip(memories, stamps, strict=True):
            m.created_at = created_at or m.created_at
            m.updated_at = updated_at or m.updated_at
        # bulk_create stamped the insert time.
        rows_restamp(memories, fields=("created_at", "updated_at"))
        _index_log_written(team, memories)
    return memories


def _index_log_written(team: Team, memories: list[Memory]) -> None:
    """Logs these memories, written, for every process's index: one entry a scope (inside the
    write's transaction)."""
    by_scope: dict[tuple[str, str], list[int]] = {}
    for m in memories:
        by_scope.setdefault((m.scope, m.agent_id), []).append(m.pk)
    for (scope, agent_id), ids in by_scope.items():
        index.log_changes(
            team_id=team.id, scope=scope, agent_id=agent_id, memory_ids=ids, deleted=False
        )


def memories_link(*, team: Team, links: list[tuple[int, str, int | None]]) -> None:
    """Sets `superseded_by` / `promoted_from` (field name) of memories of the team as given (an
    import links them once all are written); a superseded memory leaves default search, so its
    index is told."""
    if not links:
        return
    with transaction.atomic():
        for memory_id, field, target in links:
            if field not in ("superseded_by", "promoted_from"):
                raise ValueError(f"not a memory link: {field}")
            Memory.objects.filter(team=team, pk=memory_id).update(**{f"{field}_id": target})
        rows = Memory.objects.filter(
            team=team, pk__in=[m for m, f, _ in links if f == "superseded_by"]
        ).values_list("pk", "scope", "agent_id")
        by_scope: dict[tuple[str, str], list[int]] = {}
        for pk, scope, agent_id in rows:
            by_scope.setdefault((scope, agent_id), []).append(pk)
        for (scope, agent_id), ids in by_scope.items():
            index.log_changes(
                team_id=team.id, scope=scope, agent_id=agent_id, memory_ids=ids, deleted=False
            )


def _snapshot(memory: Memory) -> dict[str, Any]:
    """The revised fields as a revision stores them (JSON: the expiry as ISO 8601)."""
    data = {f: getattr(memory, f) for f in REVISED_FIELDS}
    # In UTC, so the same instant given at another offset (an import's) is no change.
    expiry = memory.expires_at
    data["expires_at"] = iso(expiry.astimezone(UTC)) if expiry is not None else None
    return data


def _revision(
    memory: Memory,
    *,
    actor: Actor,
    action: RevisionAction,
    before: dict[str, Any],
    after: dict[str, Any],
) -> MemoryRevision:
    """Adds one entry to the memory's history, signed by `actor`."""
    revision = _revision_row(memory, actor=actor, action=action, before=before, after=after)
    revision.save(force_insert=True)
    return revision


def _revision_row(
    memory: Memory,
    *,
    actor: Actor,
    action: RevisionAction,
    before: dict[str, Any],
    after: dict[str, Any],
) -> MemoryRevision:
    """One entry of the memory's history, signed by `actor`, not saved yet (a batch inserts
    many at once)."""
    return MemoryRevision(
        memory=memory,
        team_id=memory.team_id,
        action=action,
        before=before,
        after=after,
        api_key=actor.api_key,
        user=actor.user,
        actor=actor.label,
    )


def _index_changed(memory: Memory, *, deleted: bool) -> None:
    """Logs a change of this one memory for every process's index (inside the write's transaction)."""
    index.log_changes(
        team_id=memory.team_id,
        scope=memory.scope,
        agent_id=memory.agent_id,
        memory_ids=[memory.pk],
        deleted=deleted,
    )


def memory_update(
    *,
    memory: Memory,
    actor: Actor,
    content: str | None = None,
    importance: float | None = None,
    category: str | None = None,
    metadata: dict[str, Any] | None = None,
    pinned: bool | None = None,
    expires_at: datetime | _Keep | None = KEEP,
    action: RevisionAction = RevisionAction.UPDATE,
) -> Memory:
    """Changes a memory, re-embedding new content and recording a revision of what changed.
    None leaves a field as it is, except `expires_at`, where None means "never" and KEEP
    leaves it."""
    vector = None
    if content is not None and content != memory.content:
        vector = embed_passages([content])[0]
    with transaction.atomic():
        memory = _locked(memory)
        if content is not None and content != memory.content and vector is None:
            # Another request changed the text since the caller read it (the comparison above
            # was with that stale copy): the text written back needs its own vector, or search
            # would find it by the meaning of the text it replaced. Rare; embedded under the
            # row's lock (a few ms).
            vector = embed_passages([content])[0]
        before = _snapshot(memory)
        if content is not None:
            memory.content = content
            memory.content_hash = content_hash(content)
            memory.search_tokens = tokens_for_storage(content)
        if vector is not None:
            memory.embedding = to_bytes(vector)
            memory.embedding_model = get_embedder().model_name
        left_cold = _set_attributes(
            memory,
            importance=importance,
            category=category,
            metadata=metadata,
            pinned=pinned,
            expires_at=expires_at,
        )
        memory.save()
        after = _snapshot(memory)
        changed = {f for f in REVISED_FIELDS if before[f] != after[f]}
        if changed:
            _revision(
                memory,
                actor=actor,
                action=action,
                before={f: before[f] for f in changed},
                after={f: after[f] for f in changed},
            )
        if "content" in changed or left_cold:
            _index_changed(memory, deleted=False)
    return memory


@dataclass(frozen=True)
class MemoryAttributes:
    """What `memories_update` sets on one memory: None leaves a value as it is (so an expiry
    can be set here, not cleared)."""

    importance: float | None = None
    category: str | None = None
    metadata: dict[str, Any] | None = None
    pinned: bool | None = None
    expires_at: datetime | None = None


def memories_update(
    *, team: Team, changes: list[tuple[int, MemoryAttributes]], actor: Actor
) -> dict[int, Memory]:
    """Sets the attributes of many memories of `team` as memory_update would set each (a
    revision of what changed; a pinned or important cold memory made hot): in one transaction,
    the rows locked by one query and written by one UPDATE run for each (`executemany`), the
    revisions inserted at once. No content changes, so nothing is embedded. What an overwrite
    import needs: one memory_update a memory was a lock, a save and a revision insert each,
    inside the import's transaction (on SQLite, the whole database's write lock).

    Changes apply in order: a memory given twice ends as the second says, with a revision each.
    A memory that already holds the values is not written (memory_update would save it, its
    updated_at bumped); one another writer deleted, or of another team, is left out. The
    memories written, by id."""
    if not changes:
        return {}
    with transaction.atomic():
        rows: dict[int, Memory] = {
            m.pk: m
            for m in Memory.objects.select_for_update()
            .filter(team=team, pk__in={pk for pk, _ in changes})
            .order_by("id")  # one lock order for every writer of several rows
        }
        revisions: list[MemoryRevision] = []
        written: dict[int, Memory] = {}
        left_cold: list[Memory] = []
        for pk, attributes in changes:
            memory = rows.get(pk)
            if memory is None:
                continue  # deleted since the caller read it: as if deleted after
            before, tier = _snapshot(memory), memory.tier
            given = asdict(attributes)
            expiry = given.pop("expires_at")
            leaves_cold = _set_attributes(
                memory, **given, expires_at=KEEP if expiry is None else expiry
            )
            after = _snapshot(memory)
            changed = [f for f in REVISED_FIELDS if before[f] != after[f]]
            if leaves_cold:
                left_cold.append(memory)
            if changed or memory.tier != tier:
                written[pk] = memory
            if not changed:
                continue  # already so: no revision (nor a write, unless the tier rule moved it)
            revisions.append(
                _revision_row(
                    memory,
                    actor=actor,
                    action=RevisionAction.UPDATE,
                    before={f: before[f] for f in changed},
                    after={f: after[f] for f in changed},
                )
            )
        now = timezone.now()
        for memory in written.values():
            memory.updated_at = now  # auto_now, which only save() stamps
        rows_restamp(
            list(written.values()),
            fields=(
                *("importance", "category", "metadata", "pinned", "expires_at"),
                *("tier", "tier_changed_at", "cold_reason", "updated_at"),
            ),
        )
        MemoryRevision.objects.bulk_create(revisions, batch_size=500)
        _index_log_written(team, left_cold)
    return written


def _set_attributes(
    memory: Memory,
    *,
    importance: float | None,
    category: str | None,
    metadata: dict[str, Any] | None,
    pinned: bool | None,
    expires_at: datetime | _Keep | None = KEEP,
) -> bool:
    """Sets the given attributes (None: left as it is; for `expires_at`, KEEP), then the tier
    rule; True when the memory leaves cold (the index must add it back)."""
    if importance is not None:
        memory.importance = importance
    if category is not None:
        memory.category = category
    if metadata is not None:
        memory.metadata = metadata
    if pinned is not None:
        memory.pinned = pinned
    if expires_at is not KEEP:
        memory.expires_at = expires_at
    return _hot_if_kept(memory)


def _hot_if_kept(memory: Memory) -> bool:
    """The tier rule makes a pinned or important memory hot (memories.tiers.tier_for): applied
    at once, not at the next tiering pass — a lead pinning a cold memory means it to be found
    now, and embedded mode has no hourly pass at all. True when it leaves cold (the index must
    add it back)."""
    if memory.tier == MemoryTier.HOT or not tiers.held_hot(
        pinned=memory.pinned, importance=memory.importance
    ):
        return False
    was_cold = memory.tier == MemoryTier.COLD
    memory.tier = MemoryTier.HOT
    memory.tier_changed_at = timezone.now()
    memory.cold_reason = ""
    return was_cold


def _locked(memory: Memory) -> Memory:
    """The memory's row, locked until the transaction ends. NotFound when another request removed
    it after the caller read it (a DELETE that held the row first): the caller answers what it
    would have a moment later, never a 500."""
    locked = Memory.objects.select_for_update().filter(pk=memory.pk).first()
    if locked is None:
        raise NotFound("memory")
    return locked


# The endpoints whose recorded answers (tenants.idempotency) show memories: the writes (and
# their batches) and ingest, synchronous ("ingest") or a job's own run ("ingest-job").
ANSWER_ENDPOINTS = ("memories/", "ingest")


def _erased_in(body: Any, ids: set[int]) -> Any | None:
    """`body` with each memory of `ids` it shows (an object with its integer `id` and
    `content`) replaced by `{"id", "erased": true}`; None when it shows none of them."""
    if isinstance(body, dict):
        if "content" in body and type(body.get("id")) is int and body["id"] in ids:
            return {"id": body["id"], "erased": True}
        items = {k: _erased_in(v, ids) for k, v in body.items()}
        if all(v is None for v in items.values()):
            return None
        return {k: body[k] if v is None else v for k, v in items.items()}
    if isinstance(body, list):
        found = [_erased_in(v, ids) for v in body]
        if all(v is None for v in found):
            return None
        return [v if f is None else f for v, f in zip(body, found, strict=True)]
    return None


# An object's `"id": <integer>` member in an answer's stored JSON text, however it is spaced
# (json.dumps on SQLite, MariaDB's text as stored, MySQL's normalised JSON). An integer is
# written as digits only: a fraction or an exponent makes it a float, which is no memory id.
_ID_MEMBER = re.compile(r'"id"\s*:\s*(-?\d+)(?![\d.eE])')


def _shows_any(stored: str, ids: set[int]) -> bool:
    """False only for an answer (its stored JSON text) that _erased_in leaves alone: it shows
    no object with an integer `id` of `ids`. Tested on the text, so most answers are never
    decoded: decoding and walking every kept answer was five sixths of an erasure's time
    (bench/erasure.py, docs/benchmarks.md)."""
    return any(int(found) in ids for found in _ID_MEMBER.findall(stored))


def answers_forget(
    *, team_id: str, memory_ids: Collection[int], agent_id: str | None = None
) -> int:
    """An erasure reaches the answers kept for retries (`Idempotency-Key`, kept
    IDEMPOTENCY_TTL_HOURS): where one showed an erased memory, its retry now gets `{"id",
    "erased": true}` instead of its text. Called by every erasure — a purge, the trash's erase
    and expiry, an agent's deletion; not by a move to the trash, which can be undone. Returns
    the answers rewritten.

    `agent_id`: every id is a personal memory of this agent (its deletion). Past HOLDS_ANY_MAX
    ids, the database then looks for that one string instead of reading every kept answer."""
    ids = set(memory_ids)
    if not ids:
        return 0
    # An answer showing a memory holds its id's digits (`"id": 123`, however spaced).
    holds = [str(pk) for pk in ids]
    if agent_id and len(holds) > HOLDS_ANY_MAX:
        # And, for a personal memory, its agent's id: every keyed answer shows a memory as
        # presenters.memory_body does, `"agent_id"` included; a memory's agent never changes; and
        # an agent id's characters ([A-Za-z0-9_.:@-]) are written as they are in JSON text.
        holds = [agent_id]
    return idempotency_rewrite(
        team_id=team_id,
        endpoint_prefixes=ANSWER_ENDPOINTS,
        rewrite=lambda body: _erased_in(body, ids),
        may_change=lambda stored: _shows_any(stored, ids),
        holds_any=holds,
    )


def memories_update_prepare(*, updates: list[tuple[Memory, dict[str, Any]]]) -> None:
    """Embeds the new texts of `updates` in one call (outside any transaction): each update
    then finds its vector in the cache."""
    texts = [f["content"] for m, f in updates if f.get("content") not in (None, m.content)]
    if texts:
        embed_passages(texts)


def memories_update_each(
    *, updates: list[tuple[Memory, dict[str, Any]]], actor: Actor
) -> list[Memory | DomainError]:
    """Applies each `(memory, fields)` as memory_update would (the API's batch update), in
    order, each in its own transaction (a savepoint inside the caller's) -> the memory as
    changed, or the error that one met (a memory another request removed meanwhile: NotFound),
    the others applied all the same. The new texts are embedded in one call first
    (memories_update_prepare; a caller that did it already finds them in the cache)."""
    memories_update_prepare(updates=updates)
    done: list[Memory | DomainError] = []
    for memory, fields in updates:
        try:
            done.append(memory_update(memory=memory, actor=actor, **fields))
        except DomainError as exc:
            done.append(exc)
    return done


def memory_delete(*, memory: Memory) -> None:
    """Erases a memory at once (`?purge=true`, an erasure request): memories_erase of one.
    NotFound when there was nothing left to erase."""
    if not memories_erase(team_id=memory.team_id, memory_ids=[memory.pk]):
        raise NotFound("memory")


def memories_erase(*, team_id: str, memory_ids: list[int]) -> list[int]:
    """Erases the team's memories among `memory_ids` at once, in one transaction (an erasure
    request: `?purge=true`, the batch delete's `purge`) -> the ids erased. Their shares,
    revisions and links go with them, and the answers kept for retries stop showing them
    (answers_forget). One another request moved to the trash after the caller read it is erased
    there ("gone at once, everywhere"); one that is in neither (erased, restored meanwhile) is
    left out, and the caller answers it 404.

    The kept answers are read once for all of them: erasing a hundred memories one by one would
    read them a hundred times, each read a scan of the team's kept answers (docs/benchmarks.md,
    "Erasure and kept answers")."""
    wanted = sorted(set(memory_ids))
    if not wanted:
        return []
    with transaction.atomic():
        # Locked by primary key alone, in id order, as every other path locks memories: a lock
        # read through another index takes that index's records first, in its own order, and
        # deadlocks with a request that holds one of these rows and deletes it.
        locked = Memory.objects.select_for_update().filter(pk__in=wanted).order_by("id")
        live = [m for m in locked if m.team_id == team_id]
        found = {m.pk for m in live}
        trashed = list(
            TrashedMemory.objects.select_for_update()
            .filter(team_id=team_id, memory_id__in=[pk for pk in wanted if pk not in found])
            .values_list("memory_id", flat=True)
        )
        by_scope: dict[tuple[str, str], list[int]] = {}
        for m in live:
            by_scope.setdefault((m.scope, m.agent_id), []).append(m.pk)
        for (scope, agent_id), ids in by_scope.items():
            index.log_changes(
                team_id=team_id, scope=scope, agent_id=agent_id, memory_ids=ids, deleted=True
            )
        Memory.objects.filter(pk__in=found).delete()  # the team's: checked above
        TrashedMemory.objects.filter(team_id=team_id, memory_id__in=trashed).delete()
        erased = sorted(found | set(trashed))
        answers_forget(team_id=team_id, memory_ids=erased)
    return erased


def memories_delete(*, team: Team, memory_ids: list[int]) -> int:
    """Deletes many memories of one team (cleanup, purges), logging every index change."""
    with transaction.atomic():
        rows = list(
            Memory.objects.filter(team=team, pk__in=memory_ids).values_list(
                "pk", "scope", "agent_id"
            )
        )
        by_scope: dict[tuple[str, str], list[int]] = {}
        for pk, scope, agent_id in rows:
            by_scope.setdefault((scope, agent_id), []).append(pk)
        for (scope, agent_id), ids in by_scope.items():
            index.log_changes(
                team_id=team.id, scope=scope, agent_id=agent_id, memory_ids=ids, deleted=True
            )
        Memory.objects.filter(team=team, pk__in=[r[0] for r in rows]).delete()
    return len(rows)


def memories_touch(*, memory_ids: list[int]) -> None:
    """Marks memories as recalled: one UPDATE for all of them (cleanup of idle memories depends on it)."""
    if memory_ids:
        Memory.objects.filter(pk__in=memory_ids).update(
            access_count=F("access_count") + 1, last_accessed=timezone.now()
        )


def memory_recall(
    *,
    query: SearchQuery,
    acting_agent: str | None = None,
    include_entities: bool = False,
    count_usage: bool = True,
) -> SearchResults:
    """An agent's search: the hits of `memory_search`, recorded as recalled (`partial` when
    the query's recall timeout cut the search short).

    Touches (and brings back to hot, if cold) only what was returned at or above the effective
    min_score = max(query.min_score,
    SEARCH_TOUCH_MIN_SCORE): a min_score 0 search returns junk scoring 0.005, which must not look
    recalled and escape cleanup (docs/search.md, "Recall bookkeeping"). Most-recent results (an
    empty query) have no score and are all touched: an explicit fetch is a recall. Counts one
    search for the dashboard and attaches graph entities on request.
    """
    with timed(SEARCH_LATENCY, mode=query.mode if query.text else "recent"):
        hits = memory_search(query)
    floor = max(query.min_score, settings.SEARCH_TOUCH_MIN_SCORE)
    touched = [h for h in hits if h.score is None or h.score >= floor]
    memories_touch(memory_ids=[h.memory.pk for h in touched])
    # A cold memory an agent was given (an include_cold search) is back in use: hot again.
    tiers.memories_promote(
        team=query.team,
        memory_ids=[h.memory.pk for h in touched if h.memory.tier == MemoryTier.COLD],
    )
    if count_usage:
        usage_record(team=query.team, agent_id=acting_agent or query.agent_id, kind=KIND_SEARCH)
    if include_entities:
        attach_entities(team=query.team, hits=hits, acting_agent=acting_agent)
    return hits


def memory_share(*, memory: Memory, agent_ids: list[str], permission: str) -> list[MemoryShare]:
    """Grants other agents of the team `read` or `write` on a personal memory (idempotent)."""
    team = memory.team
    shares = []
    with transaction.atomic():
        # Held until the shares commit: a DELETE that took the row first has trashed the memory
        # (with the shares it had), and this one answers NotFound instead of failing on the key.
        memory = _locked(memory)
        for agent_id in agent_ids:
            if agent_id == memory.agent_id:
                continue
            agent_ensure(team=team, agent_id=agent_id)
            share, _ = MemoryShare.objects.update_or_create(
                memory=memory, agent_id=agent_id, defaults={"team": team, "permission": permission}
            )
            shares.append(share)
    return shares


def memory_unshare(*, memory: Memory, agent_ids: list[str] | None) -> int:
    qs = MemoryShare.objects.filter(memory=memory)
    if agent_ids is not None:
        qs = qs.filter(agent_id__in=agent_ids)
    deleted, _ = qs.delete()
    return deleted


def purge_agent(*, team: Team, agent_id: str) -> int:
    """Deletes an agent's personal memories, its profile, its rules (and their history) and the
    shares granted to it (agent deletion).

    Final: nothing goes to the trash, and what the agent's personal memories left there goes too.
    An agent created again with the same id starts without rules: they were this agent's.

    Takes the agent's write lock before anything else is read or deleted (the first receiver
    of the agent's deletion: memories comes before the apps that hold rows of it): a writer
    holding it — a job storing facts — commits before this reads what to delete, and a job that
    takes it later finds the agent gone (locks.job_agent_check). Only the agent's
    trash goes before it: a restore takes its trash item's row and then this lock, so taking
    them in the other order could deadlock with it.
    """
    trash = TrashedMemory.objects.filter(team=team, scope=MemoryScope.PERSONAL, agent_id=agent_id)
    trashed = list(trash.values_list("memory_id", flat=True))
    trash.delete()
    locks.agent_lock_if_made(team_id=team.id, agent_id=agent_id)
    ids = list(
        Memory.objects.filter(team=team, scope=MemoryScope.PERSONAL, agent_id=agent_id).values_list(
            "pk", flat=True
        )
    )
    MemoryShare.objects.filter(team=team, agent_id=agent_id).delete()
    ProfileField.objects.filter(team=team, agent_id=agent_id).delete()
    ProfileRevision.objects.filter(team=team, agent_id=agent_id).delete()
    Procedure.objects.filter(team=team, agent_id=agent_id).delete()
    ProcedureRevision.objects.filter(team=team, agent_id=agent_id).delete()
    answers_forget(team_id=team.id, memory_ids=[*ids, *trashed], agent_id=agent_id)
    return memories_delete(team=team, memory_ids=ids)


def memories_reembed(*, memory_ids: list[int]) -> int:
    """Embeds these memories with the current model (a batch) and tells every index. A memory
    edited while its batch was being embedded has embedded its new content itself (the edit's
    own write): it is left as it is, rather than given the vector of the text it had."""
    read = dict(Memory.objects.filter(pk__in=memory_ids).values_list("id", "content"))
    if not read:
        return 0
    vectors = dict(zip(read, embed_passages(list(read.values())), strict=True))
    model_name = get_embedder().model_name
    with transaction.atomic():
        locked = Memory.objects.select_for_update().filter(pk__in=list(read)).order_by("id")
        rows = [m for m in locked if m.content == read[m.pk]]
        for memory in rows:
            memory.embedding = to_bytes(vectors[memory.pk])
            memory.embedding_model = model_name
            memory.search_tokens = tokens_for_storage(memory.content)
        Memory.objects.bulk_update(
            rows, ["embedding", "embedding_model", "search_tokens"], batch_size=500
        )
        by_scope: dict[tuple[str, str, str], list[int]] = {}
        for m in rows:
            by_scope.setdefault((m.team_id, m.scope, m.agent_id), []).append(m.pk)
        for (team_id, scope, agent_id), ids in by_scope.items():
            index.log_changes(
                team_id=team_id, scope=scope, agent_id=agent_id, memory_ids=ids, deleted=False
            )
    return len(rows)


def memories_store_tokens(*, memory_ids: list[int]) -> int:
    """Stores the current search tokens of these memories (written before the column existed, or
    under another tokenizer). No index is told: until now they tokenised these rows themselves,
    to the same tokens; the next load just reads them."""
    rows = list(Memory.objects.filter(pk__in=memory_ids).only("id", "content"))
    for memory in rows:
        memory.search_tokens = tokens_for_storage(memory.content)
    Memory.objects.bulk_update(rows, ["search_tokens"], batch_size=500)
    return len(rows)


def index_changes_prune(*, older_than_seconds: int) -> int:
    """Drops change-log rows every index has long applied (indexes idle longer reload fully)."""
    from datetime import timedelta

    from .models import IndexChange

    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    old = IndexChange.objects.filter(created_at__lt=cutoff)
    if settings.SEARCH_BACKEND == "milvus":
        # The log is also the engine's outbox: never drop what has not been shipped yet.
        from .retrieval.milvus import shipped_cursor

        old = old.filter(id__lte=shipped_cursor())
    deleted, _ = old.delete()
    return deleted


def memory_supersede(*, old: Memory, new: Memory, actor: Actor) -> Memory:
    """Marks `old` as replaced by `new`: kept with its history, left out of default search."""
    with transaction.atomic():
        Memory.objects.filter(pk=old.pk).update(superseded_by=new, updated_at=timezone.now())
        _revision(
            old,
            actor=actor,
            action=RevisionAction.SUPERSEDE,
            before={"superseded_by": None},
            after={"superseded_by": new.pk, "by_content": new.content[:500]},
        )
        _index_changed(old, deleted=False)
    old.superseded_by = new
    return old


# --- Review console: revert, promote, bulk edits ----------------------------------------


def revision_revertable(*, revision: MemoryRevision) -> bool:
    """Whether memory_revert can restore this revision's `before` state."""
    before = revision.before or {}
    return any(f in before for f in REVISED_FIELDS) or (
        "superseded_by" in before and before["superseded_by"] is None
    )


def memory_revert(*, memory: Memory, revision: MemoryRevision, actor: Actor) -> Memory:
    """Restores the state a revision started from (its `before`), as a new "revert" revision.

    Only the fields that revision changed are restored; a supersede revision is undone by
    clearing `superseded_by`, so the memory is searchable again.
    """
    if revision.memory_id != memory.pk or revision.team_id != memory.team_id:
        raise ValidationFailed({"revision": ["this revision belongs to another memory"]})
    before = revision.before or {}
    fields: dict[str, Any] = {f: before[f] for f in REVISED_FIELDS if f in before}
    if "expires_at" in fields:  # stored as ISO 8601; None: it had no expiry
        fields["expires_at"] = parse_datetime(fields["expires_at"] or "")
    if "superseded_by" in before and before["superseded_by"] is None:
        return memory_unsupersede(memory=memory, actor=actor)
    if not revision_revertable(revision=revision):
        raise ValidationFailed({"revision": ["this revision has nothing that can be restored"]})
    return memory_update(memory=memory, actor=actor, action=RevisionAction.REVERT, **fields)


def memory_unsupersede(*, memory: Memory, actor: Actor) -> Memory:
    """Makes a superseded memory current again (the newer one is kept), recording who did it."""
    with transaction.atomic():
        memory = _locked(memory)
        if memory.superseded_by_id is None:
            return memory
        _revision(
            memory,
            actor=actor,
            action=RevisionAction.REVERT,
            before={"superseded_by": memory.superseded_by_id},
            after={"superseded_by": None},
        )
        memory.superseded_by = None
        memory.save(update_fields=["superseded_by", "updated_at"])
        _index_changed(memory, deleted=False)
    return memory


def memory_promote(*, memory: Memory, actor: Actor) -> tuple[Memory, DedupHit | None]:
    """Copies a personal memory into the team scope, keeping the original and the link to it.

    Goes through memory_create, so the copy is embedded, indexed and deduplicated: when the team
    already holds a memory saying the same thing, that one is returned with the hit and nothing
    is written (the caller says so instead of silently keeping two copies).
    """
    if memory.scope != MemoryScope.PERSONAL:
        raise ValidationFailed({"memory": ["only a personal memory can be promoted"]})
    embed_passages([memory.content])  # outside the transaction (fills the cache)
    with transaction.atomic():
        memory = _locked(memory)  # not deleted until the copy and its link commit
        team_memory, hit = memory_create(
            team=memory.team,
            scope=MemoryScope.TEAM,
            agent_id=memory.agent_id,
            content=memory.content,
            importance=memory.importance,
            category=memory.category,
            metadata={**(memory.metadata or {}), "promoted_from": memory.pk},
            expires_at=memory.expires_at,  # the copy says the same, until the same time
        )
        if hit is not None:
            return team_memory, hit
        Memory.objects.filter(pk=team_memory.pk).update(promoted_from=memory)
        team_memory.promoted_from = memory
        # Who promoted what, on the original's history (creation itself has no revision).
        _revision(
            memory,
            actor=actor,
            action=RevisionAction.PROMOTE,
            before={},
            after={"promoted_to": team_memory.pk},
        )
    return team_memory, None


@dataclass(frozen=True)
class BulkResult:
    done: int
    skipped: int
    # Listed but left as they were: removed (or, for a delete, pinned) by another request
    # between the read of the selection and the change.
    gone: int = 0


def memories_bulk_correct(
    *,
    team: Team,
    memory_ids: list[int],
    actor: Actor,
    pinned: bool | None = None,
    importance: float | None = None,
) -> BulkResult:
    """Sets pin state and/or importance on the team's memories, one revision per memory changed."""
    done = gone = 0
    for memory in Memory.objects.filter(team=team, pk__in=memory_ids).order_by("id"):
        if (pinned is None or memory.pinned == pinned) and (
            importance is None or memory.importance == importance
        ):
            continue
        try:
            memory_update(memory=memory, actor=actor, pinned=pinned, importance=importance)
        except NotFound:  # deleted since the selection was read: the others still change
            gone += 1
            continue
        done += 1
    return BulkResult(done=done, skipped=0, gone=gone)


def memories_bulk_share(
    *, team: Team, memory_ids: list[int], agent_ids: list[str], permission: str
) -> BulkResult:
    """Grants `permission` on the team's personal memories to these agents (owners excluded).

    Team memories are skipped: every agent of the team can already read and write them.
    """
    done = skipped = gone = 0
    for memory in Memory.objects.filter(team=team, pk__in=memory_ids).order_by("id"):
        if memory.scope != MemoryScope.PERSONAL:
            skipped += 1
            continue
        grantees = [a for a in agent_ids if a != memory.agent_id]
        if not grantees:
            skipped += 1
            continue
        try:
            memory_share(memory=memory, agent_ids=grantees, permission=permission)
        except NotFound:  # deleted since the selection was read
            gone += 1
            continue
        done += 1
    return BulkResult(done=done, skipped=skipped, gone=gone)


# --- episodic memory: past cases, found again by the task ---------------------------------------

EPISODE_CATEGORY = "episode"


def episode_create(
    *,
    team: Team,
    agent_id: str,
    task: str,
    outcome: str,
    steps: list[str],
    lesson: str,
    importance: float = 0.5,
    run_id: str = "",
    metadata: dict[str, Any] | None = None,
) -> Memory:
    """An episode is a personal memory whose content is the task (what a later search by a
    similar task matches) and whose metadata holds how it went. Every episode is kept: two runs
    of the same task are two cases, so dedup does not apply."""
    memory, _ = memory_create(
        team=team,
        scope=MemoryScope.PERSONAL,
        agent_id=agent_id,
        content=task,
        importance=importance,
        category=EPISODE_CATEGORY,
        metadata={
            **(metadata or {}),
            "kind": "episode",
            "outcome": outcome,
            "steps": steps,
            "lesson": lesson,
        },
        enable_dedup=False,
        run_id=run_id,
    )
    return memory


# --- procedural memory: the agent's own rules ------------------------------------------------------

# An agent's rules, whatever their status. Agents read their active rules into every prompt, and
# an add compares the new text with each of them (`procedure_add`): a handful to a few dozen is
# the use; an agent adding a rule per turn would grow both without bound. Rejected proposals
# count (they are kept so that the lifecycle does not propose them again).
MAX_RULES_PER_AGENT = 200


def procedure_create(
    *,
    team: Team,
    agent_id: str,
    rule: str,
    source: str,
    status: str = ProcedureStatus.ACTIVE,
    evidence: list[int] | None = None,
    actor: Actor | None = None,
) -> Procedure:
    """Under the agent's personal-scope lock: the lifecycle's proposals (which check the agent's
    rules before adding one) and an import of the agent's rules (which meets a rule already here
    by its text) take it too, so a rule created meanwhile is one they see, not one they add
    again."""
    agent_ensure(team=team, agent_id=agent_id)
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        return _procedure_insert(
            team=team,
            agent_id=agent_id,
            rule=rule,
            source=source,
            status=status,
            evidence=evidence,
            actor=actor or Actor(),
        )


def _procedure_insert(
    *,
    team: Team,
    agent_id: str,
    rule: str,
    source: str,
    status: str,
    evidence: list[int] | None,
    actor: Actor,
) -> Procedure:
    procedure = Procedure.objects.create(
        team=team,
        agent_id=agent_id,
        rule=rule,
        status=status,
        source=source,
        evidence=list(evidence or []),
    )
    _procedure_changed(procedure, ProcedureChange.ADDED, actor)
    return procedure


def _procedure_changed(
    procedure: Procedure,
    change: str,
    actor: Actor,
    *,
    rule_before: str = "",
    status_before: str = "",
) -> None:
    """Records a change of the rule in its history, in the transaction that makes it."""
    ProcedureRevision.objects.create(
        team_id=procedure.team_id,
        agent_id=procedure.agent_id,
        procedure_id=procedure.pk,
        change=change,
        rule=procedure.rule,
        rule_before=rule_before,
        status=procedure.status,
        status_before=status_before,
        by=actor.label[:200],
    )


def procedure_add(
    *, team: Team, agent_id: str, rule: str, source: str, actor: Actor
) -> tuple[Procedure, bool]:
    """A rule an agent or a lead adds (the API's POST); True when it is new. A rule the agent
    already has with the same text (`text.normalise`: case, width and spacing aside, as a memory's
    exact duplicate) is that rule, not a second one: agents restate their rules from session to
    session, and each copy would be followed, listed and exported again. Adding it is a decision
    to follow it, so a proposed or rejected one becomes active (what a PUT of the status would
    do). Decided under the agent's lock, which whatever adds a rule or changes its text takes
    (this, an edit, the lifecycle's proposals, an import): two adds of one rule at once leave
    one. A new rule past MAX_RULES_PER_AGENT is refused (ValidationFailed); a rule met is not
    new, so restating one is answered however many the agent holds."""
    agent_ensure(team=team, agent_id=agent_id)
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        same = _procedure_of_text(team_id=team.id, agent_id=agent_id, rule=rule)
        if same is None:
            _procedure_room_check(team=team, agent_id=agent_id)
            new = _procedure_insert(
                team=team,
                agent_id=agent_id,
                rule=rule,
                source=source,
                status=ProcedureStatus.ACTIVE,
                evidence=None,
                actor=actor,
            )
            return new, True
        if same.status != ProcedureStatus.ACTIVE:
            before = same.status
            same.save(update_fields=assign_given(same, status=ProcedureStatus.ACTIVE))
            _procedure_changed(same, ProcedureChange.CHANGED, actor, status_before=before)
        return same, False


def procedure_room(*, team: Team, agent_id: str) -> int:
    """How many more rules the agent may be given (MAX_RULES_PER_AGENT); read in the agent's
    lock by whatever adds one."""
    held = Procedure.objects.filter(team=team, agent_id=agent_id).count()
    return max(MAX_RULES_PER_AGENT - held, 0)


def _procedure_room_check(*, team: Team, agent_id: str) -> None:
    if procedure_room(team=team, agent_id=agent_id) == 0:
        raise ValidationFailed(
            {
                "rule": [
                    f"An agent holds at most {MAX_RULES_PER_AGENT} rules: remove one it no longer "
                    "follows first."
                ]
            },
            "rule: too many rules",
        )


def _procedure_of_text(
    *, team_id: str, agent_id: str, rule: str, other_than: int | None = None
) -> Procedure | None:
    """The agent's rule saying `rule` (`text.normalise`), oldest first; in the agent's lock.
    The rows read are locked: an edit or a delete of that rule (which take only its row) waits
    for the caller's answer, so the rule answered is the rule as it is."""
    wanted = normalise(rule)
    rows = Procedure.objects.select_for_update().filter(team_id=team_id, agent_id=agent_id)
    if other_than is not None:
        rows = rows.exclude(pk=other_than)
    return next((p for p in rows.order_by("id") if normalise(p.rule) == wanted), None)


class RuleExists(DomainError):
    """An edit would give an agent two rules of one text (409): `other_id` is the rule that
    already says it."""

    def __init__(self, other_id: int) -> None:
        super().__init__(
            ErrorCode.CONFLICT,
            f"this agent already has this rule (id {other_id})",
            details={"rule": [f"the same text as rule {other_id}"]},
        )
        self.other_id = other_id


def procedure_update(
    *, procedure: Procedure, actor: Actor, rule: str | None = None, status: str | None = None
) -> Procedure:
    """Edits a rule, or accepts (`active`) / rejects a proposal.

    Writes only the fields given, on the row read afresh under its lock: an agent editing a
    rule's text while a lead decides on it keeps both changes (each request wrote back the
    other's field as it had read it, so one change was lost). NotFound when another request
    removed the rule after the caller read it.

    A new text another rule of the agent already says is refused (RuleExists), as an add of it
    would meet that rule: two copies would both be followed, listed and exported. That check
    runs under the agent's lock, which every add takes, so an add and an edit to one text at
    once cannot leave two rules either; a status alone takes only the row."""
    if rule is None:
        with transaction.atomic():
            locked = _procedure_locked(procedure)
            _procedure_save(locked, actor, rule=None, status=status)
        return locked
    with locks.agent_locked(team_id=procedure.team_id, agent_id=procedure.agent_id):
        locked = _procedure_locked(procedure)
        same = _procedure_of_text(
            team_id=procedure.team_id, agent_id=procedure.agent_id, rule=rule, other_than=locked.pk
        )
        if same is not None:
            raise RuleExists(same.pk)
        _procedure_save(locked, actor, rule=rule, status=status)
    return locked


def _procedure_save(
    procedure: Procedure, actor: Actor, *, rule: str | None, status: str | None
) -> None:
    """Writes the fields given on the locked row; a change of either goes to its history (an
    edit that changes nothing writes no revision)."""
    rule_before, status_before = procedure.rule, procedure.status
    procedure.save(update_fields=assign_given(procedure, rule=rule, status=status))
    if (procedure.rule, procedure.status) != (rule_before, status_before):
        _procedure_changed(
            procedure,
            ProcedureChange.CHANGED,
            actor,
            rule_before=rule_before if procedure.rule != rule_before else "",
            status_before=status_before if procedure.status != status_before else "",
        )


def _procedure_locked(procedure: Procedure) -> Procedure:
    locked = Procedure.objects.select_for_update().filter(pk=procedure.pk).first()
    if locked is None:
        raise NotFound("procedure")
    return locked


def procedure_delete(*, procedure: Procedure, actor: Actor) -> None:
    """NotFound when another request removed it first (its DELETE answered; this one did not
    delete anything). Its history keeps the text it had when removed."""
    with transaction.atomic():
        locked = _procedure_locked(procedure)
        locked.delete()
        locked.pk = procedure.pk  # Django clears it on delete; the history names the rule
        _procedure_changed(locked, ProcedureChange.REMOVED, actor)


def procedure_restore(
    *, team: Team, agent_id: str, procedure_id: int, source: str, actor: Actor
) -> Procedure:
    """Brings back a removed rule of the agent: its id, the last text and status its history
    kept; its source is who restores it (the history says who wrote it first), and a proposal's
    evidence is not kept. Refused as an add of that text would be: 409 (RuleExists) when another
    rule of the agent says it now, 400 when the agent has no room. NotFound when the agent never
    had that rule — another team's or agent's id included; CONFLICT when it is not removed
    (restored already). Under the agent's lock, as every add: two restores of one rule at once
    restore it once, and a restore and an add of its text at once leave one rule."""
    history = ProcedureRevision.objects.filter(
        team=team, agent_id=agent_id, procedure_id=procedure_id
    ).order_by("-id")
    if not history.exists():
        # Never this agent's rule (another team's or agent's id too): nothing is locked or made.
        raise NotFound("removed procedure")
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        last = history.first()
        if Procedure.objects.filter(team=team, agent_id=agent_id, pk=procedure_id).exists():
            raise DomainError(ErrorCode.CONFLICT, f"rule {procedure_id} is not removed")
        if last is None or last.change != ProcedureChange.REMOVED:
            # Its removal is not in its history: removed before history was kept.
            raise NotFound("removed procedure")
        same = _procedure_of_text(team_id=team.id, agent_id=agent_id, rule=last.rule)
        if same is not None:
            raise RuleExists(same.pk)
        _procedure_room_check(team=team, agent_id=agent_id)
        # Its own id again, so the history, the console's links and the agent's notes still name
        # it: ids are not reused (AUTOINCREMENT on SQLite, InnoDB's persisted counter). Should
        # one be taken all the same (a database restored from a dump without its counters), the
        # rule comes back under a new id rather than failing the restore.
        columns = {
            "team": team,
            "agent_id": agent_id,
            "rule": last.rule,
            "status": last.status,
            "source": source,
            "evidence": [],
        }
        try:
            with transaction.atomic():
                procedure = Procedure.objects.create(pk=procedure_id, **columns)
        except IntegrityError:
            procedure = Procedure.objects.create(**columns)
        _procedure_changed(procedure, ProcedureChange.RESTORED, actor)
    return procedure


# --- the agent profile (memories.profile has its keys, values and classifier) -------------------

# Values a person or an agent set on purpose: extraction and ingest leave them alone.
_AUTHORITATIVE = frozenset({ProfileSource.API, ProfileSource.CONSOLE})


@dataclass(frozen=True)
class ProfileChange:
    key: str
    before: str | None  # None: the key was new
    after: str | None  # None: the key was deleted


def profile_check(fields: dict[str, Any]) -> dict[str, str]:
    """The fields stripped, or ValidationFailed naming each bad one (`fields.<key>`)."""
    errors: dict[str, list[str]] = {}
    clean: dict[str, str] = {}
    for key, value in fields.items():
        problem = key_error(key) or value_error(key, value)
        if problem is not None:
            errors[f"fields.{key}"] = [problem]
        else:
            clean[key] = value.strip()
    if errors:
        raise ValidationFailed(errors, "invalid " + ", ".join(sorted(errors)))
    return clean


def _profile_locked(*, team: Team, agent_id: str, keys: list[str]) -> dict[str, ProfileField]:
    return {
        f.key: f
        for f in ProfileField.objects.select_for_update().filter(
            team=team, agent_id=agent_id, key__in=keys
        )
    }


def _profile_create(
    *, team: Team, agent_id: str, key: str, value: str, source: str, source_memory_id: int | None
) -> bool:
    """Inserts a new key; False when another write inserted it first (writers hold the scope
    lock, so only one that bypassed it could)."""
    try:
        with transaction.atomic():  # a savepoint: the outer transaction survives a lost race
            ProfileField.objects.create(
                team=team,
                agent_id=agent_id,
                key=key,
                value=value,
                source=source,
                source_memory_id=source_memory_id,
            )
    except IntegrityError:
        return False
    return True


def _profile_write(
    *,
    team: Team,
    agent_id: str,
    fields: dict[str, str],
    source: str,
    by: str,
    source_memory_id: int | None = None,
    keep_authoritative: bool = False,
) -> list[ProfileChange]:
    """Sets each key in one transaction, the rows locked: a new or changed value writes the field
    and a revision; an unchanged one no revision (a person confirming an extracted value still
    makes it theirs: its source becomes theirs). With `keep_authoritative` (extraction, ingest)
    a field set through the API or the console is left alone, and keys past the agent's limit
    are skipped rather than refused."""
    changes: list[ProfileChange] = []
    # The agent's personal-scope lock (the one its memory writes take; extraction and ingest
    # already hold it here): row locks alone deadlock when writers insert the same new key.
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        current = _profile_locked(team=team, agent_id=agent_id, keys=list(fields))
        new_keys = [k for k in fields if k not in current]
        if new_keys:
            held = ProfileField.objects.filter(team=team, agent_id=agent_id).count()
            room = max(MAX_FIELDS_PER_AGENT - held, 0)
            if len(new_keys) > room:
                if not keep_authoritative:
                    raise ValidationFailed(
                        {"fields": [f"A profile holds at most {MAX_FIELDS_PER_AGENT} keys."]},
                        "fields: too many keys",
                    )
                new_keys = new_keys[:room]
        for key, value in fields.items():
            row = current.get(key)
            if row is None:
                if key not in new_keys:
                    continue
                if _profile_create(
                    team=team,
                    agent_id=agent_id,
                    key=key,
                    value=value,
                    source=source,
                    source_memory_id=source_memory_id,
                ):
                    changes.append(ProfileChange(key, None, value))
                    continue
                row = _profile_locked(team=team, agent_id=agent_id, keys=[key])[key]
            if keep_authoritative and row.source in _AUTHORITATIVE:
                continue
            if row.value == value:
                if not keep_authoritative and row.source != source:
                    row.source, row.source_memory_id = source, source_memory_id
                    row.save(update_fields=["source", "source_memory_id", "updated_at"])
                continue
            changes.append(ProfileChange(key, row.value, value))
            row.value, row.source, row.source_memory_id = value, source, source_memory_id
            row.save(update_fields=["value", "source", "source_memory_id", "updated_at"])
        ProfileRevision.objects.bulk_create(
            [
                ProfileRevision(
                    team=team,
                    agent_id=agent_id,
                    key=c.key,
                    before=c.before or "",
                    after=c.after or "",
                    source=source,
                    source_memory_id=source_memory_id,
                    by=by,
                )
                for c in changes
            ]
        )
    return changes


def profile_set(
    *,
    team: Team,
    agent_id: str,
    fields: dict[str, Any],
    actor: Actor,
    source: str = ProfileSource.API,
) -> list[ProfileChange]:
    """Overwrites the given keys (others untouched); the changes, one revision each."""
    clean = profile_check(fields)
    agent_ensure(team=team, agent_id=agent_id)
    return _profile_write(team=team, agent_id=agent_id, fields=clean, source=source, by=actor.label)


def profile_field_delete(
    *, team: Team, agent_id: str, key: str, actor: Actor, source: str = ProfileSource.API
) -> ProfileChange:
    """Removes one key (its history stays); NotFound when the agent has no such key."""
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        row = _profile_locked(team=team, agent_id=agent_id, keys=[key]).get(key)
        if row is None:
            raise NotFound("profile field")
        row.delete()
        change = ProfileChange(key, row.value, None)
        ProfileRevision.objects.create(
            team=team,
            agent_id=agent_id,
            key=key,
            before=row.value,
            after="",
            source=source,
            by=actor.label,
        )
    return change


def profile_learn(
    *,
    team: Team,
    agent_id: str,
    fields: dict[str, str],
    source: str,
    source_memory_id: int | None,
    actor: Actor,
) -> dict[str, str]:
    """What the lifecycle read from a fact (`memories.profile.profile_fields_in`): written
    unless a person or an agent set that key (source api / console). The keys it changed."""
    valid = {k: v.strip() for k, v in fields.items() if not (key_error(k) or value_error(k, v))}
    if not valid:
        return {}
    changes = _profile_write(
        team=team,
        agent_id=agent_id,
        fields=valid,
        source=source,
        by=actor.label,
        source_memory_id=source_memory_id,
        keep_authoritative=True,
    )
    return {c.key: c.after for c in changes if c.after is not None}
