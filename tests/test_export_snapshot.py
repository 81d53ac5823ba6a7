"""An export read while an agent writes: the bundle is one snapshot of the team, and the write
does not wait for the export. An import that embeds again does not keep writers waiting either.

* MariaDB: Django's transactions read at READ COMMITTED, where each of the export's queries
  (memories, then revisions, shares, …) saw what had committed before it; a memory written
  between two of them left its revision in the bundle without the memory, and the header's
  counts disagreed with the records.
* SQLite: the export's transaction held the database's write lock for its whole read, so the
  write waited for it (and failed after the lock wait, 3 s here).

The exporter and the writer are processes of their own on the stack's database (a file with WAL
on SQLite); the write is made at a fixed point: after the export has read the memories and
written the first one, before it reads the revisions.

An import from a server of another model embeds every memory again. That ran inside its
transaction: on SQLite every other writer waited for the whole embedding, then got a 503. Now it
embeds first; the write is made after its first batch of vectors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memoryplatform.client import MemoryClient

from .livestack import ROOT, live_stack, stack_python

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


# Another process imports a bundle of another model's vectors (all embedded again); after the
# first batch, a third process writes a memory of another agent and counts what the import has
# written so far.
IMPORT = f"""
import gzip, json, subprocess, sys
from lifecycle.services.bundle import bundle_import
from tenants.models import Team
WRITE = {WRITE!r} + "\\nprint(json.dumps([new.pk, Memory.objects.filter(agent_id='importer').count()]))"
n = 200
header = {{"format": "memoryplatform-bundle", "version": 1, "team_id": "elsewhere",
          "embedding_model": "another-model", "embedding_dim": 3, "counts": {{"memory": n}}}}
records = [{{"kind": "memory", "id": i, "scope": "personal", "agent_id": "importer",
            "content": f"Imported fact number {{i}} about the deploy pipeline",
            "embedding_model": "another-model"}} for i in range(n)]
data = gzip.compress(b"".join(json.dumps(r).encode() + b"\\n" for r in [header, *records]))
done = {{}}
batches = []
def embedding(total):
    def advance(n):
        batches.append(n)
        if not done:
            p = subprocess.run(
                [sys.executable, "manage.py", "shell", "-c", WRITE],
                capture_output=True, text=True, timeout=120,
            )
            done.update(rc=p.returncode, out=p.stdout.strip().splitlines()[-1:], err=p.stderr[-800:])
    return advance
result = bundle_import(team=Team.objects.get(), data=data, embedding_progress=embedding)
print(json.dumps({{"imported": result.imported["memory"], "reembedded": result.reembedded,
                  "batches": batches, "write": done}}))
"""


def test_an_import_embeds_before_it_holds_writers_back(tmp_path):
    with live_stack(tmp_path, servers=1, extra_env={"DB_LOCK_WAIT_SECONDS": "3"}) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        client.write_memory("coder", "The user prefers tea.")
        out = stack_python(stack, IMPORT)
        write = out["write"]
        assert write["rc"] == 0, write["err"]  # not "database is locked"
        (line,) = write["out"]
        new, imported_then = json.loads(line)
        # The write was made while the import ran: nothing of it had been written yet.
        assert imported_then == 0 and sum(out["batches"]) == 200 and len(out["batches"]) > 1
        assert out["imported"] == out["reembedded"] == 200
        assert client.get_memory(new)["content"] == "The user moved to Oslo."
        found = client.search("importer", "fact number 17 deploy pipeline", limit=3)
        assert "Imported fact number 17 about the deploy pipeline" in [m["content"] for m in found]


# One of two processes importing the same bundle into one team at the same moment: both wait at
# a barrier (a directory) once their vectors are made, then open their transactions together.
IMPORT_AT_ONCE = """
import gzip, json, time
from pathlib import Path
from lifecycle.services.bundle import bundle_import
from tenants.models import Team
barrier, me = Path({barrier!r}), {me!r}
n = 300
header = {{"format": "memoryplatform-bundle", "version": 1, "team_id": "elsewhere",
          "embedding_model": "another-model", "embedding_dim": 3, "counts": {{"memory": n}}}}
records = [{{"kind": "memory", "id": i, "scope": "personal" if i % 2 else "team",
            "agent_id": "importer", "embedding_model": "another-model",
            "content": f"Imported fact number {{i}} about the release train"}} for i in range(n)]
data = gzip.compress(b"".join(json.dumps(r).encode() + b"\\n" for r in [header, *records]))
def embedding(total):
    done = []
    def advance(k):
        done.append(k)
        if sum(done) == total:
            (barrier / me).touch()
            deadline = time.monotonic() + 120
            while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
    return advance
result = bundle_import(team=Team.objects.get(), data=data, embedding_progress=embedding)
print(json.dumps([result.imported["memory"], result.skipped["memory"]]))
"""


def test_two_imports_of_one_bundle_at_once_write_it_once(tmp_path):
    """A client retrying an import that timed out while the first still runs: the second waits
    for the first's scope locks, then finds its memories and skips them. Without the locks, on
    MariaDB both read "not here" inside their transactions and the team got every memory twice
    (SQLite's transaction serialises the two anyway)."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    with live_stack(tmp_path, servers=0) as stack:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "shell",
                    "-c",
                    IMPORT_AT_ONCE.format(barrier=str(barrier), me=me),
                ],
                cwd=ROOT,
                env=stack.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for me in ("first", "second")
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err[-3000:]
        results = sorted(json.loads(out.strip().splitlines()[-1]) for out, _ in outs)
        assert len(list(barrier.iterdir())) == 2  # both reached the barrier
        assert results == [[0, 300], [300, 0]]
        counts = stack_python(
            stack,
            "import json\nfrom memories.models import Memory\n"
            "rows = list(Memory.objects.values_list('scope', 'content'))\n"
            "print(json.dumps([len(rows), len(set(rows))]))",
        )
        assert counts == [300, 300]
