"""The dashboard's numbers for one team: aggregate queries only.

Every count is a GROUP BY in the database (by day with TruncDate, by scope, source, status or
agent), so the number of queries is fixed (pinned in tests/test_console_dashboard.py) whatever
the number of agents, days or rows. Days are the server's TIME_ZONE dates (UTC by default);
TruncDate and the JSON key extraction used here work on SQLite and MariaDB alike.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Count, F, Q, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import TruncDate
from django.utils import timezone

from lifecycle.models import JobRun, JobStatus
from memories.models import Memory, MemoryScope
from tenants.models import Team, UsageDay

NO_SOURCE = "(no source)"
OTHER_SOURCES = "(other)"
MAX_SOURCES = 6  # the most frequent sources are drawn, the rest summed as OTHER_SOURCES
TOP_AGENTS = 10
SCOPES = (MemoryScope.PERSONAL, MemoryScope.TEAM)


@dataclass
class Window:
    days: list[date]
    start: datetime  # aware, the first day's midnight

    @classmethod
    def last(cls, n: int) -> Window:
        today = timezone.localdate()
        days = [today - timedelta(days=n - 1 - i) for i in range(n)]
        start = timezone.make_aware(datetime.combine(days[0], time.min))
        return cls(days, start)


@dataclass
class MemoryCounts:
    # per day, per key: memories created that day that still exist
    by_scope_daily: dict[str, list[int]]
    by_source_daily: dict[str, list[int]]
    # memories created before the window (the cumulative curves' starting point)
    scope_before: dict[str, int]
    source_before: dict[str, int]

    def cumulative(
        self, daily: dict[str, list[int]], before: dict[str, int]
    ) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for key, values in daily.items():
            running = before.get(key, 0)
            acc = []
            for v in values:
                running += v
                acc.append(running)
            out[key] = acc
        return out


def _source_name(value: object) -> str:
    # metadata.source is free-form JSON: a missing or empty one is NO_SOURCE, a number its text.
    return NO_SOURCE if value is None or value == "" else str(value)


def _as_day(value: date | datetime) -> date:
    # TruncDate gives a date; some backends hand back a datetime at midnight.
    return value.date() if isinstance(value, datetime) else value


def memory_counts(*, team: Team, window: Window) -> MemoryCounts:
    """Memories (current rows) by creation day, by scope and by `metadata.source`: two queries."""
    index = {d: i for i, d in enumerate(window.days)}
    n = len(window.days)
    source = KeyTextTransform("source", "metadata")
    in_window = (
        Memory.objects.filter(team=team, created_at__gte=window.start)
        .annotate(day=TruncDate("created_at"), source=source)
        .values("day", "scope", "source")
        .annotate(n=Count("id"))
        .order_by()
    )
    before = (
        Memory.objects.filter(team=team, created_at__lt=window.start)
        .annotate(source=source)
        .values("scope", "source")
        .annotate(n=Count("id"))
        .order_by()
    )
    scope_daily: dict[str, list[int]] = {s: [0] * n for s in SCOPES}
    source_daily_all: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    source_totals: dict[str, int] = defaultdict(int)
    for row in in_window:
        i = index.get(_as_day(row["day"]))
        if i is None:  # a row created "tomorrow" by a clock ahead of ours
            continue
        src = _source_name(row["source"])
        scope_daily.setdefault(row["scope"], [0] * n)[i] += row["n"]
        source_daily_all[src][i] += row["n"]
        source_totals[src] += row["n"]
    scope_before: dict[str, int] = defaultdict(int)
    source_before_all: dict[str, int] = defaultdict(int)
    for old in before:
        src = _source_name(old["source"])
        scope_before[old["scope"]] += old["n"]
        source_before_all[src] += old["n"]
        source_totals[src] += old["n"]
    # The most frequent sources overall keep their name; the rest become OTHER_SOURCES so the
    # legend stays readable whatever agents put in metadata.source.
    ranked = sorted(source_totals, key=lambda s: (-source_totals[s], s))
    keep = (
        set(ranked[:MAX_SOURCES]) if len(ranked) <= MAX_SOURCES else set(ranked[: MAX_SOURCES - 1])
    )
    source_daily: dict[str, list[int]] = {}
    source_before: dict[str, int] = defaultdict(int)
    for src in ranked:
        name = src if src in keep else OTHER_SOURCES
        values = source_daily.setdefault(name, [0] * n)
        for i, v in enumerate(source_daily_all.get(src, [0] * n)):
            values[i] += v
        source_before[name] += source_before_all.get(src, 0)
    return MemoryCounts(scope_daily, source_daily, dict(scope_before), dict(source_before))


@dataclass
class JobCounts:
    succeeded: list[int]
    failed: list[int]
    other: list[int]  # queued or running (abandoned ones count as failed)
    failed_by_kind: dict[str, int]


def job_counts(*, team: Team, window: Window) -> JobCounts:
    """Lifecycle jobs per day by outcome, and failures per kind over the window: one query."""
    index = {d: i for i, d in enumerate(window.days)}
    n = len(window.days)
    rows = (
        JobRun.objects.filter(team=team, created_at__gte=window.start)
        .annotate(day=TruncDate("created_at"))
        .values("day", "status", "kind")
        .annotate(n=Count("id"))
        .order_by()
    )
    out = JobCounts([0] * n, [0] * n, [0] * n, {})
    for row in rows:
        i = index.get(_as_day(row["day"]))
        if i is None:
            continue
        if row["status"] == JobStatus.SUCCEEDED:
            out.succeeded[i] += row["n"]
        elif row["status"] in (JobStatus.FAILED, JobStatus.ABANDONED):
            out.failed[i] += row["n"]
            out.failed_by_kind[row["kind"]] = out.failed_by_kind.get(row["kind"], 0) + row["n"]
        else:
            out.other[i] += row["n"]
    return out


@dataclass
class UsageCounts:
    searches: list[int]
    writes: list[int]


def usage_counts(*, team: Team, window: Window) -> UsageCounts:
    """Searches and writes per day (tenants.UsageDay, flushed from the cache): one query."""
    index = {d: i for i, d in enumerate(window.days)}
    n = len(window.days)
    out = UsageCounts([0] * n, [0] * n)
    rows = (
        UsageDay.objects.filter(team=team, day__gte=window.days[0])
        .values("day")
        .annotate(s=Sum("searches"), w=Sum("writes"))
        .order_by()
    )
    for row in rows:
        i = index.get(_as_day(row["day"]))
        if i is not None:
            out.searches[i] += row["s"] or 0
            out.writes[i] += row["w"] or 0
    return out


def top_agents_by_memories(*, team: Team, limit: int = TOP_AGENTS) -> list[tuple[str, int]]:
    """Agents holding the most memories (personal, and team memories they wrote): one query."""
    rows = (
        Memory.objects.filter(team=team)
        .exclude(agent_id="")
        .values("agent_id")
        .annotate(n=Count("id"))
        .order_by("-n", "agent_id")[:limit]
    )
    return [(r["agent_id"], r["n"]) for r in rows]


def top_agents_by_activity(
    *, team: Team, window: Window, limit: int = TOP_AGENTS
) -> list[tuple[str, int, int]]:
    """Agents with the most searches + writes over the window: (agent, searches, writes)."""
    rows = (
        UsageDay.objects.filter(team=team, day__gte=window.days[0])
        .exclude(agent_id="")
        .values("agent_id")
        .annotate(s=Sum("searches"), w=Sum("writes"), t=Sum(F("searches") + F("writes")))
        .filter(Q(t__gt=0))
        .order_by("-t", "agent_id")[:limit]
    )
    return [(r["agent_id"], r["s"] or 0, r["w"] or 0) for r in rows]
