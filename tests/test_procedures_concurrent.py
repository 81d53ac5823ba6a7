"""Two requests on one rule (procedural memory) at once, each in its own server process on one
MariaDB database: an agent edits a rule's text while a lead accepts or rejects it, or a request
reaches a rule another one deleted, or two requests add the same rule (or one adds it as another
edits a rule into it). Both changes must hold; a rule deleted meanwhile is a 404 as a moment
later, never a 500 and never a "deleted" for nothing; a rule added twice is one rule.

The order is forced: a third process holds the rule's row, the first request queues on it, then
the second; releasing the holder lets them go in that order (InnoDB grants a row's lock in the
order it was asked for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import Stack, answer, live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

RULE = "Run the tests before every commit."


def queued(stack: Stack, pk: int, first: Callable[[], Any], second: Callable[[], Any]) -> Any:
    """`first` then `second`, queued in that order on rule `pk`'s row; both answers."""
    return queued_in_order(
        stack, ("memories.models", "Procedure", pk), answer(first), answer(second)
    )


def clients(stack: Stack) -> list[MemoryClient]:
    return [MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls]


def proposed_rule(stack: Stack) -> int:
    """A rule the lifecycle proposed (the API adds active ones)."""
    pk = clients(stack)[0].add_procedure("coder", RULE)["id"]
    stack_python(
        stack,
        "import json\nfrom memories.models import Procedure\n"
        f"Procedure.objects.filter(pk={pk}).update(status='proposed')\nprint(json.dumps(1))",
    )
    return pk


@pytest.mark.parametrize("decision", ["active", "rejected"])
@pytest.mark.parametrize("edit_first", [True, False], ids=["edit first", "decision first"])
def test_an_edit_and_a_decision_at_once_both_hold(tmp_path, decision, edit_first):
    """Each request wrote both fields as it had read them: the later one undid the earlier one's
    change (a rejected proposal came back as proposed, or the edited text reverted)."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        pk = proposed_rule(stack)
        edit = lambda: a.update_procedure("coder", pk, rule="Run the full test suite first.")  # noqa: E731
        decide = lambda: b.update_procedure("coder", pk, status=decision)  # noqa: E731
        first, second = (edit, decide) if edit_first else (decide, edit)
        queued(stack, pk, first, second)
        (rule,) = a.list_procedures("coder")["procedures"]
        assert (rule["rule"], rule["status"]) == ("Run the full test suite first.", decision)


@pytest.mark.parametrize("late", ["update", "delete"])
def test_a_request_queued_behind_a_delete_finds_the_rule_gone(tmp_path, late):
    """An edit that read the rule, then waited while a DELETE removed it, answered 500 ("save
    with update_fields did not affect any rows"); a second DELETE answered 200."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        pk = a.add_procedure("coder", RULE)["id"]
        then = (
            (lambda: b.update_procedure("coder", pk, rule="Run the full test suite first."))
            if late == "update"
            else (lambda: b.delete_procedure("coder", pk))
        )
        deleted, answered = queued(stack, pk, lambda: a.delete_procedure("coder", pk), then)
        assert deleted == {"deleted": pk}
        assert answered == (404, "NOT_FOUND")
        assert a.list_procedures("coder")["procedures"] == []


def test_a_lead_deciding_on_a_rule_deleted_meanwhile_is_told_so(tmp_path):
    """The console's accept of a rule the agent deleted after the page listed it (a 500)."""
    from .test_console_concurrent import console_post

    with live_stack(tmp_path, servers=1) as stack:
        a = clients(stack)[0]
        pk = proposed_rule(stack)
        deleted, answer = queued(
            stack,
            pk,
            lambda: a.delete_procedure("coder", pk),
            lambda: console_post(
                stack, f"lifecycle/procedures/{pk}/decide/", {"decision": "accept"}
            ),
        )
        assert deleted == {"deleted": pk}
        assert (answer["status"], answer["location"]) == (
            302,
            answer["base"] + "lifecycle/procedures/",
        )
        assert answer["messages"] == [
            f"Rule #{pk} was removed by another request meanwhile; nothing was decided."
        ]
        assert a.list_procedures("coder")["procedures"] == []


# The primary key of the coder's personal-scope lock row (made by the agent's first write).
CODER_LOCK = """
import json
from memories.models import ScopeLock
from memories.retrieval.index import scope_key
from tenants.models import Team
team = Team.objects.get()
print(json.dumps(ScopeLock.objects.get(scope_key=scope_key(team.id, "personal", "coder")).pk))
"""


def test_two_adds_of_one_rule_at_once_leave_one_rule(tmp_path):
    """Both requests looked for the rule before either had written it, and both added it."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        other = a.add_procedure("coder", "Be brief.")
        lock = stack_python(stack, CODER_LOCK)
        first, second = queued_in_order(
            stack,
            ("memories.models", "ScopeLock", lock),
            answer(lambda: a.add_procedure("coder", RULE)),
            answer(lambda: b.add_procedure("coder", "  " + RULE.lower())),
        )
        assert second == first and first["rule"] == RULE
        rules = a.list_procedures("coder")["procedures"]
        assert [r["id"] for r in rules] == [other["id"], first["id"]]


def test_a_rule_added_as_it_is_deleted_is_added_again(tmp_path):
    """An add that found the rule, then waited while a DELETE removed it, would answer with the
    rule just deleted: the agent told its rule is kept, and no rule left."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        pk = a.add_procedure("coder", RULE)["id"]
        deleted, added = queued(
            stack,
            pk,
            lambda: a.delete_procedure("coder", pk),
            lambda: b.add_procedure("coder", RULE),
        )
        assert deleted == {"deleted": pk}
        assert added["id"] != pk
        assert [
            (r["id"], r["rule"], r["status"]) for r in a.list_procedures("coder")["procedures"]
        ] == [(added["id"], RULE, "active")]


@pytest.mark.parametrize("add_first", [True, False], ids=["add first", "edit first"])
def test_an_add_and_an_edit_to_one_text_at_once_leave_one_rule(tmp_path, add_first):
    """An edit compared nothing: an agent adding a rule while another request rewrote one of its
    rules into the same words ended with two copies, both followed."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        pk = a.add_procedure("coder", "Be brief.")["id"]
        lock = stack_python(stack, CODER_LOCK)
        add = answer(lambda: a.add_procedure("coder", RULE))
        edit = answer(lambda: b.update_procedure("coder", pk, rule=RULE.upper()))
        first, second = queued_in_order(
            stack,
            ("memories.models", "ScopeLock", lock),
            *((add, edit) if add_first else (edit, add)),
        )
        rules = a.list_procedures("coder")["procedures"]
        if add_first:
            # The edit is refused: the rule it would repeat was added first.
            assert second == (409, "CONFLICT")
            assert [(r["id"], r["rule"]) for r in rules] == [
                (pk, "Be brief."),
                (first["id"], RULE),
            ]
        else:
            # The add meets the rule the edit wrote.
            assert second["id"] == first["id"] == pk
            assert [(r["id"], r["rule"]) for r in rules] == [(pk, RULE.upper())]


def test_two_adds_into_the_last_room_for_a_rule_leave_the_limit(tmp_path):
    """The agent's count is read in its lock: two new rules added at once when one more fits
    would both see room for it."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        a.add_procedure("coder", "Be brief.")
        held = stack_python(
            stack,
            "import json\nfrom memories.models import Procedure\n"
            "from memories.services import MAX_RULES_PER_AGENT\n"
            "first = Procedure.objects.get()\n"
            "Procedure.objects.bulk_create(Procedure(team_id=first.team_id, agent_id='coder', "
            "rule=f'Rule {i}.', source='agent') for i in range(MAX_RULES_PER_AGENT - 2))\n"
            "print(json.dumps(Procedure.objects.count()))",
        )
        lock = stack_python(stack, CODER_LOCK)
        first, second = queued_in_order(
            stack,
            ("memories.models", "ScopeLock", lock),
            answer(lambda: a.add_procedure("coder", RULE)),
            answer(lambda: b.add_procedure("coder", "Cite the source.")),
        )
        assert first["rule"] == RULE
        assert second == (400, "VALIDATION_ERROR")
        assert len(a.list_procedures("coder")["procedures"]) == held + 1


@pytest.mark.parametrize("then", ["restore", "add"])
def test_a_restore_and_another_restore_or_an_add_of_its_text_at_once_leave_one_rule(tmp_path, then):
    """Both restores would find the rule removed and write it back; a restore and an add of its
    words would each find no rule saying them. The lock is the agent's, as for every add."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = clients(stack)
        pk = a.add_procedure("coder", RULE)["id"]
        a.delete_procedure("coder", pk)
        lock = stack_python(stack, CODER_LOCK)
        second_call = (
            (lambda: b.restore_procedure("coder", pk))
            if then == "restore"
            else (lambda: b.add_procedure("coder", RULE.upper()))
        )
        first, second = queued_in_order(
            stack,
            ("memories.models", "ScopeLock", lock),
            answer(lambda: a.restore_procedure("coder", pk)),
            answer(second_call),
        )
        assert (first["id"], first["rule"]) == (pk, RULE)
        if then == "restore":
            assert second == (409, "CONFLICT")
        else:
            # The add meets the rule just restored: one rule of that text, with its own id.
            assert second["id"] == pk
        rules = a.list_procedures("coder")["procedures"]
        assert [(r["id"], r["rule"]) for r in rules] == [(pk, RULE)]
