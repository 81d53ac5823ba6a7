"""How the lifecycle looks in the API: JSON bodies built from the models and the typed results of
lifecycle.services (lifecycle/results.py).

The same bodies are what a job records: `job_counts` keeps the scalar fields of a result's body
(JobRun.counts), and a persona's scenario snapshot stores `scenario_body`. The bodies are
the API contract down to the key order (existing clients see the same bytes).
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse

from core.dates import iso
from graph.extraction import GraphExtraction
from graph.presenters import extraction_body
from memories.models import Memory
from memories.presenters import memory_body, procedure_body

from .models import JobRun, Persona, PipelineConfig, Scenario, WorkingArchive
from .results import (
    AutoRunAction,
    AutoRunSummary,
    CleanupPreview,
    CleanupResult,
    CompressResult,
    ConsolidateResult,
    ExportResult,
    ExtractFactsResult,
    ImportResult,
    IngestResult,
    JobReplayed,
    JobResult,
    JobSkipped,
    ProposalsResult,
    ScenesResult,
)
from .selectors import MemoryTrace, ScenarioSeen, export_chunks


def scenario_body(s: Scenario) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "summary": s.summary,
        "memory_ids": s.memory_ids,
        "created_at": iso(s.created_at),
    }


def persona_body(p: Persona) -> dict[str, Any]:
    return {
        "id": p.id,
        "agent_id": p.agent_id,
        "preferences": p.preferences,
        "habits": p.habits,
        "expertise": p.expertise,
        "communication_style": p.communication_style,
        "summary": p.summary,
        "memory_ids": p.memory_ids,
        "scenario_ids": p.scenario_ids,
        "created_at": iso(p.created_at),
    }


def config_body(config: PipelineConfig) -> dict[str, Any]:
    return {
        "team_id": config.team_id,
        "compress_every_n": config.compress_every_n,
        "compress_target_count": config.compress_target_count,
        "cleanup_idle_days": config.cleanup_idle_days,
        "cleanup_min_importance": config.cleanup_min_importance,
        "enabled": config.enabled,
        "warmup_max_memories": config.warmup_max_memories,
        "warmup_compress_every_n": config.warmup_compress_every_n,
        "extract_graph": config.extract_graph,
        "warmup_doubling": config.warmup_doubling,
        "idle_extract_seconds": config.idle_extract_seconds,
        "scenario_min_interval_seconds": config.scenario_min_interval_seconds,
        "persona_every_n": config.persona_every_n,
        "excluded_agents": list(config.excluded_agents or []),
        "max_memories_per_run": config.max_memories_per_run,
        "consolidate_min_fragments": config.consolidate_min_fragments,
        "recall_timeout_ms": config.recall_timeout_ms,
        # False: the defaults, never saved (pipeline.config_is_saved).
        "configured": not config._state.adding,
    }


def sources_body(
    memory: Memory, *, supersedes: list[int], archived: list[WorkingArchive]
) -> dict[str, Any]:
    """`GET /lifecycle/sources/<id>`: where a derived memory came from."""
    return {
        "memory_id": memory.pk,
        "source": (memory.metadata or {}).get("source"),
        "job_id": (memory.metadata or {}).get("job_id"),
        "supersedes": supersedes,
        "source_items": [
            {
                "id": a.item_id,
                "agent_id": a.agent_id,
                "content": a.content,
                "created_at": iso(a.item_created_at),
                "archived_at": iso(a.archived_at),
            }
            for a in archived
        ],
    }


def archive_item_body(a: WorkingArchive) -> dict[str, Any]:
    """An archived item (L0) as `POST /lifecycle/archive/search` lists it: `id` is the item's
    own id (what `metadata.source_items` records), not the archive row's."""
    return {
        "id": a.item_id,
        "agent_id": a.agent_id,
        "role": a.role,
        "name": a.name,
        "run_id": a.run_id,
        "content": a.content,
        "created_at": iso(a.item_created_at),
        "archived_at": iso(a.archived_at),
        "reason": a.reason,
        "job_id": a.job_id,
    }


def archive_detail_body(a: WorkingArchive, *, derived: list[Memory]) -> dict[str, Any]:
    """`GET /lifecycle/archive/<item_id>`: the item and the memories derived from it."""
    return {
        **archive_item_body(a),
        "derived_memory_ids": [m.pk for m in derived],
        "derived_memories": [memory_body(m) for m in derived],
    }


def compress_body(r: CompressResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "compressed": r.compressed,
        "remaining": r.remaining,
        "total_before": r.total_before,
        "target_count": r.target_count,
        "summary": r.summary,
        "memory_ids": r.memory_ids,
    }
    if r.busy_job_id is not None:
        body["busy_job_id"] = r.busy_job_id
    return body


def _fact_body(m: Memory) -> dict[str, Any]:
    body = {"id": m.pk, "content": m.content, "importance": m.importance, "category": m.category}
    if m.expires_at is not None:  # as on the memory object: only when set
        body["expires_at"] = iso(m.expires_at)
    return body


def extract_facts_body(r: ExtractFactsResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "facts": [_fact_body(m) for m in r.facts],
        "count": len(r.facts),
        "duplicates": r.duplicates,
        "superseded": r.superseded,
    }
    if r.analyzed is not None:
        body["analyzed"] = r.analyzed
    if r.busy_job_id is not None:
        body["busy_job_id"] = r.busy_job_id
    return body


def scenes_body(r: ScenesResult) -> dict[str, Any]:
    return {"scenarios": [scenario_body(s) for s in r.scenarios], "count": len(r.scenarios)}


def cleanup_body(r: CleanupResult) -> dict[str, Any]:
    return {
        "cleaned": r.cleaned,
        "remaining": r.remaining,
        "trashed": r.trashed,
        "cooled": r.cooled,
    }


def cleanup_preview_body(r: CleanupPreview) -> dict[str, Any]:
    return {
        "cleaned": 0,
        "remaining": r.remaining,
        "dry_run": True,
        "would_clean": r.would_clean,
        "would_cool": r.would_cool,
        "candidates": [
            {**memory_body(c.memory), "reason": c.reason, "action": c.action} for c in r.candidates
        ],
    }


def ingest_body(r: IngestResult) -> dict[str, Any]:
    """`POST /memories/ingest`: one decision per extracted fact, with the memory it concerns."""
    facts: list[dict[str, Any]] = []
    for d in r.facts:
        fact: dict[str, Any] = {"decision": d.decision, "memory": memory_body(d.memory)}
        if d.supersedes is not None:
            fact["supersedes"] = d.supersedes
        facts.append(fact)
    body: dict[str, Any] = {"archived": r.archived, "facts": facts}
    if r.profile:
        # Only when the ingest changed the agent's profile: other answers stay as they were.
        body["profile"] = r.profile
    if r.over_run_limit:
        body["facts_over_run_limit"] = r.over_run_limit
    return body


def auto_run_summary_body(r: AutoRunSummary) -> dict[str, Any]:
    return {
        "actions": r.actions,
        "compress_runs": r.compress_runs,
        "cleanup_runs": r.cleanup_runs,
    }


def auto_run_action_body(a: AutoRunAction) -> dict[str, Any]:
    head: dict[str, Any] = {"action": a.action}
    if a.agent_id is not None:
        head["agent_id"] = a.agent_id
    return {**head, **result_body(a.result)}


def export_body(r: ExportResult) -> dict[str, Any]:
    """An export job's result: where to download the bundle and what it holds."""
    return {
        "download": f"/export/{r.job_id}",
        "agent_id": r.agent_id,
        "bytes": r.bytes,
        "chunks": r.chunks,
        "sha256": r.sha256,
        "counts": r.counts,
        "expires_at": iso(r.expires_at),
    }


def export_download(*, job: JobRun, name: str) -> StreamingHttpResponse:
    """The bundle of a downloadable export job (`selectors.export_ready`), streamed one chunk
    at a time, as the file `name` (services.bundle.bundle_filename)."""
    response = StreamingHttpResponse(export_chunks(job=job), content_type="application/gzip")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    size = (job.result or {}).get("bytes")
    if isinstance(size, int):
        response["Content-Length"] = str(size)
    return response


def import_body(r: ImportResult) -> dict[str, Any]:
    return {"imported": r.imported, "skipped": r.skipped, "reembedded": r.reembedded}


def result_body(result: JobResult | JobSkipped) -> dict[str, Any]:
    """A job's result as the API answers it (POST /lifecycle/<operation>), by its type."""
    if isinstance(result, CompressResult):
        return compress_body(result)
    if isinstance(result, ExtractFactsResult):
        return extract_facts_body(result)
    if isinstance(result, ScenesResult):
        return scenes_body(result)
    if isinstance(result, Persona):
        return {"persona": persona_body(result)}
    if isinstance(result, CleanupResult):
        return cleanup_body(result)
    if isinstance(result, CleanupPreview):
        return cleanup_preview_body(result)
    if isinstance(result, GraphExtraction):
        return extraction_body(result)
    if isinstance(result, IngestResult):
        return ingest_body(result)
    if isinstance(result, ConsolidateResult):
        return {
            "consolidated": [
                {"memory": memory_body(c.memory), "fragments": c.fragments}
                for c in result.consolidated
            ],
            "count": len(result.consolidated),
            "examined": result.examined,
        }
    if isinstance(result, ProposalsResult):
        return {
            "proposals": [procedure_body(p) for p in result.proposals],
            "count": len(result.proposals),
            "examined": result.examined,
        }
    if isinstance(result, JobReplayed):
        return result.body
    if isinstance(result, AutoRunSummary):
        return auto_run_summary_body(result)
    if isinstance(result, ExportResult):
        return export_body(result)
    if isinstance(result, JobSkipped):
        return {"skipped": True}
    raise TypeError(f"no body for {type(result).__name__}")


def job_counts(result: JobResult) -> dict[str, Any]:
    """What JobRun.counts records of a result: the scalar fields of its API body."""
    return {
        k: v
        for k, v in result_body(result).items()
        if isinstance(v, int | float | bool) or v is None
    }


def job_body(job: JobRun) -> dict[str, Any]:
    """`GET /jobs/<id>`: a job's state and, once it succeeded, its result as the endpoint that
    queued it would have answered."""
    return {
        "id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "agent_id": job.agent_id or None,
        "trigger": job.trigger,
        "created_at": iso(job.created_at),
        "started_at": iso(job.started_at) if job.started_at else None,
        "finished_at": iso(job.finished_at) if job.finished_at else None,
        "counts": job.counts,
        "result": job.result,
        "error": job.error or None,
        "retry_of": job.retry_of_id,
        # The session the job was for: an ingest's run, or the run whose working-memory writes
        # triggered an automatic compress (its warm-up counts per run).
        "run_id": str(job.params.get("run_id") or "") or None,
    }


# --- Markdown exports: persona -> scenarios -> memories -> archived sources, top-down ---------


def _quote(text: str, indent: str = "") -> list[str]:
    """Stored text as a blockquote, so whatever Markdown it holds cannot break the outline."""
    return [f"{indent}> {line}".rstrip() for line in text.splitlines() or [""]]


def _source_lines(a: WorkingArchive) -> list[str]:
    who = a.role or a.reason
    if a.name:
        who += f" ({a.name})"
    head = f"- `{a.item_id}` · {who} · {iso(a.item_created_at)}"
    if a.run_id:
        head += f" · run `{a.run_id}`"
    return [head, *_quote(a.content, "  ")]


def _memory_lines(trace: MemoryTrace, level: str) -> list[str]:
    m = trace.memory
    if m is None:
        return [f"{level} Memory #{trace.memory_id}", "", "_No longer stored._", ""]
    facts = [f"importance {m.importance:g}", m.category or "uncategorised", iso(m.created_at)]
    if m.run_id:
        facts.append(f"run `{m.run_id}`")
    if m.superseded_by_id is not None:
        facts.append(f"superseded by #{m.superseded_by_id}")
    lines = [f"{level} Memory #{m.pk}", "", " · ".join(facts), "", *_quote(m.content), ""]
    if trace.sources:
        lines += ["Archived sources:", ""]
        for a in trace.sources:
            lines += _source_lines(a)
    else:
        lines.append("_No archived sources (written directly, or past the archive's retention)._")
    return [*lines, ""]


def _scenario_lines(seen: ScenarioSeen, traces: dict[int, MemoryTrace], level: str) -> list[str]:
    lines = [f"{level} Scenario: {seen.name} (`{seen.id}`)", "", *_quote(seen.summary), ""]
    if seen.from_snapshot and not seen.live:
        lines += ["_As the persona saw it; no longer stored._", ""]
    for memory_id in _int_ids(seen.memory_ids):
        lines += _memory_lines(traces[memory_id], level + "#")
    return lines


def _int_ids(ids: list[Any]) -> list[int]:
    return [int(i) for i in ids if isinstance(i, int) or (isinstance(i, str) and i.isdigit())]


def persona_markdown(
    p: Persona, *, scenarios: list[ScenarioSeen], traces: list[MemoryTrace]
) -> str:
    """`GET /lifecycle/persona/<agent_id>.md`: the persona, the scenarios it was built from (as
    it saw them), their memories, and the archived items each memory came from; then the
    persona's memories that are in none of those scenarios."""
    by_id = {t.memory_id: t for t in traces}
    lines = [
        f"# Persona of `{p.agent_id}`",
        "",
        f"Persona `{p.id}`, built {iso(p.created_at)} from {len(scenarios)} scenario(s) and "
        f"{len(p.memory_ids or [])} memory(ies) of its own.",
        "",
    ]
    if p.summary:
        lines += ["## Summary", "", *_quote(p.summary), ""]
    if p.communication_style:
        lines += ["## Communication style", "", *_quote(p.communication_style), ""]
    for title, values in (
        ("Preferences", p.preferences),
        ("Habits", p.habits),
        ("Expertise", p.expertise),
    ):
        if values:
            lines += [f"## {title}", "", *[f"- {v}" for v in values], ""]
    covered: set[int] = set()
    for seen in scenarios:
        lines += _scenario_lines(seen, by_id, "##")
        covered.update(_int_ids(seen.memory_ids))
    rest = [t for t in traces if t.memory_id not in covered]
    if rest:
        lines += ["## Other memories", ""]
        for t in rest:
            lines += _memory_lines(t, "###")
    return "\n".join(lines).rstrip() + "\n"


def scenarios_markdown(
    agent_id: str, *, scenarios: list[ScenarioSeen], traces: list[MemoryTrace]
) -> str:
    """`GET /lifecycle/scenarios/<agent_id>.md`: the agent's scenarios, newest first, each with
    its memories and their archived sources."""
    by_id = {t.memory_id: t for t in traces}
    lines = [f"# Scenarios of `{agent_id}`", ""]
    if not scenarios:
        lines.append("_No scenarios yet._")
    for seen in scenarios:
        lines += _scenario_lines(seen, by_id, "##")
    return "\n".join(lines).rstrip() + "\n"
