"""A lifecycle operation that compared a memory, then reached it after the agent had edited it,
each in its own server process on one MariaDB database (the offline engine: no LLM). The fact was
decided against the old text; the edit must stay what the agent sees — neither superseded by a
fact about the text it replaced, nor demoted to the cold tier as a fragment of a point it no
longer makes.

The order is forced: a third process holds the memory's row, the agent's edit queues on it
first (it has not written yet), then the operation, which has read the old text; releasing the
holder lets the edit commit first (InnoDB grants a row's lock in the order it was asked for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import Stack, live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

STATE = """
import json
from memories.models import Memory
print(json.dumps({{
    m.pk: [m.content, m.superseded_by_id, m.tier, "consolidated_into" in (m.metadata or {{}})]
    for m in Memory.objects.filter(agent_id="coder")
}}))
"""


def edit_then(stack: Stack, mid: int, edit: Callable[[], Any], then: Callable[[], Any]) -> Any:
    """`edit` queued on memory `mid`'s row, then `then`; the answer of `then`."""
    return queued_in_order(stack, ("memories.models", "Memory", mid), edit, then)[1]


def state(stack: Stack) -> dict[int, list[Any]]:
    return {int(k): v for k, v in stack_python(stack, STATE.format()).items()}


def test_a_fact_compared_with_the_old_text_does_not_supersede_the_edit(tmp_path):
    """Ingest read "3x", the agent then corrected the memory; the new fact ("5x") superseded the
    corrected memory, hiding it from search. Now the fact is written beside it."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=180) for u in stack.urls
        )
        first = a.ingest("coder", [{"role": "user", "content": "My leverage limit is 3x."}])
        (added,) = first["facts"]
        assert added["decision"] == "ADD"
        mid = added["memory"]["id"]
        edited_text = "My leverage limit is 3x, set by the risk desk on Monday."
        answer = edit_then(
            stack,
            mid,
            lambda: a.update_memory(mid, content=edited_text),
            lambda: b.ingest("coder", [{"role": "user", "content": "My leverage limit is 5x."}]),
        )
        (fact,) = answer["facts"]
        assert fact["decision"] == "ADD" and fact.get("supersedes") is None
        rows = state(stack)
        assert rows[mid][:2] == [edited_text, None]  # the edit, still current
        assert rows[fact["memory"]["id"]][:2] == [fact["memory"]["content"], None]
        assert "5x" in fact["memory"]["content"]


def test_a_consolidation_leaves_a_group_whose_fragment_was_edited_meanwhile(tmp_path):
    """The consolidation summarised the three fragments as read, then demoted all three to the
    cold tier — the one the agent had just corrected too. Now that group is left as it is."""
    group = [
        "Deploys to production happen every Friday at 5pm.",
        "Production deploys are scheduled every Friday at 5pm.",
        "We deploy to production on Fridays at 5pm.",
    ]
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=180) for u in stack.urls
        )
        ids = [a.write_memory("coder", t, enable_dedup=False)["id"] for t in group]
        edited_text = "Production deploys moved to Thursdays at 10am."
        answer = edit_then(
            stack,
            ids[0],
            lambda: a.update_memory(ids[0], content=edited_text),
            lambda: b.consolidate("coder"),
        )
        assert answer["consolidated"] == []
        rows = state(stack)
        assert rows[ids[0]] == [edited_text, None, "hot", False]
        assert all(rows[i][2:] == ["hot", False] for i in ids)
        assert len(rows) == len(group)  # no fact written


def test_a_consolidation_still_runs_when_nothing_changed(tmp_path):
    """The same group, no edit: one fact, the three fragments cold and linked to it (the check
    above is not a consolidation that never happens)."""
    group = [
        "Deploys to production happen every Friday at 5pm.",
        "Production deploys are scheduled every Friday at 5pm.",
        "We deploy to production on Fridays at 5pm.",
    ]
    with live_stack(tmp_path, servers=1) as stack:
        a = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=180)
        ids = [a.write_memory("coder", t, enable_dedup=False)["id"] for t in group]
        (done,) = a.consolidate("coder")["consolidated"]
        assert sorted(done["fragments"]) == sorted(ids)
        rows = state(stack)
        assert all(rows[i][2:] == ["cold", True] for i in ids)
