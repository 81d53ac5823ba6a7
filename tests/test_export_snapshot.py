"""An export read while an agent writes: the bundle is one snapshot of the team. On MariaDB
Django's transactions read at READ COMMITTED, where each of the export's queries (memories, then
revisions, shares, …) saw what had committed before it; a memory written between two of them
left its revision in the bundle without the memory, and the header's counts disagreed with the
records.

The write is made from another connection (a thread) at a fixed point: after the export has read
the memories and written the first one, before it reads the revisions."""

from __future__ import annotations

import io
import threading
from collections import Counter

import pytest
from django.db import connection

from lifecycle.services.bundle import bundle_write
from memories.services import Actor, memory_update

from .factories import MemoryFactory, TeamFactory
from .test_export_import import read_bundle

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql",
        reason="SQLite: the export's transaction holds the database's write lock, so a writer "
        "waits until the export ends",
    ),
]


def test_an_export_is_one_snapshot_while_an_agent_writes():
    team = TeamFactory(id="snap")
    first = MemoryFactory(team=team, agent_id="coder", content="The user prefers tea.")
    MemoryFactory(team=team, agent_id="coder", content="Deploys happen on Fridays.")
    written: list[int] = []

    def write() -> None:
        try:
            new = MemoryFactory(team=team, agent_id="coder", content="The user moved to Oslo.")
            memory_update(memory=first, actor=Actor(label="coder"), importance=0.9)
            written.append(new.pk)
        finally:
            connection.close()  # the thread's own connection

    def progress(_n: int) -> None:
        if not written:
            thread = threading.Thread(target=write)
            thread.start()
            thread.join(timeout=60)
            assert written, "the concurrent write did not commit"

    sink = io.BytesIO()
    counts = bundle_write(team=team, agent_id=None, sink=sink, progress=progress)
    header, records = read_bundle(sink.getvalue())
    by_kind = Counter(r["kind"] for r in records)
    assert (
        {k: v for k, v in header["counts"].items() if v}
        == dict(by_kind)
        == {k: v for k, v in counts.items() if v}
    )
    memories = {r["id"] for r in records if r["kind"] == "memory"}
    assert written[0] not in memories and len(memories) == 2
    # Every revision in the bundle belongs to a memory in it, as the snapshot held them.
    revisions = [r for r in records if r["kind"] == "revision"]
    assert all(r["memory_id"] in memories for r in revisions)
    assert not any(r["after"].get("importance") == 0.9 for r in revisions)
