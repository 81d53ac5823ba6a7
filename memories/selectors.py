"""Reads for memories. Every read takes the caller's team explicitly."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import (
    Case,
    Count,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.utils import timezone

from core.errors import Forbidden, NotFound
from tenants.models import Agent, Team

from .filters import filters_q
from .models import (
    Memory,
    MemoryRevision,
    MemoryScope,
    MemoryShare,
    MemoryTier,
    Procedure,
    ProcedureChange,
    ProcedureRevision,
    ProcedureStatus,
    ProfileField,
    ProfileRevision,
)

READ = "read"
WRITE = "write"
DELETE = "delete"


def memory_get(*, team: Team, memory_id: int, scope: str | None = None) -> Memory:
    """A memory of the caller's team; another team's id is 404 exactly like a missing one."""
    if not 0 < memory_id < 2**63:
        raise NotFound("memory")
    qs = Memory.objects.filter(team=team, pk=memory_id)
    if scope is not None:
        qs = qs.filter(scope=scope)
    memory = qs.first()
    if memory is None:
        raise NotFound("memory")
    return memory


def memories_of_scope(*, team: Team, scope: str | None, memory_ids: list[int]) -> dict[int, Memory]:
    """The memories of the team's `scope` (None: either scope) among `memory_ids`, by id; the
    others (missing, another scope, another team) are simply absent, as memory_get's 404 would
    not tell them apart."""
    wanted = [i for i in memory_ids if 0 < i < 2**63]
    memories = Memory.objects.filter(team=team)
    if scope is not None:
        memories = memories.filter(scope=scope)
    return memories.in_bulk(wanted)


def share_permission(*, memory: Memory, agent_id: str) -> str | None:
    return (
        MemoryShare.objects.filter(memory=memory, agent_id=agent_id)
        .values_list("permission", flat=True)
        .first()
    )


def check_memory_access(*, memory: Memory, acting_agent: str | None, action: str) -> None:
    """Agent-scoped keys: `acting_agent` is the agent the key is bound to (None = team-wide key)."""
    if acting_agent is None or memory.scope == MemoryScope.TEAM:
        return
    if memory.agent_id == acting_agent:
        return
    if action == DELETE:
        raise Forbidden("only the owning agent may delete a personal memory")
    permission = share_permission(memory=memory, agent_id=acting_agent)
    if permission == WRITE or (permission == READ and action == READ):
        return
    raise Forbidden("this personal memory belongs to another agent and is not shared with yours")


def memory_filters_q(filters: Mapping[str, Any]) -> Q:
    """The search `filters` (memories.filters: legacy keys and operators, checked by
    parse_filters) as a Q, to AND with the tenant's scope."""
    return filters_q(filters)


def unexpired_q(now: datetime) -> Q:
    """Memories search and listings show: no `expires_at`, one still ahead, or pinned (a pin
    protects from expiry as from cleanup; Memory.expired is the same test in Python)."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now) | Q(pinned=True)


def memory_recent(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    limit: int,
    filters: Mapping[str, Any] | None = None,
    include_cold: bool = False,
) -> list[Memory]:
    """The scope's newest live memories first (what an empty search query returns); cold ones
    (memories.tiers) only with `include_cold`."""
    qs = Memory.objects.filter(
        unexpired_q(timezone.now()), team=team, scope=scope, superseded_by__isnull=True
    )
    if not include_cold:
        qs = qs.exclude(tier=MemoryTier.COLD)
    if scope == MemoryScope.PERSONAL:
        qs = qs.filter(agent_id=agent_id)
    if filters:
        qs = qs.filter(memory_filters_q(filters))
    return list(qs.order_by("-created_at", "-id")[:limit])


def memory_same_content_id(*, team: Team, scope: str, agent_id: str, chash: str) -> int | None:
    """The oldest live memory of the scope whose content hash is `chash`, or None: what a write
    with dedup (and a restore from the trash) must not store a second time. Team memories of any
    author count; personal ones only the agent's.

    The write runs this under the scope's lock (memories.locks), so its cost is paid by every
    writer of the scope waiting for the lock. It reads the matching ids from the index `mem_hash`
    (team, scope, content_hash, agent_id), a few entries whatever the table's size, and takes the
    oldest here: asked for ORDER BY id LIMIT 1 instead, MariaDB and SQLite may prefer an index
    that is already in id order (the primary key, team_id) and walk it until a row matches, which
    was the whole table (every team's memories) on each team-scope write when none did.
    """
    qs = Memory.objects.filter(
        team=team, scope=scope, content_hash=chash, superseded_by__isnull=True
    )
    if scope == MemoryScope.PERSONAL:
        qs = qs.filter(agent_id=agent_id)
    return min(qs.order_by().values_list("id", flat=True), default=None)


def personal_owners(*, team: Team) -> list[str]:
    """Agents of the team that own personal memories."""
    return list(
        Memory.objects.filter(team=team, scope=MemoryScope.PERSONAL)
        .values_list("agent_id", flat=True)
        .distinct()
    )


def tier_counts(*, team: Team, agent_id: str | None = None) -> dict[str, int]:
    """Live memories per tier (memories.tiers), the team's or one agent's: the console."""
    qs = Memory.objects.filter(team=team, superseded_by__isnull=True)
    if agent_id is not None:
        qs = qs.filter(agent_id=agent_id)
    counts = dict.fromkeys(MemoryTier.values, 0)
    for row in qs.values("tier").annotate(n=Count("id")):
        counts[row["tier"]] = row["n"]
    return counts


def memory_counts(*, team: Team) -> dict[str, int]:
    """Long-term memories per scope for the team."""
    rows = Memory.objects.filter(team=team).values("scope").annotate(n=Count("id"))
    return {r["scope"]: r["n"] for r in rows}


def memory_shares(*, memory: Memory) -> list[MemoryShare]:
    """Who a personal memory is shared with, by agent id."""
    return list(MemoryShare.objects.filter(memory=memory).order_by("agent_id"))


def shared_memory_ids(*, team: Team, agent_id: str) -> list[int]:
    return list(
        MemoryShare.objects.filter(team=team, agent_id=agent_id).values_list("memory_id", flat=True)
    )


def memory_revisions(*, team: Team, memory: Memory) -> QuerySet[MemoryRevision]:
    return MemoryRevision.objects.filter(team=team, memory=memory).order_by("-created_at", "-id")


def memories_needing_tokens(*, team: Team | None, stamp: str) -> list[int]:
    """Memories whose stored search tokens are missing or from another tokenizer: their tokens
    do not start with `stamp` (memories.retrieval.text.tokens_stamp())."""
    qs = Memory.objects.exclude(search_tokens__startswith=stamp)
    if team is not None:
        qs = qs.filter(team=team)
    return list(qs.order_by("id").values_list("id", flat=True))


def memories_needing_embedding(
    *, team: Team | None, model_name: str, everything: bool = False
) -> list[int]:
    qs = Memory.objects.all()
    if team is not None:
        qs = qs.filter(team=team)
    if not everything:
        qs = qs.exclude(embedding_model=model_name)
    return list(qs.order_by("id").values_list("id", flat=True))


def memories_whose_content(*, team: Team | None, matches: Callable[[str], bool]) -> list[int]:
    """Ids of the memories whose content `matches` (a test SQL cannot make, e.g. "the embedding
    reads it differently now": reembed_memories --traditional), read in chunks."""
    qs = Memory.objects.all()
    if team is not None:
        qs = qs.filter(team=team)
    return [
        pk
        for pk, content in qs.order_by("id").values_list("id", "content").iterator(2000)
        if matches(content)
    ]


# --- Review console: the lead's team-wide list and search ----------------------------

# The `source` filter value for memories without `metadata.source` (written through the API).
SOURCE_API = "api"


def memory_review_queryset(
    *,
    team: Team,
    agent_id: str = "",
    scope: str = "",
    source: str = "",
    category: str = "",
    importance_min: float | None = None,
    importance_max: float | None = None,
    idle_days: int | None = None,
    pinned: bool | None = None,
    superseded: bool | None = False,
    tier: str = "",
) -> QuerySet[Memory]:
    """The team's memories matching the console's filters, newest first (vectors not loaded).

    `source` is `metadata.source` as lifecycle writes it ("compression", "extraction", ...);
    "api" means none (written directly through the API). Idle means neither recalled nor, when
    never recalled, created in the last `idle_days` days. `superseded`: False hides replaced
    memories (the default, like search), True shows only them, None both.
    """
    from datetime import timedelta

    from django.db.models.functions import Coalesce
    from django.utils import timezone

    qs = Memory.objects.filter(team=team).defer("embedding", "search_tokens")
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    if scope:
        qs = qs.filter(scope=scope)
    if source == SOURCE_API:
        qs = qs.filter(metadata__source__isnull=True)
    elif source:
        qs = qs.filter(metadata__source=source)
    if category:
        qs = qs.filter(category=category)
    if tier:
        qs = qs.filter(tier=tier)
    if importance_min is not None:
        qs = qs.filter(importance__gte=importance_min)
    if importance_max is not None:
        qs = qs.filter(importance__lte=importance_max)
    if idle_days is not None:
        cutoff = timezone.now() - timedelta(days=idle_days)
        qs = qs.annotate(_idle_since=Coalesce("last_accessed", "created_at")).filter(
            _idle_since__lte=cutoff
        )
    if pinned is not None:
        qs = qs.filter(pinned=pinned)
    if superseded is not None:
        qs = qs.filter(superseded_by__isnull=not superseded)
    return qs.order_by("-created_at", "-id")


def memory_review_facets(*, team: Team) -> dict[str, list[str]]:
    """The choices the console's filters offer: the team's agents, categories and sources."""
    rows = Memory.objects.filter(team=team)
    agents = set(Agent.objects.filter(team=team).values_list("agent_id", flat=True))
    agents |= set(rows.exclude(agent_id="").values_list("agent_id", flat=True).distinct())
    sources = {
        s
        for s in rows.values_list("metadata__source", flat=True).distinct()
        if isinstance(s, str) and s
    }
    return {
        "agents": sorted(agents),
        "categories": sorted(set(rows.values_list("category", flat=True).distinct())),
        "sources": [SOURCE_API, *sorted(sources - {SOURCE_API})],
    }


def memory_revision_last_id(*, memory: Memory) -> int | None:
    """The id of the memory's newest revision (None without any): tells whether a write added one."""
    return (
        MemoryRevision.objects.filter(memory=memory).order_by("-id").values_list("pk", flat=True)
    ).first()


def memory_page(
    *,
    team: Team,
    acting_agent: str | None,
    scope: str | None,
    agent_id: str,
    before_id: int | None,
    page_size: int,
    include_superseded: bool = False,
    filters: Mapping[str, Any] | None = None,
) -> tuple[list[Memory], int | None]:
    """One page of the memories this caller may read, newest written first (by id), and the id
    the next page starts below (None on the last page). Paging by id keeps a cursor valid while
    memories are added: new ones have higher ids, so nothing is skipped or repeated."""
    qs = Memory.objects.filter(team=team)
    if acting_agent is not None:
        # An agent-scoped key: its own personal memories and the team's.
        qs = qs.filter(
            Q(scope=MemoryScope.TEAM) | Q(scope=MemoryScope.PERSONAL, agent_id=acting_agent)
        )
    if scope:
        qs = qs.filter(scope=scope)
    if agent_id:
        qs = qs.filter(scope=MemoryScope.PERSONAL, agent_id=agent_id)
    if not include_superseded:
        qs = qs.filter(superseded_by__isnull=True)
    qs = qs.filter(unexpired_q(timezone.now()))
    if filters:
        qs = qs.filter(memory_filters_q(filters))
    if before_id is not None:
        qs = qs.filter(pk__lt=before_id)
    rows = list(qs.defer("embedding", "search_tokens").order_by("-id")[: page_size + 1])
    more = len(rows) > page_size
    rows = rows[:page_size]
    return rows, (rows[-1].pk if more else None)


@dataclass(frozen=True)
class MemoryHistory:
    memory: Memory
    revisions: list[MemoryRevision]  # oldest first
    supersedes: list[int]  # the memories this one replaced


def memory_history(*, memory: Memory) -> MemoryHistory:
    revisions = MemoryRevision.objects.filter(team_id=memory.team_id, memory=memory).order_by(
        "created_at", "id"
    )
    supersedes = Memory.objects.filter(team_id=memory.team_id, superseded_by=memory).order_by("id")
    return MemoryHistory(
        memory=memory,
        revisions=list(revisions),
        supersedes=list(supersedes.values_list("id", flat=True)),
    )


def procedure_list(*, team: Team, agent_id: str, status: str | None = None) -> QuerySet[Procedure]:
    """An agent's rules, oldest first (the order the agent wrote them in)."""
    qs = Procedure.objects.filter(team=team, agent_id=agent_id)
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("created_at", "id")


def procedures_of_team(
    *, team: Team, status: str | None = None, agent_id: str | None = None
) -> QuerySet[Procedure]:
    """The team's rules (the console): proposals waiting for a decision first, then by agent
    and age."""
    qs = Procedure.objects.filter(team=team)
    if status:
        qs = qs.filter(status=status)
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    waiting = Case(
        When(status=ProcedureStatus.PROPOSED, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )
    return qs.order_by(waiting, "agent_id", "created_at", "id")


def procedure_history(
    *, team: Team, agent_id: str, limit: int, procedure_id: int | None = None
) -> list[ProcedureRevision]:
    """The agent's rule changes (or one rule's), newest first: a removed rule's too."""
    qs = ProcedureRevision.objects.filter(team=team, agent_id=agent_id)
    if procedure_id is not None:
        qs = qs.filter(procedure_id=procedure_id)
    return list(qs.order_by("-id")[:limit])


def procedure_revisions_of_team(*, team: Team, procedure_id: int) -> list[ProcedureRevision]:
    """One rule's history (the console), newest first; [] for another team's id."""
    return list(
        ProcedureRevision.objects.filter(team=team, procedure_id=procedure_id).order_by("-id")
    )


def procedures_removed(
    *, team: Team, limit: int, agent_id: str | None = None
) -> list[ProcedureRevision]:
    """The team's rules removed last and not restored since (the console), with the text each
    had: the removals that are their rule's latest change."""
    latest = ProcedureRevision.objects.filter(
        team=team, procedure_id=OuterRef("procedure_id")
    ).order_by("-id")
    qs = ProcedureRevision.objects.filter(
        team=team, change=ProcedureChange.REMOVED, pk=Subquery(latest.values("pk")[:1])
    )
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    return list(qs.order_by("-id")[:limit])


def procedure_of_team(*, team: Team, procedure_id: int) -> Procedure | None:
    return Procedure.objects.filter(team=team, pk=procedure_id).first()


def procedure_get(*, team: Team, agent_id: str, procedure_id: int) -> Procedure:
    """One rule of the agent; another team's or agent's is as missing as one that never was."""
    procedure = Procedure.objects.filter(team=team, agent_id=agent_id, pk=procedure_id).first()
    if procedure is None:
        raise NotFound("procedure")
    return procedure


# --- the agent profile -------------------------------------------------------------------------


def profile_fields(*, team: Team, agent_id: str) -> list[ProfileField]:
    """An agent's profile, by key; [] for an agent without one (or of another team)."""
    return list(ProfileField.objects.filter(team=team, agent_id=agent_id).order_by("key"))


def profiles_of_team(*, team: Team, agent_id: str = "") -> list[ProfileField]:
    """Every agent's profile fields of the team (the console), by agent then key."""
    qs = ProfileField.objects.filter(team=team)
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    return list(qs.order_by("agent_id", "key"))


def profile_history(*, team: Team, agent_id: str, limit: int) -> list[ProfileRevision]:
    """The agent's profile changes, newest first."""
    qs = ProfileRevision.objects.filter(team=team, agent_id=agent_id).order_by("-id")
    return list(qs[:limit])
