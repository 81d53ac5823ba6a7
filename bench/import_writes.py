"""Writes of another agent while a bundle from a server of another model is imported.

Usage (from the project root):

    .venv/bin/python bench/import_writes.py [--memories 2000] [--lang en] [--mysql]
        [--graph numbered|distinct] [--history N] [--archive N] [--lifecycle N]
        [--again skip|overwrite [--changed]] [--json out.json]

What it does:

1. **Bundle**: `--memories` synthetic memories (`bench/corpus.py`) of one agent, with a header
   naming another embedding model, so the import embeds every one again (what moving a team
   to a server of another model does). With `--graph`, a knowledge graph too: an entity a
   memory, mentioned by it, related to the previous one. `numbered` names them like tickets
   ("Ticket 17", "Ticket 18": one resolution key for all, as version and ticket numbers share
   theirs); `distinct` gives each a name of its own ("Ticket aq"). With `--history N`, each
   memory has N revisions and is shared with one other agent. With `--archive N`, N archived
   working-memory items (an agent's ingested messages) too. With `--lifecycle N`, what the
   lifecycle derives, N of each: scenarios, personas, procedures and profile keys (each key with
   a revision), spread over 10 agents. With `--again`, the bundle is
   imported once before the measure, and the measured import is the same bundle again with that
   `on_conflict` (a re-import: every record meets its row here). With `--changed` too, the
   measured bundle gives every memory another importance, category and metadata than the first
   import stored, and every entity (with `--graph`) a description: an overwrite then writes
   each, and embeds each entity's new text (a backup restored over a team that changed).
2. **Serve**: a fresh server (gunicorn, two sync workers: the import occupies one) on a fresh
   SQLite file (`--mysql`: a fresh MariaDB database at 127.0.0.1:3306 as root, dropped after).
3. **Measure**: `POST /import` in a thread; meanwhile another agent writes a memory every
   0.2 s (`enable_dedup` true, no retries) until the import answers. Prints the import's time,
   and the writes' latency (median, p95, max, ms) and answers by status.

Before the import embedded ahead of its transaction, on SQLite every such write waited for the
database's write lock and, past `DB_LOCK_WAIT_SECONDS`, failed with 503 `SERVICE_UNAVAILABLE`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import BenchServer, code_version, log, machine_info, summarise
from corpus import generate

from memoryplatform.client import MemoryAPIError, MemoryClient


def _letters(i: int) -> str:
    """0 -> "a", 25 -> "z", 26 -> "aa": a name part without digits."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(97 + r) + out
    return out


def bundle(
    texts: list[str],
    graph: str | None = None,
    history: int = 0,
    archive: int = 0,
    lifecycle: int = 0,
    changed: bool = False,
) -> bytes:
    # `changed`: each memory with values other than those the first import stored (what a
    # backup restored over a team that changed since holds).
    values = {"importance": 0.8, "category": "restored", "metadata": {"restored": True}}
    records: list[dict[str, Any]] = [
        {
            "kind": "memory",
            "id": i,
            "scope": "personal",
            "agent_id": "imported",
            "content": t,
            **(values if changed else {}),
        }
        for i, t in enumerate(texts)
    ]
    counts = {"memory": len(texts)}
    if history:
        records += [
            {
                "kind": "revision",
                "memory": i,
                "action": "update",
                "before": {"importance": 0.5},
                "after": {"importance": 0.5 + k / 100},
                "actor": "key mk_bench",
                "created_at": f"2026-01-{1 + k % 28:02d}T12:00:00+00:00",
            }
            for i in range(len(texts))
            for k in range(history)
        ]
        records += [
            {"kind": "share", "memory": i, "agent_id": "reader", "permission": "read"}
            for i in range(len(texts))
        ]
        counts.update(revision=len(texts) * history, share=len(texts))
    if archive:
        records += [
            {
                "kind": "archive",
                "id": k,
                "agent_id": "imported",
                "item_id": uuid.uuid5(uuid.NAMESPACE_OID, str(k)).hex,
                "content": texts[k % len(texts)],
                "item_created_at": "2026-01-01T12:00:00+00:00",
                "archived_at": "2026-01-02T12:00:00+00:00",
                "reason": "consumed",
                "role": "user",
                "run_id": f"session-{k // 50}",
            }
            for k in range(archive)
        ]
        counts["archive"] = archive
    if graph:
        n = len(texts)
        name = (
            (lambda i: f"Ticket {i}")
            if graph == "numbered"
            else (lambda i: f"Ticket {_letters(i)}")
        )
        entity = {"kind": "entity", "agent_id": "imported", "entity_type": "project"}
        records += [
            {
                **entity,
                "id": f"e{i}",
                "name": name(i),
                "source_memory": i,
                **({"description": f"restored from a backup, number {i}"} if changed else {}),
            }
            for i in range(n)
        ]
        records += [
            {
                "kind": "relation",
                "id": f"r{i}",
                "source": f"e{i}",
                "target": f"e{i - 1}",
                "relation_type": "related_to",
            }
            for i in range(1, n)
        ]
        records += [{"kind": "mention", "entity": f"e{i}", "memory": i} for i in range(n)]
        counts.update(entity=n, relation=max(0, n - 1), mention=n)
    if lifecycle:
        records += _lifecycle(lifecycle, len(texts))
        counts.update(dict.fromkeys(("scenario", "persona", "procedure"), lifecycle))
        counts.update(profile=lifecycle, profile_revision=lifecycle)
    header = {
        "format": "memoryplatform-bundle",
        "version": 1,
        "team_id": "elsewhere",
        "embedding_model": "another-model",
        "embedding_dim": 3,
        "counts": counts,
    }
    return gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in [header, *records]))


def _lifecycle(n: int, memories: int) -> list[dict[str, Any]]:
    """n scenarios, personas, procedures and profile keys (a revision each), of 10 agents."""

    def agent(k: int) -> str:
        return f"agent-{k % 10}"

    def when(k: int) -> str:
        return (
            f"2026-01-{1 + k % 28:02d}T{k % 24:02d}:{k // 24 % 60:02d}:{k // 1440 % 60:02d}+00:00"
        )

    scenario = [
        {
            "kind": "scenario",
            "id": f"s{k}",
            "agent_id": agent(k),
            "name": f"Scenario {_letters(k)}",
            "summary": f"What the memories of scenario {_letters(k)} are about.",
            "memory_ids": [k % memories],
            "created_at": when(k),
        }
        for k in range(n)
    ]
    persona = [
        {
            "kind": "persona",
            "id": f"p{k}",
            "agent_id": agent(k),
            "summary": f"Persona {k}",
            "scenario_ids": [f"s{k}"],
            "created_at": when(k),
        }
        for k in range(n)
    ]
    procedure = [
        {
            "kind": "procedure",
            "agent_id": agent(k),
            "rule": f"Rule {_letters(k)}: run the checks before answering.",
            "status": "active",
            "source": "agent",
        }
        for k in range(n)
    ]
    profile = [
        {
            "kind": "profile",
            "agent_id": agent(k),
            "key": f"pref_{_letters(k)}",
            "value": f"value {k}",
            "source": "api",
        }
        for k in range(n)
    ]
    revision = [
        {
            "kind": "profile_revision",
            "agent_id": agent(k),
            "key": f"pref_{_letters(k)}",
            "before": "",
            "after": f"value {k}",
            "source": "api",
            "by": "key mk_bench",
            "at": when(k),
        }
        for k in range(n)
    ]
    return scenario + persona + procedure + profile + revision


def _mysql_database() -> tuple[str, str]:
    import MySQLdb  # the mysql extra

    name = f"membench_import_{uuid.uuid4().hex[:8]}"
    conn = MySQLdb.connect(host="127.0.0.1", user="root", passwd="")
    conn.cursor().execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    conn.close()
    return name, f"mysql://root@127.0.0.1:3306/{name}"


def _drop(name: str) -> None:
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", user="root", passwd="")
    conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    conn.close()


def run(args: argparse.Namespace, database_url: str | None) -> dict[str, Any]:
    texts = [item.text for item in generate(args.lang, args.memories, "import")]
    data = bundle(texts, args.graph, args.history, args.archive, args.lifecycle)
    measured = (
        bundle(texts, args.graph, args.history, args.archive, args.lifecycle, changed=True)
        if args.changed
        else data
    )
    with BenchServer(workers=2, database_url=database_url, timeout_s=1800) as server:
        client = MemoryClient(server.api_key, server.secret, base_url=server.base_url, timeout=1800)
        writer = MemoryClient(
            server.api_key, server.secret, base_url=server.base_url, timeout=60, retries=0
        )
        writer.write_memory("writer", "A first memory, so the writer's scope exists.")
        if args.again:
            client.import_bundle(data)
        answer: dict[str, Any] = {}

        def do_import() -> None:
            t0 = time.perf_counter()
            answer.update(client.import_bundle(measured, on_conflict=args.again or "skip"))
            answer["seconds"] = round(time.perf_counter() - t0, 1)

        thread = threading.Thread(target=do_import)
        thread.start()
        latencies: list[float] = []
        statuses: Counter[str] = Counter()
        i = 0
        while thread.is_alive():
            t0 = time.perf_counter()
            try:
                writer.write_memory("writer", f"Writer note {i}: the build {uuid.uuid4().hex[:6]}")
                statuses["201"] += 1
            except MemoryAPIError as exc:
                statuses[f"{exc.status} {exc.code}"] += 1
            latencies.append((time.perf_counter() - t0) * 1000)
            i += 1
            time.sleep(0.2)
        thread.join()
    return {
        "memories": args.memories,
        "lang": args.lang,
        "graph": args.graph,
        "history": args.history,
        "archive": args.archive,
        "lifecycle": args.lifecycle,
        "again": args.again,
        "changed": args.changed,
        "database": "mysql" if database_url else "sqlite",
        "import": answer,
        "writes": summarise(latencies),
        "answers": dict(statuses),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--lang", choices=("en", "zh"), default="en")
    parser.add_argument("--mysql", action="store_true")
    parser.add_argument("--graph", choices=("numbered", "distinct"))
    parser.add_argument("--history", type=int, default=0, metavar="N")
    parser.add_argument("--archive", type=int, default=0, metavar="N")
    parser.add_argument("--lifecycle", type=int, default=0, metavar="N")
    parser.add_argument("--again", choices=("skip", "overwrite"))
    parser.add_argument("--changed", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.changed and args.again != "overwrite":
        parser.error("--changed measures an overwrite: give --again overwrite")
    name, url = _mysql_database() if args.mysql else (None, None)
    try:
        result = run(args, url)
    finally:
        if name:
            _drop(name)
    result.update(machine=machine_info(), code=code_version())
    w = result["writes"]
    log(
        f"import of {args.memories} memories (all embedded again)"
        f"{f', {args.graph} graph' if args.graph else ''}"
        f"{f', {args.history} revisions and a share each' if args.history else ''}"
        f"{f', {args.archive} archive items' if args.archive else ''}"
        f"{f', {args.lifecycle} of each lifecycle kind' if args.lifecycle else ''}"
        f"{f', imported again ({args.again})' if args.again else ''}: "
        f"{result['import'].get('seconds')} s; "
        f"{w['n']} writes meanwhile: p50 {w.get('p50')} ms, p95 {w.get('p95')} ms, "
        f"max {w.get('max')} ms; answers {result['answers']}"
    )
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
