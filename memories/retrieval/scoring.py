"""The scores of a search, as pure functions of arrays and rows (docs/search.md).

* the fusions of dense and lexical evidence into one score (`FUSIONS`, `SEARCH_FUSION` picks one);
* conversation neighbours: a share of the better neighbour's rank added to a memory's own;
* memory strength: the Ebbinghaus retention that nudges the final order.

No database, no index, no embedding model: `search` gathers the arrays and calls these, so each
can be read and tested on its own. Settings are read at call time (tests change them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
from django.conf import settings

if TYPE_CHECKING:
    from memories.models import Memory


def _weighted(dense: np.ndarray, lexical: np.ndarray, w: float) -> np.ndarray:
    return w * dense + (1.0 - w) * lexical


def _noisy_or(dense: np.ndarray, lexical: np.ndarray, w: float) -> np.ndarray:
    return 1.0 - (1.0 - dense) * (1.0 - lexical)


def _soft_or(dense: np.ndarray, lexical: np.ndarray, w: float) -> np.ndarray:
    # noisy-OR with the dense evidence discounted by the weight: lexical agreement ranks first, a
    # purely semantic match still keeps w x its score.
    return 1.0 - (1.0 - w * dense) * (1.0 - lexical)


def _max(dense: np.ndarray, lexical: np.ndarray, w: float) -> np.ndarray:
    # A memory is as relevant as its best evidence: the blend, or a strong dense match alone.
    return np.maximum(_weighted(dense, lexical, w), dense)


Fusion = Callable[[np.ndarray, np.ndarray, float], np.ndarray]
# SEARCH_FUSION names one of these (docs/search.md, "Hybrid score"); checked at startup.
FUSIONS: dict[str, Fusion] = {
    "noisy_or": _noisy_or,
    "weighted": _weighted,
    "soft_or": _soft_or,
    "max": _max,
}


def fuse(dense: np.ndarray, lexical: np.ndarray, dense_weight: float) -> np.ndarray:
    return FUSIONS[settings.SEARCH_FUSION](dense, lexical, dense_weight)


def bridge(
    dense: np.ndarray, lexical: np.ndarray, weight: float, dense_share: float = 1.0
) -> np.ndarray:
    """A cross-script pair's score: its calibrated dense score, of which `dense_share` counts
    (SEARCH_XLING_DENSE_WEIGHT), joined as a noisy OR by the dictionary's word evidence
    discounted by SEARCH_XLING_LEXICAL_WEIGHT (docs/search.md, "Cross-script scores"). A glossed
    word match is weaker evidence than the same word written in the memory, so it cannot count
    in full; and across scripts the embedding tells an answer from a sentence on the same topic
    less well than the words do, so where the words are weighed it counts for less."""
    return 1.0 - (1.0 - dense_share * dense) * (1.0 - weight * lexical)


def across_scripts(
    dense: np.ndarray,
    lexical: np.ndarray,
    held: np.ndarray,
    weight: float,
    dense_weight: float,
    context: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(score, order) of cross-script pairs that the dictionary bridge weighs (`held`: the
    share of the query's words each holds through it; docs/search.md, "Cross-script scores").

    The score — what min_score filters — keeps SEARCH_XLING_DENSE_WEIGHT of the embedding beside
    the bridge, all of it when the memory holds a query word as written (`lexical` > 0: a name,
    a number, which BM25 sees). The order keeps all of it: the embedding ranks translations and
    paraphrases better than glossed words do. `context` is the BM25 side of the order (with the
    neighbours' words), `lexical` when None."""
    kept = settings.SEARCH_XLING_DENSE_WEIGHT
    seen = np.where(lexical > 0, dense, kept * dense)
    score = np.maximum(fuse(seen, lexical, dense_weight), bridge(dense, held, weight, kept))
    near = lexical if context is None else context
    order = np.maximum(fuse(dense, near, dense_weight), bridge(dense, held, weight))
    return score, order


# A memory lifted by a neighbour stays just below it (1 %): the reply is listed right after the
# turn that names the subject, and a neighbour of an exact match can never take its place.
BELOW_LENDER = 0.99


def _positions(slots: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index in `slots` of each wanted slot (its last occurrence), -1 where absent."""
    if len(slots) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(slots, kind="stable")
    ordered = slots[order]
    at = np.searchsorted(ordered, wanted, side="right") - 1
    safe = np.maximum(at, 0)
    return np.where((at >= 0) & (ordered[safe] == wanted), order[safe], -1).astype(np.int64)


def with_neighbours(
    slots: np.ndarray, prev: np.ndarray, nxt: np.ndarray, rank: np.ndarray
) -> np.ndarray:
    """max(rank, min(rank + SEARCH_NEIGHBOUR_WEIGHT x best, BELOW_LENDER x best)), `best` the
    better rank of the slot's two neighbours (a neighbour outside the candidates counts 0).
    `prev` and `nxt` are the neighbours' slots, -1 for none (`ScopeIndex.neighbour_slots`).

    The lift is capped just below the neighbour that lends it (docs/search.md, "Neighbours"):
    in a conversation the answer turn comes right after the turn that matched; in a burst of
    unrelated memories written together (an import, the facts of one document) the best match
    keeps its place, and a memory that already ranks above its neighbours gains nothing."""
    padded = np.append(rank, 0.0)  # index -1 (no neighbour, or not a candidate) reads 0
    pi, ni = _positions(slots, prev), _positions(slots, nxt)
    best = np.maximum(padded[pi], padded[ni])
    lifted = np.minimum(rank + settings.SEARCH_NEIGHBOUR_WEIGHT * best, BELOW_LENDER * best)
    return np.maximum(rank, lifted).astype(np.float32)


def strength(memory: Memory, now: datetime) -> float:
    """1 − λ + λ·R: the Ebbinghaus retention of a memory, weighted so it can only nudge the order."""
    weight = settings.SEARCH_DECAY_WEIGHT
    if weight <= 0:
        return 1.0
    last = memory.last_accessed or memory.created_at
    idle_days = max((now - last).total_seconds() / 86400.0, 0.0)
    stability = (
        settings.SEARCH_DECAY_DAYS
        * (1.0 + memory.importance)
        * (1.0 + math.log1p(memory.access_count))
    )
    retention = math.exp(-idle_days / max(stability, 1e-6))
    return 1.0 - weight + weight * retention
