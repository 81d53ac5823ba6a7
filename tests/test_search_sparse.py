"""The sparse lexical side of a search gives exactly what the dense computation gave.

`ScopeIndex.bm25_with_context`, the dictionary bridge and the candidate fusion score only the
slots the query's words reach (docs/search.md, "Approximate search"), so a search at 1M memories
does not pass over every slot. The reference below is the straightforward computation over all
slots of the scope (what the code did before): on random scopes with dead, updated and
out-of-order rows, neighbours, both scripts and filters, both must produce the same candidates,
in the same order, with the same scores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from django.conf import settings

from memories.retrieval import gloss, index
from memories.retrieval import search as search_service
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.scoring import bridge, fuse, with_neighbours
from memories.retrieval.text import tokenize

DIM = 24
ENGLISH = [
    "database",
    "server",
    "deploy",
    "friday",
    "report",
    "coffee",
    "alice",
    "bob",
    "backup",
    "python",
    "release",
    "window",
    "meeting",
    "budget",
    "invoice",
    "weather",
    "garden",
    "music",
]
# Chinese words the dictionary glosses with some of the English ones (the bridge's matches).
CHINESE = [
    "数据库",
    "服务器",
    "部署",
    "星期五",
    "报告",
    "咖啡",
    "备份",
    "会议",
    "预算",
    "天气",
    "花园",
    "音乐",
]


# --- the dense reference: every slot of the scope, as the search computed it before ------------


def dense_context_len(ix: index.ScopeIndex, slots: np.ndarray, window: float) -> np.ndarray:
    prev = ix.prev_of[slots]
    safe = np.maximum(prev, 0)
    ok = (prev >= 0) & ix.alive[safe] & (np.abs(ix.created[slots] - ix.created[safe]) <= window)
    return np.where(ok, ix.doc_len[safe], 0.0).astype(np.float32)


def dense_bm25(ix: index.ScopeIndex, tokens, *, context: bool = True):
    scores = np.zeros(ix.n, dtype=np.float32)
    combined = np.zeros(ix.n, dtype=np.float32) if context else None
    tf = np.zeros(ix.n, dtype=np.float32) if context else None
    k1, b = settings.SEARCH_BM25_K1, settings.SEARCH_BM25_B
    n_docs = max(ix.alive_count, 1)
    avgdl = max(ix.alive_len / n_docs, 1.0)
    avg_combined = 3.0 * avgdl
    window = settings.SEARCH_NEIGHBOUR_SECONDS
    reference = 0.0
    for tok in dict.fromkeys(tokens):
        tid = ix.term_id.get(tok)
        df = 0 if tid is None else min(ix.postings[tid].n, n_docs)
        idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        reference += idf
        if tid is None:
            continue
        p = ix.postings[tid]
        slots, tfs = p.slots[: p.n], p.tfs[: p.n]
        dl = ix.doc_len[slots]
        scores[slots] += idf * tfs * (k1 + 1) / (tfs + k1 * (1 - b + b * dl / avgdl))
        if combined is not None and tf is not None:
            nxt = ix.next_of[slots]
            ok = (nxt >= 0) & ix.alive[slots]
            src, cslots, ctfs = slots[ok], nxt[ok], tfs[ok]
            ok = ix.alive[cslots] & (np.abs(ix.created[cslots] - ix.created[src]) <= window)
            cslots, ctfs = cslots[ok], ctfs[ok]
            tf[slots] = 2 * tfs
            hit = np.concatenate([slots, cslots[tf[cslots] == 0]])
            tf[cslots] += ctfs
            t = tf[hit]
            cdl = 2 * ix.doc_len[hit] + dense_context_len(ix, hit, window)
            combined[hit] += idf * t * (k1 + 1) / (t + k1 * (1 - b + b * cdl / avg_combined))
            tf[hit] = 0.0
    dead = ~ix.alive[: ix.n]
    scores[dead] = 0.0
    if combined is not None:
        combined[dead] = 0.0
        combined *= (2 + k1) / (2 * (k1 + 1))
    return scores, combined, reference


def dense_term_mask(ix: index.ScopeIndex, terms) -> np.ndarray:
    mask = np.zeros(ix.n, dtype=bool)
    for tid in map(ix.term_id.get, terms):
        if tid is not None:
            p = ix.postings[tid]
            mask[p.slots[: p.n]] = True
    return mask


def dense_bridge(ix: index.ScopeIndex, qtokens, target: np.ndarray) -> np.ndarray:
    out = np.zeros(ix.n, dtype=np.float32)
    n_target = int(target.sum())
    if n_target == 0:
        return out
    total = 0.0
    for terms in gloss.alternatives(qtokens):
        held = dense_term_mask(ix, terms) & target
        weight = math.log(1.0 + n_target / (1.0 + int(held.sum())))
        total += weight
        out[held] += weight
    return out / total if total > 0 else out


def dense_candidates(ix, qvec, qtokens, mode, want, allowed, dense_weight, query_cjk, with_bridge):
    """_score_candidates over every slot, with the filter as np.isin over all ids."""
    embedder = get_embedder()
    n = ix.n
    mask = None
    if allowed is not None:
        mask = np.isin(ix.ids[:n], np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
    live = ix.alive[:n] if mask is None else ix.alive[:n] & mask
    k = max(want, settings.SEARCH_CANDIDATES)
    use_dense = mode != "keyword" and qvec is not None
    use_lexical = mode != "vector" and bool(qtokens)
    neighbours = settings.SEARCH_NEIGHBOUR_SECONDS > 0 and mode == "hybrid"
    dense_slots = np.empty(0, dtype=np.int64)
    dense_raw = np.empty(0, dtype=np.float32)
    if use_dense:
        dense_slots, dense_raw = ix.dense_top(qvec, k, mask)
    lexical_all = context_all = None
    lexical_slots = np.empty(0, dtype=np.int64)
    if use_lexical:
        bm25, with_context, reference = dense_bm25(ix, qtokens, context=neighbours)
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
    xling_weight = (
        settings.SEARCH_XLING_LEXICAL_WEIGHT
        if mode == "hybrid" and use_dense and with_bridge
        else 0.0
    )
    bridge_all = None
    if xling_weight > 0 and qtokens:
        bridge_all = dense_bridge(ix, qtokens, live & (ix.cjk[:n] != query_cjk))
        hits = np.flatnonzero(bridge_all > 0)
        if len(hits) > k:
            hits = hits[np.argpartition(-bridge_all[hits], k - 1)[:k]]
        lexical_slots = np.union1d(lexical_slots, hits.astype(np.int64))
    missing = np.setdiff1d(lexical_slots, dense_slots, assume_unique=True)
    slots = np.concatenate([dense_slots, missing])
    zeros = np.zeros(len(missing), np.float32)
    raw = np.concatenate([dense_raw, ix.dense_at(qvec, missing) if use_dense else zeros])
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
            zeros = np.zeros(len(extra), np.float32)
            raw = np.concatenate([raw, ix.dense_at(qvec, extra) if use_dense else zeros])
    other_script = ix.cjk[slots] != query_cjk
    dense = (
        np.where(
            other_script, embedder.cross_score(raw, query_cjk=query_cjk), embedder.score(raw)
        ).astype(np.float32)
        if use_dense
        else np.zeros(len(slots), dtype=np.float32)
    )
    lexical, context = (
        (lexical_all[slots].astype(np.float32), context_all[slots].astype(np.float32))
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
        across = order = dense
        if bridge_all is not None:
            # In the score only a share of the embedding counts beside the bridge, unless BM25
            # sees a word; the order keeps all of it.
            kept = settings.SEARCH_XLING_DENSE_WEIGHT
            across = bridge(dense, bridge_all[slots], xling_weight, kept).astype(np.float32)
            order = bridge(dense, bridge_all[slots], xling_weight).astype(np.float32)
            own = fuse(np.where(lexical > 0, dense, kept * dense), lexical, dense_weight)
            score = np.where(other_script, own, score)
        score = np.where(other_script, np.maximum(score, across), score)
        rank = np.where(other_script, np.maximum(rank, order), rank)
    if neighbours and len(slots):
        rank = with_neighbours(slots, prev, nxt, rank)
    return slots, score, dense, lexical, rank


# --- random scopes ---------------------------------------------------------------------------


def _content(rng: np.random.Generator, chinese: bool) -> str:
    if chinese:
        return "".join(rng.choice(CHINESE, size=int(rng.integers(2, 7))))
    # Few words from a small vocabulary: many equal BM25 scores, so ties at the k-th candidate.
    return " ".join(rng.choice(ENGLISH, size=int(rng.integers(1, 9))))


def _random_scope(
    seed: int, rows: int = 600, churn: bool = True
) -> tuple[index.ScopeIndex, list[int]]:
    """A scope of `rows` memories written in bursts (neighbours), a fifth in Chinese, then some
    removed, some updated (a new slot, the old one dead) and a few arriving out of id order;
    without `churn`, none of that (no dead slot: the index skips its `alive` checks)."""
    rng = np.random.default_rng(seed)
    embedder = get_embedder()
    ix = index.ScopeIndex(f"sparse-{seed}", DIM, embedder.model_name)
    vectors = rng.standard_normal((rows + 200, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    created = 1e9 + np.cumsum(rng.choice([5.0, 60.0, 5000.0], size=rows + 200, p=[0.6, 0.3, 0.1]))

    def row(mid: int, i: int) -> index.Row:
        return index.Row(
            mid,
            _content(rng, chinese=rng.random() < 0.2),
            vectors[i].tobytes(),
            embedder.model_name,
            False,
            "",
            float(created[i]),
        )

    ids = [int(x) for x in np.sort(rng.choice(np.arange(1, 5 * rows), size=rows, replace=False))]
    late = set(rng.choice(ids[: rows // 2], size=rows // 50, replace=False).tolist())
    if not churn:
        late = set()
    for start in range(0, rows, 97):
        ix.upsert_many(
            [row(mid, i) for i, mid in enumerate(ids[start : start + 97]) if mid not in late]
        )
    for mid in rng.permutation(sorted(late)).tolist():  # older ids seen late: links approximate
        ix.upsert(row(int(mid), ids.index(int(mid))))
    if not churn:
        return ix, ids
    for mid in rng.choice(ids, size=rows // 8, replace=False).tolist():
        ix.remove(int(mid))
    live_ids = [mid for mid in ids if mid in ix.slot_of]
    updated = rng.choice(live_ids, size=rows // 10, replace=False).tolist()
    ix.upsert_many([row(int(mid), rows + j) for j, mid in enumerate(updated)])
    return ix, [mid for mid in ids if mid in ix.slot_of]


QUERIES = [
    ("database server backup friday", False),
    ("alice bob coffee coffee meeting", False),  # a repeated word counts once
    ("deploy the release window never-seen-word", False),  # a word this scope never saw
    ("weather", False),
    ("数据库服务器备份", True),
    ("咖啡会议报告", True),
]


def _equal(got, want) -> None:
    names = ("slots", "score", "dense", "lexical", "rank")
    for name, a, b in zip(names, got, want, strict=True):
        assert a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize(("seed", "churn"), [(1, True), (2, True), (3, True), (4, False)])
@pytest.mark.parametrize("sort_share", [1, 10**6])  # ScopeIndex.union: the bitmap, the sort
def test_sparse_candidates_equal_the_dense_computation(
    settings, monkeypatch, seed, churn, sort_share
):
    monkeypatch.setattr(index, "SORT_SHARE", sort_share)
    settings.SEARCH_CANDIDATES = 25  # fewer than the words reach: the k-th place has ties
    ix, live_ids = _random_scope(seed, churn=churn)
    if churn:
        assert ix.dead_fraction > 0.1 and not ix.links_exact and ix.alive_cjk > 0
    else:
        assert ix.dead_fraction == 0 and ix.links_exact and ix.alive_cjk > 0
    rng = np.random.default_rng(100 + seed)
    filters = [
        None,
        set(rng.choice(live_ids, size=len(live_ids) // 20, replace=False).tolist()),  # few ids
        set(rng.choice(live_ids, size=len(live_ids) * 2 // 3, replace=False).tolist()),  # most
    ]
    cases = 0
    for text, query_cjk in QUERIES:
        qtokens = tokenize(text)
        qvec = rng.standard_normal(DIM).astype(np.float32)
        qvec /= np.linalg.norm(qvec)
        for mode in ("hybrid", "keyword", "vector"):
            for allowed in filters:
                for with_bridge in (True, False):
                    for neighbour_seconds in (3600.0, 0.0):
                        settings.SEARCH_NEIGHBOUR_SECONDS = neighbour_seconds
                        args = (ix, qvec, qtokens, mode, 30)
                        rest = (0.5, query_cjk, with_bridge)
                        want = dense_candidates(*args, allowed, *rest)
                        mask = None if allowed is None else ix.slot_mask(allowed)
                        got = search_service._score_candidates(*args, mask, *rest)
                        _equal(got, want)
                        cases += int(len(want[0]) > 0)
    assert cases > 100  # the comparisons were not all of empty results


@pytest.mark.parametrize("churn", [True, False])
def test_sparse_bm25_equals_the_dense_scores_at_every_slot(settings, churn):
    settings.SEARCH_NEIGHBOUR_SECONDS = 3600.0
    ix, _ = _random_scope(4, churn=churn)
    for text, _cjk in QUERIES:
        tokens = tokenize(text)
        want_own, want_ctx, want_ref = dense_bm25(ix, tokens)
        own, ctx, ref = ix.bm25_with_context(tokens)
        assert ctx is not None and want_ctx is not None
        assert ref == want_ref
        for sparse, dense in ((own, want_own), (ctx, want_ctx)):
            scattered = np.zeros(ix.n, dtype=np.float32)
            scattered[sparse.slots] = sparse.values
            np.testing.assert_array_equal(scattered, dense)
            # Only live slots are held, and every slot scoring above 0 is.
            assert ix.alive[sparse.slots].all()
            assert set(np.flatnonzero(dense > 0)) <= set(sparse.slots.tolist())
        assert (ctx.slots == own.slots).all()


def test_the_bridge_counts_the_live_memories_of_each_script(settings):
    ix, _ = _random_scope(5)
    n = ix.n
    assert ix.alive_cjk == int(np.count_nonzero(ix.alive[:n] & ix.cjk[:n]))
    for text, query_cjk in QUERIES:
        qtokens = tokenize(text)
        target = ix.alive[:n] & (ix.cjk[:n] != query_cjk)
        want = dense_bridge(ix, qtokens, target)
        got = search_service._bridge_all(ix, qtokens, query_cjk, None)
        scattered = np.zeros(n, dtype=np.float32)
        scattered[got.slots] = got.values
        np.testing.assert_array_equal(scattered, want)


def test_sparse_scores_read_any_slot():
    scores = index.SparseScores(np.array([2, 5, 9]), np.array([0.5, 0.25, 1.0], dtype=np.float32))
    got = scores.at(np.array([9, 0, 5, 10, 2, 2]))
    assert got.tolist() == [1.0, 0.0, 0.25, 0.0, 0.5, 0.5] and got.dtype == np.float32
    empty = index.SparseScores(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
    assert empty.at(np.array([1, 2])).tolist() == [0.0, 0.0]


def test_neighbour_positions_match_a_dictionary_lookup():
    from memories.retrieval.scoring import _positions

    rng = np.random.default_rng(9)
    slots = rng.choice(1000, size=300, replace=False)
    slots = np.concatenate([slots, slots[:5]])  # a repeated slot: its last place, as a dict
    wanted = np.concatenate([rng.choice(1000, size=400), [-1, -1, 5000]])
    position = {int(s): i for i, s in enumerate(slots.tolist())}
    want = [position.get(int(s), -1) for s in wanted.tolist()]
    assert _positions(slots, wanted).tolist() == want
    assert _positions(np.empty(0, dtype=np.int64), wanted).tolist() == [-1] * len(wanted)
