"""Per-scope in-process search index: a float32 vector matrix plus a BM25 inverted index.

A *scope* is what one search looks at: a team's team memories, or one agent's personal
memories (`scope_key`). Each process keeps the scopes it has searched, loaded lazily from the
database (the source of truth) and evicted least-recently-used beyond `INDEX_MEMORY_BUDGET_MB`.

Consistency across processes: every write appends an `IndexChange` row in the same transaction
as the memory. Before answering, an index reads the newer change rows of its scope (one indexed
query, usually empty) and applies them, so a write committed by any worker is visible to the
next search in every worker, and a deleted or updated memory can never come back stale. Change
rows older than `INDEX_CHANGE_RETENTION_SECONDS` are pruned by a maintenance task; an index that
has not synced for half that long reloads from scratch instead of trusting the log.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from .embeddings import Embedder, from_bytes
from .models import IndexChange, Memory
from .text import tokenize

logger = logging.getLogger(__name__)

BM25_K1 = 1.2
BM25_B = 0.75


def scope_key(team_id: str, scope: str, agent_id: str = "") -> str:
    # Team ids and agent ids never contain "|" (their validators), so keys cannot collide.
    return f"{team_id}|{scope}|{agent_id if scope == Memory.SCOPE_PERSONAL else ''}"


@dataclass
class Row:
    id: int
    content: str
    embedding: bytes | memoryview | None
    embedding_model: str
    superseded: bool


class _Postings:
    """Growable (slot, tf) arrays for one term."""

    __slots__ = ("n", "slots", "tfs")

    def __init__(self) -> None:
        self.slots = np.empty(4, dtype=np.int32)
        self.tfs = np.empty(4, dtype=np.float32)
        self.n = 0

    def add(self, slot: int, tf: int) -> None:
        if self.n == len(self.slots):
            self.slots = np.resize(self.slots, self.n * 2)
            self.tfs = np.resize(self.tfs, self.n * 2)
        self.slots[self.n] = slot
        self.tfs[self.n] = tf
        self.n += 1

    @property
    def nbytes(self) -> int:
        return int(self.slots.nbytes + self.tfs.nbytes) + 64


class ScopeIndex:
    def __init__(self, key: str, dim: int, model_name: str) -> None:
        self.key = key
        self.dim = dim
        self.model_name = model_name
        self.lock = threading.RLock()
        self.capacity = 0
        self.n = 0  # slots used (alive or dead)
        self.ids = np.empty(0, dtype=np.int64)
        self.vecs = np.empty((0, dim), dtype=np.float32)
        self.alive = np.empty(0, dtype=bool)
        self.doc_len = np.empty(0, dtype=np.float32)
        self.slot_of: dict[int, int] = {}
        self.term_id: dict[str, int] = {}
        self.postings: list[_Postings] = []
        self.alive_count = 0
        self.alive_len = 0.0
        self.last_change_id = 0
        self.synced_at = time.monotonic()

    # --- building ----------------------------------------------------------------------------

    def _grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        # x1.25, not x2: at 100k vectors doubling would reserve 150 MB nobody uses.
        cap = max(64, int(self.capacity * 1.25), need)
        self.ids = np.resize(self.ids, cap)
        vecs = np.zeros((cap, self.dim), dtype=np.float32)
        vecs[: self.n] = self.vecs[: self.n]
        self.vecs = vecs
        alive = np.zeros(cap, dtype=bool)
        alive[: self.n] = self.alive[: self.n]
        self.alive = alive
        self.doc_len = np.resize(self.doc_len, cap)
        self.capacity = cap

    def upsert(self, row: Row) -> None:
        self.remove(row.id)
        if row.superseded:
            return  # superseded memories stay in the database for history, not in search
        self._grow(self.n + 1)
        slot = self.n
        self.n += 1
        self.ids[slot] = row.id
        if row.embedding and row.embedding_model == self.model_name:
            vec = from_bytes(row.embedding)
            if vec.shape[0] == self.dim:
                self.vecs[slot] = vec
        else:
            # Made by another model (reembed_memories pending) or not yet: lexical match only.
            self.vecs[slot] = 0.0
        tokens = tokenize(row.content)
        counts: dict[int, int] = {}
        for tok in tokens:
            tid = self.term_id.get(tok)
            if tid is None:
                tid = self.term_id[tok] = len(self.postings)
                self.postings.append(_Postings())
            counts[tid] = counts.get(tid, 0) + 1
        for tid, tf in counts.items():
            self.postings[tid].add(slot, tf)
        self.doc_len[slot] = len(tokens)
        self.alive[slot] = True
        self.slot_of[row.id] = slot
        self.alive_count += 1
        self.alive_len += len(tokens)

    def remove(self, memory_id: int) -> None:
        slot = self.slot_of.pop(memory_id, None)
        if slot is None:
            return
        self.alive[slot] = False
        self.alive_count -= 1
        self.alive_len -= float(self.doc_len[slot])
        # Postings keep the dead slot (masked by `alive`) until the next compaction rebuild.

    @property
    def dead_fraction(self) -> float:
        return 0.0 if self.n == 0 else 1.0 - self.alive_count / self.n

    @property
    def nbytes(self) -> int:
        postings = sum(p.nbytes for p in self.postings)
        return int(
            self.ids.nbytes
            + self.vecs.nbytes
            + self.alive.nbytes
            + self.doc_len.nbytes
            + postings
            + 120 * len(self.slot_of)
            + 100 * len(self.term_id)
        )

    # --- querying ------------------------------------------------------------------------------

    def dense(self, query_vec: np.ndarray) -> np.ndarray:
        """Raw cosine of every slot (dead slots -inf)."""
        sims = self.vecs[: self.n] @ query_vec
        sims[~self.alive[: self.n]] = -np.inf
        return sims

    def bm25_normalised(self, tokens: Iterable[str]) -> tuple[np.ndarray, float]:
        """BM25 of every slot, and the reference score used to normalise it.

        The reference is what a document of average length containing each query term once
        would score: sum of the query terms' idf (a term unknown to this scope still counts, so a
        query about something never mentioned cannot look like a perfect match).
        """
        scores = np.zeros(self.n, dtype=np.float32)
        n_docs = max(self.alive_count, 1)
        avgdl = max(self.alive_len / n_docs, 1.0)
        reference = 0.0
        for tok in dict.fromkeys(tokens):
            tid = self.term_id.get(tok)
            df = 0 if tid is None else min(self.postings[tid].n, n_docs)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            reference += idf
            if tid is None:
                continue
            p = self.postings[tid]
            slots, tfs = p.slots[: p.n], p.tfs[: p.n]
            dl = self.doc_len[slots]
            scores[slots] += (
                idf * tfs * (BM25_K1 + 1) / (tfs + BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl))
            )
        scores[~self.alive[: self.n]] = 0.0
        return scores, reference


class IndexRegistry:
    """The process's scope indexes, LRU-bounded by bytes."""

    def __init__(self) -> None:
        self._indexes: OrderedDict[str, ScopeIndex] = OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()

    def drop(self, key: str) -> None:
        with self._lock:
            self._indexes.pop(key, None)

    def drop_team(self, team_id: str) -> None:
        with self._lock:
            for key in [k for k in self._indexes if k.startswith(team_id + "|")]:
                del self._indexes[key]

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._indexes)

    def total_bytes(self) -> int:
        with self._lock:
            return sum(ix.nbytes for ix in self._indexes.values())

    def get(self, *, team_id: str, scope: str, agent_id: str, embedder: Embedder) -> ScopeIndex:
        """The scope's index, loaded or brought up to date with the change log."""
        key = scope_key(team_id, scope, agent_id)
        with self._lock:
            ix = self._indexes.get(key)
            if ix is not None:
                self._indexes.move_to_end(key)
        retention = settings.INDEX_CHANGE_RETENTION_SECONDS
        if ix is not None and (
            ix.model_name != embedder.model_name
            or ix.dim != embedder.dim
            or time.monotonic() - ix.synced_at > retention / 2
            or ix.dead_fraction > 0.3
        ):
            ix = None  # model switched, log may have been pruned, or too many dead slots
        if ix is None:
            ix = self._load(key, team_id, scope, agent_id, embedder)
        else:
            self._sync(ix)
        return ix

    def _load(
        self, key: str, team_id: str, scope: str, agent_id: str, embedder: Embedder
    ) -> ScopeIndex:
        ix = ScopeIndex(key, embedder.dim, embedder.model_name)
        # Read the log position first: anything committed after it is replayed by the next sync
        # (replays are idempotent upserts), so nothing falls between load and sync.
        last = (
            IndexChange.objects.filter(scope_key=key)
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        ix.last_change_id = last or 0
        qs = Memory.objects.filter(team_id=team_id, scope=scope, superseded_by__isnull=True)
        if scope == Memory.SCOPE_PERSONAL:
            qs = qs.filter(agent_id=agent_id)
        rows = qs.order_by("id").values_list("id", "content", "embedding", "embedding_model")
        with ix.lock:
            ix._grow(qs.count())
            for mid, content, emb, model in rows.iterator(chunk_size=2000):
                ix.upsert(Row(mid, content, emb, model, False))
            ix.synced_at = time.monotonic()
        with self._lock:
            self._indexes[key] = ix
            self._indexes.move_to_end(key)
            self._evict(keep=key)
        return ix

    def _sync(self, ix: ScopeIndex) -> None:
        changes = list(
            IndexChange.objects.filter(scope_key=ix.key, id__gt=ix.last_change_id)
            .order_by("id")
            .values_list("id", "memory_id", "deleted")
        )
        if not changes:
            ix.synced_at = time.monotonic()
            return
        # Only the final state of each memory matters; fetch the live ones in one query.
        final: dict[int, bool] = {}
        for _, mid, deleted in changes:
            final[mid] = deleted
        live_ids = [mid for mid, deleted in final.items() if not deleted]
        rows = (
            {
                r[0]: r
                for r in Memory.objects.filter(id__in=live_ids).values_list(
                    "id", "content", "embedding", "embedding_model", "superseded_by_id"
                )
            }
            if live_ids
            else {}
        )
        with ix.lock:
            for mid in final:
                r = rows.get(mid)
                if r is None:
                    ix.remove(mid)  # deleted (or gone since the change was logged)
                else:
                    ix.upsert(Row(r[0], r[1], r[2], r[3], r[4] is not None))
            ix.last_change_id = changes[-1][0]
            ix.synced_at = time.monotonic()

    def _evict(self, keep: str) -> None:
        budget = settings.INDEX_MEMORY_BUDGET_MB * 1024 * 1024
        total = sum(ix.nbytes for ix in self._indexes.values())
        for key in list(self._indexes):
            if total <= budget:
                break
            if key == keep:
                continue
            total -= self._indexes.pop(key).nbytes
            logger.info("evicted search index %s (memory budget)", key)


registry = IndexRegistry()


def log_changes(
    *, team_id: str, scope: str, agent_id: str, memory_ids: Iterable[int], deleted: bool
) -> None:
    """Records writes for other processes' indexes; call inside the writing transaction."""
    key = scope_key(team_id, scope, agent_id)
    IndexChange.objects.bulk_create(
        [
            IndexChange(team_id=team_id, scope_key=key, memory_id=mid, deleted=deleted)
            for mid in memory_ids
        ],
        batch_size=1000,
    )
