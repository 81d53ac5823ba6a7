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
from .scoring import across_scripts, fuse, with_neighbours


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


def _bridge_all(
    ix: index.ScopeIndex, qtokens: tuple[str, ...], query_cjk: bool, mask: np.ndarray | None
) -> index.SparseScores:
    """Cross-script lexical score of the live memories in the other script (within `mask`), the
    others scoring 0: the idf-weighted share of the query's words a memory holds through the
    dictionary (gloss.words; docs/search.md, "Cross-script scores") or, for a name, by sound
    (SEARCH_XLING_PHONETIC: the index's terms that sound like it, phonetic.py). The idf is over
    those target memories, so a word most of them hold counts little.

    Sparse: only the slots in the postings of the dictionary's terms are read; the number of
    target memories comes from the index's count of live CJK memories (a filter's mask is
    counted instead)."""
    # A partial index (another backend's candidates) counts over the whole scope (ScopeStats).
    stats = ix.stats
    if stats is not None:
        n_target = stats.bridge_target
    elif mask is None:
        n_target = ix.alive_count - ix.alive_cjk if query_cjk else ix.alive_cjk
    else:
        n = ix.n
        n_target = int(np.count_nonzero(ix.alive[:n] & mask & (ix.cjk[:n] != query_cjk)))
    if n_target == 0:
        return index.SparseScores(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
    total = 0.0
    held_by_word: list[tuple[np.ndarray, float]] = []
    # Not on a partial index (another backend's candidates): its engine neither knows the keys
    # nor counts their memories, and a table per query would read every candidate's terms.
    phonetic = settings.SEARCH_XLING_PHONETIC and stats is None
    table = gloss.glossary()
    for word, terms in gloss.words(qtokens):
        # A name the dictionary lacks: the terms that sound like it count as it too.
        found = terms | ix.phonetic_matches(word, table) if phonetic else terms
        held = ix.term_slots(found, mask)
        held = held[ix.cjk[held] != query_cjk]
        count = (
            len(held)
            if stats is None or stats.bridge_held is None
            else stats.bridge_held.get(terms, 0)
        )
        weight = math.log(1.0 + n_target / (1.0 + count))
        total += weight
        held_by_word.append((held, weight))
    reached = ix.union(held for held, _ in held_by_word)
    position = ix.positions(reached)
    out = np.zeros(len(reached), dtype=np.float32)
    for held, weight in held_by_word:
        out[position[held]] += weight
    return index.SparseScores(reached, out / total if total > 0 else out)


def _best(scores: index.SparseScores, k: int) -> np.ndarray:
    """The slots of the k best positive scores (all positive ones if fewer), as int64.

    Ties at the k-th score are settled by argpartition over the slots in ascending order: the
    same ones whichever way the scores were computed."""
    positive = np.flatnonzero(scores.values > 0)
    hits = scores.slots[positive]
    if len(hits) > k:
        hits = hits[np.argpartition(-scores.values[positive], k - 1)[:k]]
    return hits.astype(np.int64)


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
    k = max(want, settings.SEARCH_CANDIDATES)
    use_dense = mode != "keyword" and qvec is not None
    use_lexical = mode != "vector" and bool(qtokens)
    neighbours = settings.SEARCH_NEIGHBOUR_SECONDS > 0 and mode == "hybrid"
    dense_slots = np.empty(0, dtype=np.int64)
    dense_raw = np.empty(0, dtype=np.float32)
    if use_dense:
        dense_slots, dense_raw = ix.dense_top(qvec, k, mask)  # type: ignore[arg-type]
    # Lexical scores are sparse (index.SparseScores): only the slots a query word reaches, so
    # nothing here is proportional to the scope's size (docs/search.md, "Approximate search").
    lexical_all: index.SparseScores | None = None
    context_all: index.SparseScores | None = None
    lexical_slots = np.empty(0, dtype=np.int64)
    if use_lexical:
        bm25, with_context, reference = ix.bm25_with_context(qtokens, context=neighbours)
        if reference > 0:
            if mask is not None:
                # Both cover the same slots (bm25_with_context).
                keep = mask[bm25.slots]
                bm25 = bm25.where(keep)
                with_context = None if with_context is None else with_context.where(keep)
            lexical_all = index.SparseScores(bm25.slots, np.minimum(bm25.values / reference, 1.0))
            context_all = (
                lexical_all
                if with_context is None
                else index.SparseScores(
                    with_context.slots, np.minimum(with_context.values / reference, 1.0)
                )
            )
            lexical_slots = _best(context_all, k)
    # Across scripts BM25 sees nothing: the dictionary bridge scores the other script's memories
    # and, like BM25, brings its best k as candidates.
    xling_weight = (
        settings.SEARCH_XLING_LEXICAL_WEIGHT
        if mode == "hybrid" and use_dense and with_bridge
        else 0.0
    )
    bridge_all: index.SparseScores | None = None
    if xling_weight > 0 and qtokens:
        bridge_all = _bridge_all(ix, qtokens, query_cjk, mask)
        lexical_slots = np.union1d(lexical_slots, _best(bridge_all, k))
    missing = np.setdiff1d(lexical_slots, dense_slots, assume_unique=True)
    slots = np.concatenate([dense_slots, missing])
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
    # The cosines of the candidates the dense top-k did not bring, read in one pass.
    unscored = slots[len(dense_slots) :]
    raw = np.concatenate(
        [
            dense_raw,
            ix.dense_at(qvec, unscored)
            if qvec is not None and use_dense
            else np.zeros(len(unscored), np.float32),
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
        (lexical_all.at(slots), context_all.at(slots))
        if lexical_all is not None and context_all is not None
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
        # instead of its discounted share, joined by the dictionary's word evidence
        # (scoring.across_scripts).
        if bridge_all is None:
            across, order = np.maximum(score, dense), np.maximum(rank, dense)
        else:
            held = bridge_all.at(slots)
            across, order = across_scripts(
                dense, lexical, held, xling_weight, dense_weight, context
            )
        score = np.where(other_script, across, score).astype(np.float32)
        rank = np.where(other_script, order, rank).astype(np.float32)
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
        mask = None if allowed is None else ix.slot_mask(allowed)
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
