"""An import while another process writes the same rows (entities, relations, shares,
mentions, profile keys, scenarios, rules), each in a process of its own on one database.

The import reads the team's entities once, when its transaction opens, and inserts the new ones
by batches. An entity another process writes after that read is not in what it read: its insert
meets the other's row in the unique constraint (on MariaDB it waits for that row's transaction,
then fails), and the batch goes in row by row, the clashing record meeting the row now there.
Without that, the whole import failed with 400 and nothing of it was kept.

* Two imports of one graph bundle at once (a client retrying one that timed out): a bundle of
  entities and relations only takes no scope lock (those are memories' locks), so both read
  "not here". One writes the graph, the other meets every entity and relation of it.
* An agent's entity written, not yet committed, as the import reads (MariaDB: the import's
  insert waits for that row, then meets it).
* The other order: an agent writes an entity the import has written and not yet committed (its
  create waits for the import's row, then merges into it, as any two creates at once do).
* A re-import: an agent's relation between two entities here, written, not yet committed, as
  the import reads the relations of those entities (MariaDB: the import's insert waits for that
  row, then meets it).
* The same for a memory's share and a mention: an agent shares the memory, or links it to an
  entity, as a re-import of that memory reads its shares and mentions; the import's insert waits
  for the agent's row, then meets it.
* An agent's update of a memory, not yet committed, as an overwrite import of that memory with
  other values writes it: the import's batch waits for the memory's row, then writes its values
  over the agent's, a revision each. The same for an entity's description and properties
  (merged with the agent's).
* An agent's profile key written, not yet committed, as an import of that key starts: a profile
  write takes the agent's personal-scope lock, and so does the import of its profile, which
  waits for the agent's write, then meets its row (a skip, or an overwrite). The same for a
  scenario the lifecycle makes and a rule (procedure) an agent adds: met by name, not doubled.
* Two imports at once of a removed rule's history (a client retrying one that timed out): the
  second waits for the first's lock on the agent, then finds the changes here and skips them;
  the rule has one id and each change is written once.
* Two proposal runs of one agent at once: the second reads the agent's rules once the first's
  proposals are in, and proposes nothing again.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from .livestack import Stack, live_stack, stack_process, stack_python, wait_for_lock_waits

pytestmark = pytest.mark.django_db(transaction=True)

# A bundle of `n` team-wide entities ("Service 0", "Service 1", …: one resolution key) and a
# relation from each to the next, from a server of another model (so its entities are embedded
# ahead); then `bundle_import`. With a barrier: waits there once its vectors are made, until two
# processes have arrived, so both open their transactions together.
IMPORT = """
import gzip, json, sys, time
from pathlib import Path
from lifecycle.services.bundle import bundle_import
from tenants.models import Team
n, barrier, me = {n}, {barrier!r}, {me!r}
header = {{"format": "memoryplatform-bundle", "version": 1, "team_id": "elsewhere",
          "embedding_model": "another-model", "embedding_dim": 3,
          "counts": {{"entity": n, "relation": n - 1}}}}
records = [{{"kind": "entity", "id": i, "name": f"Service {{i}}", "entity_type": "project"}}
           for i in range(n)]
records += [{{"kind": "relation", "id": f"r{{i}}", "source": i, "target": i + 1,
             "relation_type": "part_of"}} for i in range(n - 1)]
data = gzip.compress(b"".join(json.dumps(r).encode() + b"\\n" for r in [header, *records]))
def paused(k, read=[0]):
    # {pause} records in (every entity and one relation: the entities are inserted), stop until
    # a line arrives on stdin.
    read[0] += k
    if read[0] == {pause}:
        print("paused", flush=True)
        sys.stdin.readline()
def embedding(total):
    done = []
    def advance(k):
        done.append(k)
        if barrier and sum(done) == total:
            (Path(barrier) / me).touch()
            deadline = time.monotonic() + 120
            while len(list(Path(barrier).iterdir())) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
    return advance
result = bundle_import(team=Team.objects.get(), data=data, embedding_progress=embedding,
                       progress=paused if {pause} else None)
print(json.dumps({{k: [result.imported[k], result.skipped[k]] for k in ("entity", "relation")}}))
"""

# The graph as stored: names of the entities, (source, target) of the relations, and the id of
# the entity named "Service 0".
GRAPH = """
import json
from graph.models import Entity, Relation
names = sorted(Entity.objects.values_list("name", flat=True))
pairs = sorted(Relation.objects.values_list("source__name", "target__name"))
first = Entity.objects.filter(name="Service 0").values_list("pk", flat=True).first()
print(json.dumps([names, [list(p) for p in pairs], str(first) if first else None]))
"""

# An agent's entity "Service 0" written; its id and whether it was created.
CREATE_ENTITY = """
import json
from graph.services import entity_create_or_merge
from tenants.models import Team
entity, created = entity_create_or_merge(
    team=Team.objects.get(), agent_id="", name="Service 0", entity_type="project"
)
print(json.dumps([str(entity.pk), created]))
"""

# An agent's entity "Service 0", written and held uncommitted until a line arrives on stdin.
HOLD_ENTITY = """
import sys
from django.db import transaction
from graph.services import entity_create_or_merge
from tenants.models import Team
with transaction.atomic():
    entity, _ = entity_create_or_merge(
        team=Team.objects.get(), agent_id="", name="Service 0", entity_type="project"
    )
    print("held", entity.pk, flush=True)
    sys.stdin.readline()
"""

# The team-wide entities "Service 0" … "Service {n-1}", committed.
ENTITIES = """
import json
from graph.services import entity_create_or_merge
from tenants.models import Team
for i in range({n}):
    entity_create_or_merge(
        team=Team.objects.get(), agent_id="", name=f"Service {{i}}", entity_type="project"
    )
print(json.dumps({n}))
"""

# An agent's relation "Service 0" -part_of-> "Service 1", written and held uncommitted until a
# line arrives on stdin.
HOLD_RELATION = """
import sys
from django.db import transaction
from graph.models import Entity
from graph.services import relation_create
with transaction.atomic():
    source, target = (Entity.objects.get(name=f"Service {i}") for i in (0, 1))
    relation, _ = relation_create(source=source, target=target, relation_type="part_of")
    print("held", relation.pk, flush=True)
    sys.stdin.readline()
"""

# A bundle of `records` (its header added: counts, another server's model), imported with
# `on_conflict`. What it imported and skipped of each kind the records hold.
BUNDLE_IMPORT = """
import gzip, json
from collections import Counter
from lifecycle.services.bundle import bundle_import
from tenants.models import Team
records, on_conflict = json.loads({records!r}), {on_conflict!r}
header = {{"format": "memoryplatform-bundle", "version": 1, "team_id": "elsewhere",
          "embedding_model": "another-model", "embedding_dim": 3,
          "counts": dict(Counter(r["kind"] for r in records))}}
data = gzip.compress(b"".join(json.dumps(r).encode() + b"\\n" for r in [header, *records]))
result = bundle_import(team=Team.objects.get(), data=data, on_conflict=on_conflict)
kinds = dict.fromkeys(r["kind"] for r in records)
print(json.dumps({{k: [result.imported[k], result.skipped[k]] for k in kinds}}))
"""

CONTENT = "Kites fly high over the bay in spring"

# Alice's memory, Bob registered, the team's entity "Service 0": what the re-import meets.
LINKS_HERE = f"""
import json
from graph.services import entity_create_or_merge
from memories.services import memory_create
from tenants.models import Team
from tenants.services import agent_register
team = Team.objects.get()
memory_create(team=team, scope="personal", agent_id="alice", content={CONTENT!r})
agent_register(team=team, agent_id="bob")
entity_create_or_merge(team=team, agent_id="", name="Service 0", entity_type="project")
print(json.dumps(True))
"""

# That memory, its share with Bob, that entity and the memory's mention of it: a re-import.
LINKS_RECORDS = [
    {"kind": "memory", "id": 1, "scope": "personal", "agent_id": "alice", "content": CONTENT},
    {"kind": "share", "id": 1, "memory": 1, "agent_id": "bob", "permission": "read"},
    {"kind": "entity", "id": "e", "name": "Service 0", "entity_type": "project"},
    {"kind": "mention", "entity": "e", "memory": 1},
]

# The memory's shares (agent, permission) and mentions (entity names), as stored.
LINKS = """
import json
from graph.models import EntityMention
from memories.models import MemoryShare
shares = sorted(MemoryShare.objects.values_list("agent_id", "permission"))
mentions = sorted(EntityMention.objects.values_list("entity__name", flat=True))
print(json.dumps([[list(s) for s in shares], mentions]))
"""

# Alice's memory shared with Bob (write), held uncommitted until a line arrives on stdin.
HOLD_SHARE = f"""
import sys
from django.db import transaction
from memories.models import Memory
from memories.services import memory_share
with transaction.atomic():
    memory = Memory.objects.get(content={CONTENT!r})
    share, = memory_share(memory=memory, agent_ids=["bob"], permission="write")
    print("held", share.pk, flush=True)
    sys.stdin.readline()
"""

# Alice's memory linked to "Service 0", held uncommitted until a line arrives on stdin.
HOLD_MENTION = f"""
import sys
from django.db import transaction
from graph.models import Entity, EntityMention
from graph.services import entity_mention
from memories.models import Memory
with transaction.atomic():
    memory = Memory.objects.get(content={CONTENT!r})
    entity_mention(entity=Entity.objects.get(name="Service 0"), memory=memory)
    print("held", EntityMention.objects.get(memory=memory).pk, flush=True)
    sys.stdin.readline()
"""

# The memory of LINKS_HERE with other values (imported with overwrite).
VALUES_RECORDS = [
    {
        "kind": "memory",
        "id": 1,
        "scope": "personal",
        "agent_id": "alice",
        "content": CONTENT,
        "importance": 0.9,
        "metadata": {"from": "backup"},
    },
]

# Alice's memory updated by an agent, held uncommitted until a line arrives on stdin.
HOLD_UPDATE = f"""
import sys
from django.db import transaction
from memories.models import Memory
from memories.services import Actor, memory_update
with transaction.atomic():
    memory = memory_update(memory=Memory.objects.get(content={CONTENT!r}),
                           actor=Actor(label="agent"), importance=0.1, category="held")
    print("held", memory.pk, flush=True)
    sys.stdin.readline()
"""

# The memory's values and its revisions (actor, before, after), as stored.
VALUES = """
import json
from memories.models import Memory, MemoryRevision
m = Memory.objects.get()
revisions = [[r.actor, r.before, r.after] for r in MemoryRevision.objects.order_by("id")]
print(json.dumps([[m.importance, m.category, m.metadata], revisions]))
"""

# The entity of LINKS_HERE with a description and properties (imported with overwrite).
DESCRIBED_RECORDS = [
    {
        "kind": "entity",
        "id": "e",
        "name": "Service 0",
        "entity_type": "project",
        "description": "restored from a backup",
        "properties": {"tier": "gold"},
    },
]

# "Service 0" described by an agent, held uncommitted until a line arrives on stdin.
HOLD_DESCRIBED = """
import sys
from django.db import transaction
from graph.models import Entity
from graph.services import entity_update
with transaction.atomic():
    entity = entity_update(entity=Entity.objects.get(name="Service 0"), description="held",
                           properties={"owner": "ops"})
    print("held", entity.pk, flush=True)
    sys.stdin.readline()
"""

# "Service 0": its description and properties, and whether its vector is that of its text.
DESCRIBED = """
import json
from graph.models import Entity
from graph.services import embedding_text
from memories.retrieval.embeddings import embed_passages, to_bytes
e = Entity.objects.get(name="Service 0")
vector = to_bytes(embed_passages([embedding_text(e.name, e.description)])[0])
print(json.dumps([e.description, e.properties, bytes(e.embedding) == vector]))
"""

# Alice's profile key "timezone", with no memory of hers (whose import would take her lock
# anyway).
PROFILE_RECORDS = [
    {
        "kind": "profile",
        "agent_id": "alice",
        "key": "timezone",
        "value": "Asia/Tokyo",
        "source": "api",
    },
]

# Alice registered, and her personal-scope lock's row made (as her first write makes it): a
# holder's write, in a transaction of its own, then neither registers her nor inserts that row,
# so what the import can wait for is the lock itself, not an uncommitted insert.
AGENT_ALICE = """
import json
from memories.locks import scope_lock_prepare
from tenants.models import Team
from tenants.services import agent_register
team = Team.objects.get()
agent_register(team=team, agent_id="alice")
scope_lock_prepare(team_id=team.id, scope="personal", agent_id="alice")
print(json.dumps(True))
"""

# Alice's profile keys (key, value), as stored.
PROFILE = """
import json
from memories.models import ProfileField
print(json.dumps([[f.key, f.value] for f in ProfileField.objects.all()]))
"""

# Alice's "timezone" set through the service, held uncommitted until a line arrives on stdin.
HOLD_PROFILE = """
import sys
from django.db import transaction
from memories.models import ProfileField
from memories.services import Actor, profile_set
from tenants.models import Team
with transaction.atomic():
    profile_set(team=Team.objects.get(), agent_id="alice", fields={"timezone": "Europe/Paris"},
                actor=Actor(label="agent"))
    print("held", ProfileField.objects.get().pk, flush=True)
    sys.stdin.readline()
"""


RULE = "Run the tests before every commit."

# Alice's scenarios made by the lifecycle (replacing hers), held uncommitted until a line arrives
# on stdin; the held line gives their names (JSON).
HOLD_SCENES = """
import json, sys
from django.db import transaction
from lifecycle.services.operations import aggregate_scenes
from tenants.models import Team
with transaction.atomic():
    result, _, _ = aggregate_scenes(team=Team.objects.get(), agent_id="alice")
    print("held", json.dumps([s.name for s in result.scenarios]), flush=True)
    sys.stdin.readline()
"""

# Alice's scenarios (name, summary), as stored.
SCENARIOS = """
import json
from lifecycle.models import Scenario
print(json.dumps([[s.name, s.summary] for s in Scenario.objects.order_by("name", "id")]))
"""

# Alice's rule RULE added through the service, held uncommitted until a line arrives on stdin.
HOLD_RULE = f"""
import sys
from django.db import transaction
from memories.services import procedure_create
from tenants.models import Team
with transaction.atomic():
    rule = procedure_create(team=Team.objects.get(), agent_id="alice", rule={RULE!r},
                            source="api")
    print("held", rule.pk, flush=True)
    sys.stdin.readline()
"""

# Alice's rules (rule, status, source), as stored.
RULES = """
import json
from memories.models import Procedure
print(json.dumps([[p.rule, p.status, p.source] for p in Procedure.objects.order_by("id")]))
"""

# Alice's feedback, the same point three times: what the lifecycle proposes a rule from.
FEEDBACK = [
    "The user wants short answers without long explanations.",
    "The user asked again for shorter answers, no long explanations.",
    "The user prefers short answers and dislikes long explanations.",
]
FEEDBACK_HERE = f"""
import json
from memories.services import memory_create
from tenants.models import Team
team = Team.objects.get()
for text in {FEEDBACK!r}:
    memory_create(team=team, scope="personal", agent_id="alice", content=text,
                  category="preference", enable_dedup=False)
print(json.dumps(True))
"""

# The lifecycle's proposals from Alice's feedback: held uncommitted until a line arrives on
# stdin (`hold`), or not; how many it proposed.
PROPOSE = """
import sys
from django.db import transaction
from lifecycle.services.operations import propose_procedures
from tenants.models import Team
with transaction.atomic():
    result, _, _ = propose_procedures(team=Team.objects.get(), agent_id="alice")
    print("held" if {hold} else "", len(result.proposals), flush=True)
    if {hold}:
        sys.stdin.readline()
"""


# A removed rule's history (no record of the rule itself): added, then removed.
REMOVED_RULE_RECORDS = [
    {
        **{"kind": "procedure_revision", "id": i + 1, "agent_id": "alice", "procedure_id": 7},
        **{"change": change, "rule": "Reply in haiku.", "status": "active", "by": "key mk_x"},
        "at": f"2024-03-01T00:0{i}:00+00:00",
    }
    for i, change in enumerate(("added", "removed"))
]

# The import of that history, held uncommitted once every record is read, until a line
# arrives on stdin.
HOLD_RULE_HISTORY_IMPORT = """
import gzip, json, sys
from lifecycle.services.bundle import bundle_import
from tenants.models import Team
records = json.loads({records!r})
header = {{"format": "memoryplatform-bundle", "version": 1, "team_id": "elsewhere",
          "embedding_model": "another-model", "embedding_dim": 3,
          "counts": {{"procedure_revision": len(records)}}}}
data = gzip.compress(b"".join(json.dumps(r).encode() + b"\\n" for r in [header, *records]))
def held(k, read=[0]):
    read[0] += k
    if read[0] == len(records):
        print("held", read[0], flush=True)
        sys.stdin.readline()
result = bundle_import(team=Team.objects.get(), data=data, progress=held)
print(json.dumps(result.imported["procedure_revision"]))
"""

# The agents' rule changes (rule id, change), and how many rules are here.
RULE_HISTORY = """
import json
from memories.models import Procedure, ProcedureRevision
rows = ProcedureRevision.objects.order_by("id").values_list("procedure_id", "change")
print(json.dumps([[list(r) for r in rows], Procedure.objects.count()]))
"""


def _start(stack: Stack, code: str, **popen: Any) -> subprocess.Popen[str]:
    return stack_process(stack, code, stderr=subprocess.PIPE, **popen)


def _answer(proc: subprocess.Popen[str]) -> Any:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _run_while_held(stack: Stack, hold: str, code: str | Callable[[str], str]) -> tuple[str, Any]:
    """Starts `hold` (a process that writes and holds its write uncommitted, then prints "held"
    and what it wrote), then `code` (an import, or another writer; built from what the holder
    wrote when a callable) once it waits for that write; lets the holder commit. What the holder
    wrote, and `code`'s answer."""
    holder = _start(stack, hold, stdin=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdin is not None
    while (line := holder.stdout.readline()) and not line.startswith("held "):
        pass
    assert line, "the holding process ended without its write"
    held = line.split(maxsplit=1)[1].strip()
    try:
        waiter = _start(stack, code(held) if callable(code) else code)
        wait_for_lock_waits(stack, 1)
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    return held, _answer(waiter)


def _import_records(records: list[dict[str, Any]], on_conflict: str = "skip") -> str:
    """The import of a bundle of `records` (BUNDLE_IMPORT)."""
    return BUNDLE_IMPORT.format(records=json.dumps(records), on_conflict=on_conflict)


def _import_of(n: int) -> str:
    """The import of `n` entities and their chain of relations, at once."""
    return IMPORT.format(n=n, barrier="", me="", pause=0)


def _expected_graph(n: int) -> tuple[list[str], list[list[str]]]:
    names = sorted(f"Service {i}" for i in range(n))
    pairs = sorted([f"Service {i}", f"Service {i + 1}"] for i in range(n - 1))
    return names, pairs


def test_two_imports_of_one_graph_at_once_write_it_once(tmp_path):
    n = 600  # more than one batch of entities
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    with live_stack(tmp_path, servers=0) as stack:
        procs = [
            _start(stack, IMPORT.format(n=n, barrier=str(barrier), me=me, pause=0))
            for me in ("first", "second")
        ]
        results = sorted((_answer(p) for p in procs), key=lambda r: r["entity"])
        assert len(list(barrier.iterdir())) == 2  # both reached the barrier
        assert results == [
            {"entity": [0, n], "relation": [0, n - 1]},
            {"entity": [n, 0], "relation": [n - 1, 0]},
        ]
        names, pairs, _ = stack_python(stack, GRAPH)
        assert (names, pairs) == _expected_graph(n)


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_an_entity_an_agent_writes_as_the_import_reads_is_met_not_refused(tmp_path):
    n = 4
    with live_stack(tmp_path, servers=0) as stack:
        # The import reads "Service 0" as not here and waits for the agent's row to insert its
        # own.
        held, answer = _run_while_held(stack, HOLD_ENTITY, _import_of(n))
        assert answer == {"entity": [n - 1, 1], "relation": [n - 1, 0]}
        names, pairs, first = stack_python(stack, GRAPH)
        assert (names, pairs) == _expected_graph(n)
        # The relation from "Service 0" starts at the agent's entity.
        assert first.replace("-", "") == held.replace("-", "")


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_an_entity_an_agent_writes_as_the_import_holds_it_merges_into_it(tmp_path):
    n = 4
    with live_stack(tmp_path, servers=0) as stack:
        importer = _start(
            stack, IMPORT.format(n=n, barrier="", me="", pause=n + 1), stdin=subprocess.PIPE
        )
        assert importer.stdout is not None and importer.stdin is not None
        while (line := importer.stdout.readline()) and line.strip() != "paused":
            pass
        assert line, "the import ended before its entities were written"
        try:
            agent = _start(stack, CREATE_ENTITY)
            # The agent's create waits for the import's uncommitted "Service 0".
            wait_for_lock_waits(stack, 1)
        finally:
            importer.stdin.write("\n")
            importer.stdin.flush()
        assert _answer(importer) == {"entity": [n, 0], "relation": [n - 1, 0]}
        pk, created = _answer(agent)
        assert created is False
        names, pairs, first = stack_python(stack, GRAPH)
        assert (names, pairs) == _expected_graph(n)
        assert first.replace("-", "") == pk.replace("-", "")


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_a_relation_an_agent_writes_as_a_re_import_reads_is_met_not_refused(tmp_path):
    n = 4
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, ENTITIES.format(n=n)) == n
        # Every entity is here; the import reads the relations of their ends (the agent's is not
        # committed) and waits for the agent's row to insert its own.
        _, answer = _run_while_held(stack, HOLD_RELATION, _import_of(n))
        assert answer == {"entity": [0, n], "relation": [n - 2, 1]}
        names, pairs, _ = stack_python(stack, GRAPH)
        assert (names, pairs) == _expected_graph(n)


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
@pytest.mark.parametrize(
    ("hold", "answer", "links"),
    [
        # The import reads the memory's shares (Bob's is not committed) and waits for that row
        # to insert its own; met, it is skipped: Bob keeps the permission the agent gave.
        (
            HOLD_SHARE,
            {"memory": [0, 1], "share": [0, 1], "entity": [0, 1], "mention": [1, 0]},
            [[["bob", "write"]], ["Service 0"]],
        ),
        # The same for the memory's mention of "Service 0".
        (
            HOLD_MENTION,
            {"memory": [0, 1], "share": [1, 0], "entity": [0, 1], "mention": [0, 1]},
            [[["bob", "read"]], ["Service 0"]],
        ),
    ],
    ids=["share", "mention"],
)
def test_a_link_an_agent_writes_as_a_re_import_reads_is_met_not_refused(
    tmp_path, hold, answer, links
):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, LINKS_HERE) is True
        _, imported = _run_while_held(stack, hold, _import_records(LINKS_RECORDS))
        assert imported == answer
        assert stack_python(stack, LINKS) == links


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
@pytest.mark.parametrize(
    ("on_conflict", "answer", "value"),
    [
        ("skip", {"profile": [0, 1]}, "Europe/Paris"),
        ("overwrite", {"profile": [1, 0]}, "Asia/Tokyo"),
    ],
)
def test_a_profile_key_an_agent_writes_as_the_import_starts_is_met_not_refused(
    tmp_path, on_conflict, answer, value
):
    with live_stack(tmp_path, servers=0) as stack:
        # Alice is known (AGENT_ALICE): the import can only wait for the lock itself.
        assert stack_python(stack, AGENT_ALICE) is True
        _, imported = _run_while_held(
            stack, HOLD_PROFILE, _import_records(PROFILE_RECORDS, on_conflict)
        )
        assert imported == answer
        assert stack_python(stack, PROFILE) == [["timezone", value]]


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_an_overwrite_import_writes_over_an_agent_update_it_waited_for(tmp_path):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, LINKS_HERE) is True
        _, imported = _run_while_held(
            stack, HOLD_UPDATE, _import_records(VALUES_RECORDS, "overwrite")
        )
        assert imported == {"memory": [1, 0]}
        values, revisions = stack_python(stack, VALUES)
        # The bundle gives no category: the agent's stays.
        assert values == [0.9, "held", {"from": "backup"}]
        assert revisions == [
            [
                "agent",
                {"importance": 0.5, "category": "general"},
                {"importance": 0.1, "category": "held"},
            ],
            [
                "import",
                {"importance": 0.1, "metadata": {}},
                {"importance": 0.9, "metadata": {"from": "backup"}},
            ],
        ]


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_an_overwrite_import_describes_an_entity_over_an_agent_update_it_waited_for(tmp_path):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, LINKS_HERE) is True
        _, imported = _run_while_held(
            stack, HOLD_DESCRIBED, _import_records(DESCRIBED_RECORDS, "overwrite")
        )
        assert imported == {"entity": [1, 0]}
        # The properties merge with what the agent wrote, not with what the import first read.
        assert stack_python(stack, DESCRIBED) == [
            "restored from a backup",
            {"owner": "ops", "tier": "gold"},
            True,
        ]


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
@pytest.mark.parametrize(("on_conflict", "answer"), [("skip", [0, 1]), ("overwrite", [1, 0])])
def test_a_scenario_the_lifecycle_makes_as_the_import_starts_is_met_not_doubled(
    tmp_path, on_conflict, answer
):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, LINKS_HERE) is True
        # The bundle holds a scenario of the name the lifecycle gives Alice's memory: the import
        # waits for the lifecycle's, then meets it by its name.
        held, imported = _run_while_held(
            stack,
            HOLD_SCENES,
            lambda names: _import_records(
                [
                    {
                        "kind": "scenario",
                        "id": 1,
                        "agent_id": "alice",
                        "name": name,
                        "summary": "restored from a backup",
                    }
                    for name in json.loads(names)
                ],
                on_conflict,
            ),
        )
        names = json.loads(held)
        assert len(names) == 1
        assert imported == {"scenario": answer}
        ((name, summary),) = stack_python(stack, SCENARIOS)
        assert name == names[0]
        assert (summary == "restored from a backup") == (on_conflict == "overwrite")


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_a_rule_an_agent_adds_as_the_import_starts_is_met_not_doubled(tmp_path):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, AGENT_ALICE) is True
        records = [
            {
                "kind": "procedure",
                "id": 1,
                "agent_id": "alice",
                "rule": RULE,
                "status": "active",
                "source": "api",
            }
        ]
        _, imported = _run_while_held(stack, HOLD_RULE, _import_records(records))
        assert imported == {"procedure": [0, 1]}
        assert stack_python(stack, RULES) == [[RULE, "active", "api"]]


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_two_proposal_runs_at_once_propose_a_point_once(tmp_path):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, FEEDBACK_HERE) is True
        # The second run waits for the first's rules before it reads the agent's rules.
        held, proposed = _run_while_held(
            stack, PROPOSE.format(hold=True), PROPOSE.format(hold=False)
        )
        assert (held, proposed) == ("1", 0)
        ((rule, status, source),) = stack_python(stack, RULES)
        assert (rule in FEEDBACK, status, source) == (True, "proposed", "lifecycle")


@pytest.mark.skipif(connection.vendor != "mysql", reason="row locks across processes: MariaDB")
def test_two_imports_of_a_removed_rules_history_at_once_write_it_once(tmp_path):
    with live_stack(tmp_path, servers=0) as stack:
        assert stack_python(stack, AGENT_ALICE) is True
        records = json.dumps(REMOVED_RULE_RECORDS)
        held, imported = _run_while_held(
            stack,
            HOLD_RULE_HISTORY_IMPORT.format(records=records),
            _import_records(REMOVED_RULE_RECORDS),
        )
        assert (held, imported) == ("2", {"procedure_revision": [0, 2]})
        changes, rules = stack_python(stack, RULE_HISTORY)
        assert [c for _, c in changes] == ["added", "removed"] and rules == 0
        assert changes[0][0] == changes[1][0]
