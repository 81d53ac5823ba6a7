"""`GET /graph/entities?q=`: semantic + name search over a team's entities.

score = 1 − (1 − dense)(1 − name), the memory search's fusion: an entity is as relevant as its
strongest evidence, more when both agree. `dense` is the calibrated similarity (0..1, the
embedding backend's scale: 0.3 "related at all") of the query to the entity's name +
description; `name` is a lexical match of the normalised name (exact 1, prefix 0.9, contained
0.75). Matches score at least Q_MIN_SCORE.

The vectors of a team are kept in this process (a matrix per team, least recently used first
out beyond VECTOR_CACHE_BYTES) and checked before each search against one aggregate query
(count and newest `updated_at` of the team's entities): every create, merge, update and delete
changes one of them, so a search never uses a stale vector, in any worker. Rows are re-read from
the database by id for the answer, checked against the team: the cache can rank, never leak.
Measured on 10k entities (docs/graph.md): reading every vector from SQLite on each search cost
~250 ms; the check and the matrix product cost a few.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import Count, Max

from memories.retrieval.embeddings import embed_query, from_bytes, get_embedder
from tenants.models import Team

from .models import Entity
from .resolution import normalise_name

Q_MIN_SCORE = 0.3
VECTOR_CACHE_BYTES = 64 * 1024 * 1024


@dataclass
class _TeamVectors:
    version: tuple[Any, ...]
    ids: list[uuid.UUID]
    names: list[str]
    keys: list[str]
    descriptions: list[str]  # casefolded
    agent_ids: np.ndarray
    types: np.ndarray
    matrix: np.ndarray  # (n, dim) float32; zero rows where there is no usable vector
    usable: np.ndarray  # bool (n,)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes) + 200 * len(self.ids) + sum(map(len, self.descriptions))


_cache: OrderedDict[str, _TeamVectors] = OrderedDict()
_lock = threading.Lock()


def _version(team: Team, model_name: str) -> tuple[Any, ...]:
    agg = Entity.objects.filter(team=team).aggregate(n=Count("id"), last=Max("updated_at"))
    return (agg["n"], agg["last"], model_name)


def _load(team: Team, version: tuple[Any, ...], dim: int) -> _TeamVectors:
    rows = list(
        Entity.objects.filter(team=team).values_list(
            "id",
            "name",
            "normalized_name",
            "agent_id",
            "entity_type",
            "embedding",
            "embedding_model",
            "description",
        )
    )
    model_name = version[2]
    matrix = np.zeros((len(rows), dim), dtype=np.float32)
    usable = np.zeros(len(rows), dtype=bool)
    for i, r in enumerate(rows):
        raw = r[5]
        if raw is not None and r[6] == model_name and len(raw) == dim * 4:
            matrix[i] = from_bytes(raw)
            usable[i] = True
    return _TeamVectors(
        version=version,
        ids=[r[0] for r in rows],
        names=[r[1] for r in rows],
        keys=[r[2] for r in rows],
        descriptions=[(r[7] or "").casefold() for r in rows],
        agent_ids=np.array([r[3] for r in rows], dtype=object),
        types=np.array([r[4] for r in rows], dtype=object),
        matrix=matrix,
        usable=usable,
    )


def _vectors(team: Team, dim: int, model_name: str) -> _TeamVectors:
    version = _version(team, model_name)
    with _lock:
        hit = _cache.get(team.id)
        if hit is not None and hit.version == version and hit.matrix.shape[1] == dim:
            _cache.move_to_end(team.id)
            return hit
    fresh = _load(team, version, dim)
    with _lock:
        _cache[team.id] = fresh
        _cache.move_to_end(team.id)
        total = sum(v.nbytes for v in _cache.values())
        while total > VECTOR_CACHE_BYTES and len(_cache) > 1:
            _, dropped = _cache.popitem(last=False)
            total -= dropped.nbytes
    return fresh


def forget_team(team_id: str) -> None:
    with _lock:
        _cache.pop(team_id, None)


def name_score(query_key: str, query_text: str, key: str, name: str) -> float:
    """How well a name matches the query's words: exact 1, prefix 0.9, contained 0.75."""
    if not query_key:
        return 0.0
    if key == query_key:
        return 1.0
    if key.startswith(query_key) or query_key.startswith(key):
        return 0.9 if min(len(key), len(query_key)) >= 2 else 0.0
    if query_key in key or query_text.casefold() in name.casefold():
        return 0.75
    return 0.0


# The query's words inside the description: weaker evidence than the name, but it is what a
# user types when they remember what a thing is rather than what it is called.
DESCRIPTION_MATCH_SCORE = 0.6


def description_score(query_text: str, description: str) -> float:
    text = query_text.casefold()
    return DESCRIPTION_MATCH_SCORE if len(text) >= 2 and text in description else 0.0


def rank_entities(
    *,
    team: Team,
    q: str,
    acting_agent: str | None,
    agent_id: str | None = None,
    entity_type: str | None = None,
) -> list[tuple[uuid.UUID, float]]:
    """(id, score) of the team's entities matching `q` that the caller may see, best first."""
    embedder = get_embedder()
    qvec = embed_query(q)
    tv = _vectors(team, int(qvec.shape[0]), embedder.model_name)
    n = len(tv.ids)
    if n == 0:
        return []
    mask = np.ones(n, dtype=bool)
    if acting_agent is not None:
        mask &= (tv.agent_ids == acting_agent) | (tv.agent_ids == "")
    if agent_id:
        mask &= tv.agent_ids == agent_id
    if entity_type:
        mask &= tv.types == entity_type
    dense = np.where(tv.usable, embedder.score(tv.matrix @ qvec), 0.0).astype(np.float32)
    query_key = normalise_name(q)
    text = q.strip()
    scored: list[tuple[uuid.UUID, float]] = []
    for i in np.flatnonzero(mask):
        lexical = max(
            name_score(query_key, text, tv.keys[i], tv.names[i]),
            description_score(text, tv.descriptions[i]),
        )
        score = 1.0 - (1.0 - float(dense[i])) * (1.0 - lexical)
        if score >= Q_MIN_SCORE:
            scored.append((tv.ids[i], score))
    scored.sort(key=lambda pair: (-pair[1], str(pair[0])))
    return scored
