"""Approximate search at 1M memories in one scope: exact scan against the IVF index.

Usage (from the project root):

    .venv/bin/python bench/ann.py --rows 1000000 --json var/bench-logs/ann.json
    .venv/bin/python bench/ann.py --rows 1000000 --no-db   # the index alone, no database

Options: --lang en, --max-embed 100000 (distinct embedded texts; row i reuses the vector of
text i mod max-embed), --noise 0.01 (per-component Gaussian noise added to each reused vector,
then renormalised, so no two rows are equal), --queries 200, --nprobe 8,16,32,64 (the
approximate searches measured; the search itself runs with INDEX_ANN_NPROBE), --keep,
--profile N (after the timed passes, cProfile N approximate searches: the top functions by own
time, logged and in the JSON).

Embedding a million texts is out of reach on the benchmark machine (about 15 texts a second), so
the rows are the first `--max-embed` corpus texts' vectors reused cyclically with noise: a
near-duplicate family of ~10 rows per text. Contents are all distinct (bench/corpus.py), so
BM25 sees a million different memories. What this measures does not depend on where the
vectors come from: the cost of the scans, the load, the memory; recall is measured against the
exact scan on the same vectors (near-duplicate families make it harder, not easier: the ten
nearest rows of a query are often one family whose members differ only by the noise).

What it does:

1. (database mode, default) a fresh SQLite database (bench/common.BenchServer.prepare), seeded
   in a child process with `Memory.objects.bulk_create` as bench/latency.py does;
2. in another child (in-process, no HTTP): the scope's index loaded by the registry with the
   approximate index off (exact load time, RSS), then the approximate index built on it (build
   time, RSS); `--no-db` instead builds a ScopeIndex directly from the vectors (no BM25 words);
3. per query (half questions about a seeded memory, half about things never stored, embedded
   with the search's query embedding): the dense top-200 of the exact block scan and of the
   approximate index at each nprobe — p50/p95 ms, recall@10 against the exact top-10;
4. (database mode) a full `memory_search` (hybrid, limit 10) per query with the exact path and
   with the approximate one — p50/p95 ms, needle hit@10, and how many answers' top-10 ids are
   identical on both paths.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
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
    summarise,
)

AGENT = "bench-agent"
SEED_BATCH = 2000


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")
    import django

    django.setup()


def _rss_mb() -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0][2:].lower()] = round(int(line.split()[1]) / 1024, 1)
    return out


def noisy_vectors(base: Any, start: int, stop: int, noise: float) -> Any:
    """Rows start..stop: base[i mod len(base)] plus seeded noise, unit length."""
    import numpy as np

    idx = np.arange(start, stop) % len(base)
    rng = np.random.default_rng(start)
    rows = base[idx] + rng.normal(0.0, noise, size=(stop - start, base.shape[1])).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows.astype(np.float32)


def seed(args: argparse.Namespace, team_id: str) -> dict[str, Any]:
    """Bulk-inserts `rows` personal memories of AGENT (run in a child with the run's database)."""
    _django_setup()
    from django.db import connection
    from latency import cached_vectors

    from memories.models import Memory, MemoryScope
    from memories.retrieval.embeddings import get_embedder, to_bytes
    from memories.retrieval.text import content_hash, tokens_for_storage
    from tenants.models import Team
    from tenants.services import agent_ensure

    t0 = time.perf_counter()
    base = cached_vectors(args.lang, min(args.rows, args.max_embed))
    items = corpus.generate(args.lang, args.rows)
    team = Team.objects.get(pk=team_id)
    agent_ensure(team=team, agent_id=AGENT)
    model = get_embedder().model_name
    for start in range(0, args.rows, SEED_BATCH):
        stop = min(args.rows, start + SEED_BATCH)
        vecs = noisy_vectors(base, start, stop, args.noise)
        Memory.objects.bulk_create(
            [
                Memory(
                    team=team,
                    scope=MemoryScope.PERSONAL,
                    agent_id=AGENT,
                    content=items[i].text,
                    importance=items[i].importance,
                    category=items[i].category,
                    metadata={"seq": i},
                    embedding=to_bytes(vecs[i - start]),
                    embedding_model=model,
                    content_hash=content_hash(items[i].text),
                    search_tokens=tokens_for_storage(items[i].text),
                )
                for i in range(start, stop)
            ]
        )
        if start % 100000 == 0:
            log(f"seeded {stop} rows; {machine_load()}")
    count = Memory.objects.filter(team=team, agent_id=AGENT).count()
    connection.close()
    return {"rows": count, "seed_s": round(time.perf_counter() - t0, 1)}


def _queries(args: argparse.Namespace) -> tuple[list[str], list[str | None]]:
    """Questions (half about a seeded memory with its own text's vector) and their needles."""
    items = corpus.generate(args.lang, args.rows)
    rng = random.Random(f"ann:{args.lang}:{args.rows}")
    half = args.queries // 2
    # Needles among the rows whose vector is their own text's (plus noise).
    needles = rng.sample(items[: args.max_embed], half)
    others = corpus.fresh(args.lang, args.queries - half, "query", {i.text for i in items})
    pairs: list[tuple[str, str | None]] = [(i.question, i.text) for i in needles]
    pairs += [(i.question, None) for i in others]
    rng.shuffle(pairs)
    return [q for q, _ in pairs], [t for _, t in pairs]


def measure(args: argparse.Namespace, team_id: str) -> dict[str, Any]:
    _django_setup()
    import numpy as np
    from django.conf import settings

    from memories.retrieval import index
    from memories.retrieval.embeddings import embed_query, get_embedder

    embedder = get_embedder()
    result: dict[str, Any] = {"rss_start_mb": _rss_mb()}
    settings.INDEX_ANN_MIN_ROWS = 0  # load exact first
    t0 = time.perf_counter()
    if args.no_db:
        from latency import cached_vectors

        base = cached_vectors(args.lang, min(args.rows, args.max_embed))
        ix = index.ScopeIndex("bench", embedder.dim, embedder.model_name)
        from memories.retrieval.embeddings import to_bytes

        for start in range(0, args.rows, SEED_BATCH):
            stop = min(args.rows, start + SEED_BATCH)
            vecs = noisy_vectors(base, start, stop, args.noise)
            ix.upsert_many(
                [
                    index.Row(i + 1, "", to_bytes(vecs[i - start]), embedder.model_name, False, "")
                    for i in range(start, stop)
                ]
            )
        del base
    else:
        from memories.models import MemoryScope

        ix = index.registry.get(
            team_id=team_id, scope=MemoryScope.PERSONAL, agent_id=AGENT, embedder=embedder
        )
    gc.collect()
    result["rows"] = int(ix.n)
    result["load_exact_s"] = round(time.perf_counter() - t0, 1)
    result["rss_after_exact_load_mb"] = _rss_mb()
    log(f"exact load {result['load_exact_s']}s, {result['rss_after_exact_load_mb']}")
    settings.INDEX_ANN_MIN_ROWS = args.ann_min_rows
    t0 = time.perf_counter()
    with ix.lock:
        ix.build_ann()
    assert ix.ann is not None
    result["ann_build_s"] = round(time.perf_counter() - t0, 1)
    result["ann_lists"] = ix.ann.lists
    result["rss_after_ann_build_mb"] = _rss_mb()
    result["index_nbytes_mb"] = round(ix.nbytes / 2**20, 1)
    result["ann_nbytes_mb"] = round(ix.ann.nbytes / 2**20, 1)
    log(f"ann build {result['ann_build_s']}s, {result['rss_after_ann_build_mb']}; {machine_load()}")

    questions, needles = _queries(args)
    qvecs = [embed_query(q) for q in questions]
    live = ix.alive[: ix.n]
    exact_ms: list[float] = []
    exact_top: list[set[int]] = []
    for q in qvecs:
        t = time.perf_counter()
        slots, _ = ix.vectors.top(q, settings.SEARCH_CANDIDATES, live)
        exact_ms.append((time.perf_counter() - t) * 1000)
        exact_top.append(set(slots[:10].tolist()))
    result["dense_exact_ms"] = summarise(exact_ms)
    log(f"dense exact {result['dense_exact_ms']}")
    result["dense_ann"] = {}
    default_nprobe = settings.INDEX_ANN_NPROBE
    for nprobe in args.nprobe:
        settings.INDEX_ANN_NPROBE = nprobe
        ms: list[float] = []
        recall: list[float] = []
        for q, truth in zip(qvecs, exact_top, strict=True):
            t = time.perf_counter()
            slots, _ = ix.dense_top(q, settings.SEARCH_CANDIDATES)
            ms.append((time.perf_counter() - t) * 1000)
            recall.append(len(truth & set(slots[:10].tolist())) / 10)
        row = {"ms": summarise(ms), "recall_at_10": round(float(np.mean(recall)), 4)}
        row["min_recall_at_10"] = round(float(np.min(recall)), 2)
        result["dense_ann"][str(nprobe)] = row
        log(f"dense ann nprobe {nprobe}: {row}")
    settings.INDEX_ANN_NPROBE = default_nprobe

    if not args.no_db:
        result["search"] = _searches(ix, team_id, questions, needles, args.profile)
    result["rss_end_mb"] = _rss_mb()
    return result


def _scope_index(team_id: str) -> Any:
    from memories.models import MemoryScope
    from memories.retrieval import index
    from memories.retrieval.embeddings import get_embedder

    return index.registry.get(
        team_id=team_id, scope=MemoryScope.PERSONAL, agent_id=AGENT, embedder=get_embedder()
    )


def _profile(team: Any, questions: list[str]) -> list[str]:
    """cProfile of memory_search over `questions` (approximate path; after the timed passes, so
    the profiler's overhead is in no reported time): the 30 functions of most own time."""
    import cProfile
    import io
    import pstats

    from memories.models import MemoryScope
    from memories.retrieval.search import SearchQuery, memory_search

    profiler = cProfile.Profile()
    profiler.enable()
    for q in questions:
        memory_search(
            SearchQuery(
                team=team, scope=MemoryScope.PERSONAL, agent_id=AGENT, text=q, min_score=0.0
            )
        )
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    log(text.getvalue())
    return [line for line in text.getvalue().splitlines() if line.strip()][-31:]


def _searches(
    ix: Any, team_id: str, questions: list[str], needles: list[str | None], profile: int = 0
) -> dict[str, Any]:
    """Full memory_search per question, exact path then approximate (same loaded index)."""
    from django.conf import settings

    from memories.models import MemoryScope
    from memories.retrieval.search import SearchQuery, memory_search
    from tenants.models import Team

    team = Team.objects.get(pk=team_id)
    out: dict[str, Any] = {}
    answers: dict[str, list[list[int]]] = {}
    threshold = settings.INDEX_ANN_MIN_ROWS
    # The exact pass keeps the built index (a scope without one at twice the threshold would be
    # reloaded) and raises the threshold above the scope, so dense_top scans exactly.
    for name, min_rows in (("exact", 10**12), ("ann", threshold)):
        settings.INDEX_ANN_MIN_ROWS = min_rows
        ms: list[float] = []
        hits = 0
        ids: list[list[int]] = []
        for q in questions[:10]:  # warm-up (query vectors cached after this pass too)
            memory_search(
                SearchQuery(team=team, scope=MemoryScope.PERSONAL, agent_id=AGENT, text=q)
            )
        for q, needle in zip(questions, needles, strict=True):
            query = SearchQuery(
                team=team, scope=MemoryScope.PERSONAL, agent_id=AGENT, text=q, min_score=0.0
            )
            t = time.perf_counter()
            found = memory_search(query)
            ms.append((time.perf_counter() - t) * 1000)
            ids.append([h.memory.pk for h in found])
            if needle is not None and needle in {h.memory.content for h in found}:
                hits += 1
        answers[name] = ids
        n_needles = sum(1 for n in needles if n is not None)
        out[name] = {"ms": summarise(ms), "needle_hit_at_10": round(hits / max(n_needles, 1), 3)}
        out[name]["index_reloaded"] = ix is not _scope_index(team_id)
        log(f"memory_search {name}: {out[name]}; {machine_load()}")
    if profile:
        out["profile_ann"] = _profile(team, questions[:profile])
    settings.INDEX_ANN_MIN_ROWS = threshold
    same = sum(1 for a, b in zip(answers["exact"], answers["ann"], strict=True) if a == b)
    out["identical_top10"] = f"{same}/{len(questions)}"
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--lang", default="en")
    p.add_argument("--max-embed", type=int, default=100_000)
    p.add_argument("--noise", type=float, default=0.01)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--nprobe", default="8,16,32,64")
    p.add_argument("--ann-min-rows", type=int, default=1, help="threshold for the build (>= 1)")
    p.add_argument("--no-db", action="store_true")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--profile", type=int, default=0, help="then profile N searches (cProfile)")
    p.add_argument("--json", default="")
    p.add_argument("--_seed", default="", help=argparse.SUPPRESS)
    p.add_argument("--_measure", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.nprobe = [int(x) for x in args.nprobe.split(",") if x]
    if args._seed:
        print(json.dumps(seed(args, args._seed)))
        return 0
    if args._measure:
        print(json.dumps(measure(args, args._measure)))
        return 0

    report: dict[str, Any] = {
        "machine": machine_info(),
        "code": code_version(),
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_at_start": machine_load(),
    }
    srv = BenchServer(keep=args.keep)
    forward = [
        "--rows", str(args.rows), "--lang", args.lang, "--max-embed", str(args.max_embed),
        "--noise", str(args.noise), "--queries", str(args.queries),
        "--nprobe", ",".join(map(str, args.nprobe)), "--ann-min-rows", str(args.ann_min_rows),
        "--profile", str(args.profile),
    ]  # fmt: skip
    if args.no_db:
        forward.append("--no-db")
    try:
        srv.prepare()
        steps = [] if args.no_db else [("seed", "--_seed")]
        steps.append(("measure", "--_measure"))
        for name, flag in steps:
            log(f"{name}; {machine_load()}")
            out = subprocess.run(
                [PYTHON, str(Path(__file__).resolve()), *forward, flag, srv.team],
                cwd=ROOT,
                env=srv.env(),
                stdout=subprocess.PIPE,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise RuntimeError(f"{name} failed:\n{out.stdout[-2000:]}")
            report[name] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        srv.cleanup()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    report["load_at_end"] = machine_load()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
