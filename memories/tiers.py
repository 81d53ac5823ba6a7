"""Hot / warm / cold tiers of long-term memories (docs/lifecycle.md, "Tiers").

The rule reads the same curve the search's ranking uses (retrieval.scoring.strength): retention
R = exp(−idle_days / S), stability S = SEARCH_DECAY_DAYS × (1 + importance) × (1 + ln(1 +
access_count)). So importance, recalls and idleness decide together, and a memory the ranking
already fades is the one that leaves the index:

* hot — pinned, importance ≥ TIER_HOT_IMPORTANCE, or R ≥ TIER_HOT_RETENTION;
* cold — R < TIER_COLD_RETENTION (never pinned or important ones);
* warm — in between.

Hot and warm are in the in-process search index; cold memories are only in the database: out of
everyday search (and of the index's RAM), found by a search with `include_cold`, readable by id,
exported, traceable. An agent's explicit access (an `include_cold` hit it is given, a read by
id) brings a cold memory back to hot. Every move into or out of cold is logged as an index
change in the same transaction, so every process's index follows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from tenants.models import Team

from .models import Memory, MemoryScope, MemoryTier
from .retrieval import index

# Rows read and moved per transaction by `memories_retier`.
RETIER_CHUNK = 2000


def retention(
    *,
    importance: float,
    access_count: int,
    last_accessed: datetime | None,
    created_at: datetime,
    now: datetime,
) -> float:
    """The Ebbinghaus retention of a memory (the curve of retrieval.scoring.strength)."""
    last = last_accessed or created_at
    idle_days = max((now - last).total_seconds() / 86400.0, 0.0)
    stability = settings.SEARCH_DECAY_DAYS * (1.0 + importance) * (1.0 + math.log1p(access_count))
    return math.exp(-idle_days / max(stability, 1e-6))


def tier_for(
    *,
    importance: float,
    access_count: int,
    last_accessed: datetime | None,
    created_at: datetime,
    pinned: bool,
    now: datetime,
) -> str:
    """The tier the rule gives a memory now (module docstring)."""
    if pinned or importance >= settings.TIER_HOT_IMPORTANCE:
        return MemoryTier.HOT
    r = retention(
        importance=importance,
        access_count=access_count,
        last_accessed=last_accessed,
        created_at=created_at,
        now=now,
    )
    if r >= settings.TIER_HOT_RETENTION:
        return MemoryTier.HOT
    if r < settings.TIER_COLD_RETENTION:
        return MemoryTier.COLD
    return MemoryTier.WARM


@dataclass
class RetierResult:
    examined: int = 0
    # "hot->warm": n, ... : how many memories each move took.
    moves: dict[str, int] = field(default_factory=dict)


def _log_cold_moves(rows: Iterable[tuple[int, str, str, str]]) -> None:
    """Index changes for memories that entered or left cold: (id, team_id, scope, agent_id)."""
    by_scope: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for mid, team_id, scope, agent_id in rows:
        by_scope[(team_id, scope, agent_id if scope == MemoryScope.PERSONAL else "")].append(mid)
    for (team_id, scope, agent_id), ids in by_scope.items():
        # Not `deleted`: the index re-reads the row and leaves it out (cold) or adds it back.
        index.log_changes(
            team_id=team_id, scope=scope, agent_id=agent_id, memory_ids=ids, deleted=False
        )


def memories_set_tier(
    *,
    team: Team,
    memory_ids: list[int],
    tier: str,
    accessed: bool = False,
    still: QuerySet[Memory] | None = None,
) -> list[int]:
    """Moves the team's given memories to `tier` (those not there already) -> the ids moved.
    `accessed` also sets their `last_accessed`, so the tier rule agrees with the move (a
    promotion). The index changes are written in the same transaction as the update. `still`
    is what a memory must still match once locked (a cleanup's criteria: one pinned or recalled
    since it was chosen is not moved)."""
    if not memory_ids:
        return []
    now = timezone.now()
    fields: dict[str, object] = {"tier": tier, "tier_changed_at": now}
    if accessed:
        fields["last_accessed"] = now
    with transaction.atomic():
        moving = list(
            (still if still is not None else Memory.objects.all())
            .filter(team=team, pk__in=memory_ids)
            .exclude(tier=tier)
            .select_for_update()
            .values_list("pk", "team_id", "scope", "agent_id", "tier")
        )
        if not moving:
            return []
        Memory.objects.filter(pk__in=[m[0] for m in moving]).update(**fields)
        _log_cold_moves(
            m[:4] for m in moving if MemoryTier.COLD in (m[4], tier)
        )  # hot <-> warm changes nothing the index holds
    return [m[0] for m in moving]


def memories_promote(*, team: Team, memory_ids: list[int]) -> int:
    """An agent asked for these memories: the cold ones among them become hot again, dated as
    accessed now (else the next tiering pass would find them as idle as before)."""
    if not memory_ids:
        return 0
    cold = list(
        Memory.objects.filter(team=team, pk__in=memory_ids, tier=MemoryTier.COLD).values_list(
            "pk", flat=True
        )
    )
    return len(memories_set_tier(team=team, memory_ids=cold, tier=MemoryTier.HOT, accessed=True))


def memories_retier(*, team: Team | None = None, now: datetime | None = None) -> RetierResult:
    """Applies the tier rule to every live memory (of one team, or all): the beat task.

    Idempotent and cheap to repeat: a memory whose tier is right is not written. Reads in id
    chunks (values only, no vectors) and moves each chunk in one transaction.
    """
    now = now or timezone.now()
    result = RetierResult()
    qs = Memory.objects.filter(superseded_by__isnull=True)
    if team is not None:
        qs = qs.filter(team=team)
    last_id = 0
    while True:
        rows = list(
            qs.filter(pk__gt=last_id)
            .order_by("pk")
            .values_list(
                "pk",
                "team_id",
                "scope",
                "agent_id",
                "tier",
                "importance",
                "access_count",
                "last_accessed",
                "created_at",
                "pinned",
            )[:RETIER_CHUNK]
        )
        if not rows:
            break
        last_id = rows[-1][0]
        result.examined += len(rows)
        targets: dict[str, list[tuple[int, str, str, str, str]]] = defaultdict(list)
        for mid, team_id, scope, agent_id, tier, imp, count, last, created, pinned in rows:
            want = tier_for(
                importance=imp,
                access_count=count,
                last_accessed=last,
                created_at=created,
                pinned=pinned,
                now=now,
            )
            if want != tier:
                targets[want].append((mid, team_id, scope, agent_id, tier))
        for want, moving in targets.items():
            with transaction.atomic():
                # Only rows still in the tier read above: an access or a manual move in between
                # wins over this pass.
                for old in {m[4] for m in moving}:
                    ids = [m[0] for m in moving if m[4] == old]
                    changed = Memory.objects.filter(pk__in=ids, tier=old).update(
                        tier=want, tier_changed_at=now
                    )
                    key = f"{old}->{want}"
                    result.moves[key] = result.moves.get(key, 0) + changed
                _log_cold_moves(m[:4] for m in moving if MemoryTier.COLD in (m[4], want))
    return result
