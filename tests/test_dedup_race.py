"""A write skipped as a duplicate must be covered by what the memory says when the write commits,
not by what it said when dedup read it. An edit (or delete, or supersession) takes the memory's
row lock, not the scope's, so it can commit between the write's comparison and its answer; each
request here runs in its own server process on one MariaDB database.

The order is forced: a third process holds the memory's row, the edit queues on it first, then
the write (its dedup has read the old text and wants to skip); releasing the holder lets the
edit commit first (InnoDB grants a row's lock in the order it was asked for)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import live_stack, row_held, wait_for_lock_waits

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

SAID = "The user prefers short answers without long explanations."
EDITED = "The user now wants long answers with detailed explanations."
# Not the same text, but says nothing more: a near duplicate dedup skips (asserted below).
NEAR = "The user prefers short answers, without long explanations."


@pytest.mark.parametrize(
    ("delete", "write_text"),
    [(False, SAID), (True, SAID), (False, NEAR)],
    ids=["exact-edited", "exact-deleted", "near-edited"],
)
def test_a_write_is_not_skipped_for_a_memory_changed_while_dedup_compared_it(
    tmp_path, delete, write_text
):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        held = a.write_memory("coder", SAID)["id"]
        for client in (a, b):  # each process loads its model and index before the race
            client.search("coder", "warm up")
        # Without the race, the write is skipped for that memory.
        other = a.write_memory("tester", SAID)["id"]
        assert a.write_memory("tester", write_text).get("dedup_skipped") is True
        a.delete_memory(other, purge=True)

        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "memories.models", "Memory", held):
                change = pool.submit(
                    (lambda: b.delete_memory(held))
                    if delete
                    else (lambda: b.update_memory(held, content=EDITED))
                )
                wait_for_lock_waits(stack, 1)
                write = pool.submit(a.write_memory, "coder", write_text)
                wait_for_lock_waits(stack, 2, unless=write)
            change.result(timeout=60)
            written = write.result(timeout=60)

        # What the agent said is stored, as a memory of its own.
        assert not written.get("dedup_skipped"), written
        assert written["id"] != held and written["content"] == write_text
        found = a.search("coder", "short answers without long explanations")
        assert found[0]["id"] == written["id"]
        if not delete:
            assert a.get_memory(held)["content"] == EDITED
