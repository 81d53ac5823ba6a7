"""The fp16 vector blocks behind every scope index: exact enough, masked, across block edges."""

from __future__ import annotations

import numpy as np
import pytest

from memories.retrieval.index import VectorBlocks


@pytest.fixture(params=["sq8", "fp16"])
def blocks(monkeypatch, request):
    monkeypatch.setattr(VectorBlocks, "BLOCK", 16)  # many blocks with few rows
    rng = np.random.default_rng(7)
    m = rng.standard_normal((100, 32)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    vb = VectorBlocks(32, codec=request.param)
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
    assert list(slots[:3]) == list(np.argsort(-exact)[:3])
    assert set(slots) >= set(np.argsort(-exact)[:8])  # ties within the codec's precision
    assert np.allclose(raw, exact[slots], atol=2e-2 if vb.codec == "sq8" else 2e-3)
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
    tol = 2e-2 if vb.codec == "sq8" else 2e-3
    assert np.allclose(vb.at(m[7], slots), m[slots] @ m[7], atol=tol)
    assert vb.at(m[7], np.empty(0, dtype=np.int64)).size == 0


def test_a_fraction_of_the_memory_of_float32(blocks):
    vb, m = blocks
    share = 0.45 if vb.codec == "sq8" else 0.7  # 1 or 2 bytes a value plus a little per block
    assert vb.nbytes < m.nbytes * share


def test_sq8_keeps_real_embeddings_close():
    """On real vectors (USE, unit length, small components) sq8 cosines stay within 0.005."""
    from memories.retrieval.embeddings import embed_passages, embed_query

    texts = [
        f"memory number {i} about {w}" for i, w in enumerate(["tea", "Redis", "回测", "Alice"] * 5)
    ]
    m = embed_passages(texts)
    vb = VectorBlocks(m.shape[1], codec="sq8")
    vb.append(m)
    q = embed_query("which memory is about tea")
    slots, raw = vb.top(q, 5, np.ones(len(texts), dtype=bool))
    assert np.abs(raw - m[slots] @ q).max() < 0.005
    assert slots[0] == int(np.argmax(m @ q))


def test_rows_decode_what_each_block_holds_as_blocks_grow(blocks):
    vb, m = blocks

    def reconstructed(slots):
        return np.vstack([vb.blocks[s // 16].reconstruct(int(s % 16)) for s in slots.tolist()])

    slots = np.array([99, 0, 17, 16, 15, 98, 3, 50, 99], dtype=np.int64)
    np.testing.assert_array_equal(vb.rows(slots), reconstructed(slots))
    # The last block grows after its codes were read (its buffer may move), then fills up.
    for row in m[:30]:
        vb.append(row)
        last = np.array([vb.n - 1, 97, vb.n // 2], dtype=np.int64)
        np.testing.assert_array_equal(vb.rows(last), reconstructed(last))
    everything = np.arange(vb.n, dtype=np.int64)
    np.testing.assert_array_equal(vb.rows(everything), reconstructed(everything))
    assert vb.rows(np.empty(0, dtype=np.int64)).shape == (0, 32)
