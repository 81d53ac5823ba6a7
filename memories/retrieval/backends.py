"""Where a search finds its candidates: the search backend (`SEARCH_BACKEND`; docs/search.md).

* `local` (default): the in-process per-scope index (index.py) — every process holds the scopes
  it searches, loaded from the database and kept current by the change log.
* `milvus`: a Milvus engine (milvus.py) holds the dense and sparse vectors of every memory and
  returns candidates; the platform rescores them exactly from their database rows.

Both give `memory_search` the same thing — `Candidate`s with the platform's own fused score —
so `min_score`, the calibration, dedup and the order keep their meaning whichever runs.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any, Protocol

import numpy as np
from django.conf import settings

from core.errors import DomainError, ErrorCode

from . import index
from .candidates import Candidate, _top_candidates
from .embeddings import get_embedder

logger = logging.getLogger(__name__)


class SearchBackend(Protocol):
    name: str

    def scope_candidates(
        self,
        *,
        team_id: str,
        scope: str,
        agent_id: str,
        qvec: np.ndarray | None,
        qtokens: tuple[str, ...],
        mode: str,
        want: int,
        allowed: set[int] | None,
        dense_weight: float,
        query_cjk: bool,
        with_bridge: bool,
        wait: float | None,
    ) -> list[Candidate] | None:
        """The scope's best `want` candidates, best first (search._top_candidates' contract);
        None when the scope is not ready within `wait` seconds (None = no limit)."""
        ...

    def nearest(
        self, *, team_id: str, scope: str, agent_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """(memory id, raw cosine) of the k memories of the scope closest to `vector` (dedup)."""
        ...

    def warm(self, *, team_id: str, scope: str, agent_id: str) -> None:
        """Prepares the scope before a writer takes its lock (local: loads its index)."""
        ...

    def stale(self, *, team_id: str, scope: str, agent_id: str) -> None:
        """A candidate the database no longer confirms was returned: refresh what it came from."""
        ...

    def purge_team(self, team_id: str) -> None:
        """The team's rows are gone from the database: forget everything held for it."""
        ...


class LocalBackend:
    """The in-process index of index.py: the behaviour and numbers of docs/search.md."""

    name = "local"

    def scope_candidates(
        self,
        *,
        team_id: str,
        scope: str,
        agent_id: str,
        qvec: np.ndarray | None,
        qtokens: tuple[str, ...],
        mode: str,
        want: int,
        allowed: set[int] | None,
        dense_weight: float,
        query_cjk: bool,
        with_bridge: bool,
        wait: float | None,
    ) -> list[Candidate] | None:
        embedder = get_embedder()
        ix: index.ScopeIndex | None
        if wait is None:
            ix = index.registry.get(
                team_id=team_id, scope=scope, agent_id=agent_id, embedder=embedder
            )
        else:
            ix = index.registry.get_within(
                team_id=team_id, scope=scope, agent_id=agent_id, embedder=embedder, seconds=wait
            )
        if ix is None:
            return None
        return _top_candidates(
            ix, qvec, qtokens, mode, want, allowed, dense_weight, query_cjk, with_bridge
        )

    def nearest(
        self, *, team_id: str, scope: str, agent_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        ix = index.registry.get(
            team_id=team_id, scope=scope, agent_id=agent_id, embedder=get_embedder()
        )
        with ix.lock:
            if ix.n == 0:
                return []
            # One quantised scan for the k nearest: this runs on every write, over 100k+ vectors.
            slots, raw = ix.dense_top(vector, k)
            return [(int(ix.ids[s]), float(r)) for s, r in zip(slots, raw, strict=True)]

    def warm(self, *, team_id: str, scope: str, agent_id: str) -> None:
        index.registry.warm(
            team_id=team_id, scope=scope, agent_id=agent_id, embedder=get_embedder()
        )

    def stale(self, *, team_id: str, scope: str, agent_id: str) -> None:
        index.registry.drop(index.scope_key(team_id, scope, agent_id))

    def purge_team(self, team_id: str) -> None:
        index.registry.drop_team(team_id)


class EngineBackend:
    """A backend on an external engine (milvus), with what happens when it cannot be reached:
    searches answer 503 SEARCH_UNAVAILABLE, or use the local index when SEARCH_FALLBACK_LOCAL
    says so. Writes never depend on it (the change log keeps them for the shipper)."""

    def __init__(self, engine: SearchBackend, down: type[Exception]) -> None:
        self.engine = engine
        self.down = down
        self.name = engine.name

    def scope_candidates(self, **kwargs: Any) -> list[Candidate] | None:
        try:
            return self.engine.scope_candidates(**kwargs)
        except self.down as exc:
            if settings.SEARCH_FALLBACK_LOCAL:
                logger.warning("search engine unreachable, answering from the local index: %s", exc)
                return local_backend().scope_candidates(**kwargs)
            logger.error("search engine unreachable: %s", exc)
            raise DomainError(
                ErrorCode.SEARCH_UNAVAILABLE,
                "The search engine is unavailable; try again shortly. Writes are kept and "
                "become searchable once it is back.",
            ) from exc

    def nearest(
        self, *, team_id: str, scope: str, agent_id: str, vector: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        return self.engine.nearest(
            team_id=team_id, scope=scope, agent_id=agent_id, vector=vector, k=k
        )

    def warm(self, *, team_id: str, scope: str, agent_id: str) -> None:
        self.engine.warm(team_id=team_id, scope=scope, agent_id=agent_id)

    def stale(self, *, team_id: str, scope: str, agent_id: str) -> None:
        self.engine.stale(team_id=team_id, scope=scope, agent_id=agent_id)

    def purge_team(self, team_id: str) -> None:
        self.engine.purge_team(team_id)


BACKENDS = ("local", "milvus")


@cache
def _backend(name: str) -> SearchBackend:
    if name == "local":
        return LocalBackend()
    if name == "milvus":
        # Imported only when chosen: pymilvus is the optional `milvus` extra (and imported by
        # the engine's first connection only, so a missing extra is a 503, not a crash).
        from .milvus import EngineDown, MilvusBackend

        return EngineBackend(MilvusBackend(), EngineDown)
    raise ValueError(f"SEARCH_BACKEND must be one of {', '.join(BACKENDS)}, not {name!r}")


def get_backend() -> SearchBackend:
    """The configured backend (`SEARCH_BACKEND`), one instance per process and name."""
    return _backend(settings.SEARCH_BACKEND)


def local_backend() -> SearchBackend:
    return _backend("local")
