"""An export read while an agent writes: the bundle is one snapshot of the team, and the write
does not wait for the export.

* MariaDB: Django's transactions read at READ COMMITTED, where each of the export's queries
  (memories, then revisions, shares, …) saw what had committed before it; a memory written
  between two of them left its revision in the bundle without the memory, and the header's
  counts disagreed with the records.
* SQLite: the export's transaction held the database's write lock for its whole read, so the
  write waited for it (and failed after the lock wait, 3 s here).

The exporter and the writer are processes of their own on the stack's database (a file with WAL
on SQLite); the write is made at a fixed point: after the export has read the memories and
written the first one, before it reads the revisions."""

from __future__ import annotations

import pytest

from memoryplatform.client import MemoryClient

from .livestack import live_stack, stack_python

pytestmark = pytest.mark.django_db(transaction=True)

# Another process: a new memory, and an edit (a revision) of the first one.
WRITE = """
import json
from memories.models import Memory, MemoryScope
from memories.services import Actor, memory_create, memory_update
first = Memory.objects.order_by("id").first()
new, _ = memory_create(
    team=first.team, scope=MemoryScope.PERSONAL, agent_id="coder",
    content="The user moved to Oslo.", enable_dedup=False,
)
memory_update(memory=first, actor=Actor(label="coder"), importance=0.9)
print(json.dumps(new.pk))
"""

EXPORT = f"""
import gzip, io, json, subprocess, sys
from collections import Counter
from lifecycle.services.bundle import bundle_write
from tenants.models import Team
WRITE = {WRITE!r}
done = {{}}
def progress(_n):
    if not done:
        p = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", WRITE],
            capture_output=True, text=True, timeout=120,
        )
        done.update(rc=p.returncode, out=p.stdout.strip().splitlines()[-1:], err=p.stderr[-800:])
sink = io.BytesIO()
counts = bundle_write(team=Team.objects.get(), agent_id=None, sink=sink, progress=progress)
lines = [json.loads(x) for x in gzip.decompress(sink.getvalue()).splitlines()]
records = lines[1:]
print(json.dumps({{
    "counts": {{k: v for k, v in lines[0]["counts"].items() if v}},
    "returned": {{k: v for k, v in counts.items() if v}},
    "kinds": Counter(r["kind"] for r in records),
    "memories": [r["id"] for r in records if r["kind"] == "memory"],
    "revisions": [[r["memory"], r["after"]] for r in records if r["kind"] == "revision"],
    "write": done,
}}))
"""


def test_an_export_is_one_snapshot_and_does_not_hold_writers_back(tmp_path):
    with live_stack(tmp_path, servers=1, extra_env={"DB_LOCK_WAIT_SECONDS": "3"}) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        ids = [
            client.write_memory("coder", text)["id"]
            for text in ("The user prefers tea.", "Deploys happen on Fridays.")
        ]
        out = stack_python(stack, EXPORT)
        write = out["write"]
        assert write["rc"] == 0, write["err"]  # not "database is locked"
        (new,) = write["out"]
        assert out["counts"] == out["kinds"] == out["returned"]
        assert sorted(out["memories"]) == sorted(ids) and int(new) not in out["memories"]
        # The edit committed during the export is not in it: as of the snapshot, no revision.
        assert out["revisions"] == []
        # Both writes did commit.
        assert client.get_memory(int(new))["content"] == "The user moved to Oslo."
        assert client.get_memory(ids[0])["importance"] == 0.9
