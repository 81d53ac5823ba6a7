"""Hybrid retrieval: dense + BM25 fused into one calibrated score, then a gentle memory signal.

What `score` means (docs/search.md):

* `dense` — the embedding backend's calibrated cosine (embeddings.py): 0.3 is the edge of
  "related at all", 0.85 of "says the same thing", whatever the model.
* `lexical` — BM25 of the memory for the query divided by what a document of average length
  containing each query term once would score, clipped to 1. So 1.0 means "contains every query
  word", and a query term this scope never saw counts against the match.
* `score` in `hybrid` mode = 1 − (1 − dense)(1 − lexical) (`SEARCH_FUSION=noisy_or`, the default):
  a memory is as relevant as its strongest evidence, more when both agree, so a purely semantic
  (e.g. cross-lingual) match keeps its dense score; `weighted` (SEARCH_DENSE_WEIGHT × dense + the
  rest × lexical) and `max` are alternatives. `vector` / `keyword` modes use one part alone.
  `min_score` filters on it.

Order (hybrid): `rank` × memory strength, where `rank` is the fused score with conversation
context — the BM25 also reads the previous neighbour's words, and a share of the better
neighbour's rank is added, never lifting a memory above that neighbour (docs/search.md,
"Neighbours"); `score` stays the memory's own. Strength = 1 − λ + λ·R and R is an Ebbinghaus retention
exp(−idle_days / S) with stability S = SEARCH_DECAY_DAYS × (1 + importance) × (1 + ln(1 +
access_count)): old, never-recalled, unimportant memories fade; every recall makes a memory
stronger. λ = SEARCH_DECAY_WEIGHT (0.1) caps the effect, so a strong match is never buried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from memories import selectors
from memories.models import Memory, MemoryScope, MemoryTier, ProfileField
from tenants.models import Team

from . import gloss
from .backends import get_backend
from .candidates import (  # noqa: F401  (search._score_candidates etc.: bench/study, tests)
    Candidate,
    _bridge_all,
    _score_candidates,
    _top_candidates,
)
from .embeddings import embed_passages, embed_query, get_embedder
from .scoring import across_scripts, fuse, strength
from .text import is_cjk, tokenize, tokens_stamp

SearchMode = Literal["hybrid", "vector", "keyword"]


@dataclass(frozen=True, kw_only=True)
class SearchQuery:
    """One search: what the API's search body says, with the tenant made explicit.

    An empty `text` asks for the most recent memories instead (no score)."""

    team: Team
    scope: str
    agent_id: str = ""
    text: str = ""
    limit: int = 10
    min_score: float = 0.3
    max_chars_per_memory: int = 0
    max_total_chars: int = 0
    mode: SearchMode = "hybrid"
    filters: Mapping[str, Any] = field(default_factory=dict)
    include_shared: bool = False
    include_team: bool = False
    # Cold memories (memories.tiers) are out of everyday search; True searches them too.
    include_cold: bool = False
    # The recall timeout (docs/search.md, "Recall timeout"): after this many milliseconds the
    # search answers with what it has, marked partial. 0 = no limit. The entry points of an
    # agent's search fill it from the team's config (recall_timeout_ms below).
    timeout_ms: int = 0


@dataclass
class SearchHit:
    memory: Memory
    score: float | None  # None for "most recent" results
    content: str  # the memory's content after the character budgets
    entities: list[dict[str, Any]] | None = None  # attached on request by memory_recall


class SearchResults(list[SearchHit]):
    """The hits of a search, best first; `partial`: the recall timeout skipped part of it (a
    scope whose index was not loaded in time, the team or shared memories, the dictionary
    bridge), so the hits are what the rest found."""

    partial: bool = False


# The graph app registers how to find the entities read from memories, so search can attach
# them (`include_entities`) without memories importing graph (imports flow tenants <- memories
# <- graph <- lifecycle). Called as provider(team=, memory_ids=, acting_agent=).
EntitiesProvider = Callable[..., dict[int, list[dict[str, Any]]]]
_entities_provider: EntitiesProvider | None = None


def register_entities_provider(provider: EntitiesProvider) -> None:
    global _entities_provider
    _entities_provider = provider


# The team's recall timeout lives in its pipeline config (lifecycle), which memories may not
# import: lifecycle registers how to read it. Called as provider(team) -> milliseconds.
RecallTimeoutProvider = Callable[[Team], int]
_recall_timeout_provider: RecallTimeoutProvider | None = None


def register_recall_timeout_provider(provider: RecallTimeoutProvider) -> None:
    global _recall_timeout_provider
    _recall_timeout_provider = provider


def recall_timeout_ms(team: Team) -> int:
    """The team's recall timeout for SearchQuery.timeout_ms (0 = no limit, also when no
    provider is registered)."""
    return _recall_timeout_provider(team) if _recall_timeout_provider is not None else 0


def attach_entities(*, team: Team, hits: list[SearchHit], acting_agent: str | None) -> None:
    """Sets `entities` (graph entities read from each memory; [] if none) on search hits."""
    found: dict[int, list[dict[str, Any]]] = {}
    if _entities_provider is not None and hits:
        found = _entities_provider(
            team=team, memory_ids=[h.memory.pk for h in hits], acting_agent=acting_agent
        )
    for hit in hits:
        hit.entities = found.get(hit.memory.pk, [])


# Rows read and scored at a time by _direct_candidates: bounds the embeddings held at once (an
# include_cold search over 90k cold rows would otherwise hold all of them, ~180 MB at 512 dims).
DIRECT_CHUNK = 4096


def _direct_candidates(
    rows: Any,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    dense_weight: float,
    query_cjk: bool = False,
) -> list[Candidate]:
    """Memories outside the in-memory index (shared with the agent, or cold), scored straight
    from their rows: one matrix product for the dense side, and the plain share of the query
    words present for the lexical side (too few documents, or documents outside the scope's
    statistics, for a meaningful idf).

    Read in chunks of DIRECT_CHUNK rows. A row's words are its stored `search_tokens` (what the
    index reads too; tokenised again only when missing or from another tokenizer version):
    tokenising every content was most of the time of an include_cold search
    (docs/benchmarks.md, "Tiers")."""
    embedder = get_embedder()
    qset = set(qtokens)
    weight = settings.SEARCH_XLING_LEXICAL_WEIGHT
    words: tuple[frozenset[str], ...] | None = None  # the query's dictionary alternatives
    out: list[Candidate] = []
    chunk: list[tuple[int, str, Any, str, str]] = []
    fields = ("id", "content", "embedding", "embedding_model", "search_tokens")
    for row in rows.values_list(*fields).iterator(chunk_size=DIRECT_CHUNK):
        chunk.append(row)
        if len(chunk) == DIRECT_CHUNK:
            words = _score_direct_chunk(
                chunk,
                embedder,
                qvec,
                qset,
                qtokens,
                mode,
                dense_weight,
                query_cjk,
                weight,
                words,
                out,
            )
            chunk = []
    if chunk:
        _score_direct_chunk(
            chunk, embedder, qvec, qset, qtokens, mode, dense_weight, query_cjk, weight, words, out
        )
    return out


def _score_direct_chunk(
    items: list[tuple[int, str, Any, str, str]],
    embedder: Any,
    qvec: np.ndarray | None,
    qset: set[str],
    qtokens: tuple[str, ...],
    mode: str,
    dense_weight: float,
    query_cjk: bool,
    weight: float,
    words: tuple[frozenset[str], ...] | None,
    out: list[Candidate],
) -> tuple[frozenset[str], ...] | None:
    """Scores one chunk of rows into `out`; returns the query's dictionary alternatives if it
    had to compute them (cross-script rows), so later chunks reuse them."""
    n = len(items)
    dense = np.zeros(n, dtype=np.float32)
    cjk = np.fromiter((is_cjk(content) for _, content, _, _, _ in items), dtype=bool, count=n)
    if qvec is not None:
        width = qvec.shape[0] * 4
        usable = np.flatnonzero(
            np.fromiter(
                (
                    bool(emb) and model == embedder.model_name and len(emb) == width
                    for _, _, emb, model, _ in items
                ),
                dtype=bool,
                count=n,
            )
        )
        if len(usable):
            matrix = np.frombuffer(
                b"".join(bytes(items[i][2]) for i in usable), dtype="<f4"
            ).reshape(len(usable), qvec.shape[0])
            raw = matrix @ qvec.astype(np.float32)
            other = cjk[usable] != query_cjk
            dense[usable] = np.where(
                other, embedder.cross_score(raw, query_cjk=query_cjk), embedder.score(raw)
            )
    held: list[frozenset[str]] = []
    if qset:
        # text.tokens_from_storage, with the stamp read once for the chunk.
        stamp = tokens_stamp()
        cut = len(stamp)
        for _, content, _, _, stored in items:
            stored = stored or ""
            held.append(
                frozenset(stored[cut:].split() if stored.startswith(stamp) else tokenize(content))
            )
    lexical = np.array(
        [len(qset & h) / len(qset) for h in held] if qset else np.zeros(n), dtype=np.float64
    )
    dense64 = dense.astype(np.float64)
    if mode == "vector":
        score = rank = dense64
    elif mode == "keyword":
        score = rank = lexical
    else:
        score = np.asarray(fuse(dense64, lexical, dense_weight), dtype=np.float64)
        rank = score.copy()
        # Cross-script, as in _score_candidates (a plain share of the query's words here).
        for i in np.flatnonzero(cjk != query_cjk):
            at = slice(i, i + 1)
            across = order = np.maximum(score[at], dense64[at])
            if weight > 0 and qtokens and qvec is not None:
                if words is None:
                    words = gloss.alternatives(qtokens)
                if words:
                    share = np.array([sum(1 for terms in words if terms & held[i]) / len(words)])
                    across, order = across_scripts(
                        dense64[at], lexical[at], share, weight, dense_weight
                    )
            score[i], rank[i] = float(across[0]), float(order[0])
    for i in np.flatnonzero(score > 0):
        out.append(
            Candidate(
                int(items[i][0]),
                float(score[i]),
                float(dense[i]),
                float(lexical[i]),
                float(rank[i]),
            )
        )
    return words


def _shared_candidates(
    team: Team,
    agent_id: str,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    dense_weight: float,
    filters: Mapping[str, Any],
    query_cjk: bool = False,
    include_cold: bool = False,
) -> list[Candidate]:
    """Memories other agents shared with this one: few, so scored directly from their rows."""
    ids = selectors.shared_memory_ids(team=team, agent_id=agent_id)
    if not ids:
        return []
    rows = Memory.objects.filter(
        Q(team=team, pk__in=ids, superseded_by__isnull=True) & selectors.memory_filters_q(filters)
    )
    if not include_cold:
        rows = rows.exclude(tier=MemoryTier.COLD)
    return _direct_candidates(rows, qvec, qtokens, mode, dense_weight, query_cjk)


def _cold_candidates(
    team: Team,
    scope: str,
    agent_id: str,
    qvec: np.ndarray | None,
    qtokens: tuple[str, ...],
    mode: str,
    dense_weight: float,
    filters: Mapping[str, Any],
    query_cjk: bool = False,
) -> list[Candidate]:
    """A scope's cold memories (memories.tiers): not in the index, scored from their rows when
    a search asks for them (`include_cold`)."""
    rows = Memory.objects.filter(
        Q(team=team, scope=scope, tier=MemoryTier.COLD, superseded_by__isnull=True)
        & selectors.memory_filters_q(filters)
    )
    if scope == MemoryScope.PERSONAL:
        rows = rows.filter(agent_id=agent_id)
    return _direct_candidates(rows, qvec, qtokens, mode, dense_weight, query_cjk)


def _apply_budgets(
    items: list[tuple[Memory, float | None]], max_chars_per_memory: int, max_total_chars: int
) -> list[SearchHit]:
    out: list[SearchHit] = []
    total = 0
    for memory, score in items:
        content = memory.content
        if max_chars_per_memory and len(content) > max_chars_per_memory:
            content = content[:max_chars_per_memory] + "..."
        if max_total_chars and total + len(content) > max_total_chars:
            break
        total += len(content)
        out.append(SearchHit(memory=memory, score=score, content=content))
    return out


class _Deadline:
    """The recall timeout of one search (SearchQuery.timeout_ms; None = no limit)."""

    def __init__(self, timeout_ms: int) -> None:
        self.at = time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else None

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def remaining(self) -> float | None:
        return None if self.at is None else max(self.at - time.monotonic(), 0.0)


def memory_search(query: SearchQuery) -> SearchResults:
    """Relevant memories of one scope (plus the team's and shared ones on request), best first.

    Reads only: recall bookkeeping, usage counting and graph entities are the caller's
    (services.memory_recall for an agent; the review console only reads).

    With a recall timeout (`timeout_ms`) the search never blocks past it on what it can do
    without (docs/search.md, "Recall timeout"): a scope whose index is not loaded is loaded in
    the background and waited for at most the time left, then skipped; once the time is up the
    team scope, the shared memories and the dictionary bridge are skipped. The asked scope is
    always searched when its index is ready. Anything skipped marks the answer `partial`.
    """
    if not query.text.strip():
        return _recent(query)
    deadline = _Deadline(query.timeout_ms)
    partial = False
    team, scope, agent_id, mode = query.team, query.scope, query.agent_id, query.mode
    if mode == "hybrid" and not get_embedder().reads(query.text):
        # A question in a script the model never learnt: its vector is close to every memory
        # in that script, so only the words are evidence (docs/search.md, "Scripts the model
        # does not read").
        mode = "keyword"
    filters = query.filters
    backend = get_backend()
    qvec = embed_query(query.text) if mode != "keyword" else None
    qtokens = tokenize(query.text)
    query_cjk = is_cjk(query.text)
    dense_weight = settings.SEARCH_DENSE_WEIGHT
    want = max(query.limit * 3, 30)
    scopes = [(scope, agent_id if scope == MemoryScope.PERSONAL else "")]
    if query.include_team and scope == MemoryScope.PERSONAL:
        scopes.append((MemoryScope.TEAM, ""))
    candidates: list[Candidate] = []
    # The dictionary bridge runs over the whole scope (_bridge_all): left out once time is up.
    bridge_wanted = (
        mode == "hybrid"
        and qvec is not None
        and bool(qtokens)
        and settings.SEARCH_XLING_LEXICAL_WEIGHT > 0
    )
    for position, (sc, ag) in enumerate(scopes):
        if position > 0 and deadline.passed():
            partial = True  # the team scope of include_team
            continue
        allowed = None
        if filters:
            base = Memory.objects.filter(team=team, scope=sc, superseded_by__isnull=True)
            if sc == MemoryScope.PERSONAL:
                base = base.filter(agent_id=ag)
            allowed = set(
                base.filter(selectors.memory_filters_q(filters)).values_list("id", flat=True)
            )
        with_bridge = not deadline.passed()
        found = backend.scope_candidates(
            team_id=team.id,
            scope=sc,
            agent_id=ag,
            qvec=qvec,
            qtokens=qtokens,
            mode=mode,
            want=want,
            allowed=allowed,
            dense_weight=dense_weight,
            query_cjk=query_cjk,
            with_bridge=with_bridge,
            wait=deadline.remaining(),
        )
        if found is None:
            partial = True  # still loading: it serves a later search
            continue
        partial = partial or (bridge_wanted and not with_bridge)
        candidates.extend(found)
        if query.include_cold and deadline.passed():
            partial = True  # the cold rows are read from the database: skipped once time is up
        elif query.include_cold:
            candidates.extend(
                _cold_candidates(
                    team, sc, ag, qvec, qtokens, mode, dense_weight, filters, query_cjk
                )
            )
    shared: set[int] = set()
    if query.include_shared and scope == MemoryScope.PERSONAL and deadline.passed():
        partial = True
    elif query.include_shared and scope == MemoryScope.PERSONAL:
        shared_candidates = _shared_candidates(
            team,
            agent_id,
            qvec,
            qtokens,
            mode,
            dense_weight,
            filters,
            query_cjk,
            include_cold=query.include_cold,
        )
        shared = {c.memory_id for c in shared_candidates}
        candidates.extend(shared_candidates)
    candidates = [c for c in candidates if c.score >= query.min_score]
    if not candidates:
        return _results([], partial=partial)
    best: dict[int, Candidate] = {}
    for c in candidates:
        if c.memory_id not in best or c.rank > best[c.memory_id].rank:
            best[c.memory_id] = c
    ranked = sorted(best.values(), key=lambda c: -c.rank)[:want]
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
        and (query.include_cold or m.tier != MemoryTier.COLD)
        and (
            (m.scope, m.agent_id if m.scope == MemoryScope.PERSONAL else "") in allowed_scopes
            or mid in shared
        )
    }
    if len(rows) < len(ranked):
        for sc, ag in scopes:
            backend.stale(team_id=team.id, scope=sc, agent_id=ag)
    now = timezone.now()
    # Past its own expires_at: out of search at once, though still indexed until the hourly
    # pass trashes it (not a stale index, so not counted above).
    rows = {mid: m for mid, m in rows.items() if not m.expired(now)}
    ordered: list[tuple[Memory, float | None]] = [
        (memory, c.score)
        for memory, c in sorted(
            ((rows[c.memory_id], c) for c in ranked if c.memory_id in rows),
            key=lambda pair: -(pair[1].rank * strength(pair[0], now)),
        )[: query.limit]
    ]
    return _results(
        _apply_budgets(ordered, query.max_chars_per_memory, query.max_total_chars),
        partial=partial,
    )


def _results(hits: list[SearchHit], *, partial: bool = False) -> SearchResults:
    results = SearchResults(hits)
    results.partial = partial
    return results


def _recent(query: SearchQuery) -> SearchResults:
    """Newest first (no score): what an empty search query returns."""
    memories = selectors.memory_recent(
        team=query.team,
        scope=query.scope,
        agent_id=query.agent_id,
        limit=query.limit,
        filters=query.filters,
        include_cold=query.include_cold,
    )
    return _results(
        _apply_budgets(
            [(m, None) for m in memories], query.max_chars_per_memory, query.max_total_chars
        )
    )


def memory_review_search(
    *,
    team: Team,
    query: str,
    agent_id: str = "",
    scope: str = "",
    limit: int = 100,
    min_score: float = 0.3,
) -> list[tuple[int, float]]:
    """(memory id, score) of the team's memories matching `query`, best first, team-wide.

    The API's own hybrid search, run over the team scope and every agent's personal scope (or the
    one agent / scope asked for), merged by score. Cold memories are included: a lead reviews
    everything the team holds (memories.tiers), and what they find stays cold. A lead reviewing memories is not an agent
    recalling them (that would make every reviewed memory look fresh to idle cleanup and
    purges), so this only reads.
    """
    scopes: list[tuple[str, str]] = []
    if scope in ("", MemoryScope.TEAM):
        # A team memory's agent_id is its author: with an agent asked for, only theirs are kept.
        scopes.append((MemoryScope.TEAM, ""))
    if scope in ("", MemoryScope.PERSONAL):
        owners = [agent_id] if agent_id else selectors.personal_owners(team=team)
        scopes.extend((MemoryScope.PERSONAL, a) for a in sorted(owners))
    scored: dict[int, float] = {}
    for sc, ag in scopes:
        for hit in memory_search(
            SearchQuery(
                team=team,
                scope=sc,
                agent_id=ag,
                text=query,
                limit=limit,
                min_score=min_score,
                include_cold=True,
            )
        ):
            if sc == MemoryScope.TEAM and agent_id and hit.memory.agent_id != agent_id:
                continue
            score = float(hit.score or 0.0)
            scored[hit.memory.pk] = max(scored.get(hit.memory.pk, 0.0), score)
    return sorted(scored.items(), key=lambda pair: -pair[1])[:limit]


# --- profile fields in a search (include_profile) ---------------------------------------------

# At most this many profile fields come with a search: the profile is read whole elsewhere
# (GET /profile/<agent_id>); a search adds only the fields it is about.
PROFILE_SEARCH_LIMIT = 5


@dataclass
class ProfileHit:
    field: ProfileField
    score: float


# How people ask about the well-known keys, in English and Chinese: matched with the field, so
# "what does the user do for a living" finds `occupation` and 用户住在哪个城市 `location`. No
# "user" in them: every field is about the user, so the word tells them apart from nothing.
PROFILE_KEY_WORDS = {
    "occupation": "job work profession role what they do for a living 职业 工作 做什么",
    "employer": "employer company organisation workplace where they work 公司 单位 在哪工作",
    "location": "location city country region home where they live 住在 城市 所在地 哪里",
    "timezone": "timezone time zone local time 时区 时间",
    "language": "language speaks answers in 语言 说什么语言",
    "programming_language": "programming language codes in 编程语言",
    "tools": "tools editor software works with 工具 软件",
    "cloud_platform": "cloud platform hosting where systems run deploy 云平台 云服务",
}


def _profile_text(key: str, value: str) -> str:
    """What a field is matched as: its key in words, how people ask about a well-known key, and
    the value — whatever language the value is in."""
    return f"{key.replace('_', ' ')} ({PROFILE_KEY_WORDS.get(key, '')}): {value}"


def profile_search(
    *, team: Team, agent_id: str, text: str, min_score: float, limit: int = PROFILE_SEARCH_LIMIT
) -> list[ProfileHit]:
    """The agent's profile fields a search is about, best first: each scored as its text
    (`_profile_text`) with the scale of memory scores — the calibrated dense score (cross-script
    curve across scripts, joined by the dictionary's word evidence as for memories) fused with
    the share of the query's words it holds — and kept at or above `min_score`. The profile is
    small (at most 100 fields) and its passage vectors are cached by the embedder."""
    fields = selectors.profile_fields(team=team, agent_id=agent_id)
    if not fields or not text.strip():
        return []
    embedder = get_embedder()
    texts = [_profile_text(f.key, f.value) for f in fields]
    qvec = embed_query(text)
    raw = embed_passages(texts) @ qvec
    qtokens = tokenize(text)
    qset = set(qtokens)
    query_cjk = is_cjk(text)
    reads = embedder.reads(text)
    words = gloss.alternatives(qtokens) if qtokens else []
    weight = settings.SEARCH_XLING_LEXICAL_WEIGHT
    hits: list[ProfileHit] = []
    for f, body, r in zip(fields, texts, raw, strict=True):
        held = set(tokenize(body)) | set(tokenize(f.value))
        lexical = len(qset & held) / len(qset) if qset else 0.0
        other = is_cjk(body) != query_cjk
        dense = float(
            0.0
            if not reads  # the words alone, as in memory_search
            else embedder.cross_score(np.array([r]), query_cjk=query_cjk)[0]
            if other
            else embedder.score(np.array([r]))[0]
        )
        score = float(fuse(np.array([dense]), np.array([lexical]), settings.SEARCH_DENSE_WEIGHT)[0])
        if other and weight > 0 and words:
            share = sum(1 for terms in words if terms & held) / len(words)
            score = float(
                across_scripts(
                    np.array([dense]),
                    np.array([lexical]),
                    np.array([share]),
                    weight,
                    settings.SEARCH_DENSE_WEIGHT,
                )[0][0]
            )
        if score >= min_score:
            hits.append(ProfileHit(field=f, score=score))
    hits.sort(key=lambda h: -h.score)
    return hits[:limit]
