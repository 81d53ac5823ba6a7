"""Lifecycle operations (docs/lifecycle.md): compress, extract facts, aggregate, persona, cleanup.

Each returns `(result, usage, engine_name)` so `jobs.job_execute` can record it; the result is a
model or a frozen dataclass of `results` (lifecycle.presenters renders it). Never loss:
working-memory items are archived (L0) in the same transaction that writes what was derived
from them, and removed from the working store only after that transaction committed. If the
engine or the database fails, working memory is untouched.

Exactly once: an operation that consumes an agent's working memory (compress; extract-facts with
`delete_after`) first takes the agent's claim under its job's lease (`jobs.claim_acquire`), so
concurrent consumers never summarise the same items — the others report nothing consumed and
`busy_job_id`. The claim is checked again inside the committing transaction
(`jobs.claim_confirm`): a job that lost it (its lease expired and it was reclaimed) commits
nothing. A compress that died after committing but before removing its items leaves them
archived: the next compress removes them without summarising them again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from lifecycle.llm import get_engine
from lifecycle.models import ArchiveReason, JobKind, JobRun, Persona, Scenario, WorkingArchive
from lifecycle.offline import (
    REPEAT_THRESHOLD,
    repeated_points,
    similarity_matrix,
    whole_expiry,
)
from lifecycle.schemas import Fact
from llm import Usage
from memories import locks
from memories.models import (
    ColdReason,
    Memory,
    MemoryScope,
    MemoryTier,
    Procedure,
    ProcedureStatus,
)
from memories.profile import profile_fields_in
from memories.purge import memories_trash
from memories.retrieval.dedup import conflict_reason, preference_terms
from memories.retrieval.embeddings import embed_passages
from memories.selectors import procedure_list, profile_fields, unexpired_q
from memories.services import (
    Actor,
    DedupHit,
    memory_create,
    memory_find_similar,
    memory_outlives,
    memory_supersede,
    memory_update,
    procedure_create,
    procedure_room,
    profile_learn,
)
from memories.tiers import memories_set_tier
from memories.working import WorkingItem, get_working_store
from tenants.models import Team

from ..presenters import scenario_body
from ..results import (
    CleanupCandidate,
    CleanupPreview,
    CleanupResult,
    CompressResult,
    ConsolidateResult,
    Consolidation,
    ExtractFactsResult,
    ProposalsResult,
    ScenesResult,
)
from . import jobs
from .archive import archive_items

logger = logging.getLogger(__name__)

SYSTEM = Actor(label="lifecycle")
# A fact this close to an older one, that differs from it in a number, date, negation or
# preference (or only adds detail), is an update of it: the older one is superseded, not lost.
SUPERSEDE_MIN_SCORE = 0.85


def _archive(team: Team, agent_id: str, items: list[WorkingItem], job_id: int | None) -> None:
    """Keeps the working items a job consumed, so what it derived from them stays traceable."""
    archive_items(
        team_id=team.pk,
        agent_id=agent_id,
        items=items,
        job_id=job_id,
        reason=ArchiveReason.CONSUMED,
    )


def _sources(items: list[WorkingItem], indexes: list[int]) -> list[str]:
    picked = [items[i].id for i in indexes if 0 <= i < len(items)]
    return picked or [i.id for i in items]


def working_claim_key(team: Team, agent_id: str) -> str:
    return f"working:{team.id}:{agent_id}"


# Item ids per IN list (a backend's parameter limit).
_IN_CHUNK = 500


def _already_compressed(team: Team, agent_id: str, items: list[WorkingItem]) -> set[str]:
    """Items an earlier compress archived (committed) but never removed: it died in between."""
    ids = [i.id for i in items]
    done: set[str] = set()
    for start in range(0, len(ids), _IN_CHUNK):
        done.update(
            WorkingArchive.objects.filter(
                team=team,
                agent_id=agent_id,
                item_id__in=ids[start : start + _IN_CHUNK],
                reason=ArchiveReason.CONSUMED,
                job__kind=JobKind.COMPRESS,
            ).values_list("item_id", flat=True)
        )
    return done


@dataclass(frozen=True)
class _Claim:
    """A job's claim on an agent's working memory, under the job's lease; no lease: a claim of
    nothing (a job run without one, or an extraction that only reads)."""

    lease: jobs.Lease | None
    key: str
    busy_job_id: int | None = None  # not claimed: the job that holds it

    def confirm(self) -> None:
        """In the transaction that commits the results: raises CONFLICT if the claim was lost."""
        if self.lease is not None:
            jobs.claim_confirm(lease=self.lease, key=self.key)


@contextmanager
def _working_claim(lease: jobs.Lease | None, key: str) -> Iterator[_Claim]:
    """Claims the working memory `key` for the job holding `lease` while the block runs. When
    another job holds it, the claim yielded names that job (`busy_job_id`) and nothing is
    claimed or released."""
    busy = jobs.claim_acquire(lease=lease, key=key) if lease is not None else None
    if busy is not None:
        yield _Claim(lease=None, key=key, busy_job_id=busy)
        return
    try:
        yield _Claim(lease=lease, key=key)
    finally:
        if lease is not None:
            jobs.claim_release(lease=lease, key=key)


def compress(
    *,
    team: Team,
    agent_id: str,
    target_count: int = 5,
    job_id: int | None = None,
    lease: jobs.Lease | None = None,
) -> tuple[CompressResult, Usage, str]:
    key = working_claim_key(team, agent_id)
    with _working_claim(lease, key) as claim:
        if claim.busy_job_id is not None:
            count = get_working_store().count(team_id=team.id, agent_id=agent_id)
            result = CompressResult(
                compressed=0,
                remaining=count,
                total_before=count,
                target_count=target_count,
                summary=None,
                memory_ids=[],
                busy_job_id=claim.busy_job_id,  # the job consuming these items now
            )
            return result, Usage(), get_engine().name
        return _compress(team, agent_id, target_count, job_id, claim)


def _compress(
    team: Team,
    agent_id: str,
    target_count: int,
    job_id: int | None,
    claim: _Claim,
) -> tuple[CompressResult, Usage, str]:
    store = get_working_store()
    items = store.list(team_id=team.id, agent_id=agent_id)
    leftovers = _already_compressed(team, agent_id, items)
    if leftovers:
        store.remove(team_id=team.id, agent_id=agent_id, item_ids=sorted(leftovers))
        items = [i for i in items if i.id not in leftovers]
    engine = get_engine()
    if not items:
        nothing = CompressResult(
            compressed=0,
            remaining=0,
            total_before=0,
            target_count=target_count,
            summary=None,
            memory_ids=[],
        )
        return nothing, Usage(), engine.name
    summaries, usage = engine.compress([i.content for i in items], target_count)
    summaries = summaries[:target_count]
    # The summaries belong to a session only when everything they summarise does: then a new
    # session's warm-up (pipeline.compress_threshold) counts them as its own memories.
    runs = {i.run_id for i in items}
    run_id = runs.pop() if len(runs) == 1 else ""
    embed_passages([s.content for s in summaries])  # outside the transaction (fills the cache)
    now = timezone.now()
    # A summary expires only when all it says does ("on call until Friday; in Rome for the next
    # three days"), counted from its latest item: one lasting sentence keeps it for good.
    said = [i.created_at for i in items]
    expiries = [whole_expiry(s.content, _said_when(s.source_indexes, said)) for s in summaries]
    written: list[int] = []
    locks.scope_lock_prepare(team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=agent_id)
    with transaction.atomic():
        # The agent's lock before the job's row (claim.confirm locks it): an agent's deletion
        # takes them in that order.
        locks.scope_lock(team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=agent_id)
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        claim.confirm()
        for s, expires_at in zip(summaries, expiries, strict=True):
            memory, _ = memory_create(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id=agent_id,
                content=s.content,
                importance=s.importance,
                expires_at=expires_at if expires_at is not None and expires_at > now else None,
                metadata={
                    "source": "compression",
                    "source_items": _sources(items, s.source_indexes),
                    "job_id": job_id,
                },
                run_id=run_id,
            )
            written.append(memory.pk)
        _archive(team, agent_id, items, job_id)
    # Committed: only now may the working items go.
    store.remove(team_id=team.id, agent_id=agent_id, item_ids=[i.id for i in items])
    result = CompressResult(
        compressed=len(items),
        remaining=store.count(team_id=team.id, agent_id=agent_id),
        total_before=len(items),
        target_count=target_count,
        summary="\n".join(s.content for s in summaries) or None,
        memory_ids=written,
    )
    return result, usage, engine.name


@dataclass(frozen=True)
class StoredFact:
    """What became of one extracted fact: `duplicate` (already known: `memory` is the one that
    says it), `superseded` (`memory` is new and replaced `supersedes`) or `created`; `profile`:
    the agent's profile fields it changed (key -> new value)."""

    outcome: Literal["duplicate", "superseded", "created"]
    memory: Memory
    supersedes: int | None = None
    profile: dict[str, str] = field(default_factory=dict)


def _said_when(source_indexes: list[int], said: list[datetime]) -> datetime:
    """When what an engine wrote from some items was said: the latest of its items' moments
    (`said`, by the items' index, as `source_indexes`), of all the items when it names none."""
    return max([said[j] for j in source_indexes if 0 <= j < len(said)] or said)


def facts_dated(facts: list[Fact], said: list[datetime]) -> None:
    """Gives each fact that states no end the one it names from the day it was said ("until
    Friday": offline.whole_expiry, each of its clauses naming one), counted from when its items
    were said (`_said_when`). Read from the fact's own words, whichever engine wrote them: the
    LLM is never asked to count days."""
    for fact in facts:
        if fact.expires_at is None and said:
            fact.expires_at = whole_expiry(fact.content, _said_when(fact.source_indexes, said))


def store_fact(
    *,
    team: Team,
    agent_id: str,
    fact: Fact,
    source_items: list[str],
    job_id: int | None,
    source: str = "extraction",
    run_id: str = "",
) -> StoredFact:
    """Writes one fact: skipped as a duplicate, written as an update (superseding), or written.
    Never deletes: an updated memory stays, marked superseded, in the new one's history.

    A fact that states a profile field ("I work as a …", "我住在…": memories.profile) also sets
    that field, with `source` and the memory's id, in the caller's transaction — unless a person
    or an agent set the field through the API or the console.

    The caller holds the agent's personal scope lock (memories.locks) in that transaction."""
    stored = _store_fact(
        team=team,
        agent_id=agent_id,
        fact=fact,
        source_items=source_items,
        job_id=job_id,
        source=source,
        run_id=run_id,
    )
    found = profile_fields_in(fact.content)
    if not found:
        return stored
    changed = profile_learn(
        team=team,
        agent_id=agent_id,
        fields=found,
        source=source,
        source_memory_id=stored.memory.pk,
        actor=SYSTEM,
    )
    return replace(stored, profile=changed)


def _store_fact(
    *,
    team: Team,
    agent_id: str,
    fact: Fact,
    source_items: list[str],
    job_id: int | None,
    source: str,
    run_id: str,
) -> StoredFact:
    vector = embed_passages([fact.content])[0]
    found = memory_find_similar(
        team=team,
        scope=MemoryScope.PERSONAL,
        agent_id=agent_id,
        vector=vector,
        min_score=SUPERSEDE_MIN_SCORE,
    )
    # The candidates locked and read again (after the scope lock the caller holds: the order a
    # write's dedup takes them in). An edit takes only the row's lock, so one may have committed
    # since the read above; a memory whose text changed is no longer the one compared, and
    # superseding it would hide the agent's edit behind a fact about its old text. Those, and
    # any superseded or deleted meanwhile, are left out: the fact is then written, and the
    # write's own dedup compares it with the memory as it is now.
    fresh = Memory.objects.select_for_update().in_bulk([m.pk for m, _ in found])
    similar = [
        (fresh[m.pk], score)
        for m, score in found
        if m.pk in fresh
        and fresh[m.pk].content_hash == m.content_hash
        and fresh[m.pk].superseded_by_id is None
    ]
    metadata = {"source": source, "source_items": source_items, "job_id": job_id}
    # The end the fact states ("until 2031-01-31"); one already past makes it a statement about
    # the past, stored without one rather than hidden at once.
    expires_at = fact.expires_at
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        expires_at = None

    def write(meta: dict[str, Any], *, enable_dedup: bool) -> tuple[Memory, DedupHit | None]:
        return memory_create(
            team=team,
            scope=MemoryScope.PERSONAL,
            agent_id=agent_id,
            content=fact.content,
            importance=fact.importance,
            category=fact.category,
            metadata=meta,
            enable_dedup=enable_dedup,
            run_id=run_id,
            vector=vector,
            expires_at=expires_at,
        )

    links: list[int] = []  # memories the fact is written beside, linked in `related_to`
    for old, _score in similar:
        reason = conflict_reason(fact.content, old.content)
        if reason is None:
            if memory_outlives(expires_at, old.expires_at):
                # It says the same but stops being true sooner (or already did): the fact is
                # stored, linked to this one.
                links.append(old.pk)
                continue
            return StoredFact("duplicate", old)
        updates = reason in (
            "numbers differ",
            "negation differs",
            "stated preference differs",
            "dates differ",
            "adds detail",
        ) or (reason.startswith("replaces") and bool(preference_terms(fact.content)))
        if updates and old.expires_at is not None and old.expires_at <= now:
            # Already expired: nothing to replace (the memory it would leave behind, if any,
            # is another candidate).
            continue
        if updates and memory_outlives(old.expires_at, expires_at):
            # A change for a while ("the limit is 5x until Friday"): superseded, the older
            # memory would be hidden for good and nothing would say the limit once the change
            # expires. Stored beside it, linked.
            links.append(old.pk)
            continue
        if updates:
            # Written as is: the older memory it updates would otherwise answer as a duplicate.
            new, _ = write({**metadata, "supersedes": old.pk}, enable_dedup=False)
            memory_supersede(old=old, new=new, actor=SYSTEM)
            return StoredFact("superseded", new, supersedes=old.pk)
    new, hit = write({**metadata, "related_to": links} if links else metadata, enable_dedup=True)
    return StoredFact("duplicate" if hit else "created", new)


def extract_facts(
    *,
    team: Team,
    agent_id: str,
    max_memories: int = 20,
    delete_after: bool = False,
    job_id: int | None = None,
    lease: jobs.Lease | None = None,
) -> tuple[ExtractFactsResult, Usage, str]:
    # Only a deleting extraction consumes working memory; a reading one may overlap anything.
    key = working_claim_key(team, agent_id)
    with _working_claim(lease if delete_after else None, key) as claim:
        if claim.busy_job_id is not None:
            result = ExtractFactsResult(
                facts=[], duplicates=0, superseded=0, analyzed=0, busy_job_id=claim.busy_job_id
            )
            return result, Usage(), get_engine().name
        return _extract_facts(team, agent_id, max_memories, delete_after, job_id, claim)


def _extract_facts(
    team: Team,
    agent_id: str,
    max_memories: int,
    delete_after: bool,
    job_id: int | None,
    claim: _Claim,
) -> tuple[ExtractFactsResult, Usage, str]:
    store = get_working_store()
    items = store.list(team_id=team.id, agent_id=agent_id, limit=max_memories)
    engine = get_engine()
    if not items:
        nothing = ExtractFactsResult(facts=[], duplicates=0, superseded=0, analyzed=None)
        return nothing, Usage(), engine.name
    facts, usage = engine.extract_facts([i.content for i in items])
    facts_dated(facts, [i.created_at for i in items])
    embed_passages([f.content for f in facts])
    stored: list[Memory] = []
    duplicates = superseded = 0
    locks.scope_lock_prepare(team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=agent_id)
    with transaction.atomic():
        # Before the first fact's comparison, as ingest does: store_fact decides under it. And
        # before the job's row (claim.confirm locks it), as an agent's deletion takes them.
        locks.scope_lock(team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=agent_id)
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        claim.confirm()
        for fact in facts:
            outcome = store_fact(
                team=team,
                agent_id=agent_id,
                fact=fact,
                source_items=_sources(items, fact.source_indexes),
                job_id=job_id,
            )
            if outcome.outcome == "duplicate":
                duplicates += 1
                continue
            superseded += outcome.outcome == "superseded"
            stored.append(outcome.memory)
        _archive(team, agent_id, items, job_id)
    if delete_after:
        store.remove(team_id=team.id, agent_id=agent_id, item_ids=[i.id for i in items])
    result = ExtractFactsResult(
        facts=stored, duplicates=duplicates, superseded=superseded, analyzed=len(items)
    )
    return result, usage, engine.name


def aggregate_scenes(
    *, team: Team, agent_id: str, max_memories: int = 50, job_id: int | None = None
) -> tuple[ScenesResult, Usage, str]:
    """Groups the agent's personal and the team's memories into scenarios (replacing the agent's
    previous scenarios; personas keep a snapshot of the ones they were built from)."""
    memories = list(
        Memory.objects.filter(
            Q(scope=MemoryScope.PERSONAL, agent_id=agent_id) | Q(scope=MemoryScope.TEAM),
            unexpired_q(timezone.now()),
            team=team,
            superseded_by__isnull=True,
        ).order_by("-created_at", "-id")[:max_memories]
    )
    engine = get_engine()
    if not memories:
        return ScenesResult([]), Usage(), engine.name
    drafts, usage = engine.aggregate([(m.pk, m.content) for m in reversed(memories)])
    # Under the agent's personal-scope lock, which an import of the agent's scenarios takes too:
    # an import at the same moment (in another process) comes before, and these replace its
    # scenarios, or after, and meets these by name; never a second scenario of one name.
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        Scenario.objects.filter(team=team, agent_id=agent_id).delete()
        created = [
            Scenario.objects.create(
                team=team,
                agent_id=agent_id,
                name=d.name,
                summary=d.summary,
                memory_ids=d.memory_ids,
                job_id=job_id,
            )
            for d in drafts
        ]
    return ScenesResult(created), usage, engine.name


def generate_persona(
    *, team: Team, agent_id: str, max_items: int = 30, job_id: int | None = None
) -> tuple[Persona, Usage, str]:
    memories = list(
        Memory.objects.filter(
            unexpired_q(timezone.now()),
            team=team,
            scope=MemoryScope.PERSONAL,
            agent_id=agent_id,
            superseded_by__isnull=True,
        ).order_by("-importance", "-created_at")[:max_items]
    )
    scenarios = list(
        Scenario.objects.filter(team=team, agent_id=agent_id).order_by("-created_at")[:max_items]
    )
    # The profile is exact (set, or read from a fact and not contradicted since): it comes first.
    profile = [(f.key, f.value) for f in profile_fields(team=team, agent_id=agent_id)]
    engine = get_engine()
    draft, usage = engine.persona(
        [(m.pk, m.content, m.category) for m in memories],
        [(s.id, s.name, s.summary) for s in scenarios],
        profile,
    )
    used = {s.id: s for s in scenarios}
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        persona = Persona.objects.create(
            team=team,
            agent_id=agent_id,
            preferences=draft.preferences,
            habits=draft.habits,
            expertise=draft.expertise,
            communication_style=draft.communication_style,
            summary=draft.summary,
            memory_ids=draft.memory_ids,
            scenario_ids=draft.scenario_ids,
            # The scenarios as the API shows them: the snapshot keeps that shape (a JSON column).
            scenarios_snapshot=[
                scenario_body(used[sid]) for sid in draft.scenario_ids if sid in used
            ],
            job_id=job_id,
        )
    return persona, usage, engine.name


# Who removed a memory (TrashedMemory.removed_by), by the trigger of the cleanup job.
CLEANUP_REMOVED_BY = {"api": "cleanup", "beat": "beat", "command": "command", "auto": "auto"}
CLEANUP_CHUNK = 500


def _cleanup_queryset(
    team: Team, max_age_days: int, min_importance: float, agent_id: str | None
) -> Any:
    cutoff = timezone.now() - timedelta(days=max_age_days)
    qs = Memory.objects.filter(team=team, pinned=False, importance__lt=min_importance).filter(
        Q(last_accessed__lt=cutoff) | Q(last_accessed__isnull=True, created_at__lt=cutoff)
    )
    if agent_id:
        qs = qs.filter(scope=MemoryScope.PERSONAL, agent_id=agent_id)
    return qs


def _cleanup_scope(team: Team, agent_id: str | None) -> QuerySet[Memory]:
    """The memories a cleanup looks at (what `remaining` counts)."""
    qs = Memory.objects.filter(team=team)
    if agent_id:
        qs = qs.filter(scope=MemoryScope.PERSONAL, agent_id=agent_id)
    return qs


def _ladder_step(memory: Memory, ready_before: datetime) -> str:
    """What the cleanup ladder does with a candidate: cold first; the trash once it has been
    cold for CLEANUP_COLD_GRACE_DAYS (docs/lifecycle.md, "Tiers")."""
    if memory.tier != MemoryTier.COLD:
        return "cold"
    if memory.tier_changed_at is None or memory.tier_changed_at <= ready_before:
        return "trash"
    return "wait"


def _cold_ready_before() -> datetime:
    return timezone.now() - timedelta(days=settings.CLEANUP_COLD_GRACE_DAYS)


def _ready_q(ready_before: datetime) -> Q:
    return Q(tier=MemoryTier.COLD) & (
        Q(tier_changed_at__isnull=True) | Q(tier_changed_at__lte=ready_before)
    )


def cleanup_preview(
    *,
    team: Team,
    max_age_days: int = 90,
    min_importance: float = 0.2,
    agent_id: str | None = None,
) -> CleanupPreview:
    """What `cleanup` would do (reads only): the first 1000 candidates, least important first,
    each with its ladder step."""
    qs = _cleanup_queryset(team, max_age_days, min_importance, agent_id)
    ready_before = _cold_ready_before()
    candidates = [
        CleanupCandidate(
            memory=m,
            reason=f"importance {m.importance:g} < {min_importance:g} and "
            f"not accessed for more than {max_age_days} days",
            action=_ladder_step(m, ready_before),
        )
        for m in qs.order_by("importance", "id")[:1000]
    ]
    return CleanupPreview(
        remaining=_cleanup_scope(team, agent_id).count(),
        would_clean=qs.filter(_ready_q(ready_before)).count(),
        would_cool=qs.exclude(tier=MemoryTier.COLD).count(),
        candidates=candidates,
    )


def cleanup(
    *,
    team: Team,
    max_age_days: int = 90,
    min_importance: float = 0.2,
    agent_id: str | None = None,
    dry_run: bool = False,
    job_id: int | None = None,
    removed_by: str | None = None,
) -> tuple[CleanupResult | CleanupPreview, Usage, str]:
    """Forgets memories that are both unimportant and idle, by a ladder; pinned ones never.

    A candidate that is not cold yet goes cold (out of everyday search and of the in-memory
    index, kept: `cooled` lists them); one that has been cold for CLEANUP_COLD_GRACE_DAYS goes
    to the trash (restorable for TRASH_RETENTION_DAYS; `trashed` lists them), and the trash is
    emptied after that. So nothing goes from "in use" to "gone" in one step, and a memory an
    agent asks for again on the way (an include_cold search, a read by id) is hot again and no
    longer a candidate. `removed_by` says which path ran it (auto-run passes "auto"); without
    it, it follows the job's trigger: api -> "cleanup", beat -> "beat", command -> "command".
    `dry_run` changes nothing and returns `cleanup_preview`.
    """
    if dry_run:
        preview = cleanup_preview(
            team=team,
            max_age_days=max_age_days,
            min_importance=min_importance,
            agent_id=agent_id,
        )
        return preview, Usage(), "rules"
    qs = _cleanup_queryset(team, max_age_days, min_importance, agent_id)
    scope_qs = _cleanup_scope(team, agent_id)
    if removed_by is None:
        trigger = None
        if job_id is not None:
            trigger = JobRun.objects.filter(pk=job_id).values_list("trigger", flat=True).first()
        removed_by = CLEANUP_REMOVED_BY.get(trigger or "", "cleanup")
    reason = (
        f"cleanup: importance < {min_importance:g} and not accessed for more than "
        f"{max_age_days} days, cold for {settings.CLEANUP_COLD_GRACE_DAYS} days"
        + (f" (job #{job_id})" if job_id else "")
    )
    # Read both sets before changing anything: what goes cold now is not trashed by this run.
    ready = qs.filter(_ready_q(_cold_ready_before()))
    ids = list(ready.order_by("id").values_list("pk", flat=True))
    cool = list(qs.exclude(tier=MemoryTier.COLD).order_by("id").values_list("pk", flat=True))
    trashed: list[int] = []
    # In chunks: each loads the rows with their vectors to snapshot them into the trash.
    for start in range(0, len(ids), CLEANUP_CHUNK):
        trashed += memories_trash(
            team=team,
            memories=list(ready.filter(pk__in=ids[start : start + CLEANUP_CHUNK])),
            removed_by=removed_by,
            reason=reason,
            # Checked again under the rows' locks: one pinned, recalled (hot again) or made
            # important since it was read stays where it is.
            still=ready,
        )
    cooled: list[int] = []
    for start in range(0, len(cool), CLEANUP_CHUNK):
        # Moved only while still candidates under the rows' locks: one recalled, pinned or
        # re-weighted since it was read stays where it is.
        cooled += memories_set_tier(
            team=team,
            memory_ids=cool[start : start + CLEANUP_CHUNK],
            tier=MemoryTier.COLD,
            still=qs,
            cold_reason=ColdReason.CLEANUP,
        )
    result = CleanupResult(
        cleaned=len(trashed), remaining=scope_qs.count(), trashed=trashed, cooled=cooled
    )
    return result, Usage(), "rules"


# Feedback worth a rule is what the agent was told about how to work: preferences and habits.
FEEDBACK_CATEGORIES = ("preference", "habit")


def propose_procedures(
    *,
    team: Team,
    agent_id: str,
    min_repeats: int = 3,
    max_memories: int = 200,
    job_id: int | None = None,
) -> tuple[ProposalsResult, Usage, str]:
    """Proposes a rule for every point of feedback the agent's memories repeat `min_repeats`
    times or more (offline.repeated_points; the rule is the feedback's most central wording).
    A proposal is never followed until the agent or a lead accepts it (PUT status active), and
    a point that already has a rule — active, proposed or rejected — is not proposed again.
    Nothing is proposed past the agent's room for rules (MAX_RULES_PER_AGENT): the points
    repeated most often first."""
    memories = list(
        Memory.objects.filter(
            unexpired_q(timezone.now()),
            team=team,
            scope=MemoryScope.PERSONAL,
            agent_id=agent_id,
            superseded_by__isnull=True,
            category__in=FEEDBACK_CATEGORIES,
        ).order_by("-created_at", "-id")[:max_memories]
    )
    texts = [m.content for m in memories]
    points = repeated_points(texts, min_repeats=min_repeats)
    proposals: list[Procedure] = []
    # The agent's rules are read and the proposals added under the agent's personal-scope lock,
    # the one every rule's create takes: a proposal run, a rule the agent adds or an import of
    # its rules at the same moment (in another process) is one this run sees, not one it
    # proposes again.
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        known = [p.rule for p in procedure_list(team=team, agent_id=agent_id)]
        room = procedure_room(team=team, agent_id=agent_id)
        for central, group in points:
            if len(proposals) == room:
                break
            rule = texts[central]
            if known and max(similarity_matrix([rule, *known])[0, 1:]) >= REPEAT_THRESHOLD:
                continue  # this point has a rule already (or was refused)
            proposals.append(
                procedure_create(
                    team=team,
                    agent_id=agent_id,
                    rule=rule,
                    source="lifecycle",
                    status=ProcedureStatus.PROPOSED,
                    evidence=sorted(memories[i].pk for i in group),
                    actor=Actor(label="lifecycle"),
                )
            )
            known.append(rule)
    return ProposalsResult(proposals=proposals, examined=len(memories)), Usage(), "offline"


def consolidate(
    *,
    team: Team,
    agent_id: str,
    min_fragments: int = 3,
    max_memories: int = 200,
    job_id: int | None = None,
) -> tuple[ConsolidateResult, Usage, str]:
    """Fragments about one thing become one stable fact (the engine's one-summary compress of
    them); each fragment is demoted to the cold tier with `metadata.consolidated_into` = the
    fact — kept, out of everyday search, found by an `include_cold` search, traceable both ways
    (the fact's `metadata.consolidated_from` lists them). Nothing is deleted. Groups are the
    agent's live, not cold memories that say the same point (offline.repeated_points),
    `min_fragments` or more; pinned memories and episodes are left as they are."""
    memories = list(
        Memory.objects.filter(
            unexpired_q(timezone.now()),
            team=team,
            scope=MemoryScope.PERSONAL,
            agent_id=agent_id,
            superseded_by__isnull=True,
            pinned=False,
        )
        .exclude(category="episode")
        .exclude(tier=MemoryTier.COLD)
        # A fragment already consolidated (then asked for, hot again) stays out: its fact
        # holds the point.
        .exclude(metadata__has_key="consolidated_into")
        .order_by("-created_at", "-id")[:max_memories]
    )
    engine = get_engine()
    usage = Usage()
    groups = repeated_points([m.content for m in memories], min_repeats=min_fragments)
    done: list[Consolidation] = []
    for _central, group in groups:
        fragments = sorted((memories[i] for i in group), key=lambda m: (m.created_at, m.pk))
        summaries, spent = engine.compress([m.content for m in fragments], 1)
        usage = usage.add(spent)
        if not summaries:
            continue
        summary = summaries[0]
        # Two consolidations of one agent at once (a manual run beside an automatic one): the
        # second waits here, then finds the fragments cold and writes nothing.
        with locks.agent_locked(team_id=team.id, agent_id=agent_id):
            locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
            # The fragments locked and read again: an edit, a pin or a delete takes only the
            # row's lock, and the summary was written from the texts read before the engine
            # call. A fragment changed since (its text, pinned, superseded, cold, gone) leaves
            # its group as it is: demoting an edited fragment would hide the agent's correction
            # behind a fact about its old text.
            fresh = Memory.objects.select_for_update().in_bulk([m.pk for m in fragments])
            if any(
                (now := fresh.get(m.pk)) is None
                or now.content_hash != m.content_hash
                or now.pinned
                or now.superseded_by_id is not None
                or now.tier == MemoryTier.COLD
                or now.expired(timezone.now())
                for m in fragments
            ):
                continue
            fragments = [fresh[m.pk] for m in fragments]
            # The fact says what every fragment says: it stays true while one of them does.
            expiries = [m.expires_at for m in fragments]
            expires_at = None if None in expiries else max(e for e in expiries if e is not None)
            fact, _ = memory_create(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id=agent_id,
                content=summary.content,
                importance=max([summary.importance, *(m.importance for m in fragments)]),
                category=Counter(m.category for m in fragments).most_common(1)[0][0],
                metadata={
                    "source": "consolidation",
                    "consolidated_from": [m.pk for m in fragments],
                    "job_id": job_id,
                },
                enable_dedup=False,
                expires_at=expires_at,
            )
            for fragment in fragments:
                memory_update(
                    memory=fragment,
                    actor=SYSTEM,
                    metadata={**fragment.metadata, "consolidated_into": fact.pk},
                )
            memories_set_tier(
                team=team,
                memory_ids=[m.pk for m in fragments],
                tier=MemoryTier.COLD,
                cold_reason=ColdReason.CONSOLIDATED,
            )
        done.append(Consolidation(memory=fact, fragments=[m.pk for m in fragments]))
    return ConsolidateResult(consolidated=done, examined=len(memories)), usage, engine.name
