"""Hybrid retrieval: dense + BM25 fused into one calibrated score, then a gentle memory signal.

What `score` means (docs/search.md):

* `dense` — the embedding backend's calibrated cosine (memories.embeddings): 0.3 is the edge of
  "related at all", 0.85 of "says the same thing", whatever the model.
* `lexical` — BM25 of the memory for the query divided by what a document of average length
  containing each query term once would score, clipped to 1. So 1.0 means "contains every query
  word", and a query term this scope never saw counts against the match.
* `score` in `hybrid` mode = 1 − (1 − dense)(1 − lexical) (`SEARCH_FUSION=noisy_or`, the default):
  a memory is as relevant as its strongest evidence, more when both agree, so a purely semantic
  (e.g. cross-lingual) match keeps its dense score; `weighted` (SEARCH_DENSE_WEIGHT × dense + the
  rest × lexical) and `max` are alternatives. `vector` / `keyword` modes use one part alone.
  `min_score` filters on it.

Order: `score` × memory strength, where strength = 1 − λ + λ·R and R is an Ebbinghaus retention
exp(−idle_days / S) with stability S = SEARCH_DECAY_DAYS × (1 + importance) × (1 + ln(1 +
access_count)): old, never-recalled, unimportant memories fade; every recall makes a memory
stronger. λ = SEARCH_DECAY_WEIGHT (0.1) caps the effect, so a strong match is never buried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from tenants.models import Team

from . import index, selectors, services
from .embeddings import embed_query, from_bytes, get_embedder
from .models import Memory
from .selectors import memory_to_dict
from .text import is_cjk, tokenize


@dataclass
class Candidate:
    memory_id: int
    score: float
    dense: float
    lexical: float


# The graph app registers how to find the entities read from memories, so search can attach
# them (`include_entities`) without memories importing graph (imports flow tenants <- memories
# <- graph <- lifecycle). Called as provider(team=, memory_ids=, acting_agent=).
EntitiesProvider = Callable[..., dict[int, list[dict[str, Any]]]]
_entities_provider: EntitiesProvider | None = None


def register_entities_provider(provider: EntitiesProvider) -> None:
    global _entities_provider
    _entities_provider = provider


def attach_entities(
    *, team: Team, results: list[dict[str, Any]], acting_agent: str | None
) -> list[dict[str, Any]]:
    """Adds `entities` (graph entities read from each memory; [] if none) to search results."""
    found: dict[int, list[dict[str, Any]]] = {}
    if _entities_provider is not None and results:
        found = _entities_provider(
            team=team, memory_ids=[r["id"] for r in results], acting_agent=acting_agent
        )
    for r in results:
        r["entities"] = found.get(r["id"], [])
    return results


def _filters_q(filters: dict[str, Any]) -> Q:
    q = Q()
    if "category" in filters:
        q &= Q(category=filters["category"])
    for key, value in (filters.get("metadata") or {}).items():
        q &= Q(**{f"metadata__{key}": value})
    if "created_after" in filters:
        q &= Q(created_at__gte=filters["created_after"])
    if "created_before" in filters:
        q &= Q(created_at__lt=filters["created_before"])
    return q


def fuse(dense: np.ndarray, lexical: np.ndarray, dense_weight: float) -> np.ndarray:
    mode = settings.SEARCH_FUSION
    weighted = dense_weight * dense + (1.0 - dense_weight) * lexical
    if mode == "weighted":
        return weighted
    if mode == "noisy_or":
        return 1.0 - (1.0 - dense) * (1.0 - lexical)
    if mode == "soft_or":
        # noisy-OR with the dense evidence discounted by the weight: lexical agreement ranks
        # first, a purely semantic match still keeps dense_weight x its score.
        return 1.0 - (1.0 - dense_weight * dense) * (1.0 - lexical)
    # "max": a memory is as relevant as its best evidence: the blend, or a strong dense match alone
    return np.maximum(weighted, dense)


def _score_candidates(
    ix: index.ScopeIndex,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    want: int,
    mask: np.ndarray | None,
    dense_weight: float,
    query_cjk: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(slots, score, dense, lexical) of the scope's candidates: the dense top-k and the BM25
    top-k (k = max(want, SEARCH_CANDIDATES)), each scored on both sides, then fused.

    A memory outside both lists is beaten on both sides by k others, so it cannot reach the
    first `want` of the fused order; scoring only the candidates keeps a 100k-memory scope
    to one quantised vector scan plus the postings of the query's words.
    """
    embedder = get_embedder()
    n = ix.n
    live = ix.alive[:n] if mask is None else ix.alive[:n] & mask
    k = max(want, settings.SEARCH_CANDIDATES)
    use_dense = mode != "keyword" and qvec is not None
    use_lexical = mode != "vector" and bool(qtokens)
    dense_slots = np.empty(0, dtype=np.int64)
    dense_raw = np.empty(0, dtype=np.float32)
    if use_dense:
        dense_slots, dense_raw = ix.dense_top(qvec, k, mask)  # type: ignore[arg-type]
    lexical_all: np.ndarray | None = None
    lexical_slots = np.empty(0, dtype=np.int64)
    if use_lexical:
        bm25, reference = ix.bm25_normalised(qtokens)
        if reference > 0:
            lexical_all = np.where(live, np.minimum(bm25 / reference, 1.0), 0.0)
            hits = np.flatnonzero(lexical_all > 0)
            if len(hits) > k:
                hits = hits[np.argpartition(-lexical_all[hits], k - 1)[:k]]
            lexical_slots = hits.astype(np.int64)
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
    lexical = (
        lexical_all[slots].astype(np.float32)
        if lexical_all is not None
        else np.zeros(len(slots), dtype=np.float32)
    )
    if mode == "vector":
        score = dense
    elif mode == "keyword":
        score = lexical
    else:
        score = fuse(dense, lexical, dense_weight)
        if use_dense:
            # Cross-script: BM25 cannot see the memory, so the embedding's full score stands
            # instead of its discounted share.
            score = np.where(other_script, np.maximum(score, dense), score)
    return slots, score, dense, lexical


def _top_candidates(
    ix: index.ScopeIndex,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    want: int,
    allowed: set[int] | None,
    dense_weight: float,
    query_cjk: bool = False,
) -> list[Candidate]:
    with ix.lock:
        if ix.n == 0:
            return []
        mask = None
        if allowed is not None:
            mask = np.isin(ix.ids[: ix.n], np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
        slots, score, dense, lexical = _score_candidates(
            ix, qvec, qtokens, mode, want, mask, dense_weight, query_cjk
        )
        order = np.argsort(-score, kind="stable")[:want]
        return [
            Candidate(int(ix.ids[slots[i]]), float(score[i]), float(dense[i]), float(lexical[i]))
            for i in order
            if score[i] > 0.0
        ]


def _shared_candidates(
    team: Team,
    agent_id: str,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    dense_weight: float,
    filters: dict[str, Any],
    query_cjk: bool = False,
) -> list[Candidate]:
    """Memories other agents shared with this one: few, so scored directly from their rows."""
    ids = selectors.shared_memory_ids(team=team, agent_id=agent_id)
    if not ids:
        return []
    embedder = get_embedder()
    rows = Memory.objects.filter(
        Q(team=team, pk__in=ids, superseded_by__isnull=True) & _filters_q(filters)
    )
    out = []
    qset = set(qtokens)
    for m in rows.only("id", "content", "embedding", "embedding_model"):
        dense = 0.0
        if qvec is not None and m.embedding and m.embedding_model == embedder.model_name:
            vec = from_bytes(m.embedding)
            if vec.shape == qvec.shape:
                raw = float(vec @ qvec)
                dense = float(
                    embedder.cross_score(raw, query_cjk=query_cjk)
                    if is_cjk(m.content) != query_cjk
                    else embedder.score(raw)
                )
        # Too few documents for a meaningful idf: plain share of the query words present.
        lexical = len(qset & set(tokenize(m.content))) / len(qset) if qset else 0.0
        score = (
            dense
            if mode == "vector"
            else lexical
            if mode == "keyword"
            else float(fuse(np.array([dense]), np.array([lexical]), dense_weight)[0])
        )
        if mode == "hybrid" and is_cjk(m.content) != query_cjk:
            score = max(score, dense)  # cross-script, as in _score_candidates
        if score > 0:
            out.append(Candidate(m.pk, score, dense, lexical))
    return out


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


def _apply_budgets(
    items: list[tuple[Memory, float]], max_chars_per_memory: int, max_total_chars: int
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    total = 0
    for memory, score in items:
        content = memory.content
        if max_chars_per_memory and len(content) > max_chars_per_memory:
            content = content[:max_chars_per_memory] + "..."
        if max_total_chars and total + len(content) > max_total_chars:
            break
        total += len(content)
        out.append(memory_to_dict(memory, score=score, content=content))
    return out


def memory_search(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    query: str,
    limit: int = 10,
    min_score: float = 0.3,
    max_chars_per_memory: int = 0,
    max_total_chars: int = 0,
    mode: str = "hybrid",
    filters: dict[str, Any] | None = None,
    include_shared: bool = False,
    include_team: bool = False,
    touch: bool = True,
) -> list[dict[str, Any]]:
    """Relevant memories of one scope (plus the team's and shared ones on request), best first.

    touch=False: a reviewer looking, not an agent recalling — access counts stay as they are.
    touch=True touches only the results scoring at least max(min_score, SEARCH_TOUCH_MIN_SCORE).
    """
    filters = filters or {}
    if not query.strip():
        return memory_recent(
            team=team,
            scope=scope,
            agent_id=agent_id,
            limit=limit,
            filters=filters,
            max_chars_per_memory=max_chars_per_memory,
            max_total_chars=max_total_chars,
        )
    embedder = get_embedder()
    qvec = embed_query(query) if mode != "keyword" else None
    qtokens = tokenize(query)
    query_cjk = is_cjk(query)
    dense_weight = settings.SEARCH_DENSE_WEIGHT
    want = max(limit * 3, 30)
    scopes = [(scope, agent_id if scope == Memory.SCOPE_PERSONAL else "")]
    if include_team and scope == Memory.SCOPE_PERSONAL:
        scopes.append((Memory.SCOPE_TEAM, ""))
    candidates: list[Candidate] = []
    for sc, ag in scopes:
        allowed = None
        if filters:
            base = Memory.objects.filter(team=team, scope=sc, superseded_by__isnull=True)
            if sc == Memory.SCOPE_PERSONAL:
                base = base.filter(agent_id=ag)
            allowed = set(base.filter(_filters_q(filters)).values_list("id", flat=True))
        ix = index.registry.get(team_id=team.id, scope=sc, agent_id=ag, embedder=embedder)
        candidates.extend(
            _top_candidates(ix, qvec, qtokens, mode, want, allowed, dense_weight, query_cjk)
        )
    shared: set[int] = set()
    if include_shared and scope == Memory.SCOPE_PERSONAL:
        shared_candidates = _shared_candidates(
            team, agent_id, qvec, qtokens, mode, dense_weight, filters, query_cjk
        )
        shared = {c.memory_id for c in shared_candidates}
        candidates.extend(shared_candidates)
    candidates = [c for c in candidates if c.score >= min_score]
    if not candidates:
        return []
    best: dict[int, Candidate] = {}
    for c in candidates:
        if c.memory_id not in best or c.score > best[c.memory_id].score:
            best[c.memory_id] = c
    ranked = sorted(best.values(), key=lambda c: -c.score)[:want]
    rows = Memory.objects.defer("embedding", "search_tokens").in_bulk([c.memory_id for c in ranked])
    # The rows come from the database and are checked against the team and scopes searched: a
    # stale index entry can never leak or resurrect anything. Should one be missing, that scope's
    # index is rebuilt next time.
    allowed_scopes = {(sc, ag) for sc, ag in scopes}
    rows = {
        mid: m
        for mid, m in rows.items()
        if m.team_id == team.id
        and m.superseded_by_id is None
        and (
            (m.scope, m.agent_id if m.scope == Memory.SCOPE_PERSONAL else "") in allowed_scopes
            or mid in shared
        )
    }
    if len(rows) < len(ranked):
        for sc, ag in scopes:
            index.registry.drop(index.scope_key(team.id, sc, ag))
    now = timezone.now()
    ordered = sorted(
        ((rows[c.memory_id], c.score) for c in ranked if c.memory_id in rows),
        key=lambda pair: -(pair[1] * strength(pair[0], now)),
    )[:limit]
    results = _apply_budgets(ordered, max_chars_per_memory, max_total_chars)
    if touch:
        # Recall is what the caller got back above the effective min_score: a min_score 0 search
        # returns junk scoring 0.005, which must not look recalled and escape cleanup.
        floor = max(min_score, settings.SEARCH_TOUCH_MIN_SCORE)
        scores = {m.pk: score for m, score in ordered}
        services.memories_touch(memory_ids=[r["id"] for r in results if scores[r["id"]] >= floor])
    return results


def memory_recent(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    limit: int,
    filters: dict[str, Any] | None = None,
    max_chars_per_memory: int = 0,
    max_total_chars: int = 0,
) -> list[dict[str, Any]]:
    """Newest first; what an empty search query returns too. Counts as recall (touches)."""
    qs = Memory.objects.filter(team=team, scope=scope, superseded_by__isnull=True)
    if scope == Memory.SCOPE_PERSONAL:
        qs = qs.filter(agent_id=agent_id)
    if filters:
        qs = qs.filter(_filters_q(filters))
    memories = list(qs.order_by("-created_at", "-id")[:limit])
    results = _apply_budgets([(m, None) for m in memories], max_chars_per_memory, max_total_chars)  # type: ignore[misc]
    for r in results:
        r.pop("score", None)
    services.memories_touch(memory_ids=[r["id"] for r in results])
    return results
