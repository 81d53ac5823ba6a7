"""Candidates of one scope and their scores: the dense top-k and the BM25 top-k of an index,
each scored on both sides and fused (search.py's module docstring says what the scores mean).

Shared by the search backends (backends.py): the local one runs it on a scope's whole
in-process index, the milvus one on a small index of the engine's candidates with the scope's
statistics (index.ScopeStats), so both score alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from . import gloss, index
from .embeddings import get_embedder
from .scoring import bridge, fuse, with_neighbours


@dataclass
class Candidate:
    memory_id: int
    score: float  # what the memory itself matches: the `score` returned and min_score's subject
    dense: float
    lexical: float
    rank: float = -1.0  # the order: score with conversation context (docs/search.md); -1 = score

    def __post_init__(self) -> None:
        if self.rank < 0:
            self.rank = self.score


def _bridge_all(ix: index.ScopeIndex, qtokens: tuple[str, ...], target: np.ndarray) -> np.ndarray:
    """Cross-script lexical score of every slot, 0 outside `target` (the live memories in the
    other script): the idf-weighted share of the query's words a memory holds through the
    dictionary (gloss.alternatives; docs/search.md, "Cross-script scores"). The idf is over the
    target memories, so a word most of them hold counts little."""
    out = np.zeros(ix.n, dtype=np.float32)
    # A partial index (another backend's candidates) counts over the whole scope (ScopeStats).
    stats = ix.stats
    n_target = int(target.sum()) if stats is None else stats.bridge_target
    if n_target == 0 or not target.any():
        return out
    total = 0.0
    for terms in gloss.alternatives(qtokens):
        held = ix.term_mask(terms) & target
        count = (
            int(held.sum())
            if stats is None or stats.bridge_held is None
            else stats.bridge_held.get(terms, 0)
        )
        weight = math.log(1.0 + n_target / (1.0 + count))
        total += weight
        out[held] += weight
    return out / total if total > 0 else out


def _score_candidates(
    ix: index.ScopeIndex,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    want: int,
    mask: np.ndarray | None,
    dense_weight: float,
    query_cjk: bool = False,
    with_bridge: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(slots, score, dense, lexical, rank) of the scope's candidates: the dense top-k and the
    BM25 top-k (k = max(want, SEARCH_CANDIDATES)), each scored on both sides, then fused; plus
    their conversation neighbours.

    A memory outside both lists is beaten on both sides by k others, so it cannot reach the
    first `want` of the fused order; scoring only the candidates keeps a 100k-memory scope
    to one quantised vector scan plus the postings of the query's words.

    `score` is what the memory itself matches. `rank` orders: the same fusion, its BM25 also
    reading the previous neighbour's words, plus SEARCH_NEIGHBOUR_WEIGHT x the better rank of its
    two neighbours, capped just below that neighbour (scoring.with_neighbours; docs/search.md,
    "Neighbours").

    `with_bridge` False leaves out the dictionary bridge (the recall timeout has passed).
    """
    embedder = get_embedder()
    n = ix.n
    live = ix.alive[:n] if mask is None else ix.alive[:n] & mask
    k = max(want, settings.SEARCH_CANDIDATES)
    use_dense = mode != "keyword" and qvec is not None
    use_lexical = mode != "vector" and bool(qtokens)
    neighbours = settings.SEARCH_NEIGHBOUR_SECONDS > 0 and mode == "hybrid"
    dense_slots = np.empty(0, dtype=np.int64)
    dense_raw = np.empty(0, dtype=np.float32)
    if use_dense:
        dense_slots, dense_raw = ix.dense_top(qvec, k, mask)  # type: ignore[arg-type]
    lexical_all: np.ndarray | None = None
    context_all: np.ndarray | None = None
    lexical_slots = np.empty(0, dtype=np.int64)
    if use_lexical:
        bm25, with_context, reference = ix.bm25_with_context(qtokens, context=neighbours)
        if reference > 0:
            lexical_all = np.where(live, np.minimum(bm25 / reference, 1.0), 0.0)
            context_all = (
                lexical_all
                if with_context is None
                else np.where(live, np.minimum(with_context / reference, 1.0), 0.0)
            )
            hits = np.flatnonzero(context_all > 0)
            if len(hits) > k:
                hits = hits[np.argpartition(-context_all[hits], k - 1)[:k]]
            lexical_slots = hits.astype(np.int64)
    # Across scripts BM25 sees nothing: the dictionary bridge scores the other script's memories
    # and, like BM25, brings its best k as candidates.
    xling_weight = (
        settings.SEARCH_XLING_LEXICAL_WEIGHT
        if mode == "hybrid" and use_dense and with_bridge
        else 0.0
    )
    bridge_all: np.ndarray | None = None
    if xling_weight > 0 and qtokens:
        bridge_all = _bridge_all(ix, qtokens, live & (ix.cjk[:n] != query_cjk))
        hits = np.flatnonzero(bridge_all > 0)
        if len(hits) > k:
            hits = hits[np.argpartition(-bridge_all[hits], k - 1)[:k]]
        lexical_slots = np.union1d(lexical_slots, hits.astype(np.int64))
    missing = np.setdiff1d(lexical_slots, dense_slots, assume_unique=True)
    slots = np.concatenate([dense_slots, missing])
    raw = np.concatenate(
        [
            dense_raw,
            ix.dense_at(qvec, missing)
            if qvec is not None and use_dense
            else np.zeros(len(missing), np.float32),
        ]
    )
    prev = nxt = np.empty(0, dtype=np.int64)
    if neighbours and len(slots):
        prev, nxt = ix.neighbour_slots(slots)
        near = np.concatenate([prev, nxt])
        near = near[near >= 0]
        if mask is not None:
            near = near[mask[near]]
        extra = np.setdiff1d(near, slots)
        if len(extra):
            extra_prev, extra_next = ix.neighbour_slots(extra)
            prev = np.concatenate([prev, extra_prev])
            nxt = np.concatenate([nxt, extra_next])
            slots = np.concatenate([slots, extra])
            raw = np.concatenate(
                [
                    raw,
                    ix.dense_at(qvec, extra)
                    if qvec is not None and use_dense
                    else np.zeros(len(extra), np.float32),
                ]
            )
    # Cross-script (a Chinese memory for an English query or the reverse): the backend's
    # cross-script curve, so such a pair scores what it would written in one script.
    other_script = ix.cjk[slots] != query_cjk
    dense = (
        np.where(
            other_script,
            embedder.cross_score(raw, query_cjk=query_cjk),
            embedder.score(raw),
        ).astype(np.float32)
        if use_dense
        else np.zeros(len(slots), dtype=np.float32)
    )
    lexical, context = (
        (lexical_all[slots].astype(np.float32), context_all[slots].astype(np.float32))  # type: ignore[index]
        if lexical_all is not None
        else (np.zeros(len(slots), dtype=np.float32),) * 2
    )
    if mode == "vector":
        return slots, dense, dense, lexical, dense
    if mode == "keyword":
        return slots, lexical, dense, lexical, lexical
    score = fuse(dense, lexical, dense_weight)
    rank = fuse(dense, context, dense_weight)
    if use_dense:
        # Cross-script: BM25 cannot see the memory, so the embedding's full score stands
        # instead of its discounted share, joined by the dictionary's word evidence.
        across = (
            dense
            if bridge_all is None
            else bridge(dense, bridge_all[slots], xling_weight).astype(np.float32)
        )
        score = np.where(other_script, np.maximum(score, across), score)
        rank = np.where(other_script, np.maximum(rank, across), rank)
    if neighbours and len(slots):
        rank = with_neighbours(slots, prev, nxt, rank)
    return slots, score, dense, lexical, rank


def _top_candidates(
    ix: index.ScopeIndex,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    want: int,
    allowed: set[int] | None,
    dense_weight: float,
    query_cjk: bool = False,
    with_bridge: bool = True,
) -> list[Candidate]:
    with ix.lock:
        if ix.n == 0:
            return []
        mask = None
        if allowed is not None:
            mask = np.isin(ix.ids[: ix.n], np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
        slots, score, dense, lexical, rank = _score_candidates(
            ix, qvec, qtokens, mode, want, mask, dense_weight, query_cjk, with_bridge
        )
        order = np.argsort(-rank, kind="stable")[:want]
        return [
            Candidate(
                int(ix.ids[slots[i]]),
                float(score[i]),
                float(dense[i]),
                float(lexical[i]),
                float(rank[i]),
            )
            for i in order
            # Context orders, it never makes a result: a memory needs evidence of its own.
            if score[i] > 0.0
        ]
