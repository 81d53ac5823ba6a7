"""The fp16 vector blocks behind every scope index: exact enough, masked, across block edges."""

from __future__ import annotations

import numpy as np
import pytest

from memories.index import VectorBlocks


@pytest.fixture
def blocks(monkeypatch):
    monkeypatch.setattr(VectorBlocks, "BLOCK", 16)  # many blocks with few rows
    rng = np.random.default_rng(7)
    m = rng.standard_normal((100, 32)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    vb = VectorBlocks(32)
    vb.append(m[:5])  # appends that straddle block edges
    vb.append(m[5:40])
    for row in m[40:]:
        vb.append(row)
    return vb, m


def test_top_matches_exact_float32_ranking(blocks):
    vb, m = blocks
    assert vb.n == 100 and len(vb.blocks) == 7
    q = m[42] + 0.05 * m[3]
    q /= np.linalg.norm(q)
    exact = m @ q
    slots, raw = vb.top(q, 10, np.ones(100, dtype=bool))
    assert list(slots) == list(np.argsort(-exact)[:10])
    assert np.allclose(raw, exact[slots], atol=2e-3)
    assert list(raw) == sorted(raw, reverse=True)


def test_mask_excludes_rows_in_every_block(blocks):
    vb, m = blocks
    mask = np.ones(100, dtype=bool)
    mask[42] = False
    mask[::3] = False
    slots, _ = vb.top(m[42], 100, mask)
    assert set(slots) == set(np.flatnonzero(mask))
    assert vb.top(m[42], 5, np.zeros(100, dtype=bool))[0].size == 0


def test_at_scores_given_slots(blocks):
    vb, m = blocks
    slots = np.array([99, 0, 17, 16, 15], dtype=np.int64)
    assert np.allclose(vb.at(m[7], slots), m[slots] @ m[7], atol=2e-3)
    assert vb.at(m[7], np.empty(0, dtype=np.int64)).size == 0


def test_half_the_memory_of_float32(blocks):
    vb, m = blocks
    assert vb.nbytes < m.nbytes * 0.7  # 2 bytes a value plus a little per block
