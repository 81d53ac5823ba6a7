"""What the warm-up at start (`WARM_UP_AT_START`) costs a gunicorn worker in memory.

Usage (from the project root):

    .venv/bin/python bench/latency.py --sizes 100000 --lang zh --working none \\
        --max-embed 10000 --searches 20 --writes 20 --keep    # logs "kept /tmp/membench-..."
    .venv/bin/python bench/warmup_rss.py --data-dir /tmp/membench-... [--json out.json]

On a `DATA_DIR` that `bench/latency.py --keep` left (its SQLite database holds the seeded scope
of `bench-agent`), one gunicorn sync worker is started three times, and its VmRSS is read once
it answers `/health` (the warm-up is done by then: gunicorn's `post_worker_init`) and after one
search of the scope (which loads the scope's index; the team's recall timeout is set to 0 first, so
that the search waits for the whole load):

* `WARM_UP_AT_START=0`: the model and the dictionaries load during that first search;
* warm-up, with the glossary cache in `DATA_DIR` (every start after the first one);
* warm-up, without it (the first start on a new `DATA_DIR`, or after an upgrade that changes the
  cache's key): the worker builds the cache from CC-CEDICT. The cache file is moved aside for
  this start and put back afterwards.

Numbers and the command that produced them: docs/benchmarks.md ("Worker memory with the
warm-up at start").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BenchServer, log, machine_info, machine_load, rss_kib

AGENT = "bench-agent"
VARIANTS = (
    ("WARM_UP_AT_START=0", "0", True),
    ("warm-up, glossary cache present", "1", True),
    ("warm-up, glossary cache missing", "1", False),
)


def _mb(pid: int) -> float:
    return round(rss_kib(pid).get("rss", 0) / 1024, 1)


def _start(data_dir: Path, warm_up: str, query: str) -> dict[str, Any]:
    from memoryplatform.client import MemoryClient  # importable once common is (ROOT on the path)

    srv = BenchServer(keep=True, extra_env={"WARM_UP_AT_START": warm_up})
    srv.data_dir = data_dir
    out = srv.manage("create_api_key", "--team", srv.team, "--rate-limit", "0", "--json")
    creds = json.loads(out.strip().splitlines()[-1])
    srv.start()
    try:
        pid = srv.worker_pid()
        at_start = _mb(pid)
        client = MemoryClient(creds["api_key"], creds["secret"], base_url=srv.base_url, timeout=600)
        # The search waits for the scope's index however long its load takes: with the default
        # recall timeout (5 s) a busy machine answers `partial` with no memory, and the RSS
        # would be read in the middle of the load (docs/search.md, "Recall timeout").
        client.set_pipeline_config(recall_timeout_ms=0)
        hits = client.search(AGENT, query)
        return {"start_mb": at_start, "after_search_mb": _mb(pid), "hits": len(hits)}
    finally:
        srv.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data-dir", required=True, help="a DATA_DIR kept by bench/latency.py --keep")
    p.add_argument("--query", default="用户喜欢喝什么茶？", help="the one search")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    data_dir = Path(args.data_dir)
    if not (data_dir / "db.sqlite3").exists():
        sys.exit(f"{data_dir} holds no db.sqlite3: run bench/latency.py --keep first")
    # Checked before any start: the "cache present" start would otherwise build it, unnoticed.
    if not list(data_dir.glob("cedict-gloss-*.sqlite3")):
        sys.exit(f"{data_dir} holds no glossary cache: run manage.py warm_up on it first")
    aside = Path(tempfile.mkdtemp(prefix="warmup-rss-"))
    results: dict[str, Any] = {"machine": machine_info(), "runs": {}}
    try:
        for name, warm_up, with_cache in VARIANTS:
            moved = []
            if not with_cache:
                for cache in data_dir.glob("cedict-gloss-*.sqlite3"):
                    moved.append(Path(shutil.move(str(cache), aside / cache.name)))
            try:
                run = _start(data_dir, warm_up, args.query)
            finally:
                for cache in moved:
                    (data_dir / cache.name).unlink(missing_ok=True)
                    shutil.move(str(cache), data_dir / cache.name)
            run["load"] = machine_load()
            results["runs"][name] = run
            log(f"{name}: {run}")
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    print("\n| worker | start MB | after the first search MB |\n| --- | --- | --- |")
    for name, run in results["runs"].items():
        print(f"| {name} | {run['start_mb']} | {run['after_search_mb']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
