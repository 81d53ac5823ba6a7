"""Approximate dense search above INDEX_ANN_MIN_ROWS (docs/search.md, "Approximate search"):
its top-10 matches the exact scan's, removed memories never come back, memories written after
the load are found, a selective filter stays exact, and API search answers as the exact path
does. The threshold is lowered so a 2,000-memory scope takes the approximate path."""

from __future__ import annotations

import numpy as np
import pytest

from memories.models import Memory, MemoryScope
from memories.retrieval import index
from memories.retrieval.embeddings import get_embedder, to_bytes
from memories.retrieval.text import content_hash, tokens_for_storage
from memories.services import memory_create, memory_delete

from .helpers import ok_data

pytestmark = pytest.mark.django_db

ROWS = 2000
AGENT = "a1"


@pytest.fixture
def ann_settings(settings):
    settings.INDEX_ANN_MIN_ROWS = ROWS
    settings.INDEX_ANN_NPROBE = 8  # of ~45 cells: a real approximation, not a full scan
    index.registry.clear()
    yield settings
    index.registry.clear()


def _clustered(n: int, dim: int, seed: int = 7) -> np.ndarray:
    """Unit vectors around 40 centres: neighbours are close, as real embeddings' are."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim)).astype(np.float32)
    rows = centres[rng.integers(0, 40, n)] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _seed(team, vectors: np.ndarray) -> list[int]:
    """Filler memories with the given vectors (bulk, as a large imported scope)."""
    model = get_embedder().model_name
    Memory.objects.bulk_create(
        [
            Memory(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id=AGENT,
                content=f"filler record {i} about item{i}",
                embedding=to_bytes(vec),
                embedding_model=model,
                content_hash=content_hash(f"filler record {i} about item{i}"),
                search_tokens=tokens_for_storage(f"filler record {i} about item{i}"),
            )
            for i, vec in enumerate(vectors)
        ],
        batch_size=500,
    )
    return list(
        Memory.objects.filter(team=team, agent_id=AGENT).order_by("id").values_list("id", flat=True)
    )


def _index(team) -> index.ScopeIndex:
    return index.registry.get(
        team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=AGENT, embedder=get_embedder()
    )


def _exact(ix: index.ScopeIndex, q: np.ndarray, k: int, mask=None) -> np.ndarray:
    live = ix.alive[: ix.n] if mask is None else ix.alive[: ix.n] & mask
    return ix.vectors.top(q, k, live)[0]


def test_below_the_threshold_the_index_stays_exact(team, ann_settings):
    dim = get_embedder().dim
    _seed(team, _clustered(ROWS - 1, dim))
    assert _index(team).ann is None
    index.registry.clear()
    ann_settings.INDEX_ANN_MIN_ROWS = 0  # never
    _seed(team, _clustered(10, dim, seed=3))
    assert _index(team).ann is None


def test_approximate_top10_matches_the_exact_scan(team, ann_settings):
    dim = get_embedder().dim
    vectors = _clustered(ROWS, dim)
    _seed(team, vectors)
    ix = _index(team)
    assert ix.ann is not None and ix.ann.ivf.ntotal == ROWS
    rng = np.random.default_rng(1)
    queries = vectors[rng.choice(ROWS, 100, replace=False)] + 0.05 * rng.normal(
        size=(100, dim)
    ).astype(np.float32)
    recall = []
    for q in queries:
        slots, raw = ix.dense_top(q, 200)
        assert np.all(np.diff(raw) <= 0)  # best first
        # Scores come from the exact blocks: the same cosine as the exact path gives.
        np.testing.assert_allclose(raw, ix.vectors.at(q, slots), rtol=0, atol=0)
        recall.append(len(set(_exact(ix, q, 10).tolist()) & set(slots[:10].tolist())) / 10)
    assert np.mean(recall) >= 0.98


def test_removed_memories_never_come_back_and_new_ones_are_found(team, ann_settings):
    dim = get_embedder().dim
    vectors = _clustered(ROWS, dim)
    ids = _seed(team, vectors)
    ix = _index(team)
    assert ix.ann is not None
    target = vectors[5]
    before = ix.dense_top(target, 10)[0]
    gone = [int(ix.ids[s]) for s in before[:5]]
    for memory in Memory.objects.filter(pk__in=gone):
        memory_delete(memory=memory)
    ix = _index(team)
    assert ix.ann is not None  # synced, not reloaded
    after = {int(ix.ids[s]) for s in ix.dense_top(target, 200)[0]}
    assert not after & set(gone)

    memory, _ = memory_create(
        team=team,
        scope=MemoryScope.PERSONAL,
        agent_id=AGENT,
        content="The staging database is refreshed every Sunday night",
    )
    ix = _index(team)
    assert ix.ann is not None and ix.ann.ivf.ntotal == ix.n
    assert memory.pk in ix.slot_of
    qvec = ix.vectors.rows(np.array([ix.slot_of[memory.pk]]))[0]
    assert int(ix.ids[ix.dense_top(qvec, 10)[0][0]]) == memory.pk
    assert len(ids) == ROWS


def test_a_selective_filter_scans_exactly(team, ann_settings):
    dim = get_embedder().dim
    vectors = _clustered(ROWS, dim)
    _seed(team, vectors)
    ix = _index(team)
    assert ix.ann is not None
    rng = np.random.default_rng(2)
    mask = np.zeros(ix.n, dtype=bool)
    mask[rng.choice(ix.n, 60, replace=False)] = True
    for q in vectors[rng.choice(ROWS, 20, replace=False)]:
        slots, _ = ix.dense_top(q, 10, mask)
        assert mask[slots].all()
        assert slots.tolist() == _exact(ix, q, 10, mask).tolist()


NEEDLES = [
    ("The staging database is refreshed every Sunday night", "when is staging refreshed"),
    ("Alice owns the billing service and its on-call rota", "who owns billing"),
    ("The office wifi password rotates on the first of each month", "wifi password rotation"),
    ("Deploys are frozen from December 20 until January 3", "when is the deploy freeze"),
]


def _search(api, query: str) -> list[int]:
    r = api.post(
        "/memories/personal/search",
        {"agent_id": AGENT, "query": query, "min_score": 0, "limit": 10},
    )
    assert r.status_code == 200, r.content
    return [m["id"] for m in ok_data(r)]


def test_api_search_answers_as_the_exact_path(team, api, ann_settings):
    dim = get_embedder().dim
    _seed(team, _clustered(ROWS, dim))
    needles = [
        memory_create(team=team, scope=MemoryScope.PERSONAL, agent_id=AGENT, content=text)[0].pk
        for text, _ in NEEDLES
    ]
    approximate = []
    for _, question in NEEDLES:
        approximate.append(_search(api, question))
    assert _index(team).ann is not None
    index.registry.clear()
    ann_settings.INDEX_ANN_MIN_ROWS = 0
    exact = [_search(api, question) for _, question in NEEDLES]
    assert _index(team).ann is None
    assert approximate == exact
    for pk, found in zip(needles, approximate, strict=True):
        assert found[0] == pk


def test_a_scope_grown_past_twice_the_threshold_reloads_with_the_approximate_index(
    team, ann_settings
):
    ann_settings.INDEX_ANN_MIN_ROWS = 0
    _seed(team, _clustered(ROWS, get_embedder().dim))
    first = _index(team)
    assert first.ann is None
    ann_settings.INDEX_ANN_MIN_ROWS = ROWS // 2  # the scope now holds twice the threshold
    second = _index(team)
    assert second is not first and second.ann is not None
    assert _index(team) is second  # and stays loaded
