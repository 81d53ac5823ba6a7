"""Per-scope in-process search index: fp16 vector blocks plus a BM25 inverted index.

A *scope* is what one search looks at: a team's team memories, or one agent's personal
memories (`scope_key`). Each process keeps the scopes it has searched, loaded lazily from the
database (the source of truth) and evicted least-recently-used beyond `INDEX_MEMORY_BUDGET_MB`.

Consistency across processes: every write appends an `IndexChange` row in the same transaction
as the memory. Before answering, an index reads the newer change rows of its scope (one indexed
query, usually empty) and applies them, so a write committed by any worker is visible to the
next search in every worker, and a deleted or updated memory can never come back stale. Change
rows older than `INDEX_CHANGE_RETENTION_SECONDS` are pruned by a maintenance task; an index that
has not synced for half that long reloads from scratch instead of trusting the log.

Change ids are allocated when a row is inserted, not when its transaction commits: a writer may
hold id 41 uncommitted while another commits id 42, and a sync that saw 42 must still pick up 41
once it lands. So an index does not trust "everything up to the highest id seen": it re-reads the
ids above a *settled floor* — the highest id it saw at a sync at least
`INDEX_CHANGE_SETTLE_SECONDS` ago (no writing transaction lasts longer) — and skips those it has
already applied.

Vectors are kept as float16 in fixed-size faiss blocks (`VectorBlocks`): half the memory of
float32 with cosines exact to ~1e-3, a scan about 2.4x faster than numpy's float32 product on
this hardware (bench/latency.py, docs/benchmarks.md), and growth that never copies more than one
block — so the first write after loading 100k memories does not double the process's memory.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import timedelta

import faiss
import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core import allocator
from core.metrics import INDEX_LOADS, INDEX_MEMORIES, INDEX_SCOPES, timed
from memories.models import IndexChange, Memory, MemoryScope, MemoryTier

from . import gloss
from .embeddings import Embedder, from_bytes
from .phonetic import PhoneticTable
from .text import is_cjk, tokenize, tokens_from_storage

logger = logging.getLogger(__name__)

# Rows from which an index load is followed by a trim of the allocator (core.allocator).
TRIM_AFTER_LOAD_ROWS = 10_000

# How many removed ids a neighbour lookup skips before giving up (ScopeIndex._live_neighbour).
NEIGHBOUR_WALK = 8

# ScopeIndex.union sorts the slots it is given when they are fewer than 1/SORT_SHARE of the
# scope's slots, and marks them in a byte per slot otherwise.
SORT_SHARE = 32


@dataclass
class SparseScores:
    """Scores of some slots (sorted, distinct); every other slot scores 0."""

    slots: np.ndarray  # int64, ascending
    values: np.ndarray  # float32, one per slot

    def at(self, slots: np.ndarray) -> np.ndarray:
        """The scores of arbitrary `slots` (0 for a slot not held), float32."""
        out = np.zeros(len(slots), dtype=np.float32)
        if len(self.slots) == 0 or len(slots) == 0:
            return out
        i = np.minimum(np.searchsorted(self.slots, slots), len(self.slots) - 1)
        found = self.slots[i] == slots
        out[found] = self.values[i[found]]
        return out

    def where(self, keep: np.ndarray) -> SparseScores:
        """The scores of the slots where `keep` (bool, one per slot held) is true."""
        return SparseScores(self.slots[keep], self.values[keep])


def scope_key(team_id: str, scope: str, agent_id: str = "") -> str:
    # Team ids and agent ids never contain "|" (their validators), so keys cannot collide.
    return f"{team_id}|{scope}|{agent_id if scope == MemoryScope.PERSONAL else ''}"


@dataclass
class Row:
    id: int
    content: str
    embedding: bytes | memoryview | None
    embedding_model: str
    # Superseded or cold (memories.tiers): kept in the database, not in this index.
    hidden: bool
    search_tokens: str = ""
    created: float = 0.0  # created_at as a Unix timestamp (neighbours: SEARCH_NEIGHBOUR_SECONDS)


@dataclass
class ScopeStats:
    """Scope-wide BM25 statistics for an index that holds only part of its scope.

    A search backend other than this in-process index (memories.retrieval.backends) rescores
    its candidates exactly in a small `ScopeIndex` of just those rows; their BM25 must still
    weigh words by the whole scope, so it reads the counts from here instead of its postings.
    `df` holds the query's tokens; `bridge_target` / `bridge_held` the dictionary bridge's
    counts (search._bridge_all): memories in the other script, and those of them holding one
    of each alternatives set.
    """

    n_docs: int
    total_len: float
    df: dict[str, int]
    bridge_target: int = 0
    bridge_held: dict[frozenset[str], int] | None = None


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


_threads_set = False


def _set_threads() -> None:
    """One scan thread per process by default (SEARCH_THREADS): workers share the cores."""
    global _threads_set
    if not _threads_set:
        faiss.omp_set_num_threads(settings.SEARCH_THREADS)
        _threads_set = True


class VectorBlocks:
    """Append-only rows of quantised vectors in blocks of BLOCK rows; slot = row number.

    Codec (`INDEX_VECTOR_CODEC`): `sq8` (default) stores one byte per value on a uniform scale
    of ±range, where range is twice the largest component of the first rows this index saw
    (USE's unit vectors stay within ±0.14, so ±0.27 in 255 steps: cosines within ~0.003 and
    the same nearest neighbours, measured on 100k bench vectors); `fp16` two bytes, exact to
    ~1e-3. A later component beyond the range is clipped, which costs that row a little
    precision, never correctness of what is returned (search re-reads rows from the database).
    """

    BLOCK = 8192

    def __init__(self, dim: int, codec: str | None = None) -> None:
        self.dim = dim
        self.codec = codec or settings.INDEX_VECTOR_CODEC
        if self.codec not in ("sq8", "fp16"):
            raise ValueError(f"INDEX_VECTOR_CODEC must be sq8 or fp16, not {self.codec!r}")
        self.blocks: list[faiss.IndexScalarQuantizer] = []
        self.n = 0
        self.range = 0.0  # sq8: fixed by the first rows appended
        self._views: list[np.ndarray] = []  # codes of the full blocks (_codes)

    def _block(self) -> faiss.IndexScalarQuantizer:
        _set_threads()
        if self.codec == "fp16":
            return faiss.IndexScalarQuantizer(
                self.dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
            )
        block = faiss.IndexScalarQuantizer(
            self.dim, faiss.ScalarQuantizer.QT_8bit_uniform, faiss.METRIC_INNER_PRODUCT
        )
        # "Training" a uniform quantiser only sets its range: two rows at -range and +range.
        bounds = np.full((2, self.dim), self.range, dtype=np.float32)
        bounds[0] *= -1
        block.train(bounds)
        return block

    def append(self, rows: np.ndarray) -> None:
        """Appends (m, dim) float32 rows."""
        rows = np.ascontiguousarray(rows, dtype=np.float32).reshape(-1, self.dim)
        if self.codec == "sq8" and not self.range and len(rows):
            peak = float(np.abs(rows).max())
            # Twice the largest component seen first; ±1 (any unit vector) when those rows
            # have no vector yet (made by another model, reembed pending).
            self.range = min(1.0, max(0.05, 2.0 * peak)) if peak > 0 else 1.0
        start = 0
        while start < len(rows):
            if not self.blocks or self.blocks[-1].ntotal >= self.BLOCK:
                self.blocks.append(self._block())
            last = self.blocks[-1]
            take = min(self.BLOCK - last.ntotal, len(rows) - start)
            last.add(rows[start : start + take])
            start += take
            self.n += take

    def top(self, query: np.ndarray, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, raw cosines) of the best k rows among those where `mask` (bool, n) is true."""
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dim)
        found_slots: list[np.ndarray] = []
        found_raw: list[np.ndarray] = []
        for b, block in enumerate(self.blocks):
            base = b * self.BLOCK
            size = int(block.ntotal)
            local = mask[base : base + size]
            if not local.any():
                continue
            params = None
            if not local.all():
                # faiss only points at the bitmap and the selector: both stay referenced here
                # until the search returns.
                bitmap = np.packbits(local, bitorder="little")
                selector = faiss.IDSelectorBitmap(size, faiss.swig_ptr(bitmap))
                params = faiss.SearchParameters(sel=selector)  # type: ignore[call-arg]
            dist, labels = block.search(q, min(k, size), params=params)
            keep = labels[0] >= 0
            found_slots.append(labels[0][keep].astype(np.int64) + base)
            found_raw.append(dist[0][keep])
        if not found_slots:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        slots = np.concatenate(found_slots)
        raw = np.concatenate(found_raw).astype(np.float32)
        if len(slots) > k:
            best = np.argpartition(-raw, k - 1)[:k]
            slots, raw = slots[best], raw[best]
        order = np.argsort(-raw, kind="stable")
        return slots[order], raw[order]

    def at(self, query: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Raw cosines of the given slots (decoded rows; for a few hundred candidates)."""
        if len(slots) == 0:
            return np.zeros(0, dtype=np.float32)
        # One dot product per row (einsum, not a BLAS matrix-vector product whose rounding
        # depends on how many rows go together): a slot's cosine is the same whichever other
        # slots are read with it.
        query = np.asarray(query, dtype=np.float32)
        return np.einsum("ij,j->i", self.rows(slots), query).astype(np.float32)

    def _codes(self, b: int) -> np.ndarray:
        """(rows, code bytes) view of block b's codes, without a copy. A full block never changes
        again, so its view is kept; the last block's buffer moves as it grows: made anew."""
        if b < len(self._views):
            return self._views[b]
        block = self.blocks[b]
        size, width = int(block.ntotal), int(block.code_size)
        view = faiss.rev_swig_ptr(block.codes.data(), size * width).reshape(size, width)
        if size == self.BLOCK and b == len(self._views):
            self._views.append(view)
        return view

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """Decoded (len(slots), dim) float32 rows of the given slots.

        The codes are gathered from every block's buffer and decoded in one call (all blocks
        share one codec and range), rather than a faiss call per block: a search's few hundred
        candidates touch most of the 122 blocks of a 1M scope."""
        slots = np.asarray(slots, dtype=np.int64)
        if len(slots) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        blocks = slots // self.BLOCK
        order = np.argsort(blocks, kind="stable")
        ordered = blocks[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        ends = np.append(starts[1:], len(order))
        codes = np.empty((len(slots), int(self.blocks[0].code_size)), dtype=np.uint8)
        for b, start, end in zip(
            ordered[starts].tolist(), starts.tolist(), ends.tolist(), strict=True
        ):
            where = order[start:end]
            codes[where] = self._codes(b)[slots[where] - b * self.BLOCK]
        return self.blocks[0].sa_decode(codes)

    @property
    def nbytes(self) -> int:
        per_value = 1 if self.codec == "sq8" else 2
        return self.n * self.dim * per_value + 256 * len(self.blocks)


class AnnIndex:
    """Approximate dense top-k over a large scope (`INDEX_ANN_MIN_ROWS`; docs/search.md).

    An inverted file (faiss IndexIVFScalarQuantizer): k-means cells trained on a sample of the
    scope's own vectors, 8-bit residual codes, a search scanning the `INDEX_ANN_NPROBE` cells
    closest to the query. IVF rather than HNSW: removals and filters are a bitmap over slots
    passed at search time (the same `alive` mask the exact scan uses), nothing is deleted from
    the structure, and appends after the load are one cheap add. Labels are slots; the exact
    blocks stay the source of every score (`ScopeIndex.dense_top` rescores what this returns).
    """

    def __init__(self, dim: int, vectors: VectorBlocks, n: int) -> None:
        _set_threads()
        self.dim = dim
        self.trained_rows = n
        self.lists = int(
            min(65536, max(16, round(settings.INDEX_ANN_LISTS_PER_SQRT * math.sqrt(n))))
        )
        self.quantizer = faiss.IndexFlatIP(dim)
        self.ivf = faiss.IndexIVFScalarQuantizer(
            self.quantizer,
            dim,
            self.lists,
            faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT,
            True,  # residual codes: 8 bits for the offset from the cell's centre
        )
        # k-means on at most 64 rows a cell (faiss warns below 39): seconds at 1M rows.
        rng = np.random.default_rng(0)
        take = min(n, 64 * self.lists)
        sample = np.sort(rng.choice(n, size=take, replace=False)).astype(np.int64)
        self.ivf.cp.niter = 10  # k-means iterations: the recall barely moves beyond (measured)
        self.ivf.train(vectors.rows(sample))
        for start in range(0, n, VectorBlocks.BLOCK):
            stop = min(n, start + VectorBlocks.BLOCK)
            self.add(vectors.rows(np.arange(start, stop, dtype=np.int64)), start)

    def add(self, rows: np.ndarray, first_slot: int) -> None:
        ids = np.arange(first_slot, first_slot + len(rows), dtype=np.int64)
        self.ivf.add_with_ids(np.ascontiguousarray(rows, dtype=np.float32), ids)

    def top(self, query: np.ndarray, k: int, mask: np.ndarray) -> np.ndarray:
        """Slots of about the best k rows among those where `mask` (bool, n) is true."""
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dim)
        # The bitmap and the selector stay referenced here until the search returns.
        bitmap = np.packbits(mask, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersIVF()
        params.sel = selector
        params.nprobe = min(self.lists, settings.INDEX_ANN_NPROBE)
        _, labels = self.ivf.search(q, k, params=params)
        found = labels[0]
        return found[found >= 0].astype(np.int64)

    @property
    def nbytes(self) -> int:
        # Codes and ids per row, plus the cells' centres.
        return int(self.ivf.ntotal) * (int(self.ivf.code_size) + 8) + self.lists * self.dim * 4


class ScopeIndex:
    def __init__(
        self,
        key: str,
        dim: int,
        model_name: str,
        codec: str | None = None,
        stats: ScopeStats | None = None,
    ) -> None:
        self.key = key
        self.dim = dim
        self.model_name = model_name
        # Set for a partial index (candidates of another backend): the whole scope's counts.
        self.stats = stats
        self.lock = threading.RLock()
        self.capacity = 0
        self.n = 0  # slots used (alive or dead)
        self.ids = np.empty(0, dtype=np.int64)
        self.vectors = VectorBlocks(dim, codec)
        # Approximate dense top-k, built at load for a scope of INDEX_ANN_MIN_ROWS or more.
        self.ann: AnnIndex | None = None
        self.alive = np.empty(0, dtype=bool)
        self.doc_len = np.empty(0, dtype=np.float32)
        self.cjk = np.empty(0, dtype=bool)  # memory written mostly in CJK (text.is_cjk)
        self.alive_cjk = 0  # live memories written mostly in CJK (the bridge's idf)
        # Scratch of bm25_with_context (slot -> position among the slots a query reaches): kept
        # between searches so a search never allocates an array over the whole scope.
        self._position = np.empty(0, dtype=np.int64)
        self.slot_of: dict[int, int] = {}
        self.term_id: dict[str, int] = {}
        self.postings: list[_Postings] = []
        self.terms: list[str] = []  # term id -> term (the phonetic table reads new terms)
        # Keys of the terms that may be names (phonetic.py), built on the first cross-script
        # search and extended with new terms on later ones.
        self.phonetic = PhoneticTable()
        self.alive_count = 0
        self.alive_len = 0.0
        # Conversation context (docs/search.md, "Neighbours"): memories of a scope written one
        # after the other within SEARCH_NEIGHBOUR_SECONDS are neighbours. The ranking's BM25
        # reads a memory's previous neighbour's words as its context: found at query time from
        # the postings and the links below, so nothing is stored twice.
        self.created = np.empty(0, dtype=np.float64)
        # Ids of the scope in ascending order (neighbours); may hold dead ids, rebuilt when stale.
        self.order = np.empty(0, dtype=np.int64)
        self.order_n = 0
        self.order_stale = False
        self.max_id = 0  # the highest memory id ever put in `order`
        # Neighbour links per slot (-1: none), kept on writes so a search reads them in one go;
        # a link to a removed slot is resolved through `order`. Memories arriving out of id
        # order make the links approximate: `links_exact` then sends lookups to `order`.
        self.prev_of = np.empty(0, dtype=np.int64)
        self.next_of = np.empty(0, dtype=np.int64)
        self.links_exact = True
        self.last_change_id = 0
        # Gap-safe sync (module docstring): ids <= change_floor are settled; ids above it that
        # were applied already are remembered so a re-read skips them; `change_marks` holds
        # (monotonic time, highest id seen) of recent syncs, from which the floor advances.
        self.change_floor = 0
        self.applied_changes: set[int] = set()
        self.change_marks: deque[tuple[float, int]] = deque()
        self.synced_at = time.monotonic()

    # --- building ----------------------------------------------------------------------------

    def _grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        # x1.25, not x2: these per-slot arrays are small (13 bytes a slot); vectors grow by block.
        cap = max(64, int(self.capacity * 1.25), need)
        self.ids = np.resize(self.ids, cap)
        alive = np.zeros(cap, dtype=bool)
        alive[: self.n] = self.alive[: self.n]
        self.alive = alive
        self.doc_len = np.resize(self.doc_len, cap)
        self.cjk = np.resize(self.cjk, cap)
        self.created = np.resize(self.created, cap)
        self.order = np.resize(self.order, cap)
        for name in ("prev_of", "next_of"):
            links = np.full(cap, -1, dtype=np.int64)
            links[: self.n] = getattr(self, name)[: self.n]
            setattr(self, name, links)
        self.capacity = cap

    def _ordered_ids(self) -> np.ndarray:
        if self.order_stale:
            live = self.ids[: self.n][self.alive[: self.n]]
            self.order_n = len(live)
            self.order[: self.order_n] = np.sort(live)
            self.order_stale = False
        return self.order[: self.order_n]

    def _live_neighbour(
        self, order: np.ndarray, pos: int, step: int, created: float, window: float
    ) -> int:
        """Slot of the first live memory from order[pos] walking by `step`, -1 if none or more
        than `window` seconds apart. Removed ids stay in `order` until the next reload (a removal
        must not cost a re-sort); a few steps skip them, as a scope reloads once 30 % of its
        slots are dead."""
        for _ in range(NEIGHBOUR_WALK):
            if not 0 <= pos < len(order):
                return -1
            slot = self.slot_of.get(int(order[pos]))
            if slot is not None:
                return slot if abs(created - self.created[slot]) <= window else -1
            pos += step
        return -1

    def neighbour_slots(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(previous, next) neighbour slot of each slot, -1 where none (docs/search.md)."""
        window = settings.SEARCH_NEIGHBOUR_SECONDS
        prev = self.prev_of[slots].copy()
        nxt = self.next_of[slots].copy()
        # Links through a removed slot (or all, after out-of-order arrivals): walk `order`.
        stale = (
            np.ones(len(slots), dtype=bool)
            if not self.links_exact
            else (
                ((prev >= 0) & ~self.alive[np.maximum(prev, 0)])
                | ((nxt >= 0) & ~self.alive[np.maximum(nxt, 0)])
            )
        )
        if stale.any():
            order = self._ordered_ids()
            for i in np.flatnonzero(stale).tolist():
                slot = int(slots[i])
                p = int(np.searchsorted(order, self.ids[slot]))
                when = float(self.created[slot])
                prev[i] = self._live_neighbour(order, p - 1, -1, when, math.inf)
                nxt[i] = self._live_neighbour(order, p + 1, 1, when, math.inf)
        when = self.created[slots]
        prev[(prev >= 0) & (np.abs(when - self.created[np.maximum(prev, 0)]) > window)] = -1
        nxt[(nxt >= 0) & (np.abs(when - self.created[np.maximum(nxt, 0)]) > window)] = -1
        return prev, nxt

    def _vector(self, row: Row) -> np.ndarray:
        if row.embedding and row.embedding_model == self.model_name:
            vec = from_bytes(row.embedding)
            if vec.shape[0] == self.dim:
                return vec
        # Made by another model (reembed_memories pending) or not yet: lexical match only.
        return np.zeros(self.dim, dtype=np.float32)

    def upsert(self, row: Row) -> None:
        self.upsert_many([row])

    def upsert_many(self, rows: list[Row]) -> None:
        """Adds or replaces rows; vectors are appended to the blocks in one call."""
        fresh: list[Row] = []
        for row in {r.id: r for r in rows}.values():  # the last state of each memory wins
            self.remove(row.id)
            if not row.hidden:  # superseded and cold memories stay in the database only
                fresh.append(row)
        if not fresh:
            return
        vecs = np.vstack([self._vector(r) for r in fresh])
        self.vectors.append(vecs)
        if self.ann is not None:
            self.ann.add(vecs, self.n)  # the slots _add_slot gives them next, in this order
        for row in fresh:
            self._add_slot(row)

    def _add_slot(self, row: Row) -> None:
        self._grow(self.n + 1)
        slot = self.n
        self.n += 1
        self.ids[slot] = row.id
        tokens = tokens_from_storage(row.search_tokens) or tokenize(row.content)
        counts: dict[int, int] = {}
        for tok in tokens:
            tid = self.term_id.get(tok)
            if tid is None:
                tid = self.term_id[tok] = len(self.postings)
                self.postings.append(_Postings())
                self.terms.append(tok)
            counts[tid] = counts.get(tid, 0) + 1
        for tid, tf in counts.items():
            self.postings[tid].add(slot, tf)
        self.created[slot] = row.created
        self._link(slot, row.id, row.created)
        self.doc_len[slot] = len(tokens)
        self.cjk[slot] = is_cjk(row.content)
        self.alive[slot] = True
        self.slot_of[row.id] = slot
        self.alive_count += 1
        self.alive_len += len(tokens)
        self.alive_cjk += int(self.cjk[slot])

    def _link(self, slot: int, memory_id: int, created: float) -> None:
        """Puts a slot in the id order and links it to its neighbours."""
        if memory_id > self.max_id:
            # The usual case, every row of a load and every new memory: the newest of the
            # scope, whose previous neighbour is the newest before it (Python ints: a load
            # links 100k rows).
            prev = self.slot_of.get(self.max_id, -1)
            if prev < 0 and self.order_n:  # the newest one was removed: the live one before it
                order = self._ordered_ids()
                prev = self._live_neighbour(order, len(order) - 1, -1, created, math.inf)
            self.prev_of[slot] = prev
            if prev >= 0:
                self.next_of[prev] = slot
            self.order[self.order_n] = memory_id
            self.order_n += 1
            self.max_id = memory_id
            return
        order = self._ordered_ids()
        pos = int(np.searchsorted(order, memory_id))
        prev = self._live_neighbour(order, pos - 1, -1, created, math.inf)
        nxt = self._live_neighbour(order, pos + 1, 1, created, math.inf)
        self.prev_of[slot], self.next_of[slot] = prev, nxt
        if prev >= 0:
            self.next_of[prev] = slot
        if nxt >= 0:
            self.prev_of[nxt] = slot
        if pos == len(order) or order[pos] != memory_id:
            # An older id seen late (commits out of id order): re-sort, and stop trusting links
            # until the next reload.
            self.order_stale = True
            self.links_exact = False
        # else: an updated memory keeps its place; slot_of now points at its new slot

    def remove(self, memory_id: int) -> None:
        slot = self.slot_of.pop(memory_id, None)
        if slot is None:
            return
        self.alive[slot] = False
        self.alive_count -= 1
        self.alive_len -= float(self.doc_len[slot])
        self.alive_cjk -= int(self.cjk[slot])
        # Postings keep the dead slot (masked by `alive`) until the next compaction rebuild.

    def build_ann(self) -> None:
        """Builds the approximate index if the scope is large enough (INDEX_ANN_MIN_ROWS)."""
        threshold = settings.INDEX_ANN_MIN_ROWS
        if threshold > 0 and self.n >= threshold and self.ann is None:
            started = time.perf_counter()
            self.ann = AnnIndex(self.dim, self.vectors, self.n)
            logger.info(
                "built approximate index of %s: %d rows, %d cells, %.1fs",
                self.key,
                self.n,
                self.ann.lists,
                time.perf_counter() - started,
            )

    @property
    def ann_outgrown(self) -> bool:
        """Grown to twice the rows its dense search was set up for: twice INDEX_ANN_MIN_ROWS
        without an approximate index, or twice the rows the cells were trained on. A reload
        then builds (or retrains) the approximate index, as one does for dead slots."""
        threshold = settings.INDEX_ANN_MIN_ROWS
        if threshold <= 0:
            return False
        return self.n >= 2 * (self.ann.trained_rows if self.ann is not None else threshold)

    @property
    def dead_fraction(self) -> float:
        return 0.0 if self.n == 0 else 1.0 - self.alive_count / self.n

    @property
    def nbytes(self) -> int:
        postings = sum(p.nbytes for p in self.postings)
        return int(
            self.ids.nbytes
            + self.vectors.nbytes
            + (self.ann.nbytes if self.ann is not None else 0)
            + self.alive.nbytes
            + self.doc_len.nbytes
            + self.cjk.nbytes
            + self._position.nbytes
            + self.created.nbytes
            + self.order.nbytes
            + self.prev_of.nbytes
            + self.next_of.nbytes
            + postings
            + 120 * len(self.slot_of)
            + 100 * len(self.term_id)
            + 8 * len(self.terms)
            + self.phonetic.nbytes
        )

    # --- querying ------------------------------------------------------------------------------

    def dense_top(
        self, query_vec: np.ndarray, k: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(slots, raw cosines) of the k closest live slots (within `mask` if given), best first.

        A scope with an approximate index asks it for the k slots and rescores them from the
        exact blocks, so a slot's cosine is the same on both paths. A filter leaving fewer than
        INDEX_ANN_MIN_ROWS rows scans those rows exactly instead: the cells an approximate
        search visits may hold none of them.
        """
        live = self.alive[: self.n] if mask is None else self.alive[: self.n] & mask
        if self.ann is not None:
            allowed = self.alive_count if mask is None else int(np.count_nonzero(live))
            if allowed >= settings.INDEX_ANN_MIN_ROWS:
                slots = self.ann.top(query_vec, k, live)
                if len(slots) >= min(k, allowed):
                    raw = self.vectors.at(query_vec, slots)
                    order = np.argsort(-raw, kind="stable")
                    return slots[order], raw[order]
                # Fewer than k in the visited cells (a filter sparse there): the exact scan.
        return self.vectors.top(query_vec, k, live)

    def dense_at(self, query_vec: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Raw cosines of given slots (e.g. lexical candidates the dense top-k missed)."""
        return self.vectors.at(query_vec, slots)

    def union(self, parts: Iterable[np.ndarray]) -> np.ndarray:
        """Sorted distinct slots of `parts` (int64).

        A sort of what was given when that is small against the scope; otherwise one byte per
        slot marked and read back, which at 1M slots (1 MB) costs less than sorting the hundred
        thousand postings a common word brings (measured: ~1-3 ms against ~13-30 ms)."""
        arrays = [p for p in parts if len(p)]
        total = sum(len(p) for p in arrays)
        if total == 0:
            return np.empty(0, dtype=np.int64)
        if total * SORT_SHARE < self.n:
            out = np.sort(np.concatenate(arrays).astype(np.int64, copy=False))
            return out[np.concatenate(([True], out[1:] != out[:-1]))]
        mark = np.zeros(self.n, dtype=bool)
        for p in arrays:
            mark[p] = True
        return np.flatnonzero(mark)

    def positions(self, slots: np.ndarray) -> np.ndarray:
        """A slot -> index-in-`slots` map over the scope's slots, valid only at `slots` and only
        until the next call: scratch kept by the index, so building it costs len(slots), not
        the scope's size. The caller holds `lock`."""
        if len(self._position) < self.n:
            self._position = np.empty(self.capacity, dtype=np.int64)
        self._position[slots] = np.arange(len(slots), dtype=np.int64)
        return self._position

    def slot_mask(self, ids: Collection[int]) -> np.ndarray:
        """(n,) bool over the slots: true at the live slots of `ids` (a search's filter)."""
        if len(ids) * SORT_SHARE >= self.n:
            # Most of the scope: one vectorised pass beats a dict look-up per id.
            wanted = np.fromiter(ids, dtype=np.int64, count=len(ids))
            return np.isin(self.ids[: self.n], wanted) & self.alive[: self.n]
        mask = np.zeros(self.n, dtype=bool)
        found = [s for s in map(self.slot_of.get, ids) if s is not None]
        mask[np.array(found, dtype=np.int64)] = True
        return mask

    def phonetic_matches(self, token: str, glossary: gloss.Glossary) -> frozenset[str]:
        """Terms of this index in the other script than `token` that sound like it (a
        transliterated name: phonetic.py). Call under `lock`: reads the terms added since the
        last call into the table first."""
        if self.phonetic.done < len(self.terms):
            self.phonetic.extend(self.terms, glossary)
        return self.phonetic.matches(token, glossary)

    def term_slots(self, terms: Iterable[str], mask: np.ndarray | None = None) -> np.ndarray:
        """Sorted live slots holding any of `terms` (and true in `mask`, bool over slots)."""
        parts = []
        for tid in map(self.term_id.get, terms):
            if tid is not None:
                p = self.postings[tid]
                parts.append(p.slots[: p.n])
        slots = self.union(parts)
        keep = self.alive[slots] if mask is None else self.alive[slots] & mask[slots]
        return slots[keep]

    def bm25_normalised(self, tokens: Iterable[str]) -> tuple[SparseScores, float]:
        """BM25 of the live slots holding a query term, and the reference score used to
        normalise it.

        The reference is what a document of average length containing each query term once
        would score: sum of the query terms' idf (a term unknown to this scope still counts, so a
        query about something never mentioned cannot look like a perfect match).
        """
        own, _, reference = self.bm25_with_context(tokens, context=False)
        return own, reference

    def _context_len(self, slots: np.ndarray, window: float) -> np.ndarray:
        """Length of each slot's context: its live previous neighbour's, within the window."""
        prev = self.prev_of[slots]
        safe = np.maximum(prev, 0)
        ok = (prev >= 0) & (np.abs(self.created[slots] - self.created[safe]) <= window)
        if self.alive_count < self.n:  # a removed neighbour lends nothing
            ok &= self.alive[safe]
        out = self.doc_len[safe]
        out[~ok] = 0.0
        return out

    def bm25_with_context(
        self, tokens: Iterable[str], *, context: bool = True
    ) -> tuple[SparseScores, SparseScores | None, float]:
        """(own BM25, BM25 with context, reference) of the live slots a query term reaches.

        With context, a memory is the document "its own words twice + its previous neighbour's
        words" (docs/search.md, "Neighbours"): an answer often sits in the turn after the one that
        names the subject. That score is normalised to the own one's scale (an average-length
        memory containing each query term once in its own words scores the reference).

        Sparse: only the live slots in the query terms' postings (and, with context, the live
        memories right after them) are scored, in arrays over those slots alone — a slot outside
        them scores 0 — so a search costs the postings of its words, not the scope's size. Both
        results cover the same slots (`own` is 0 where only the context holds a term). Callers
        hold `lock` (the position scratch below is the index's).
        """
        k1, b = settings.SEARCH_BM25_K1, settings.SEARCH_BM25_B
        stats = self.stats
        n_docs = max(self.alive_count if stats is None else stats.n_docs, 1)
        avgdl = max((self.alive_len if stats is None else stats.total_len) / n_docs, 1.0)
        # Nearly every memory has a previous neighbour: context adds about one memory's length.
        avg_combined = 3.0 * avgdl
        window = settings.SEARCH_NEIGHBOUR_SECONDS
        reference = 0.0
        # Per known term: (idf, its live slots, their tf, context slots, their tf from the term).
        terms: list[tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        for tok in dict.fromkeys(tokens):
            tid = self.term_id.get(tok)
            if stats is not None:
                df = min(stats.df.get(tok, 0), n_docs)
            else:
                df = 0 if tid is None else min(self.postings[tid].n, n_docs)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            reference += idf
            if tid is None:
                continue
            p = self.postings[tid]
            slots, tfs = p.slots[: p.n], p.tfs[: p.n]
            if self.alive_count < self.n:
                # Removed slots stay in the postings until the next reload; they score nothing.
                keep = self.alive[slots]
                slots, tfs = slots[keep], tfs[keep]
            cslots = np.empty(0, dtype=np.int64)
            ctfs = np.empty(0, dtype=np.float32)
            if context:
                # The memories whose previous neighbour holds the term: each live slot's next.
                nxt = self.next_of[slots]
                ok = nxt >= 0
                src, cslots, ctfs = slots[ok], nxt[ok], tfs[ok]
                ok = np.abs(self.created[cslots] - self.created[src]) <= window
                if self.alive_count < self.n:
                    ok &= self.alive[cslots]
                cslots, ctfs = cslots[ok], ctfs[ok]
            terms.append((idf, slots, tfs, cslots, ctfs))
        reached = self.union(part for t in terms for part in (t[1], t[3]))
        position = self.positions(reached)
        scores = np.zeros(len(reached), dtype=np.float32)
        combined = np.zeros(len(reached), dtype=np.float32) if context else None
        # Term frequencies with context, for one term at a time (kept all zero between terms).
        tf = np.zeros(len(reached), dtype=np.float32) if context else None
        for idf, slots, tfs, cslots, ctfs in terms:
            at = position[slots]
            dl = self.doc_len[slots]
            scores[at] += idf * tfs * (k1 + 1) / (tfs + k1 * (1 - b + b * dl / avgdl))
            if combined is not None and tf is not None:
                cat = position[cslots]
                tf[at] = 2 * tfs
                hit = np.concatenate([at, cat[tf[cat] == 0]])
                tf[cat] += ctfs
                t = tf[hit]
                hit_slots = np.concatenate([slots, reached[hit[len(at) :]]])
                cdl = 2 * self.doc_len[hit_slots] + self._context_len(hit_slots, window)
                combined[hit] += idf * t * (k1 + 1) / (t + k1 * (1 - b + b * cdl / avg_combined))
                tf[hit] = 0.0  # clean for the next term
        if combined is not None:
            # An average-length memory holding a term once in its own words (tf 2 here).
            combined *= (2 + k1) / (2 * (k1 + 1))
        return (
            SparseScores(reached, scores),
            None if combined is None else SparseScores(reached, combined),
            reference,
        )


@dataclass
class _Loading:
    """A scope load running in a background thread (IndexRegistry.get_within)."""

    done: threading.Event
    index: ScopeIndex | None = None
    failed: bool = False


class IndexRegistry:
    """The process's scope indexes, LRU-bounded by bytes."""

    def __init__(self) -> None:
        self._indexes: OrderedDict[str, ScopeIndex] = OrderedDict()
        # Loads in flight, by scope key: one loader per scope, every other search waits on it.
        self._loading: dict[str, _Loading] = {}
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

    def loading(self) -> list[str]:
        """Scope keys whose load is running in the background (get_within)."""
        with self._lock:
            return list(self._loading)

    def total_bytes(self) -> int:
        with self._lock:
            return sum(ix.nbytes for ix in self._indexes.values())

    def _usable(self, key: str, embedder: Embedder) -> ScopeIndex | None:
        """The scope's loaded index if it can be brought up to date by its change log."""
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
            or ix.ann_outgrown
        ):
            # Model switched, log may have been pruned, too many dead slots, or grown past what
            # its dense search was built for.
            return None
        return ix

    def _gauges(self) -> None:
        with self._lock:
            INDEX_SCOPES.set(len(self._indexes))
            INDEX_MEMORIES.set(sum(i.alive_count for i in self._indexes.values()))

    def get(self, *, team_id: str, scope: str, agent_id: str, embedder: Embedder) -> ScopeIndex:
        """The scope's index, loaded or brought up to date with the change log.

        A load already running in the background (get_within) is waited for, not repeated."""
        key = scope_key(team_id, scope, agent_id)
        ix = self._usable(key, embedder)
        if ix is None:
            with self._lock:
                loading = self._loading.get(key)
            if loading is not None:
                loading.done.wait()
                ix = loading.index
        if ix is None:
            with timed(INDEX_LOADS):
                ix = self._load(key, team_id, scope, agent_id, embedder)
        else:
            self._sync(ix)
        self._gauges()
        return ix

    def get_within(
        self, *, team_id: str, scope: str, agent_id: str, embedder: Embedder, seconds: float
    ) -> ScopeIndex | None:
        """get, waiting at most `seconds` for a scope that must be loaded first; None if it is not
        ready by then (a search's recall timeout: docs/search.md, "Recall timeout").

        The load runs in a background thread — one per scope, later searches wait on the same
        one — and carries on after a timeout, so the scope serves the next search. A loaded
        index is only synced with its change log (one indexed query), never skipped.

        Inside a transaction the load stays in this thread, unbounded: another thread's
        connection could not see what the transaction wrote, and would cache a scope missing it.
        """
        key = scope_key(team_id, scope, agent_id)
        ix = self._usable(key, embedder)
        if ix is not None:
            self._sync(ix)
            self._gauges()
            return ix
        if connection.in_atomic_block:
            return self.get(team_id=team_id, scope=scope, agent_id=agent_id, embedder=embedder)
        loading = self._start_load(key, team_id, scope, agent_id, embedder)
        if not loading.done.wait(max(seconds, 0.0)):
            return None
        if loading.failed:
            # Loaded again here, so the caller sees the real error (or a success on retry).
            return self.get(team_id=team_id, scope=scope, agent_id=agent_id, embedder=embedder)
        self._gauges()
        return loading.index

    def _start_load(
        self, key: str, team_id: str, scope: str, agent_id: str, embedder: Embedder
    ) -> _Loading:
        """The scope's background load: the one in flight, or a new one."""
        with self._lock:
            loading = self._loading.get(key)
            if loading is not None:
                return loading
            loading = _Loading(done=threading.Event())
            self._loading[key] = loading

        def run() -> None:
            try:
                with timed(INDEX_LOADS):
                    loading.index = self._load(key, team_id, scope, agent_id, embedder)
            except Exception:
                loading.failed = True
                logger.exception("background load of search index %s failed", key)
            finally:
                # _load published the index before this: no moment where neither is visible.
                with self._lock:
                    self._loading.pop(key, None)
                loading.done.set()
                connection.close()  # this thread's own connection

        # A copy of this context: the load's log lines keep the request id that started it.
        context = contextvars.copy_context()
        threading.Thread(
            target=context.run, args=(run,), name=f"index-load {key}", daemon=True
        ).start()
        return loading

    def warm(self, *, team_id: str, scope: str, agent_id: str, embedder: Embedder) -> None:
        """Loads the scope's index if this process has none yet, without syncing a loaded one.

        A full load takes seconds at 100k memories: a writer does it before taking the scope's
        write lock (memories.locks), so the other writers of the scope never wait for it.
        """
        with self._lock:
            if scope_key(team_id, scope, agent_id) in self._indexes:
                return
        self.get(team_id=team_id, scope=scope, agent_id=agent_id, embedder=embedder)

    def _load(
        self, key: str, team_id: str, scope: str, agent_id: str, embedder: Embedder
    ) -> ScopeIndex:
        ix = ScopeIndex(key, embedder.dim, embedder.model_name)
        # Read the log before the rows: a change visible now is committed, so the rows read next
        # reflect it (marked applied); anything committed later, even with a lower id, is above
        # the settled floor and replayed by the next sync (replays are idempotent upserts).
        # A change older than the settle time is committed, and so is every lower id.
        ix.change_floor = (
            IndexChange.objects.filter(
                scope_key=key,
                created_at__lt=timezone.now()
                - timedelta(seconds=settings.INDEX_CHANGE_SETTLE_SECONDS),
            )
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        ) or 0
        ix.applied_changes = set(
            IndexChange.objects.filter(scope_key=key, id__gt=ix.change_floor).values_list(
                "id", flat=True
            )
        )
        ix.last_change_id = max(ix.applied_changes, default=ix.change_floor)
        qs = Memory.objects.filter(
            team_id=team_id, scope=scope, superseded_by__isnull=True
        ).exclude(tier=MemoryTier.COLD)
        if scope == MemoryScope.PERSONAL:
            qs = qs.filter(agent_id=agent_id)
        rows = qs.order_by("id").values_list(
            "id", "content", "embedding", "embedding_model", "search_tokens", "created_at"
        )
        with ix.lock:
            ix._grow(qs.count())
            batch: list[Row] = []
            for mid, content, emb, model, stored, created in rows.iterator(chunk_size=2000):
                batch.append(Row(mid, content, emb, model, False, stored, created.timestamp()))
                if len(batch) == 2000:
                    ix.upsert_many(batch)
                    batch = []
            ix.upsert_many(batch)
            ix.build_ann()
            if (
                settings.SEARCH_XLING_PHONETIC
                and settings.SEARCH_XLING_LEXICAL_WEIGHT > 0
                and 0 < ix.alive_cjk < ix.alive_count
            ):
                # Both scripts: cross-script searches will come. Reading every term's phonetic
                # key here (~20 µs a term) keeps it off the first one's path.
                ix.phonetic.extend(ix.terms, gloss.glossary())
            ix.synced_at = time.monotonic()
        with self._lock:
            self._indexes[key] = ix
            self._indexes.move_to_end(key)
            self._evict(keep=key)
        # The load's temporary arrays (and an evicted index) are free now, but their pages stay
        # in the process until trimmed: -17 MB at 50k memories. Only after a large load: a trim
        # walks every arena (milliseconds at 400 MB), and a small scope's load leaves little.
        if ix.alive_count >= TRIM_AFTER_LOAD_ROWS:
            allocator.release_free_memory()
        return ix

    def _sync(self, ix: ScopeIndex) -> None:
        now = time.monotonic()
        seen = list(
            IndexChange.objects.filter(scope_key=ix.key, id__gt=ix.change_floor)
            .order_by("id")
            .values_list("id", "memory_id", "deleted")
        )
        with ix.lock:
            changes = [c for c in seen if c[0] not in ix.applied_changes]
            ix.applied_changes.update(c[0] for c in changes)
            if seen:
                ix.last_change_id = max(ix.last_change_id, seen[-1][0])
            self._advance_floor(ix, now)
        if not changes:
            ix.synced_at = now
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
                    "id",
                    "content",
                    "embedding",
                    "embedding_model",
                    "superseded_by_id",
                    "search_tokens",
                    "created_at",
                    "tier",
                )
            }
            if live_ids
            else {}
        )
        with ix.lock:
            upserts: list[Row] = []
            for mid in final:
                r = rows.get(mid)
                if r is None:
                    ix.remove(mid)  # deleted (or gone since the change was logged)
                else:
                    upserts.append(
                        Row(
                            r[0],
                            r[1],
                            r[2],
                            r[3],
                            r[4] is not None or r[7] == MemoryTier.COLD,
                            r[5],
                            r[6].timestamp(),
                        )
                    )
            ix.upsert_many(upserts)
            ix.synced_at = now

    @staticmethod
    def _advance_floor(ix: ScopeIndex, now: float) -> None:
        """Moves the settled floor to the highest id seen at a sync old enough that every
        lower id has committed or rolled back since; forgets applied ids below it."""
        if not ix.change_marks or ix.change_marks[-1][1] != ix.last_change_id:
            ix.change_marks.append((now, ix.last_change_id))
        settle = settings.INDEX_CHANGE_SETTLE_SECONDS
        floor = ix.change_floor
        while ix.change_marks and now - ix.change_marks[0][0] >= settle:
            floor = max(floor, ix.change_marks.popleft()[1])
        if floor != ix.change_floor:
            ix.change_floor = floor
            ix.applied_changes = {c for c in ix.applied_changes if c > floor}

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


# Set by memories.apps: queues the shipping of the change log to an external search engine
# (the milvus backend); called after a logged write commits.
_ship_hook: Callable[[], None] | None = None


def set_ship_hook(hook: Callable[[], None] | None) -> None:
    global _ship_hook
    _ship_hook = hook


def log_changes(
    *, team_id: str, scope: str, agent_id: str, memory_ids: Iterable[int], deleted: bool
) -> None:
    """Records writes for other processes' indexes; call inside the writing transaction."""
    key = scope_key(team_id, scope, agent_id)
    if settings.SEARCH_BACKEND != "local" and _ship_hook is not None:
        # The log is also the outbox of an external search engine: ship it once this commits.
        transaction.on_commit(_ship_hook)
    IndexChange.objects.bulk_create(
        [
            IndexChange(team_id=team_id, scope_key=key, memory_id=mid, deleted=deleted)
            for mid in memory_ids
        ],
        batch_size=1000,
    )
