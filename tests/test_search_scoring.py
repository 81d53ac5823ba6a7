"""The pure scoring functions of search (memories/retrieval/scoring.py), on arrays and rows alone:
no index, no embedding model."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.core import checks
from django.utils import timezone

from memories.models import Memory
from memories.retrieval.scoring import FUSIONS, fuse, strength, with_neighbours

DENSE = np.array([0.0, 0.5, 0.9, 0.2], dtype=np.float32)
LEXICAL = np.array([0.0, 0.5, 0.0, 1.0], dtype=np.float32)


def test_fusions():
    w = 0.6
    expected = {
        "noisy_or": 1 - (1 - DENSE) * (1 - LEXICAL),
        "weighted": w * DENSE + (1 - w) * LEXICAL,
        "soft_or": 1 - (1 - w * DENSE) * (1 - LEXICAL),
        "max": np.maximum(w * DENSE + (1 - w) * LEXICAL, DENSE),
    }
    assert set(FUSIONS) == set(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(FUSIONS[name](DENSE, LEXICAL, w), want, rtol=1e-6)
    # noisy-OR: a purely semantic match keeps its dense score, agreement adds up.
    np.testing.assert_allclose(FUSIONS["noisy_or"](DENSE, LEXICAL, w)[[2, 1]], [0.9, 0.75])


def test_fuse_follows_the_setting(settings):
    settings.SEARCH_FUSION = "weighted"
    np.testing.assert_allclose(fuse(DENSE, LEXICAL, 1.0), DENSE)
    settings.SEARCH_FUSION = "noisy_or"
    np.testing.assert_allclose(fuse(DENSE, LEXICAL, 1.0), 1 - (1 - DENSE) * (1 - LEXICAL))


def test_an_unknown_fusion_stops_the_server(settings):
    settings.SEARCH_FUSION = "nosiy_or"
    errors = [e for e in checks.run_checks() if e.id == "memories.E001"]
    assert len(errors) == 1 and "nosiy_or" in errors[0].msg


def test_with_neighbours_lifts_a_memory_up_to_just_below_its_better_neighbour(settings):
    settings.SEARCH_NEIGHBOUR_WEIGHT = 0.5
    slots = np.array([10, 11, 12, 14], dtype=np.int64)
    rank = np.array([0.2, 0.8, 0.7, 0.1], dtype=np.float32)
    # 10 <- 11 -> 12; 12's next neighbour (13) is no candidate; 10 has no previous one; 14 none.
    prev = np.array([-1, 10, 11, -1], dtype=np.int64)
    nxt = np.array([11, 12, 13, -1], dtype=np.int64)
    out = with_neighbours(slots, prev, nxt, rank)
    assert out.dtype == np.float32
    # 10: 0.2 + 0.5 x 0.8 = 0.6, under 0.99 x 0.8; 12: 0.7 + 0.4 is capped at 0.99 x 0.8;
    # 11 ranks above both its neighbours and gains nothing; 14 has none.
    np.testing.assert_allclose(out, [0.6, 0.8, 0.792, 0.1], rtol=1e-6)
    np.testing.assert_array_equal(rank, np.array([0.2, 0.8, 0.7, 0.1], dtype=np.float32))


@pytest.mark.parametrize("weight", [0.0, -1.0])
def test_strength_off(settings, weight):
    settings.SEARCH_DECAY_WEIGHT = weight
    now = timezone.now()
    old = Memory(created_at=now - timedelta(days=3650), importance=0.0, access_count=0)
    assert strength(old, now) == 1.0


def test_strength_fades_with_idleness_and_recalls_slow_it(settings):
    settings.SEARCH_DECAY_WEIGHT = 0.1
    settings.SEARCH_DECAY_DAYS = 30
    now = timezone.now()
    fresh = Memory(created_at=now, importance=0.0, access_count=0)
    idle = Memory(created_at=now - timedelta(days=90), importance=0.0, access_count=0)
    recalled = Memory(created_at=now - timedelta(days=90), importance=0.0, access_count=20)
    recent = Memory(
        created_at=now - timedelta(days=90),
        last_accessed=now - timedelta(days=1),
        importance=0.0,
        access_count=0,
    )
    assert strength(fresh, now) == pytest.approx(1.0)
    assert strength(idle, now) == pytest.approx(0.9 + 0.1 * np.exp(-3.0))
    assert strength(idle, now) < strength(recalled, now) < 1.0
    assert strength(recent, now) == pytest.approx(0.9 + 0.1 * np.exp(-1 / 30))
    assert strength(idle, now) >= 0.9  # λ caps the effect: a strong match is never buried
