"""An agent deleted while an ingest for it runs, each in its own server process on one MariaDB
database. Whichever takes the agent's write lock first, nothing of the ingest is left for the
deleted agent: an ingest that wrote first has its facts erased by the deletion; one that comes
second finds the agent gone and writes nothing (before, it wrote its facts and registered the
agent again). The same holds for every other kind of job that writes for its agent.

The order is forced: a third process holds the agent's lock row, the first request queues on it,
then the second; releasing the holder lets them go in that order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import answer, live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

MESSAGES = [
    {"role": "user", "content": "I live in Singapore and trade crypto on Binance."},
    {"role": "user", "content": "My leverage limit is 3x on every account."},
]

LOCK_ROW = """
import json
from memories.models import ScopeLock
from memories.retrieval.index import scope_key
from tenants.models import Team
team = Team.objects.get()
print(json.dumps(ScopeLock.objects.get(scope_key=scope_key(team.id, "personal", "coder")).pk))
"""

LEFT = """
import json
from graph.models import Entity
from lifecycle.models import Persona, Scenario, WorkingArchive
from memories.models import Memory, Procedure, ProfileField
from tenants.models import Agent
print(json.dumps({
    "agent": Agent.objects.filter(agent_id="coder").count(),
    "memories": Memory.objects.filter(agent_id="coder").count(),
    "archive": WorkingArchive.objects.filter(agent_id="coder").count(),
    "profile": ProfileField.objects.filter(agent_id="coder").count(),
    "scenarios": Scenario.objects.filter(agent_id="coder").count(),
    "personas": Persona.objects.filter(agent_id="coder").count(),
    "rules": Procedure.objects.filter(agent_id="coder").count(),
    "entities": Entity.objects.filter(agent_id="coder").count(),
}))
"""
NOTHING = dict.fromkeys(
    ["agent", "memories", "archive", "profile", "scenarios", "personas", "rules", "entities"], 0
)

# Three wordings of one point of feedback: a group to consolidate, a rule to propose.
FEEDBACK = [
    "The user wants short answers without long explanations.",
    "The user asked again for shorter answers, no long explanations.",
    "The user prefers short answers and dislikes long explanations.",
]


def _working(client: MemoryClient) -> None:
    for m in MESSAGES:
        client.write_working("coder", m["content"])


def _feedback(client: MemoryClient) -> None:
    for text in FEEDBACK:
        client.write_memory("coder", text, category="preference", enable_dedup=False)


def _facts(client: MemoryClient) -> None:
    for m in MESSAGES:
        client.write_memory("coder", m["content"])


# Each kind of job that writes for its agent: what it needs to have something to write, and
# its call (each reaches the agent's lock only after its engine call, when it has work).
JOBS: dict[str, tuple[Callable[[MemoryClient], None], Callable[[MemoryClient], Any]]] = {
    "compress": (_working, lambda c: c.compress("coder")),
    "extract-facts": (_working, lambda c: c.extract_facts("coder")),
    "scenarios": (_feedback, lambda c: c.aggregate_scenarios("coder")),
    "persona": (_feedback, lambda c: c.generate_persona("coder")),
    "consolidate": (_feedback, lambda c: c.consolidate("coder")),
    "proposals": (_feedback, lambda c: c.propose_procedures("coder")),
    # Writes an entity at a time, each under the lock (graph.extraction._fenced).
    "graph": (_facts, lambda c: c.post("/lifecycle/extract-graph", {"agent_id": "coder"})),
}


@pytest.mark.parametrize("ingest_first", [True, False], ids=["ingest first", "deletion first"])
def test_an_ingest_and_its_agents_deletion_at_once_leave_nothing_of_the_agent(
    tmp_path, ingest_first
):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        a.write_memory("coder", "Prefers tabs to spaces.")  # the agent and its lock row
        team = stack.team_id
        lock = stack_python(stack, LOCK_ROW)
        ingest = answer(lambda: a.ingest("coder", MESSAGES))
        delete = answer(lambda: b.delete_agent(team, "coder"))
        first, second = queued_in_order(
            stack,
            ("memories.models", "ScopeLock", lock),
            *((ingest, delete) if ingest_first else (delete, ingest)),
        )
        if ingest_first:
            # The ingest wrote (its answer shows its facts); the deletion, queued behind it on
            # the agent's lock, erased them with the rest.
            assert first["archived"] == 2 and first["facts"]
            assert second is None
        else:
            assert first is None
            # Queued behind the deletion, the ingest finds its agent gone.
            assert second == (404, "NOT_FOUND")
        assert stack_python(stack, LEFT) == NOTHING


def test_a_restore_of_the_agents_trash_and_its_deletion_at_once_leave_nothing(tmp_path):
    """A restore takes its trash item's row, then the agent's write lock. A deletion that took
    the lock first and then the trash rows waited for the restore while the restore waited for
    it: InnoDB rolled one back (a 503)."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        mid = a.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]
        a.delete_memory(mid)
        team = stack.team_id
        item = stack_python(
            stack,
            "import json\nfrom memories.models import TrashedMemory\n"
            f"print(json.dumps(TrashedMemory.objects.get(memory_id={mid}).pk))",
        )
        restored, deleted = queued_in_order(
            stack,
            ("memories.models", "TrashedMemory", item),
            answer(lambda: a.restore_memory(mid)),
            answer(lambda: b.delete_agent(team, "coder")),
        )
        assert restored["id"] == mid and deleted is None
        assert stack_python(stack, LEFT) == NOTHING


@pytest.mark.parametrize(
    ("kind", "job_first"),
    [(kind, False) for kind in JOBS] + [("compress", True), ("persona", True)],
    ids=lambda v: v if isinstance(v, str) else ("job first" if v else "deletion first"),
)
def test_a_lifecycle_job_and_its_agents_deletion_at_once_leave_nothing_of_the_agent(
    tmp_path, kind, job_first
):
    """Compress, persona and graph extraction wrote without the agent's lock before: they
    take it now. The others took it already and only lacked the check."""
    prepare, call = JOBS[kind]
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        a.write_memory("coder", "Prefers tabs to spaces.")  # the agent and its lock row
        prepare(a)
        team = stack.team_id
        lock = stack_python(stack, LOCK_ROW)
        job = answer(lambda: call(a))
        delete = answer(lambda: b.delete_agent(team, "coder"))
        first, second = queued_in_order(
            stack,
            ("memories.models", "ScopeLock", lock),
            *((job, delete) if job_first else (delete, job)),
        )
        if job_first:
            # The job wrote (a summary's memory, a persona); the deletion, queued behind it on
            # the agent's lock, erased that with the rest.
            assert (first.get("memory_ids") or first.get("persona")) and second is None
        else:
            assert first is None
            assert second == (404, "NOT_FOUND")
        assert stack_python(stack, LEFT) == NOTHING
