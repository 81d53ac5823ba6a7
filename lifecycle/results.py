"""What the lifecycle operations and the pipeline return: models or these frozen dataclasses.

lifecycle.presenters renders them for the API (and for what a job records); nothing here knows
the JSON shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

from graph.extraction import GraphExtraction
from lifecycle.models import Persona, Scenario
from memories.models import Memory, Procedure


@dataclass(frozen=True)
class CompressResult:
    compressed: int  # working items consumed
    remaining: int  # working items left afterwards
    total_before: int
    target_count: int
    summary: str | None  # the summaries, one a line; None when nothing was written
    memory_ids: list[int]  # the memories written
    busy_job_id: int | None = None  # another job was consuming the items: nothing was done


@dataclass(frozen=True)
class ExtractFactsResult:
    facts: list[Memory]  # the facts written (duplicates are not)
    duplicates: int
    superseded: int  # older memories this run replaced
    analyzed: int | None  # working items read; None when there were none
    busy_job_id: int | None = None  # as in CompressResult


@dataclass(frozen=True)
class ScenesResult:
    scenarios: list[Scenario]


@dataclass(frozen=True)
class CleanupCandidate:
    memory: Memory
    reason: str
    # What this cleanup does with it (the ladder, docs/lifecycle.md "Tiers"): "cold" (out of
    # everyday search), "trash" (cold for CLEANUP_COLD_GRACE_DAYS already) or "wait" (cold,
    # still within the grace period).
    action: str = "trash"


@dataclass(frozen=True)
class CleanupPreview:
    """A dry-run cleanup: what it would forget (at most 1000 candidates listed)."""

    remaining: int  # memories in scope
    would_clean: int  # would go to the trash
    candidates: list[CleanupCandidate]
    would_cool: int = 0  # would go cold


@dataclass(frozen=True)
class CleanupResult:
    cleaned: int
    remaining: int
    trashed: list[int]  # the ids moved to the trash
    cooled: list[int] = field(default_factory=list)  # the ids moved to the cold tier


@dataclass(frozen=True)
class AutoRunAction:
    """One action of an auto-run: a compress of one agent, or the team's cleanup."""

    action: str  # "compress" | "cleanup"
    agent_id: str | None  # the compressed agent; None for the cleanup
    result: JobResult


@dataclass(frozen=True)
class AutoRunSummary:
    """An auto-run recorded as one job: each action is its own job with its own record."""

    actions: int
    compress_runs: int
    cleanup_runs: int


@dataclass(frozen=True)
class IngestDecision:
    """What one fact of an ingested conversation did: `ADD` (a new memory), `UPDATE` (a new
    memory that superseded `supersedes`, kept in its history) or `NOOP` (`memory` already said
    it)."""

    decision: str  # "ADD" | "UPDATE" | "NOOP"
    memory: Memory
    supersedes: int | None = None


@dataclass(frozen=True)
class IngestResult:
    archived: int  # messages kept in the archive (L0)
    facts: list[IngestDecision]
    profile: dict[str, str] = field(default_factory=dict)  # profile fields changed: key -> value
    # Facts not written: the run already had the config's max_memories_per_run memories.
    over_run_limit: int = 0


@dataclass(frozen=True)
class Consolidation:
    memory: Memory  # the stable fact written
    fragments: list[int]  # the memories it stands for, now superseded by it


@dataclass(frozen=True)
class ConsolidateResult:
    consolidated: list[Consolidation]
    examined: int  # memories read


@dataclass(frozen=True)
class ProposalsResult:
    proposals: list[Procedure]  # the rules proposed (status proposed), waiting to be accepted
    examined: int  # memories read


@dataclass(frozen=True)
class JobReplayed:
    """A retried job whose first run had committed already: what that run answered."""

    body: dict[str, Any]
    status_code: int = 200


@dataclass(frozen=True)
class ExportResult:
    """A bundle written for download (POST /export; docs/export.md)."""

    job_id: int
    agent_id: str | None  # None: the whole team
    bytes: int  # size of the gzipped bundle
    chunks: int  # ExportChunk rows holding it
    sha256: str  # of the gzipped bundle, as downloaded
    counts: dict[str, int]  # records by kind, as in the bundle's header
    expires_at: datetime  # removed after that (EXPORT_RETENTION_HOURS)


@dataclass(frozen=True)
class ImportResult:
    """What POST /import did, by record kind (docs/export.md). An overwritten record counts as
    imported."""

    imported: dict[str, int]
    skipped: dict[str, int]
    reembedded: int  # memories and entities embedded again on this server


@dataclass(frozen=True)
class JobSkipped:
    """A queued automatic compress that found nothing left to do when it ran."""


# What a job's operation returns (pipeline.HANDLERS), by kind.
JobResult: TypeAlias = (
    CompressResult
    | ExtractFactsResult
    | ScenesResult
    | Persona
    | CleanupResult
    | CleanupPreview
    | GraphExtraction
    | AutoRunSummary
    | IngestResult
    | ProposalsResult
    | ConsolidateResult
    | JobReplayed
    | ExportResult
)
