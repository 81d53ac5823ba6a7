"""What an erasure costs in the answers kept for retries (`Idempotency-Key`).

Usage (from the project root):

    .venv/bin/python bench/erasure.py [--answers 10000,100000] [--repeat 20] [--mysql]
        [--json out.json]

Every erasure (a purge, the trash's erase and expiry, an agent's deletion) rewrites the kept
answers that showed an erased memory (memories.services.answers_forget), so that a retry gets
`{"id", "erased": true}` instead of the text. It reads the answers the team has kept
(IDEMPOTENCY_TTL_HOURS, 24 h by default) whose text holds an erased id's digits (for more than
32 ids: the deleted agent's id for an agent's deletion, every answer otherwise), and decodes those
that show one: the cost grows with the number of keyed writes the team made in that window.

What it does, per size N:

1. a fresh SQLite file (or, with `--mysql`, a fresh MariaDB database at 127.0.0.1:3306 as root,
   dropped afterwards), migrated (bench/common.BenchServer.prepare), and N kept answers of one
   team bulk-inserted: nine in ten shaped like a memory write's answer (one memory), one in ten
   like an ingest's (five facts, each with its memory);
2. timed in this process, `--repeat` times each (median and p95, ms):
   * **purge, shown nowhere** — one memory id no answer shows (the usual case: a memory written
     without a key, or longer ago than the window), above every id the answers show: a scan that
     changes nothing;
   * **purge, shown once** — one id a kept answer shows: the scan plus one row rewritten under
     its lock (each repeat erases another answer's memory);
   * **1,000 ids** — a thousand ids, 1 % of them shown, of several agents (a purge of many);
   * **agent deletion, 1,000 ids** — the same, all of one agent's (`answers_forget(agent_id=)`):
     the answers are the writes of ten agents, one in ten that agent's.

Numbers and the command that produced them: docs/benchmarks.md ("Erasure and kept answers").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BenchServer, log, machine_info, machine_load, mysql, summarise

AGENTS = 10
GONE = "agent-3"  # the deleted agent


def _memory(pk: int, agent_id: str) -> dict[str, Any]:
    """A memory as a write's answer shows it (the fields that matter to the scan's cost: the
    number of keys and strings it walks)."""
    return {
        "id": pk,
        "content": f"The user prefers short answers; note {pk} about the deployment window.",
        "agent_id": agent_id,
        "scope": "personal",
        "category": "preference",
        "importance": 0.5,
        "metadata": {"source": "chat", "tags": ["style", "deploy"]},
        "tier": "hot",
        "access_count": 0,
        "created_at": "2026-12-05T10:00:00Z",
        "updated_at": "2026-12-05T10:00:00Z",
        "dedup_skipped": False,
    }


def seed(team_id: str, n: int) -> tuple[int, list[int]]:
    """N kept answers of the team, answer i written by agent i % AGENTS; returns the highest
    memory id they show and the ids of GONE's memories they show."""
    from tenants.models import IdempotentRequest

    rows = []
    pk = 0
    gone: list[int] = []
    for i in range(n):
        agent_id = f"agent-{i % AGENTS}"
        if i % 10 == 9:
            facts = []
            for _ in range(5):
                pk += 1
                facts.append({"decision": "ADD", "memory": _memory(pk, agent_id)})
            endpoint, body = "ingest", {"archived": 5, "facts": facts}
        else:
            pk += 1
            endpoint, body = "memories/personal", _memory(pk, agent_id)
        if agent_id == GONE:
            gone.append(pk)
        rows.append(
            IdempotentRequest(
                team_id=team_id,
                endpoint=endpoint,
                key=f"key-{i}",
                request_hash="0" * 64,
                status_code=200,
                body=body,
            )
        )
    IdempotentRequest.objects.bulk_create(rows, batch_size=2000)
    return pk, gone


def timed(fn: Any, times: int) -> tuple[list[float], list[Any]]:
    ms: list[float] = []
    out: list[Any] = []
    for i in range(times):
        t0 = time.perf_counter()
        out.append(fn(i))
        ms.append((time.perf_counter() - t0) * 1000)
    return ms, out


def measure(team_id: str, n: int, repeat: int) -> dict[str, Any]:
    from memories.services import answers_forget

    t0 = time.perf_counter()
    top, gone = seed(team_id, n)
    row: dict[str, Any] = {"answers": n, "seed_seconds": round(time.perf_counter() - t0, 1)}
    step = max(1, top // (repeat + 1))
    for label, fn in (
        (
            "purge, shown nowhere",
            lambda i: answers_forget(team_id=team_id, memory_ids=[top + 1 + i]),
        ),
        (
            "purge, shown once",
            lambda i: answers_forget(team_id=team_id, memory_ids=[1 + i * step]),
        ),
        (
            "1,000 ids",
            lambda i: answers_forget(
                team_id=team_id,
                memory_ids=[-(10**6) * (i + 1) - k for k in range(990)]
                + [2 + i * step + k for k in range(10)],
            ),
        ),
        (
            "agent deletion, 1,000 ids",
            lambda i: answers_forget(
                team_id=team_id,
                memory_ids=[top + 10**6 * (i + 1) + k for k in range(990)]
                + gone[i * 10 : i * 10 + 10],
                agent_id=GONE,
            ),
        ),
    ):
        ms, changed = timed(fn, repeat)
        row[label] = {**summarise(ms), "rewritten_per_call": max(changed)}
        log(f"{n} answers, {label}: {row[label]}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", default="10000,100000", help="sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--mysql", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    sizes = [int(s) for s in args.answers.split(",") if s.strip()]

    results: dict[str, Any] = {
        "machine": machine_info(),
        "load_before": machine_load(),
        "database": "mariadb" if args.mysql else "sqlite",
        "repeat": args.repeat,
        "runs": [],
    }
    for n in sizes:
        database_url = None
        db_name = f"erasurebench_{n}"
        if args.mysql:
            mysql(
                f"DROP DATABASE IF EXISTS {db_name}; "
                f"CREATE DATABASE {db_name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
            database_url = f"mysql://root@127.0.0.1:3306/{db_name}"
        server = BenchServer(database_url=database_url)
        try:
            server.prepare()
            # One Django setup per process: each size runs in a child of its own.
            out = subprocess.run(
                [sys.executable, __file__, "--child", server.team, str(n), str(args.repeat)],
                env=server.env(),
                capture_output=True,
                text=True,
                timeout=3600,
                check=True,
            )
            sys.stderr.write(out.stderr)
            results["runs"].append(json.loads(out.stdout.strip().splitlines()[-1]))
        finally:
            server.cleanup()
            if args.mysql:
                mysql(f"DROP DATABASE IF EXISTS {db_name}")
    results["load_after"] = machine_load()
    print(json.dumps(results, indent=2, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False))


def child(team_id: str, n: int, repeat: int) -> None:
    import django

    django.setup()
    print(json.dumps(measure(team_id, n, repeat)))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
