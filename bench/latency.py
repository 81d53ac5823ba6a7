"""Search / write / working-memory latency and server RSS with N memories in one agent's scope.

Usage (from the project root):

    .venv/bin/python bench/latency.py --sizes 10000,100000 --lang zh,en [--json out.json]
    .venv/bin/python bench/latency.py --prepare-only --sizes 100000 --lang zh,en   # vectors only

Options: --searches 200, --writes 200, --working-writes 500, --retries 2 (0: writes without
an Idempotency-Key),
--redis-url redis://127.0.0.1:6379/13, --working redis,redis:pipeline,db (or none),
--server gunicorn|runserver, --mysql (each run on a fresh MariaDB database
`membench_<lang>_<n>` at 127.0.0.1:3306 as root, dropped afterwards; default: a fresh SQLite
file), --max-embed N (embed only the first N texts per language, later rows reuse those vectors
cyclically — for a machine too loaded to embed 200k texts; reported in the table), --keep (keep
the temporary DATA_DIR), --no-stored-tokens (seed rows without `search_tokens`, as rows written
before that column existed: the first search then tokenises every memory), --warm-up-command
(run `manage.py warm_up` on the fresh DATA_DIR before the server starts, as docs/deploy.md says:
the worker then reads the glossary cache instead of building it).

What it does, per language and size N:

1. **Corpus** (`bench/corpus.py`): N deterministic synthetic memories (12 templates, varied
   names, places, products, numbers and ids; English or Chinese), each with a question about it.
2. **Vectors**: `memories.retrieval.embeddings.embed_passages` in batches, cached per 5,000-text
   chunk in `var/bench-cache/<sha256>.npy` (key: model name + texts), so re-runs and the 10k run
   reuse the 100k run's work.
3. **Seed** in-process (a child process of this script with Django set up against the run's
   database): one agent, N `Memory` rows via `bulk_create` (no IndexChange rows: a fresh scope's
   index loads from the Memory table on first search).
4. **Serve**: a fresh server (gunicorn, one sync worker, or runserver) on a loopback port.
5. **Measure** with `memoryplatform.client.MemoryClient`, one client, sequential, client-side
   wall time per HTTP call: the first search (index load, reported on its own), 10 warm-up
   searches, `--searches` timed searches (half are questions about a seeded memory — "needle"
   hit@10 is reported —, half questions about things never stored), `--writes` timed writes
   (`enable_dedup` true, content distinct from the corpus), 50 writes without dedup, 600
   writes by batches of 1, 10 and 100 (memories per second), then edits of those 600: 100
   updates with new text, 100 removals to the trash and 100 erasures, each way one per request
   and 100 per request (memories per second), 50 new questions after the writes, 50 questions asked again (the server caches query vectors, so
   this is a search without the query embedding), and the worker's VmRSS / VmHWM from /proc
   (after the index load, after two writes, at the end).
6. **Working memory**: a server with `REDIS_URL` (and one without, the database store),
   `--working-writes` timed POST /memories/working of one agent — with the team's pipeline
   setting as shipped and, for Redis, with the automatic pipeline saved as enabled (a compress
   job every few writes, run in a background thread of the server in embedded mode).

Targets (the memories issue): search p95 <= 50 ms and write p95 <= 60 ms at 100k, working
write p95 <= 10 ms on Redis, RSS < 400 MB per worker at 100k.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from common import (
    PYTHON,
    ROOT,
    BenchServer,
    code_version,
    log,
    machine_info,
    machine_load,
    percentile,
    rss_kib,
    summarise,
)

CHUNK = 5000
EMBED_BATCH = 16
CACHE_DIR = ROOT / "var" / "bench-cache"
AGENT = "bench-agent"


# --- in-process part (Django) -----------------------------------------------------------------


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")
    import django

    django.setup()


def cached_vectors(lang: str, n: int) -> Any:
    """(n, dim) float32 passage vectors of the first n corpus items, cached per chunk."""
    import numpy as np

    from memories.retrieval.embeddings import embed_passages, get_embedder

    model = get_embedder().model_name
    # Whole chunks, so a chunk's cache key does not depend on n (10k reuses the 100k's chunks).
    texts = [i.text for i in corpus.generate(lang, -(-n // CHUNK) * CHUNK)]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    parts = []
    for start in range(0, n, CHUNK):
        full_chunk = texts[start : start + CHUNK]
        key = hashlib.sha256((model + "\0" + "\n".join(full_chunk)).encode()).hexdigest()[:32]
        path = CACHE_DIR / f"{key}.npy"
        if path.exists():
            vecs = np.load(path)
        else:
            t0 = time.perf_counter()
            rows = []
            for b in range(0, len(full_chunk), EMBED_BATCH):
                rows.append(embed_passages(full_chunk[b : b + EMBED_BATCH]))
            vecs = np.vstack(rows).astype(np.float32)
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, vecs)
            tmp.replace(path)
            dt = time.perf_counter() - t0
            log(
                f"embedded {lang} chunk {start // CHUNK} ({len(full_chunk)} texts) in {dt:.0f}s "
                f"= {len(full_chunk) / dt:.1f}/s; {machine_load()}"
            )
        parts.append(vecs[: min(CHUNK, n - start)])
    return np.vstack(parts)


def prepare_vectors(langs: list[str], n: int) -> None:
    """Fills the cache: first 10k of every language (the small runs), then the rest."""
    _django_setup()
    for first in (min(n, 10000), n):
        for lang in langs:
            cached_vectors(lang, first)


def seed(
    lang: str, n: int, team_id: str, max_embed: int = 0, no_tokens: bool = False
) -> dict[str, Any]:
    """Bulk-inserts the first n corpus items as personal memories of AGENT (run in a child).

    `max_embed` > 0 and < n: only the first `max_embed` texts are embedded; row i beyond them gets
    the vector of row i mod max_embed (a shortcut for a loaded machine, reported as such: the
    cost of a search or a write does not depend on the vectors' values, needle and dedup
    results do).
    """
    _django_setup()
    from django.db import connection

    from memories.models import Memory, MemoryScope
    from memories.retrieval.embeddings import get_embedder, to_bytes
    from memories.retrieval.text import content_hash, tokens_for_storage
    from tenants.models import Team
    from tenants.services import agent_ensure

    t0 = time.perf_counter()
    embedded = min(n, max_embed) if max_embed > 0 else n
    vecs = cached_vectors(lang, embedded)
    if embedded < n:
        import numpy as np

        vecs = vecs[np.arange(n) % embedded]
    t_vec = time.perf_counter() - t0
    items = corpus.generate(lang, n)
    team = Team.objects.get(pk=team_id)
    agent_ensure(team=team, agent_id=AGENT)
    model = get_embedder().model_name
    t1 = time.perf_counter()
    batch: list[Memory] = []
    for i, (item, vec) in enumerate(zip(items, vecs, strict=True)):
        batch.append(
            Memory(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id=AGENT,
                content=item.text,
                importance=item.importance,
                category=item.category,
                metadata={"seq": i, "lang": lang},
                embedding=to_bytes(vec),
                embedding_model=model,
                content_hash=content_hash(item.text),
                # As the API writes them (memories.services.memory_create); --no-stored-tokens
                # leaves them empty, as for rows written before they existed.
                search_tokens="" if no_tokens else tokens_for_storage(item.text),
            )
        )
        if len(batch) >= 2000:
            Memory.objects.bulk_create(batch)
            batch = []
    if batch:
        Memory.objects.bulk_create(batch)
    t_ins = time.perf_counter() - t1
    count = Memory.objects.filter(team=team, agent_id=AGENT).count()
    connection.close()
    return {
        "vectors_s": round(t_vec, 1),
        "insert_s": round(t_ins, 1),
        "rows": count,
        "embedded": embedded,
    }


# --- HTTP part ----------------------------------------------------------------------------------


def _mysql_db(name: str, drop_only: bool = False) -> str:
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", port=3306, user="root")
    try:
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        if not drop_only:
            cur.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        conn.close()
    return f"mysql://root@127.0.0.1:3306/{name}"


def _rss_mb(pid: int) -> dict[str, float]:
    r = rss_kib(pid)
    return {k: round(v / 1024, 1) for k, v in r.items()}


def run_one(lang: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    from memoryplatform.client import MemoryAPIError, MemoryClient

    db_name = f"membench_{lang}_{n}"
    database_url = _mysql_db(db_name) if args.mysql else None
    srv = BenchServer(server=args.server, database_url=database_url, keep=args.keep)
    result: dict[str, Any] = {
        "lang": lang,
        "size": n,
        "database": "mariadb" if args.mysql else "sqlite",
        "warm_up_command": args.warm_up_command,
    }
    try:
        srv.prepare()
        log(f"[{lang} {n}] seeding; {machine_load()}")
        t0 = time.perf_counter()
        out = subprocess.run(
            [
                PYTHON,
                str(Path(__file__).resolve()),
                "--_seed",
                lang,
                str(n),
                srv.team,
                str(args.max_embed),
                "1" if args.no_stored_tokens else "0",
            ],
            cwd=ROOT,
            env=srv.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"seed failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
        result["seed"] = json.loads(out.stdout.strip().splitlines()[-1])
        result["seed"]["total_s"] = round(time.perf_counter() - t0, 1)
        log(f"[{lang} {n}] seeded {result['seed']}")
        if result["seed"]["rows"] != n:
            raise RuntimeError(f"expected {n} rows, seeded {result['seed']['rows']}")

        if args.warm_up_command:
            srv.manage("warm_up")
        srv.start()
        pid = srv.worker_pid()
        # retries > 0 (the client's default): every write carries an Idempotency-Key.
        client = MemoryClient(
            srv.api_key, srv.secret, base_url=srv.base_url, timeout=1800, retries=args.retries
        )
        result["retries"] = args.retries
        result["rss_start_mb"] = _rss_mb(pid)

        items = corpus.generate(lang, n)
        seeded = {i.text for i in items}
        rng = random.Random(f"latency:{lang}:{n}")
        half = args.searches // 2
        embedded = result["seed"]["embedded"]
        # Needles only among rows with their own vector (all of them unless --max-embed).
        needles = rng.sample(items[:embedded], half)
        others = corpus.fresh(lang, args.searches - half + 60, "query", seeded)
        queries: list[tuple[str, str | None]] = [(i.question, i.text) for i in needles]
        queries += [(i.question, None) for i in others[: args.searches - half]]
        rng.shuffle(queries)
        warm = [i.question for i in others[args.searches - half :]]

        # 1. first search: loads the scope's index (vectors + BM25) from the database
        t = time.perf_counter()
        client.search(AGENT, warm[0])
        result["index_load_ms"] = round((time.perf_counter() - t) * 1000, 1)
        result["load_at"] = machine_load()
        result["rss_after_load_mb"] = _rss_mb(pid)
        log(
            f"[{lang} {n}] first search (index load) {result['index_load_ms']} ms; {machine_load()}"
        )
        for q in warm[1:11]:
            client.search(AGENT, q)

        # 2. timed searches
        lat: list[float] = []
        hits = 0
        n_results: list[int] = []
        # Top-1 score for questions about a stored memory vs about things never stored: how
        # well `min_score` (0.3 by default) can tell "nothing relevant" apart.
        top_needle: list[float] = []
        top_absent: list[float] = []
        for q, target in queries:
            t = time.perf_counter()
            res = client.search(AGENT, q)
            lat.append((time.perf_counter() - t) * 1000)
            n_results.append(len(res))
            top = float(res[0].get("score") or 0.0) if res else 0.0
            (top_needle if target is not None else top_absent).append(top)
            if target is not None and any(r["content"] == target for r in res):
                hits += 1
        result["search_ms"] = summarise(lat)
        result["search_load"] = machine_load()
        result["needle_hit_at_10"] = round(hits / max(half, 1), 3)
        result["mean_results"] = round(sum(n_results) / len(n_results), 1)
        result["top_score_needle"] = {
            "p5": round(percentile(top_needle, 5), 3),
            "p50": round(percentile(top_needle, 50), 3),
        }
        result["top_score_absent"] = {
            "p50": round(percentile(top_absent, 50), 3),
            "p95": round(percentile(top_absent, 95), 3),
            "returned_any": sum(1 for x in top_absent if x > 0),
            "n": len(top_absent),
        }
        result["rss_after_search_mb"] = _rss_mb(pid)
        log(f"[{lang} {n}] search {result['search_ms']} needle@10 {result['needle_hit_at_10']}")

        # 3. timed writes (dedup on, distinct content)
        writes = corpus.fresh(lang, args.writes, "write", seeded)
        wl: list[float] = []
        skipped = 0
        skipped_examples: list[dict[str, Any]] = []
        errors: list[str] = []
        for i, item in enumerate(writes):
            if i == 2:
                # A write's own row reaches the index at the next request's sync, so the second
                # write is the one that overflows the arrays sized at load time (a full copy).
                result["rss_after_first_writes_mb"] = _rss_mb(pid)
                result["write_2_ms"] = round(wl[1], 1)
            t = time.perf_counter()
            try:
                res = client.write_memory(
                    AGENT,
                    item.text,
                    importance=item.importance,
                    enable_dedup=True,
                    metadata={"w": i},
                )
                if res.get("dedup_skipped"):
                    skipped += 1
                    if len(skipped_examples) < 10:
                        skipped_examples.append(
                            {
                                "new": item.text,
                                "kept": res.get("content"),
                                "score": res.get("dedup_score"),
                            }
                        )
            except MemoryAPIError as exc:
                errors.append(f"{exc.status} {exc.code}")
            wl.append((time.perf_counter() - t) * 1000)
        result["write_ms"] = summarise(wl)
        result["write_first_ms"] = round(wl[0], 1) if wl else None
        result["write_load"] = machine_load()
        result["write_dedup_skipped"] = skipped
        result["write_dedup_examples"] = skipped_examples
        result["write_errors"] = errors[:10]
        log(f"[{lang} {n}] write {result['write_ms']} skipped {skipped} errors {len(errors)}")

        # 4. writes without dedup: the same path minus the duplicate check
        nl: list[float] = []
        for i, item in enumerate(corpus.fresh(lang, 50, "write-nodedup", seeded)):
            t = time.perf_counter()
            client.write_memory(AGENT, item.text, enable_dedup=False, metadata={"nd": i})
            nl.append((time.perf_counter() - t) * 1000)
        result["write_nodedup_ms"] = summarise(nl)

        # 4b. batch ingest: the same kind of writes through POST /memories/personal/batch, 1, 10
        # and 100 per request (dedup on), as memories per second over the whole run.
        result["batch_ingest"] = {}
        written: list[int] = []
        for size in (1, 10, 100):
            items = [
                {"agent_id": AGENT, "content": it.text, "importance": it.importance}
                for it in corpus.fresh(lang, 200, f"batch-{size}", seeded)
            ]
            t = time.perf_counter()
            for start in range(0, len(items), size):
                done = client.write_memories(items[start : start + size])["results"]
                written += [r["memory"]["id"] for r in done if r["status"] == 201]
            seconds = time.perf_counter() - t
            result["batch_ingest"][str(size)] = round(len(items) / seconds, 1)
        log(f"[{lang} {n}] batch ingest memories/s {result['batch_ingest']}")

        # 4c. batch edits of what 4b wrote: memories per second, one per request (the single
        # PUT / DELETE) against 100 per request (batch/update, batch/delete).
        result["batch_edit"] = _batch_edits(client, lang, written, seeded)
        log(f"[{lang} {n}] batch edits memories/s {result['batch_edit']}")

        # 5. new questions after the writes (each search applies the change log first)
        al: list[float] = []
        for item in corpus.fresh(lang, 50, "query-after", seeded):
            t = time.perf_counter()
            client.search(AGENT, item.question)
            al.append((time.perf_counter() - t) * 1000)
        result["search_after_writes_ms"] = summarise(al)

        # 6. questions asked before: the server's query-vector cache answers the embedding, so
        # this is the search without the query embedding (index, database, rendering, HTTP).
        cl: list[float] = []
        for q, _ in queries[:50]:
            t = time.perf_counter()
            client.search(AGENT, q)
            cl.append((time.perf_counter() - t) * 1000)
        result["search_cached_query_ms"] = summarise(cl)
        result["rss_end_mb"] = _rss_mb(pid)
        result["end_load"] = machine_load()
        log(f"[{lang} {n}] RSS {result['rss_end_mb']}; {machine_load()}")
    finally:
        if srv.proc is not None and srv.proc.poll() is not None:
            log(srv.log_tail())
        srv.cleanup()
        if args.mysql:
            _mysql_db(db_name, drop_only=True)
    return result


def _batch_edits(client: Any, lang: str, ids: list[int], seeded: set[str]) -> dict[str, float]:
    """Memories per second over 100 memories each: updates with new text (re-embedded, a
    revision each), then removals to the trash, then erasures (`purge`), each one per request
    and 100 per request. Needs 600 of `ids`."""
    if len(ids) < 600:
        raise RuntimeError(f"batch edits need 600 written memories, have {len(ids)}")
    texts = iter(it.text for it in corpus.fresh(lang, 200, "batch-edit", seeded))
    out: dict[str, float] = {}

    def rate(key: str, count: int, call: Any) -> None:
        t = time.perf_counter()
        call()
        out[key] = round(count / (time.perf_counter() - t), 1)

    def update_one() -> None:
        for i in ids[0:100]:
            client.update_memory(i, content=next(texts))

    def update_batch() -> None:
        items = [{"id": i, "content": next(texts)} for i in ids[100:200]]
        if client.update_memories(items)["updated"] != 100:
            raise RuntimeError("batch update refused items")

    def delete_one(purge: bool, part: list[int]) -> None:
        for i in part:
            client.delete_memory(i, purge=purge)

    def delete_batch(purge: bool, part: list[int]) -> None:
        if client.delete_memories(part, purge=purge)["removed"] != len(part):
            raise RuntimeError("batch delete refused ids")

    rate("update_1", 100, update_one)
    rate("update_100", 100, update_batch)
    rate("trash_1", 100, lambda: delete_one(False, ids[200:300]))
    rate("trash_100", 100, lambda: delete_batch(False, ids[300:400]))
    rate("purge_1", 100, lambda: delete_one(True, ids[400:500]))
    rate("purge_100", 100, lambda: delete_batch(True, ids[500:600]))
    return out


def run_working(config: str, args: argparse.Namespace) -> dict[str, Any]:
    """`config`: "redis" or "db" (the store), optionally ":pipeline" / ":nopipeline" (the team's
    automatic pipeline saved as enabled / disabled through POST /lifecycle/auto-config; enabled,
    a compress job is queued every few writes and runs in a background thread of the server in
    embedded mode). Without the option the team keeps the shipped default."""
    from memoryplatform.client import MemoryClient

    backend, _, option = config.partition(":")
    if backend not in ("redis", "db") or option not in ("", "pipeline", "nopipeline"):
        raise ValueError(f"unknown working-memory configuration {config!r}")
    redis_url = args.redis_url if backend == "redis" else None
    srv = BenchServer(server=args.server, redis_url=redis_url, keep=args.keep)
    result: dict[str, Any] = {"backend": config}
    agent = f"wm-{os.getpid()}-{int(time.time())}"
    try:
        srv.prepare()
        srv.start()
        pid = srv.worker_pid()
        client = MemoryClient(srv.api_key, srv.secret, base_url=srv.base_url, timeout=60)
        if backend == "redis":
            stats = client.get_stats()
            if not stats.get("redis_ok"):
                raise RuntimeError(f"server does not see Redis: {stats}")
        if option:
            client.set_pipeline_config(enabled=option == "pipeline")
        result["pipeline"] = client.get_pipeline_config()
        items = corpus.generate("en", 300) + corpus.generate("zh", 300)
        random.Random("working").shuffle(items)
        for item in items[:20]:
            client.write_working(agent, item.text)
        lat: list[float] = []
        for i in range(args.working_writes):
            text = f"{items[i % len(items)].text} (#{i})"
            t = time.perf_counter()
            client.write_working(agent, text)
            lat.append((time.perf_counter() - t) * 1000)
        result["write_ms"] = summarise(lat)
        result["load"] = machine_load()
        t = time.perf_counter()
        listed = client.get_working(agent, limit=50)
        result["list_50_ms"] = round((time.perf_counter() - t) * 1000, 1)
        result["listed"] = len(listed)
        result["rss_mb"] = _rss_mb(pid)
        # What the pipeline did meanwhile (compress jobs turn working items into memories).
        stats = client.get_stats()
        result["personal_memories_after"] = stats.get("personal_memories")
        cleared = client.clear_working(agent)
        result["cleared"] = cleared.get("cleared")
        log(f"[working {config}] {result}")
    finally:
        srv.cleanup()
    return result


# --- report -------------------------------------------------------------------------------------


def _p(s: dict[str, float] | None, key: str) -> str:
    return "–" if not s or key not in s else f"{s[key]:.0f}"


def print_report(report: dict[str, Any]) -> None:
    print(f"\nmachine: {report['machine']}")
    print(f"code: {report['code']}")
    print(
        "\n| lang | N | vectors embedded | index load (1st search) | search p50 / p95 / p99 ms | "
        "search, cached query vector p50 / p95 | search after writes p50 / p95 | "
        "write (dedup) p50 / p95 / p99 | write (no dedup) p50 / p95 | dedup-skipped | "
        "needle hit@10 | RSS after load / after 2 writes / end / peak MB | load |"
    )
    print("| --- " * 13 + "|")
    for r in report["runs"]:
        if "error" in r:
            print(f"| {r['lang']} | {r['size']} | ERROR: {r['error']} |")
            continue
        s, c, a = r["search_ms"], r.get("search_cached_query_ms"), r["search_after_writes_ms"]
        w, nd = r["write_ms"], r.get("write_nodedup_ms")
        fw = r.get("rss_after_first_writes_mb", r.get("rss_after_first_write_mb", {}))
        print(
            f"| {r['lang']} | {r['size']:,} | {r['seed']['embedded']:,} | "
            f"{r['index_load_ms'] / 1000:.1f} s | "
            f"{_p(s, 'p50')} / {_p(s, 'p95')} / {_p(s, 'p99')} | {_p(c, 'p50')} / {_p(c, 'p95')} | "
            f"{_p(a, 'p50')} / {_p(a, 'p95')} | {_p(w, 'p50')} / {_p(w, 'p95')} / {_p(w, 'p99')} | "
            f"{_p(nd, 'p50')} / {_p(nd, 'p95')} | {r['write_dedup_skipped']} / {w['n']} | "
            f"{r['needle_hit_at_10']:.2f} | {r['rss_after_load_mb'].get('rss')} / "
            f"{fw.get('rss', '–')} / {r['rss_end_mb'].get('rss')} / {r['rss_end_mb'].get('hwm')} | "
            f"{r['search_load'].replace('load average: ', '')} |"
        )
    print("\n| lang | N | batch ingest, memories/s at 1 / 10 / 100 per request |")
    print("| --- | --- | --- |")
    for r in report["runs"]:
        b = r.get("batch_ingest") or {}
        if b:
            print(
                f"| {r['lang']} | {r['size']:,} | {b.get('1')} / {b.get('10')} / {b.get('100')} |"
            )
    edits = [(r, r["batch_edit"]) for r in report["runs"] if r.get("batch_edit")]
    if edits:
        print(
            "\n| lang | N | update, memories/s at 1 / 100 per request | to the trash | erased "
            "(purge) |"
        )
        print("| --- " * 5 + "|")
        for r, e in edits:
            print(
                f"| {r['lang']} | {r['size']:,} | {e['update_1']} / {e['update_100']} | "
                f"{e['trash_1']} / {e['trash_100']} | {e['purge_1']} / {e['purge_100']} |"
            )
    print(
        "\n| lang | N | top-1 score, stored-memory questions p5 / p50 | top-1 score, never-stored "
        "questions p50 / p95 | never-stored questions with results (min_score 0.3) | mean results |"
    )
    print("| --- " * 6 + "|")
    for r in report["runs"]:
        if "top_score_needle" not in r:
            continue
        sn, sa = r["top_score_needle"], r["top_score_absent"]
        print(
            f"| {r['lang']} | {r['size']:,} | {sn['p5']} / {sn['p50']} | {sa['p50']} / {sa['p95']} | "
            f"{sa['returned_any']} / {sa['n']} | {r['mean_results']} |"
        )
    if report.get("working"):
        print(
            "\n| working memory | write p50 / p95 / p99 ms | max ms | list 50 ms | RSS MB | load |"
        )
        print("| --- " * 6 + "|")
        for wm in report["working"]:
            if "error" in wm:
                print(f"| {wm['backend']} | ERROR: {wm['error']} |")
                continue
            ws = wm["write_ms"]
            print(
                f"| {wm['backend']} | {ws['p50']} / {ws['p95']} / {ws['p99']} | {ws['max']} | "
                f"{wm['list_50_ms']} | {wm['rss_mb'].get('rss')} | "
                f"{wm['load'].replace('load average: ', '')} |"
            )


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "--_seed":
        lang, n, team, max_embed = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
        print(json.dumps(seed(lang, n, team, max_embed, no_tokens=sys.argv[6] == "1")))
        return 0

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--lang", default="zh,en")
    p.add_argument("--searches", type=int, default=200)
    p.add_argument("--writes", type=int, default=200)
    p.add_argument("--working-writes", type=int, default=500)
    p.add_argument(
        "--working",
        default="redis,redis:pipeline,db",
        help="working-memory configurations: redis | db, each optionally :pipeline or "
        ":nopipeline; or none",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument("--server", choices=["gunicorn", "runserver"], default="gunicorn")
    p.add_argument("--mysql", action="store_true", help="fresh MariaDB database per run")
    p.add_argument("--prepare-only", action="store_true", help="only fill the vector cache")
    p.add_argument(
        "--max-embed",
        type=int,
        default=0,
        help="embed only the first N texts per language; later rows reuse their vectors "
        "cyclically (reported; for a machine too loaded to embed 100k texts)",
    )
    p.add_argument("--keep", action="store_true", help="keep temporary data directories")
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="the client's re-sends; above 0 every write carries an Idempotency-Key (the "
        "client's default), 0 sends none",
    )
    p.add_argument(
        "--no-stored-tokens",
        action="store_true",
        help="seed rows without search_tokens (as written before they existed): the index "
        "load tokenises every memory",
    )
    p.add_argument(
        "--warm-up-command",
        action="store_true",
        help="run manage.py warm_up on the fresh DATA_DIR before the server starts",
    )
    p.add_argument("--json", type=Path, help="write the numbers here")
    args = p.parse_args()

    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    langs = [x.strip() for x in args.lang.split(",") if x.strip()]
    for lang in langs:
        if lang not in corpus.MAKERS:
            p.error(f"unknown language {lang!r} (en, zh)")

    if args.prepare_only:
        # Django's settings create DATA_DIR; nothing is written there by the embedding step.
        scratch = tempfile.mkdtemp(prefix="membench-prep-")
        os.environ.setdefault("DATA_DIR", scratch)
        try:
            top = max(sizes)
            prepare_vectors(langs, min(top, args.max_embed) if args.max_embed > 0 else top)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return 0

    report: dict[str, Any] = {
        "machine": machine_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_at_start": machine_load(),
        "server": f"{args.server}, 1 worker",
        "code": code_version(),
        "runs": [],
        "working": [],
    }
    # Vectors first (in a child with Django set up), so the timed runs never wait for embedding.
    if sizes:  # --sizes '' measures working memory only
        log(f"preparing vectors; {machine_load()}")
        subprocess.run(
            [
                PYTHON,
                str(Path(__file__).resolve()),
                "--prepare-only",
                "--sizes",
                str(max(sizes)),
                "--lang",
                ",".join(langs),
                "--max-embed",
                str(args.max_embed),
            ],
            cwd=ROOT,
            check=True,
        )
    for n in sizes:
        for lang in langs:
            try:
                report["runs"].append(run_one(lang, n, args))
            except Exception as exc:  # keep going: one failed run must not lose the others
                log(f"[{lang} {n}] FAILED: {exc}")
                report["runs"].append({"lang": lang, "size": n, "error": str(exc)[:500]})
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    backends = [b.strip() for b in args.working.split(",") if b.strip() and b.strip() != "none"]
    for backend in backends:
        try:
            report["working"].append(run_working(backend, args))
        except Exception as exc:
            log(f"[working {backend}] FAILED: {exc}")
            report["working"].append({"backend": backend, "error": str(exc)[:500]})
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    report["load_at_end"] = machine_load()
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
