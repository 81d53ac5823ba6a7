"""The Milvus search backend (`SEARCH_BACKEND=milvus`; docs/search.md, "Search backends").

The engine generates candidates; the platform scores them. One collection per embedding model
and dimension holds, per memory that everyday search sees (not superseded, not cold): its id,
`team_id` (the partition key), `scope_key`, created time, CJK flag, token count, the normalised
dense embedding, a sparse vector built from the platform's own tokens (text.tokenize: jieba for
Chinese, stemmed words otherwise; term -> crc32, value = BM25 tf saturation) and the same term
hashes as an array (scope-wide document frequencies by `count(*)`).

A search asks the engine for the dense top-k and the sparse top-k of the scope (k = max(want,
SEARCH_CANDIDATES)), adds the memories changed since the shipped cursor (read-your-writes), their
conversation neighbours from the database, and scores all of them exactly from their rows with
the in-process code (a `ScopeIndex` of just those rows, its BM25 reading the scope's counts from
the engine: index.ScopeStats). So `score`, `min_score` and the order mean what they mean on the
local backend.

Tenancy: every engine query is built by `Engine` in this module, and each one carries the team
(`_team_filter` raises before anything reaches the engine when it is missing).

Writes go to the database and the `IndexChange` log as on the local backend; `ship_changes`
(the `memories.ship_search_changes` task) sends them to the engine in log order and moves the
`SearchCursor`. The engine being down never fails a write: the log keeps the changes.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from memories.models import IndexChange, Memory, MemoryScope, MemoryTier, SearchCursor

from . import gloss
from .candidates import Candidate, _top_candidates
from .embeddings import from_bytes, get_embedder
from .index import Row, ScopeIndex, ScopeStats, scope_key
from .text import is_cjk, tokenize, tokens_from_storage

logger = logging.getLogger(__name__)

CURSOR = "milvus"
# Term hashes kept per memory for document frequencies (the engine's array capacity).
MAX_TERMS = 4096
# A filtered search with at most this many allowed memories scores all of them from the
# database (exact) instead of filtering the engine's top-k afterwards.
FILTERED_EXACT_MAX = 5000
# Document frequencies: at most this many memories' term lists read in one query (_scope_stats).
HOLDERS_MAX = 10000
# Key 0 of a sparse vector marks "no words" (the engine refuses an empty sparse vector); no
# query asks for it.
EMPTY_TERM = 0
# Milvus' error code for "collection not loaded" (a query on a released collection).
NOT_LOADED = 101


class EngineDown(Exception):
    """The engine could not be reached or answered with an error."""


class TenancyError(RuntimeError):
    """An engine query without its team: refused before it reaches the engine."""


def term_hash(term: str) -> int:
    """A term's stable 32-bit key in the sparse vectors (0 is reserved: EMPTY_TERM)."""
    return zlib.crc32(term.encode("utf-8")) or 1


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _team_filter(team_id: str, key: str | None = None, extra: str = "") -> str:
    """The filter of every engine query: the team, and the scope when given.

    The only place a filter is made, so no query can leave the team out."""
    if not team_id or not isinstance(team_id, str):
        raise TenancyError("an engine query without team_id")
    parts = [f"team_id == {_quote(team_id)}"]
    if key is not None:
        if not key.startswith(team_id + "|"):
            raise TenancyError(f"scope {key!r} is not a scope of team {team_id!r}")
        parts.append(f"scope_key == {_quote(key)}")
    if extra:
        parts.append(f"({extra})")
    return " and ".join(parts)


def collection_name(model_name: str, dim: int) -> str:
    slug = re.sub(r"[^0-9a-zA-Z_]", "_", model_name)[:120]
    return f"{settings.SEARCH_MILVUS_COLLECTION}_{slug}_{dim}"


class Engine:
    """One process's connection to the engine; every query of this backend goes through it."""

    def __init__(self, uri: str, model_name: str, dim: int) -> None:
        if not uri:
            raise EngineDown("SEARCH_MILVUS_URI is not set")
        self.uri = uri
        self.dim = dim
        self.collection = collection_name(model_name, dim)
        self._client: Any = None
        self._ready = False
        self._lock = threading.Lock()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return fn(*args, timeout=settings.SEARCH_MILVUS_TIMEOUT, **kwargs)
            except Exception as exc:
                if getattr(exc, "code", None) != NOT_LOADED or self._client is None:
                    raise
                # A restarted engine holds the collection released (milvus-lite's server
                # always does): load it and ask again, rather than failing every call until
                # this process restarts. Loading a loaded collection is a no-op.
                logger.warning("search engine collection not loaded, loading it: %s", exc)
                self._client.load_collection(
                    self.collection, timeout=settings.SEARCH_MILVUS_TIMEOUT
                )
                return fn(*args, timeout=settings.SEARCH_MILVUS_TIMEOUT, **kwargs)
        except TenancyError:
            raise
        except Exception as exc:  # pymilvus raises MilvusException and grpc errors alike
            raise EngineDown(f"{what}: {exc}") from exc

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    from pymilvus import MilvusClient
                except ImportError as exc:  # the optional extra is not installed
                    raise EngineDown("pymilvus is not installed (pip install '.[milvus]')") from exc
                try:
                    self._client = MilvusClient(
                        uri=self.uri,
                        token=settings.SEARCH_MILVUS_TOKEN,
                        timeout=settings.SEARCH_MILVUS_TIMEOUT,
                    )
                except Exception as exc:
                    raise EngineDown(f"connect {self.uri}: {exc}") from exc
            client = self._client
        if not self._ready:
            self._ensure_collection(client)
            self._ready = True
        return client

    def _ensure_collection(self, client: Any) -> None:
        from pymilvus import DataType

        if self._call("has_collection", client.has_collection, self.collection):
            return
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        # Partition key: a team's rows sit together, and every query filters on it anyway.
        schema.add_field("team_id", DataType.VARCHAR, max_length=64, is_partition_key=True)
        schema.add_field("scope_key", DataType.VARCHAR, max_length=160)
        schema.add_field("created", DataType.DOUBLE)
        schema.add_field("cjk", DataType.BOOL)
        schema.add_field("doc_len", DataType.INT64)
        schema.add_field(
            "terms", DataType.ARRAY, element_type=DataType.INT64, max_capacity=MAX_TERMS
        )
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self.dim)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        params = client.prepare_index_params()
        # Exact (FLAT) inner product: the candidates must be the true dense top-k; an ANN index
        # (HNSW, IVF) is a one-line change here for a server deployment at scale.
        params.add_index("dense", index_type="FLAT", metric_type="IP")
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        self._call(
            "create_collection",
            client.create_collection,
            self.collection,
            schema=schema,
            index_params=params,
        )

    # --- reads (each with the team's filter) ---------------------------------------------------

    def dense_top(self, team_id: str, key: str, vec: np.ndarray, k: int) -> list[tuple[int, float]]:
        where = _team_filter(team_id, key)  # before anything reaches the engine
        client = self.client()
        found = self._call(
            "search dense",
            client.search,
            self.collection,
            data=[np.asarray(vec, dtype=np.float32).tolist()],
            anns_field="dense",
            limit=k,
            filter=where,
            output_fields=["id"],
            search_params={"metric_type": "IP"},
        )
        return [(int(hit["id"]), float(hit["distance"])) for hit in found[0]]

    def sparse_top(
        self,
        team_id: str,
        key: str,
        weights: dict[int, float],
        k: int,
        cjk: bool | None = None,
    ) -> list[int]:
        extra = "" if cjk is None else f"cjk == {'true' if cjk else 'false'}"
        where = _team_filter(team_id, key, extra)
        if not weights:
            return []
        client = self.client()
        found = self._call(
            "search sparse",
            client.search,
            self.collection,
            data=[weights],
            anns_field="sparse",
            limit=k,
            filter=where,
            output_fields=["id"],
            search_params={"metric_type": "IP"},
        )
        return [int(hit["id"]) for hit in found[0]]

    def count(self, team_id: str, key: str, extra: str = "") -> int:
        where = _team_filter(team_id, key, extra)
        client = self.client()
        rows = self._call(
            "count",
            client.query,
            self.collection,
            filter=where,
            output_fields=["count(*)"],
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def rows(self, team_id: str, key: str, ids: Iterable[int]) -> list[dict[str, Any]]:
        """The engine's own (doc_len, terms, cjk) of the given memories of the scope."""
        id_list = sorted(set(ids))
        out: list[dict[str, Any]] = []
        for start in range(0, len(id_list), 1000):
            part = id_list[start : start + 1000]
            where = _team_filter(team_id, key, f"id in {part}")
            client = self.client()
            out.extend(
                self._call(
                    "query",
                    client.query,
                    self.collection,
                    filter=where,
                    output_fields=["id", "doc_len", "terms", "cjk"],
                    limit=len(part),
                )
            )
        return out

    def holders(
        self, team_id: str, key: str, hashes: set[int], limit: int
    ) -> list[dict[str, Any]] | None:
        """(terms, cjk) of the scope's memories holding any of `hashes`; None past `limit`."""
        where = _team_filter(team_id, key, f"array_contains_any(terms, {sorted(hashes)})")
        client = self.client()
        rows = self._call(
            "query",
            client.query,
            self.collection,
            filter=where,
            output_fields=["terms", "cjk"],
            limit=limit + 1,
        )
        return None if len(rows) > limit else list(rows)

    def doc_lens(self, team_id: str, key: str) -> Iterator[tuple[int, bool]]:
        where = _team_filter(team_id, key)
        client = self.client()
        it = self._call(
            "query_iterator",
            client.query_iterator,
            self.collection,
            batch_size=5000,
            filter=where,
            output_fields=["doc_len", "cjk"],
        )
        try:
            while True:
                try:
                    batch = it.next()
                except Exception as exc:
                    raise EngineDown(f"query_iterator: {exc}") from exc
                if not batch:
                    return
                for row in batch:
                    yield int(row["doc_len"]), bool(row["cjk"])
        finally:
            it.close()

    # --- writes ----------------------------------------------------------------------------------

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            _team_filter(row["team_id"], row["scope_key"])  # same guard as the reads
        if rows:
            client = self.client()
            self._call("upsert", client.upsert, self.collection, rows)

    def delete(self, team_id: str, ids: Iterable[int]) -> None:
        ids = sorted(set(ids))
        where = _team_filter(team_id, extra=f"id in {ids}")
        if ids:
            client = self.client()
            self._call("delete", client.delete, self.collection, filter=where)

    def delete_team(self, team_id: str) -> None:
        where = _team_filter(team_id)
        client = self.client()
        self._call("delete", client.delete, self.collection, filter=where)

    def drop_collection(self) -> None:
        client = self.client()
        self._call("drop_collection", client.drop_collection, self.collection)
        self._ready = False


_engines: dict[tuple[str, str, int], Engine] = {}
_engines_lock = threading.Lock()


def engine() -> Engine:
    """The engine of the configured URI and the current embedding model (one per process)."""
    embedder = get_embedder()
    key = (settings.SEARCH_MILVUS_URI, embedder.model_name, embedder.dim)
    with _engines_lock:
        eng = _engines.get(key)
        if eng is None:
            eng = _engines[key] = Engine(*key)
        return eng


def reset_engines() -> None:
    """Forgets the process's connections (tests point each at its own milvus-lite file)."""
    with _engines_lock:
        _engines.clear()
    _totals.clear()


# --- rows -> engine rows -------------------------------------------------------------------------


def _engine_row(
    *,
    mid: int,
    team_id: str,
    key: str,
    content: str,
    embedding: Any,
    model: str,
    stored: str,
    created: float,
    model_name: str,
    dim: int,
) -> dict[str, Any]:
    tokens = tokens_from_storage(stored or "") or tokenize(content)
    counts = Counter(term_hash(t) for t in tokens)
    k1 = settings.SEARCH_BM25_K1
    # BM25's tf saturation without the length part (the scope's average length is not known at
    # write time): good for candidates; the exact score is the platform's own.
    sparse = {h: float(tf * (k1 + 1) / (tf + k1)) for h, tf in counts.items()}
    vec = np.zeros(dim, dtype=np.float32)
    if embedding and model == model_name:
        got = from_bytes(embedding)
        if got.shape[0] == dim:
            vec = got
    return {
        "id": mid,
        "team_id": team_id,
        "scope_key": key,
        "created": created,
        "cjk": is_cjk(content),
        "doc_len": len(tokens),
        "terms": sorted(counts)[:MAX_TERMS],
        "dense": vec.tolist(),
        "sparse": sparse or {EMPTY_TERM: 1e-6},
    }


ROW_FIELDS = (
    "id",
    "team_id",
    "scope",
    "agent_id",
    "content",
    "embedding",
    "embedding_model",
    "search_tokens",
    "created_at",
    "tier",
    "superseded_by_id",
)


def _visible(tier: str, superseded_by: Any) -> bool:
    """In everyday search (so in the engine): not superseded, not cold."""
    return superseded_by is None and tier != MemoryTier.COLD


def engine_rows(values: Iterable[tuple[Any, ...]], eng: Engine) -> list[dict[str, Any]]:
    """Engine rows of `Memory` values in ROW_FIELDS order (the visible ones only)."""
    model_name = get_embedder().model_name
    out = []
    for mid, team_id, scope, agent_id, content, emb, model, stored, created, tier, sup in values:
        if not _visible(tier, sup):
            continue
        out.append(
            _engine_row(
                mid=mid,
                team_id=team_id,
                key=scope_key(team_id, scope, agent_id),
                content=content,
                embedding=emb,
                model=model,
                stored=stored,
                created=created.timestamp(),
                model_name=model_name,
                dim=eng.dim,
            )
        )
    return out


# --- the outbox ----------------------------------------------------------------------------------

_ship_lock = threading.Lock()


def shipped_cursor() -> int:
    return (
        SearchCursor.objects.filter(name=CURSOR).values_list("last_change_id", flat=True).first()
        or 0
    )


def ship_changes(*, limit: int = 5000) -> int:
    """Sends the change log past the cursor to the engine; returns how many changes it sent.

    Idempotent: each changed memory is written (or deleted) as its current database row says, so
    sending a change twice is harmless. The cursor advances only to the highest change old
    enough that every lower id has committed (INDEX_CHANGE_SETTLE_SECONDS, as in index.py); the
    younger ones are sent again next time. One shipper at a time (the cursor row is locked; a
    process lock too, for SQLite), so a memory's states reach the engine in order. Engine down:
    nothing moves, the log keeps the changes, and 0 is returned (a write must never fail).
    """
    eng = engine()
    with _ship_lock, transaction.atomic():
        SearchCursor.objects.get_or_create(name=CURSOR)
        cursor = SearchCursor.objects.select_for_update().get(name=CURSOR)
        settled_before = timezone.now() - timedelta(seconds=settings.INDEX_CHANGE_SETTLE_SECONDS)
        changes = list(
            IndexChange.objects.filter(id__gt=cursor.last_change_id)
            .order_by("id")
            .values_list("id", "team_id", "memory_id", "created_at")[:limit]
        )
        if not changes:
            return 0
        final: dict[int, str] = {}  # memory id -> team id (the latest change of each wins)
        for _, team_id, mid, _ in changes:
            final[mid] = team_id
        values = Memory.objects.filter(pk__in=list(final)).values_list(*ROW_FIELDS)
        rows = {v[0]: v for v in values}
        upserts = engine_rows(rows.values(), eng)
        gone: dict[str, list[int]] = {}
        for mid, team_id in final.items():
            row = rows.get(mid)
            if row is None or row[1] != team_id or not _visible(row[9], row[10]):
                gone.setdefault(team_id, []).append(mid)
        try:
            for team_id, ids in gone.items():
                eng.delete(team_id, ids)
            for start in range(0, len(upserts), 500):
                eng.upsert(upserts[start : start + 500])
        except EngineDown as exc:
            logger.warning("search engine unreachable, %d changes wait: %s", len(changes), exc)
            return 0
        settled = [cid for cid, _, _, created in changes if created < settled_before]
        if settled:
            cursor.last_change_id = max(settled)
            cursor.save(update_fields=["last_change_id", "updated_at"])
    return len(changes)


# --- the backend --------------------------------------------------------------------------------


def _scope_rows(team_id: str, scope: str, agent_id: str) -> QuerySet[Memory]:
    """The database rows the engine holds for a scope (what the local index loads)."""
    qs = Memory.objects.filter(team_id=team_id, scope=scope, superseded_by__isnull=True).exclude(
        tier=MemoryTier.COLD
    )
    if scope == MemoryScope.PERSONAL:
        qs = qs.filter(agent_id=agent_id)
    return qs


def _unshipped(key: str) -> set[int]:
    """Memories of the scope changed after the shipped cursor: the engine may not know them yet."""
    return set(
        IndexChange.objects.filter(scope_key=key, id__gt=shipped_cursor()).values_list(
            "memory_id", flat=True
        )
    )


# (uri, collection, scope key) -> (monotonic time, documents, total tokens, CJK documents) of
# the last scan of the scope
_totals: dict[tuple[str, str, str], tuple[float, int, float, int]] = {}


def _scope_totals(eng: Engine, team_id: str, key: str) -> tuple[int, float, int]:
    """The scope's document count (exact: one count query), total length (BM25's avgdl) and
    number of CJK documents (the dictionary bridge's idf).

    The last two need a scan of the scope's rows: their shares of the count are reused for
    SEARCH_MILVUS_STATS_SECONDS while the count stays within 10 % of the scanned one."""
    n = eng.count(team_id, key)
    cache_key = (eng.uri, eng.collection, key)
    hit = _totals.get(cache_key)
    now = time.monotonic()
    if (
        hit is not None
        and hit[1] > 0
        and now - hit[0] < settings.SEARCH_MILVUS_STATS_SECONDS
        and abs(n - hit[1]) <= 0.1 * hit[1]
    ):
        return n, n * hit[2] / hit[1], round(n * hit[3] / hit[1])
    scanned = cjk = 0
    total = 0.0
    for length, is_cjk_row in eng.doc_lens(team_id, key):
        scanned += 1
        total += length
        cjk += is_cjk_row
    if len(_totals) >= 10000:  # bounded: a process serving many scopes rescans the rare ones
        _totals.clear()
    _totals[cache_key] = (now, scanned, total, cjk)
    return scanned, total, cjk


def _scope_stats(
    eng: Engine,
    team_id: str,
    key: str,
    tokens: tuple[str, ...],
    alternatives: tuple[frozenset[str], ...],
    other_cjk: bool,
) -> ScopeStats:
    """BM25's statistics of the scope for one query: size, total length, each token's document
    frequency, and the dictionary bridge's counts over the other script.

    The frequencies come from one query returning the term lists of the memories holding any
    of the words (an engine round trip costs far more than counting a few thousand lists
    here); past HOLDERS_MAX such memories, one count query per word instead."""
    n_docs, total_len, n_cjk = _scope_totals(eng, team_id, key)
    stats = ScopeStats(n_docs, total_len, dict.fromkeys(tokens, 0))
    if alternatives:
        stats.bridge_target = n_cjk if other_cjk else n_docs - n_cjk
        stats.bridge_held = dict.fromkeys(alternatives, 0)
    hashes = {tok: term_hash(tok) for tok in tokens}
    alt_hashes = {alt: {term_hash(t) for t in alt} for alt in alternatives}
    wanted = set(hashes.values()).union(*alt_hashes.values())
    if not wanted:
        return stats
    rows = eng.holders(team_id, key, wanted, HOLDERS_MAX)
    if rows is not None:
        for row in rows:
            terms = set(row["terms"])
            for tok, h in hashes.items():
                stats.df[tok] += h in terms
            if stats.bridge_held is not None and bool(row["cjk"]) == other_cjk:
                for alt, hs in alt_hashes.items():
                    stats.bridge_held[alt] += bool(hs & terms)
        return stats
    for tok, h in hashes.items():
        stats.df[tok] = eng.count(team_id, key, f"array_contains(terms, {h})")
    if stats.bridge_held is not None:
        other = "true" if other_cjk else "false"
        for alt in alternatives:
            stats.bridge_held[alt] = eng.count(
                team_id, key, f"cjk == {other} and array_contains_any(terms, {_hash_list(alt)})"
            )
    return stats


def _hash_list(terms: Iterable[str]) -> str:
    return str(sorted({term_hash(t) for t in terms}))


def _count_unshipped(
    eng: Engine,
    team_id: str,
    scope: str,
    agent_id: str,
    key: str,
    dirty: set[int],
    stats: ScopeStats,
    other_cjk: bool,
) -> None:
    """Corrects the engine's counts for the memories changed since the cursor: their state in
    the engine (if any) out, their state in the database (if live) in. So a scope whose writes
    the engine has not received yet (a lag, an outage) still weighs words by all of them."""
    held = stats.bridge_held or {}
    hashes = {tok: term_hash(tok) for tok in stats.df}
    alt_hashes = {terms: {term_hash(t) for t in terms} for terms in held}
    for row in eng.rows(team_id, key, dirty):
        terms = set(row["terms"])
        stats.n_docs -= 1
        stats.total_len -= int(row["doc_len"])
        for tok, h in hashes.items():
            stats.df[tok] -= h in terms
        if bool(row["cjk"]) == other_cjk:
            stats.bridge_target -= 1
            for alt, hs in alt_hashes.items():
                held[alt] -= bool(hs & terms)
    for content, stored in (
        _scope_rows(team_id, scope, agent_id)
        .filter(id__in=dirty)
        .values_list("content", "search_tokens")
    ):
        tokens = tokens_from_storage(stored or "") or tokenize(content)
        words = set(tokens)
        stats.n_docs += 1
        stats.total_len += len(tokens)
        for tok in hashes:
            stats.df[tok] += tok in words
        if is_cjk(content) == other_cjk:
            stats.bridge_target += 1
            for alt in held:
                held[alt] += bool(alt & words)
    # A cached total a little older than the engine's rows could go below zero: clamp.
    stats.n_docs = max(stats.n_docs, 0)
    stats.total_len = max(stats.total_len, 0.0)
    stats.bridge_target = max(stats.bridge_target, 0)
    for tok in stats.df:
        stats.df[tok] = max(stats.df[tok], 0)
    for alt in held:
        held[alt] = max(held[alt], 0)


class MilvusBackend:
    name = "milvus"

    # --- search --------------------------------------------------------------------------------

    def scope_candidates(
        self,
        *,
        team_id: str,
        scope: str,
        agent_id: str,
        qvec: np.ndarray | None,
        qtokens: tuple[str, ...],
        mode: str,
        want: int,
        allowed: set[int] | None,
        dense_weight: float,
        query_cjk: bool,
        with_bridge: bool,
        wait: float | None,
    ) -> list[Candidate] | None:
        """As the local backend's; raises EngineDown (backends.py answers 503 or falls back).
        `wait` is not used: nothing is loaded, every engine call is bounded by
        SEARCH_MILVUS_TIMEOUT instead."""
        eng = engine()
        key = scope_key(team_id, scope, agent_id)
        k = max(want, settings.SEARCH_CANDIDATES)
        use_dense = mode != "keyword" and qvec is not None
        use_lexical = mode != "vector" and bool(qtokens)
        bridge = (
            mode == "hybrid"
            and use_dense
            and with_bridge
            and bool(qtokens)
            and settings.SEARCH_XLING_LEXICAL_WEIGHT > 0
        )
        alternatives = gloss.alternatives(qtokens) if bridge else ()
        # The scope's BM25 statistics, from the engine (index.ScopeStats).
        stats = _scope_stats(
            eng,
            team_id,
            key,
            tuple(dict.fromkeys(qtokens)) if use_lexical else (),
            alternatives,
            not query_cjk,
        )
        dirty = _unshipped(key)
        if dirty:
            _count_unshipped(eng, team_id, scope, agent_id, key, dirty, stats, not query_cjk)

        ids: set[int] = set(dirty)  # read-your-writes: scored from their rows
        if allowed is not None and len(allowed) <= FILTERED_EXACT_MAX:
            ids |= allowed  # a narrow filter: every allowed memory, exactly
        else:
            if use_dense:
                ids.update(mid for mid, _ in eng.dense_top(team_id, key, qvec, k))  # type: ignore[arg-type]
            if use_lexical:
                n = max(stats.n_docs, 1)
                weights = {
                    # BM25's idf (positive: a term's df is at most the scope's size)
                    term_hash(t): float(np.log(1.0 + (n - min(d, n) + 0.5) / (min(d, n) + 0.5)))
                    for t, d in stats.df.items()
                    if d > 0
                }
                ids.update(eng.sparse_top(team_id, key, weights, k))
            if alternatives and stats.bridge_target:
                held = stats.bridge_held or {}
                weights = {}
                for terms in alternatives:
                    w = float(np.log(1.0 + stats.bridge_target / (1.0 + held.get(terms, 0))))
                    for t in terms:
                        h = term_hash(t)
                        weights[h] = max(weights.get(h, 0.0), w)
                ids.update(eng.sparse_top(team_id, key, weights, k, cjk=not query_cjk))
            if allowed is not None:
                ids &= allowed
        if not ids:
            return []
        ix = self._partial_index(team_id, scope, agent_id, key, ids, stats)
        return _top_candidates(
            ix, qvec, qtokens, mode, want, allowed, dense_weight, query_cjk, with_bridge
        )

    @staticmethod
    def _links(base: QuerySet[Memory], ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """(previous, next) memory id of the scope around each id (-1: none), one query: the
        conversation neighbours of index.py, read from the database."""
        prev_q = base.filter(id__lt=OuterRef("id")).order_by("-id").values("id")[:1]
        next_q = base.filter(id__gt=OuterRef("id")).order_by("id").values("id")[:1]
        out: dict[int, tuple[int, int]] = {}
        id_list = list(ids)
        for start in range(0, len(id_list), 1000):
            rows = (
                base.filter(id__in=id_list[start : start + 1000])
                .annotate(prev=Subquery(prev_q), next=Subquery(next_q))
                .values_list("id", "prev", "next")
            )
            for mid, prev, nxt in rows:
                out[mid] = (prev if prev is not None else -1, nxt if nxt is not None else -1)
        return out

    def _partial_index(
        self,
        team_id: str,
        scope: str,
        agent_id: str,
        key: str,
        ids: set[int],
        stats: ScopeStats,
    ) -> ScopeIndex:
        """A ScopeIndex of the candidates, their neighbours and the previous neighbours of
        those (whose words are a neighbour's context), linked as in the scope."""
        embedder = get_embedder()
        base = _scope_rows(team_id, scope, agent_id)
        links = self._links(base, ids)
        first = {n for pair in links.values() for n in pair if n >= 0} - set(links)
        links.update(self._links(base, first))
        context = {links[m][0] for m in first if m in links and links[m][0] >= 0} - set(links)
        wanted = set(links) | context
        ix = ScopeIndex(key, embedder.dim, embedder.model_name, codec="fp16", stats=stats)
        rows = (
            base.filter(id__in=sorted(wanted))
            .order_by("id")
            .values_list(
                "id", "content", "embedding", "embedding_model", "search_tokens", "created_at"
            )
        )
        with ix.lock:
            batch = [
                Row(mid, content, emb, model, False, stored, created.timestamp())
                for mid, content, emb, model, stored, created in rows.iterator(chunk_size=2000)
            ]
            ix._grow(len(batch))
            ix.upsert_many(batch)
            # The scope's own links, not those of this subset's id order.
            ix.prev_of[: ix.n] = -1
            ix.next_of[: ix.n] = -1
            for mid, (prev, nxt) in links.items():
                slot = ix.slot_of.get(mid)
                if slot is None:
                    continue
                ix.prev_of[slot] = ix.slot_of.get(prev, -1)
                ix.next_of[slot] = ix.slot_of.get(nxt, -1)
            ix.links_exact = True
        return ix

    # --- dedup ---------------------------------------------------------------------------------

    def nearest(
        self, *, team_id: str, scope: str, agent_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """The engine's dense top-k, with the memories changed since the cursor read from
        their rows (a just-written memory is a duplicate candidate at once). Engine down: the
        changed rows only are not enough to find a duplicate, so the write goes ahead without
        near-duplicate detection (exact duplicates are still caught by the database)."""
        key = scope_key(team_id, scope, agent_id)
        dirty = _unshipped(key)
        found: dict[int, float] = {}
        try:
            for mid, raw in engine().dense_top(team_id, key, vector, k):
                if mid not in dirty:
                    found[mid] = raw
        except EngineDown as exc:
            logger.warning("search engine unreachable, near-duplicate check skipped: %s", exc)
        if dirty:
            model = get_embedder().model_name
            for mid, emb, emb_model in (
                _scope_rows(team_id, scope, agent_id)
                .filter(id__in=dirty)
                .values_list("id", "embedding", "embedding_model")
            ):
                if emb and emb_model == model:
                    vec = from_bytes(emb)
                    if vec.shape == vector.shape:
                        found[mid] = float(vec @ vector.astype(np.float32))
        return sorted(found.items(), key=lambda pair: -pair[1])[:k]

    def warm(self, *, team_id: str, scope: str, agent_id: str) -> None:
        return None  # nothing held in the process

    def stale(self, *, team_id: str, scope: str, agent_id: str) -> None:
        # The engine returned a memory the database no longer confirms: the rescoring reads
        # rows, so it never reached a result; the shipper's next pass corrects the engine.
        return None

    def purge_team(self, team_id: str) -> None:
        try:
            engine().delete_team(team_id)
        except EngineDown as exc:
            # Search re-reads every row from the database, so what stays behind is never
            # returned; `manage.py reindex --backend milvus` clears it.
            logger.warning("search engine unreachable, team %s left in it: %s", team_id, exc)


# --- reindex ------------------------------------------------------------------------------------


def reindex(*, team_id: str | None = None, progress: Any = None, chunk: int = 1000) -> int:
    """Rebuilds the engine's rows from the database (every team, or one); returns rows sent.

    All teams: the collection is dropped and refilled, and the cursor set to what was settled
    before the rows were read (later changes are shipped on top: replays are idempotent)."""
    eng = engine()
    settled_before = timezone.now() - timedelta(seconds=settings.INDEX_CHANGE_SETTLE_SECONDS)
    floor = (
        IndexChange.objects.filter(created_at__lt=settled_before)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    ) or 0
    if team_id is None:
        eng.drop_collection()
    else:
        eng.delete_team(team_id)
    qs = Memory.objects.filter(superseded_by__isnull=True).exclude(tier=MemoryTier.COLD)
    if team_id is not None:
        qs = qs.filter(team_id=team_id)
    sent = 0
    last = 0
    while True:
        values = list(qs.filter(id__gt=last).order_by("id").values_list(*ROW_FIELDS)[:chunk])
        if not values:
            break
        last = values[-1][0]
        eng.upsert(engine_rows(values, eng))
        sent += len(values)
        if progress is not None:
            progress.advance(len(values))
    if team_id is None:
        SearchCursor.objects.update_or_create(name=CURSOR, defaults={"last_change_id": floor})
    _totals.clear()
    return sent
