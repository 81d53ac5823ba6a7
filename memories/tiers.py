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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from tenants.models import Team

from .models import ColdReason, Memory, MemoryScope, MemoryTier
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


def held_hot(*, pinned: bool, importance: float) -> bool:
    """The rule's first clause: a pinned or important memory is hot, however idle."""
    return pinned or importance >= settings.TIER_HOT_IMPORTANCE


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
    if held_hot(pinned=pinned, importance=importance):
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
    cold_reason: str = "",
) -> list[int]:
    """Moves the team's given memories to `tier` (those not there already) -> the ids moved.
    `accessed` also sets their `last_accessed`, so the tier rule agrees with the move (a
    promotion). The index changes are written in the same transaction as the update. `still`
    is what a memory must still match once locked (a cleanup's criteria: one pinned or recalled
    since it was chosen is not moved). `cold_reason` (ColdReason) says why, for a move to cold."""
    if not memory_ids:
        return []
    now = timezone.now()
    fields: dict[str, object] = {
        "tier": tier,
        "tier_changed_at": now,
        "cold_reason": cold_reason if tier == MemoryTier.COLD else "",
    }
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


# The rule's inputs and the row's place, as the tiering pass reads them.
_RULE_FIELDS = (
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
)


def _pass_target(row: tuple[Any, ...], now: datetime) -> str | None:
    """Where the tiering pass moves a row of `_RULE_FIELDS`, or None to leave it.

    The pass follows idleness, so it never takes a memory out of cold on retention alone: a
    cold memory is either idle (the rule agrees) or was demoted on purpose — a consolidated
    fragment, a cleanup candidate in its grace period — and moving those back each hour would
    undo consolidation and restart the cleanup ladder's clock forever. Cold is left by an
    access (`memories_promote`), or by a pin or an importance that makes the memory hot."""
    _, _, _, _, tier, importance, _, _, _, pinned = row
    if tier == MemoryTier.COLD and not held_hot(pinned=pinned, importance=importance):
        return None
    return _rule_target(row, now)


def _rule_target(row: tuple[Any, ...], now: datetime) -> str | None:
    """The tier the rule gives a row of `_RULE_FIELDS`, or None when it is there already."""
    _, _, _, _, tier, importance, access_count, last, created, pinned = row
    want = tier_for(
        importance=importance,
        access_count=access_count,
        last_accessed=last,
        created_at=created,
        pinned=pinned,
        now=now,
    )
    return want if want != tier else None


def memories_retier(*, team: Team | None = None, now: datetime | None = None) -> RetierResult:
    """Applies the tier rule to every live memory (of one team, or all): the beat task.

    Idempotent and cheap to repeat: a memory whose tier is right is not written. Reads in id
    chunks (values only, no vectors); the rows a chunk would move are then locked and judged
    again in one transaction, so a pin, a recall or a manual move made since the read wins over
    the pass.
    """
    now = now or timezone.now()
    qs = Memory.objects.filter(superseded_by__isnull=True)
    if team is not None:
        qs = qs.filter(team=team)
    return _move_by(qs, lambda row: _pass_target(row, now), now)


# Cold memories the tiering pass may warm back: those it cooled itself, or of unknown reason
# (cooled before reasons were recorded) that are no consolidated fragment.
_REWARMABLE = Q(cold_reason=ColdReason.IDLE) | (
    Q(cold_reason="") & ~Q(metadata__has_key="consolidated_into")
)


def memories_rewarm(*, team: Team | None = None, now: datetime | None = None) -> RetierResult:
    """Warms back the cold memories the tier rule no longer calls cold: after an operator
    lowers TIER_COLD_RETENTION (or raises the decay), the hourly pass, which never takes a
    memory out of cold on retention alone (_pass_target), leaves them where they are. Only
    memories the pass cooled itself: a cleanup candidate in its grace period and a
    consolidated fragment stay cold (Memory.cold_reason). Locked and judged again before they
    move, like the pass; idempotent."""
    now = now or timezone.now()
    qs = Memory.objects.filter(superseded_by__isnull=True, tier=MemoryTier.COLD).filter(_REWARMABLE)
    if team is not None:
        qs = qs.filter(team=team)
    return _move_by(qs, lambda row: _rule_target(row, now), now)


def _move_by(
    qs: QuerySet[Memory], target: Callable[[tuple[Any, ...]], str | None], now: datetime
) -> RetierResult:
    """Moves each row of `qs` to `target(row)` (None: leaves it), in id chunks of values
    (`_RULE_FIELDS`, no vectors); the rows a chunk would move are locked and judged again in one
    transaction, so a pin, a recall or another move made since the read wins. A move to cold
    is the rule's (ColdReason.IDLE); one into or out of cold is logged for every index."""
    result = RetierResult()
    last_id = 0
    while True:
        rows = list(
            qs.filter(pk__gt=last_id).order_by("pk").values_list(*_RULE_FIELDS)[:RETIER_CHUNK]
        )
        if not rows:
            break
        last_id = rows[-1][0]
        result.examined += len(rows)
        ids = [row[0] for row in rows if target(row) is not None]
        if not ids:
            continue
        with transaction.atomic():
            locked = list(
                qs.filter(pk__in=ids).order_by("pk").select_for_update().values_list(*_RULE_FIELDS)
            )
            moving: dict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
            for row in locked:
                want = target(row)
                if want is not None:
                    moving[(row[4], want)].append(row)
            for (old, want), moved in moving.items():
                Memory.objects.filter(pk__in=[m[0] for m in moved]).update(
                    tier=want,
                    tier_changed_at=now,
                    cold_reason=ColdReason.IDLE if want == MemoryTier.COLD else "",
                )
                key = f"{old}->{want}"
                result.moves[key] = result.moves.get(key, 0) + len(moved)
                if MemoryTier.COLD in (old, want):
                    _log_cold_moves(m[:4] for m in moved)
    return result
