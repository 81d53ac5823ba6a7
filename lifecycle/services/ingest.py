"""Conversation ingest (`POST /memories/ingest`, docs/ingest.md): an agent hands over a stretch
of conversation in one call.

Every message is kept as L0 in the archive (`WorkingArchive`, reason `ingested`, with its role,
time, speaker name and run id), so whatever is derived from it stays traceable
(`/lifecycle/sources/<id>`). With `infer`, the facts are extracted from the messages of the
chosen roles (the user's by default: an assistant's own explanations are not facts about the
user) by the lifecycle engine — the configured LLM, or the offline engine — and each fact gets
one decision against the agent's personal memories (`operations.store_fact`): `ADD`, `UPDATE`
(a new memory supersedes the older one, which stays in its history) or `NOOP` (already known).
Nothing is ever deleted.

The engine call and the embeddings happen before the transaction; the archive rows, the
decisions and the idempotency record then commit together under the agent's scope lock, so two
ingests of one agent decide one after the other and see each other's facts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from lifecycle.llm import get_engine
from lifecycle.models import ArchiveReason, WorkingArchive
from lifecycle.schemas import Fact
from llm import Usage
from memories import locks
from memories.models import Memory, MemoryScope
from memories.retrieval.embeddings import embed_passages
from tenants.idempotency import IdempotencyKey, idempotency_record
from tenants.models import Team

from ..presenters import ingest_body
from ..results import IngestDecision, IngestResult
from .operations import facts_dated, store_fact

ROLES = ("user", "assistant", "system", "tool")
DEFAULT_FACT_ROLES = ("user",)
MAX_MESSAGES = 200
_DECISIONS = {"created": "ADD", "superseded": "UPDATE", "duplicate": "NOOP"}


@dataclass(frozen=True)
class IngestMessage:
    role: str
    content: str
    at: datetime | None = None  # when it was said; the ingest time when not given
    name: str = ""  # the speaker, when the conversation has several


def ingest(
    *,
    team: Team,
    agent_id: str,
    messages: Sequence[IngestMessage],
    run_id: str = "",
    infer: bool = True,
    fact_roles: Sequence[str] = DEFAULT_FACT_ROLES,
    job_id: int | None = None,
    idempotency: IdempotencyKey | None = None,
    max_memories_per_run: int = 0,
) -> tuple[IngestResult, Usage, str]:
    """Archives the messages and decides their facts; `(result, usage, engine name)` like every
    lifecycle operation. Raises `idempotency.Replayed` when a twin request committed first.

    `max_memories_per_run` (the pipeline config's; 0 = unlimited) bounds the memories a run
    (`run_id`) gets: once it has that many, its further facts are not decided at all — counted in
    `over_run_limit` — while their messages are archived like any other, so nothing is lost and a
    later extraction can still read them."""
    engine = get_engine()
    usage = Usage()
    facts: list[Fact] = []
    # The messages facts are read from, by their index among all messages.
    readable = [i for i, m in enumerate(messages) if m.role in fact_roles]
    now = timezone.now()
    if infer and readable:
        facts, usage = engine.extract_facts([messages[i].content for i in readable])
        facts_dated(facts, [messages[i].at or now for i in readable])
        if facts:
            embed_passages([f.content for f in facts])  # one call; store_fact hits the cache
    item_ids = [uuid.uuid4().hex for _ in messages]
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        WorkingArchive.objects.bulk_create(
            [
                WorkingArchive(
                    team=team,
                    agent_id=agent_id,
                    item_id=item_id,
                    content=m.content,
                    item_created_at=m.at or now,
                    job_id=job_id,
                    reason=ArchiveReason.INGESTED,
                    role=m.role,
                    name=m.name,
                    run_id=run_id,
                )
                for item_id, m in zip(item_ids, messages, strict=True)
            ]
        )
        decisions: list[IngestDecision] = []
        profile: dict[str, str] = {}
        # Counted under the scope lock: two ingests of one run cannot both take the last room.
        room: int | None = None
        if run_id and max_memories_per_run > 0:
            written = Memory.objects.filter(
                team=team, scope=MemoryScope.PERSONAL, agent_id=agent_id, run_id=run_id
            ).count()
            room = max(max_memories_per_run - written, 0)
        over = 0
        for fact in facts:
            if room is not None and room <= 0:
                over += 1
                continue
            sources = [item_ids[readable[j]] for j in fact.source_indexes if 0 <= j < len(readable)]
            stored = store_fact(
                team=team,
                agent_id=agent_id,
                fact=fact,
                source_items=sources,
                job_id=job_id,
                source="ingest",
                run_id=run_id,
            )
            if room is not None and stored.outcome != "duplicate":
                room -= 1
            decisions.append(
                IngestDecision(_DECISIONS[stored.outcome], stored.memory, stored.supersedes)
            )
            profile.update(stored.profile)
        result = IngestResult(
            archived=len(messages), facts=decisions, profile=profile, over_run_limit=over
        )
        idempotency_record(team=team, key=idempotency, status_code=200, body=ingest_body(result))
    return result, usage, engine.name
