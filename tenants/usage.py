"""Searches and writes per agent per day, counted in the cache and flushed to UsageDay in batches.

The hot path (every memory search and write) must not pay a database write: `usage_record`
costs one `cache.incr` (an atomic INCR in Redis, a locked add in the in-process cache). Counters
are flushed by `usage_flush`, from a beat task every minute (`tenants.flush_usage`) and before
the console dashboard reads, so the embedded mode, which has no beat, is right too.

Key layout (all expire after KEY_TTL_SECONDS; a day's keys are only written that day):

* `usage:<day>:<team>|<agent>|<kind>`: the counter, counts not yet flushed;
* `usage:<day>:n`: how many counters exist that day, and `usage:<day>:slot:<i>` the i-th one's
  suffix. Django's cache cannot list keys (and Redis KEYS would block the server), so a counter
  registers itself in a numbered slot (an atomic INCR gives the number) the first time it is
  created; the flush reads the slots with get_many.

The flush subtracts what it wrote from each counter (`decr` by the amount read), so increments
that land between the read and the write are kept for the next flush. A cache lock keeps two
flushes from writing the same counts twice. Counting is best effort: when the cache is down,
counts are skipped (a dependency that is down degrades only what needs it), and an in-process
cache that evicts a counter loses its unflushed counts.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import date, timedelta

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from .models import Team, UsageDay

logger = logging.getLogger(__name__)

KIND_SEARCH = "search"
KIND_WRITE = "write"
KINDS = (KIND_SEARCH, KIND_WRITE)
_FIELD = {KIND_SEARCH: "searches", KIND_WRITE: "writes"}

KEY_TTL_SECONDS = 3 * 24 * 3600
FLUSH_LOCK_KEY = "usage:flush-lock"
FLUSH_LOCK_SECONDS = 60

# As for the rate limiter: when the cache is unreachable, remember it briefly so each request
# does not pay a connect timeout.
_cache_down_until = 0.0
_CACHE_RETRY_SECONDS = 5.0


def _day_prefix(day: date) -> str:
    return f"usage:{day.isoformat()}:"


def usage_record(*, team: Team, agent_id: str | None, kind: str) -> None:
    """Counts one search or write of `agent_id` ("" or None: team-wide). Never raises."""
    global _cache_down_until
    now = time.monotonic()
    if now < _cache_down_until:
        return
    prefix = _day_prefix(timezone.localdate())
    suffix = f"{team.id}|{agent_id or ''}|{kind}"
    key = prefix + suffix
    try:
        try:
            cache.incr(key)
        except ValueError:
            # First count of the day for this agent and kind: create and register the counter.
            if cache.add(key, 0, timeout=KEY_TTL_SECONDS):
                cache.add(prefix + "n", 0, timeout=KEY_TTL_SECONDS)
                slot = cache.incr(prefix + "n")
                cache.set(f"{prefix}slot:{slot}", suffix, timeout=KEY_TTL_SECONDS)
            cache.incr(key)
    except Exception:
        _cache_down_until = now + _CACHE_RETRY_SECONDS
        logger.warning(
            "usage counters: cache unreachable; not counting for %s s", _CACHE_RETRY_SECONDS
        )


@dataclass(frozen=True)
class _Pending:
    key: str
    day: date
    team_id: str
    agent_id: str
    kind: str
    count: int


def _pending(day: date) -> list[_Pending]:
    prefix = _day_prefix(day)
    n = cache.get(prefix + "n") or 0
    if not n:
        return []
    slots = cache.get_many([f"{prefix}slot:{i}" for i in range(1, int(n) + 1)])
    suffixes = {prefix + s: s for s in slots.values() if isinstance(s, str)}
    counts = cache.get_many(list(suffixes))
    out: list[_Pending] = []
    for key, value in counts.items():
        if not isinstance(value, int) or value <= 0:
            continue
        team_id, agent_id, kind = suffixes[key].split("|", 2)
        if kind in _FIELD:
            out.append(_Pending(key, day, team_id, agent_id, kind, value))
    return out


def usage_flush() -> int:
    """Writes the counted searches and writes to UsageDay; returns how many counts it moved.

    A constant number of queries whatever the number of agents and days (one read of the rows
    concerned, one bulk insert, one bulk update). Never raises for a cache outage.
    """
    try:
        if not cache.add(FLUSH_LOCK_KEY, 1, timeout=FLUSH_LOCK_SECONDS):
            return 0  # another flush is running; it moves these counts
    except Exception:
        return 0
    try:
        today = timezone.localdate()
        # Yesterday too: counts made just before midnight are flushed after it.
        pending = _pending(today - timedelta(days=1)) + _pending(today)
        if not pending:
            return 0
        return _write(pending)
    except Exception:
        logger.warning("usage counters: flush failed", exc_info=True)
        return 0
    finally:
        with contextlib.suppress(Exception):  # the lock expires on its own
            cache.delete(FLUSH_LOCK_KEY)


def _write(pending: list[_Pending]) -> int:
    totals: dict[tuple[str, str, date], dict[str, int]] = {}
    for p in pending:
        row = totals.setdefault((p.team_id, p.agent_id, p.day), {"searches": 0, "writes": 0})
        row[_FIELD[p.kind]] += p.count
    team_ids = {t for t, _, _ in totals}
    days = {d for _, _, d in totals}
    with transaction.atomic():
        # Teams deleted since the counts were made: their counts are dropped.
        live = set(Team.objects.filter(id__in=team_ids).values_list("id", flat=True))
        existing = {
            (u.team_id, u.agent_id, u.day): u
            for u in UsageDay.objects.select_for_update().filter(team_id__in=live, day__in=days)
        }
        new: list[UsageDay] = []
        changed: list[UsageDay] = []
        for (team_id, agent_id, day), add in totals.items():
            if team_id not in live:
                continue
            found = existing.get((team_id, agent_id, day))
            if found is None:
                new.append(UsageDay(team_id=team_id, agent_id=agent_id, day=day, **add))
            else:
                found.searches += add["searches"]
                found.writes += add["writes"]
                found.updated_at = timezone.now()  # bulk_update does not apply auto_now
                changed.append(found)
        if new:
            UsageDay.objects.bulk_create(new)
        if changed:
            UsageDay.objects.bulk_update(changed, ["searches", "writes", "updated_at"])
        # Subtract what was written, inside the transaction: if the cache fails here the rows
        # roll back, so a count is at worst lost, never written twice.
        for p in pending:
            cache.decr(p.key, p.count)
    return sum(p.count for p in pending)
