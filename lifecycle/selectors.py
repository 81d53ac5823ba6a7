"""Reads for the lifecycle records. Every read takes the caller's team explicitly; another team's
id is simply not found."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from memories.models import Memory, MemoryScope
from tenants.models import Team

from .models import (
    ExportChunk,
    JobKind,
    JobRun,
    JobStatus,
    Persona,
    Scenario,
    WorkingArchive,
)


def memory_source_item_ids(*, memory: Memory) -> list[str]:
    """The working-memory item ids a derived memory records in `metadata.source_items`."""
    return [
        str(i) for i in (memory.metadata or {}).get("source_items", []) if isinstance(i, str | int)
    ]


def working_sources(*, team: Team, memory: Memory) -> QuerySet[WorkingArchive]:
    """The archived working-memory items (L0) a memory was derived from, oldest first.

    Empty for a memory written by hand. Filtered by team as well as by item id: item ids are
    only unique per working store, and another team's archive must never show up here.
    """
    return WorkingArchive.objects.filter(
        team=team, item_id__in=memory_source_item_ids(memory=memory)
    ).order_by("item_created_at", "id")


@dataclass(frozen=True)
class ArchiveQuery:
    """What `POST /lifecycle/archive/search` narrows the archive to; empty means any."""

    agent_id: str = ""
    run_id: str = ""
    role: str = ""
    reason: str = ""
    since: datetime | None = None  # on the item's own time (when it was said or written)
    until: datetime | None = None
    query: str = ""  # a case-insensitive substring of the content: a text filter, not semantic


def archive_page(
    *,
    team: Team,
    query: ArchiveQuery,
    after: tuple[datetime, int] | None,
    page_size: int,
) -> tuple[list[WorkingArchive], tuple[datetime, int] | None]:
    """One page of the team's archive (L0), newest item first (by the item's time, then by row),
    and the key the next page starts after (None on the last page). Keyset paging on
    (item time, row id): rows archived meanwhile with older times land in their place without
    shifting the pages already read."""
    qs = WorkingArchive.objects.filter(team=team)
    if query.agent_id:
        qs = qs.filter(agent_id=query.agent_id)
    if query.run_id:
        qs = qs.filter(run_id=query.run_id)
    if query.role:
        qs = qs.filter(role=query.role)
    if query.reason:
        qs = qs.filter(reason=query.reason)
    if query.since is not None:
        qs = qs.filter(item_created_at__gte=query.since)
    if query.until is not None:
        qs = qs.filter(item_created_at__lte=query.until)
    if query.query:
        # LIKE through the database's collation: case-insensitive for Latin scripts on SQLite
        # (ASCII) and MariaDB (utf8mb4_unicode_ci); CJK has no case, so a plain substring.
        qs = qs.filter(content__icontains=query.query)
    if after is not None:
        at, pk = after
        qs = qs.filter(Q(item_created_at__lt=at) | Q(item_created_at=at, pk__lt=pk))
    rows = list(qs.order_by("-item_created_at", "-id")[: page_size + 1])
    more = len(rows) > page_size
    rows = rows[:page_size]
    return rows, ((rows[-1].item_created_at, rows[-1].pk) if more else None)


def archive_item_get(*, team: Team, item_id: str) -> WorkingArchive | None:
    """The team's archive row of a working item or ingested message, by the item's id (the one
    `metadata.source_items` records). Item ids are uuid4 hex; should one have been archived twice,
    the first row is the one derived memories were written with."""
    return WorkingArchive.objects.filter(team=team, item_id=item_id).order_by("id").first()


# The reverse link (item -> memories) has no index: `metadata.source_items` is a JSON list, which
# SQLite cannot search by element. A derived memory is written in the same transaction as the
# item's archive row (compress, extract-facts, ingest), by the same job and for the same agent,
# so the scan is bounded to that agent's memories of that job written within
# ARCHIVE_DERIVED_WINDOW of the row, at most ARCHIVE_DERIVED_SCAN of them, and filtered here.
ARCHIVE_DERIVED_WINDOW = timedelta(hours=1)
ARCHIVE_DERIVED_SCAN = 1000


def archive_derived_memories(*, team: Team, item: WorkingArchive) -> list[Memory]:
    """The team's memories whose `metadata.source_items` holds this item's id, by id (see the
    bound above). Empty for an evicted item (nothing was derived from it) or a message ingested
    without `infer`."""
    qs = Memory.objects.filter(
        team=team,
        agent_id=item.agent_id,
        created_at__gte=item.archived_at - ARCHIVE_DERIVED_WINDOW,
        created_at__lte=item.archived_at + ARCHIVE_DERIVED_WINDOW,
    )
    if item.job_id is not None:
        qs = qs.filter(metadata__job_id=item.job_id)
    candidates = qs.defer("embedding", "search_tokens").order_by("id")[:ARCHIVE_DERIVED_SCAN]
    return [m for m in candidates if item.item_id in memory_source_item_ids(memory=m)]


def memory_supersedes(*, memory: Memory) -> list[int]:
    """The ids of the older memories this one replaced."""
    return list(memory.supersedes.values_list("pk", flat=True))


def job_list(
    *,
    team: Team,
    status: str = "",
    kind: str = "",
    trigger: str = "",
    agent_id: str = "",
    failed_only: bool = False,
) -> QuerySet[JobRun]:
    """The team's job log, newest first, narrowed by any of the given filters."""
    qs = JobRun.objects.filter(team=team)
    if status:
        qs = qs.filter(status=status)
    if failed_only:
        qs = qs.filter(status=JobStatus.FAILED)
    if kind:
        qs = qs.filter(kind=kind)
    if trigger:
        qs = qs.filter(trigger=trigger)
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    return qs.order_by("-created_at", "-id")


def job_get(*, team: Team, job_id: int) -> JobRun | None:
    return JobRun.objects.filter(team=team, pk=job_id).first()


@dataclass(frozen=True)
class JobOutputs:
    memories: list[Memory]  # the first 200 written, by id
    scenarios: list[Scenario]
    personas: list[Persona]
    archived: int  # working items archived


def job_outputs(*, team: Team, job: JobRun) -> JobOutputs:
    """What a job left behind: memories it wrote, scenarios, personas, archived working items.

    JobRun keeps only counts; the outputs carry the job id, so they are found from it.
    """
    # Outputs are written after the job record: the time bound keeps the JSON lookup off the
    # team's older memories.
    memories = Memory.objects.filter(
        team=team, created_at__gte=job.created_at, metadata__job_id=job.pk
    )
    return JobOutputs(
        memories=list(memories.order_by("id")[:200]),
        scenarios=list(Scenario.objects.filter(team=team, job=job).order_by("created_at")),
        personas=list(Persona.objects.filter(team=team, job=job).order_by("created_at")),
        archived=WorkingArchive.objects.filter(team=team, job=job).count(),
    )


def job_agent_ids(*, team: Team) -> list[str]:
    """Agent ids that appear in the team's job log (for the filter)."""
    return sorted(
        a
        for a in JobRun.objects.filter(team=team).values_list("agent_id", flat=True).distinct()
        if a
    )


def persona_list(*, team: Team, agent_id: str = "") -> QuerySet[Persona]:
    qs = Persona.objects.filter(team=team)
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    return qs.order_by("-created_at", "id")


def persona_get(*, team: Team, persona_id: str) -> Persona | None:
    return Persona.objects.filter(team=team, pk=persona_id).first()


@dataclass(frozen=True)
class ScenarioSeen:
    """A scenario as a persona saw it (its snapshot), or as stored."""

    id: str
    name: str
    summary: str
    memory_ids: list[Any]
    agent_id: str
    live: bool  # still stored (scenarios are regenerated over time)
    from_snapshot: bool


def persona_scenarios(*, team: Team, persona: Persona) -> list[ScenarioSeen]:
    """The scenarios a persona was built from, as it saw them (its snapshot), each marked with
    whether that scenario still exists."""
    snapshot = [s for s in persona.scenarios_snapshot or [] if isinstance(s, dict) and s.get("id")]
    live = set(
        Scenario.objects.filter(team=team, pk__in=[s["id"] for s in snapshot]).values_list(
            "pk", flat=True
        )
    )
    return [
        ScenarioSeen(
            id=str(s["id"]),
            name=str(s.get("name", "")),
            summary=str(s.get("summary", "")),
            memory_ids=list(s.get("memory_ids") or []),
            agent_id=persona.agent_id,
            live=s["id"] in live,
            from_snapshot=True,
        )
        for s in snapshot
    ]


def scenario_view(
    *, team: Team, scenario_id: str, persona: Persona | None = None
) -> ScenarioSeen | None:
    """A scenario as a persona saw it (its snapshot) when `persona` is given and holds it, else
    the stored scenario of the team; None when neither exists."""
    if persona is not None:
        for seen in persona_scenarios(team=team, persona=persona):
            if seen.id == scenario_id:
                return seen
    scenario = Scenario.objects.filter(team=team, pk=scenario_id).first()
    if scenario is None:
        return None
    return ScenarioSeen(
        id=scenario.id,
        name=scenario.name,
        summary=scenario.summary,
        memory_ids=list(scenario.memory_ids or []),
        agent_id=scenario.agent_id,
        live=True,
        from_snapshot=False,
    )


def memories_in_order(*, team: Team, memory_ids: list[Any]) -> list[tuple[int, Memory | None]]:
    """The team's memories for these ids, in the given order; None for one that is gone
    (cleaned up, deleted) or is not the team's."""
    ids = [int(i) for i in memory_ids if isinstance(i, int) or (isinstance(i, str) and i.isdigit())]
    found = {m.pk: m for m in Memory.objects.filter(team=team, pk__in=ids)}
    return [(i, found.get(i)) for i in ids]


def export_ready(*, job: JobRun) -> bool:
    """Whether an export job's bundle can be downloaded: it succeeded and was not pruned yet."""
    return job.status == JobStatus.SUCCEEDED and ExportChunk.objects.filter(job=job).exists()


def export_list(*, team: Team, limit: int) -> list[tuple[JobRun, bool]]:
    """The team's newest `limit` export jobs, each with whether it can be downloaded
    (export_ready's rule), in one query."""
    jobs = job_list(team=team, kind=JobKind.EXPORT).annotate(
        has_chunks=Exists(ExportChunk.objects.filter(job=OuterRef("pk")))
    )[:limit]
    return [(job, job.status == JobStatus.SUCCEEDED and job.has_chunks) for job in jobs]


def export_chunks(*, job: JobRun) -> Iterator[bytes]:
    """An export job's bundle, one chunk (one query) at a time: a download never holds it whole
    in memory."""
    seqs = list(ExportChunk.objects.filter(job=job).order_by("seq").values_list("seq", flat=True))
    for seq in seqs:
        data = ExportChunk.objects.filter(job=job, seq=seq).values_list("data", flat=True).first()
        if data is not None:
            yield bytes(data)


@dataclass(frozen=True)
class MemoryTrace:
    """A memory named by a persona or a scenario, with the archived items (L0) it came from;
    `memory` is None when it is gone or not the agent's to show."""

    memory_id: int
    memory: Memory | None
    sources: list[WorkingArchive]


def memory_traces(*, team: Team, agent_id: str, memory_ids: list[Any]) -> list[MemoryTrace]:
    """The memories of these ids in the given order, each with its archived sources (oldest
    first), in two queries. Only the agent's own personal memories and the team's are shown:
    the export is the agent's, whatever ids a stored list holds."""
    pairs = memories_in_order(team=team, memory_ids=memory_ids)
    shown = {
        i: m
        for i, m in pairs
        if m is not None and (m.scope == MemoryScope.TEAM or m.agent_id == agent_id)
    }
    wanted = {item for m in shown.values() for item in memory_source_item_ids(memory=m)}
    by_item: dict[str, list[WorkingArchive]] = {}
    for row in WorkingArchive.objects.filter(team=team, item_id__in=wanted).order_by(
        "item_created_at", "id"
    ):
        by_item.setdefault(row.item_id, []).append(row)
    traces: list[MemoryTrace] = []
    for i, _ in pairs:
        m = shown.get(i)
        sources: list[WorkingArchive] = []
        if m is not None:
            for item in dict.fromkeys(memory_source_item_ids(memory=m)):
                sources += by_item.get(item, [])
        traces.append(MemoryTrace(memory_id=i, memory=m, sources=sources))
    return traces


def scenarios_of_agent(*, team: Team, agent_id: str) -> list[ScenarioSeen]:
    """The agent's stored scenarios, newest first (as GET /lifecycle/scenarios/<agent_id>)."""
    rows = Scenario.objects.filter(team=team, agent_id=agent_id).order_by("-created_at", "id")
    return [
        ScenarioSeen(
            id=s.id,
            name=s.name,
            summary=s.summary,
            memory_ids=list(s.memory_ids or []),
            agent_id=s.agent_id,
            live=True,
            from_snapshot=False,
        )
        for s in rows
    ]


def persona_latest(*, team: Team, agent_id: str) -> Persona | None:
    return Persona.objects.filter(team=team, agent_id=agent_id).order_by("-created_at").first()
