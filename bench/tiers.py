"""What cold tiering saves: index RAM, load time and search latency of one scope by cold share.

Usage (from the project root):

    .venv/bin/python bench/tiers.py --sizes 100000 --fractions 0,0.5,0.9 [--lang zh] [--json out.json]

Options: --searches 200 (default searches per fraction), --cold-searches 40 (include_cold
searches per fraction: each scans the scope's cold rows from the database), --max-embed N (embed
only the first N texts, later rows reuse those vectors cyclically — bench/latency.py; needles
are then taken among the first N rows), --keep (keep the temporary DATA_DIR).

What it does, per language and size N:

1. **Seed** (bench/latency.py `seed`, cached vectors in var/bench-cache): a fresh SQLite
   database (common.BenchServer.prepare: migrate, team, key) and N personal memories of one
   agent, all hot.
2. **Per cold fraction f**, a direct UPDATE sets `tier='cold'` on an evenly spread subset of
   the rows: row r (by id) is cold when frac(r·φ) < f, φ = the golden ratio's fractional part
   — a low-discrepancy sequence, so the cold rows are spread over the whole id range, a
   larger f's cold set contains a smaller one's, and the share is f to within 1/N. The needles
   are fixed across fractions: "hot needles" are rows hot at the largest f, "cold needles"
   rows cold at the smallest non-zero f.
3. **Measure** in a FRESH child process per fraction (so its RSS is that fraction's alone):
   Django set up and the embedding model loaded (one query embedded), then VmRSS; the index
   load (`memories.retrieval.index.registry.get`) timed; VmRSS / VmHWM after it and the
   index's own `nbytes`; then, in-process with `memories.retrieval.search.memory_search`:
   10 warm-up searches, `--searches` default searches (half questions about hot needles, half
   about things never stored: hot needle hit@10), and `--cold-searches` searches with
   `include_cold=True` (half questions about cold needles, half about nothing: cold needle
   hit@10), with VmRSS / VmHWM after each phase. Latencies are wall time of the whole
   `memory_search` call, query embedding included.

No server, no HTTP: the numbers are what one worker's search costs with that share of its scope
cold. Results: docs/benchmarks.md, "Tiers".
"""

from __future__ import annotations

import argparse
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
import latency
from common import (
    PYTHON,
    ROOT,
    BenchServer,
    code_version,
    log,
    machine_info,
    machine_load,
    rss_kib,
    summarise,
)

AGENT = latency.AGENT
PHI = 0.6180339887498949


def is_cold(rank: int, fraction: float) -> bool:
    """Row `rank` (0-based, by id) is cold at `fraction`: evenly spread and nested in fraction."""
    return (rank * PHI) % 1.0 < fraction


def pick_needles(
    lang: str, n: int, embedded: int, fractions: list[float], count: int
) -> dict[str, list[int]]:
    """Row ranks of the hot needles (hot at every fraction) and cold needles (cold at every
    non-zero fraction), among the rows with their own vector."""
    top = max(fractions)
    low = min((f for f in fractions if f > 0), default=0.0)
    rng = random.Random(f"tiers:{lang}:{n}")
    ranks = list(range(min(n, embedded)))
    hot = [r for r in ranks if not is_cold(r, top)]
    cold = [r for r in ranks if is_cold(r, low)] if low > 0 else []
    return {
        "hot": sorted(rng.sample(hot, min(count, len(hot)))),
        "cold": sorted(rng.sample(cold, min(count, len(cold)))),
    }


# --- children (Django set up against the run's database) ----------------------------------------


def set_cold(fraction: float) -> dict[str, Any]:
    """All of AGENT's memories hot, then the `fraction` subset cold (a direct UPDATE, no index
    change rows: each measuring child loads its index from scratch)."""
    latency._django_setup()
    from django.db import connection, transaction

    from memories.models import Memory, MemoryTier

    t0 = time.perf_counter()
    rows = Memory.objects.filter(agent_id=AGENT)
    ids = list(rows.order_by("id").values_list("id", flat=True))
    cold = [mid for r, mid in enumerate(ids) if is_cold(r, fraction)]
    with transaction.atomic():
        rows.update(tier=MemoryTier.HOT)
        for start in range(0, len(cold), 500):
            Memory.objects.filter(pk__in=cold[start : start + 500]).update(tier=MemoryTier.COLD)
    counted = rows.filter(tier=MemoryTier.COLD).count()
    connection.close()
    return {"cold_rows": counted, "update_s": round(time.perf_counter() - t0, 1)}


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One fraction in a fresh process: index load, RSS, default and include_cold searches."""
    latency._django_setup()
    from memories.retrieval import index
    from memories.retrieval.embeddings import embed_query, get_embedder
    from memories.retrieval.search import SearchQuery, memory_search
    from tenants.models import Team

    pid = os.getpid()
    team = Team.objects.get(pk=spec["team"])
    embedder = get_embedder()
    embed_query("warm up the embedding model")
    out: dict[str, Any] = {"rss_before_load_kib": rss_kib(pid)}

    t0 = time.perf_counter()
    ix = index.registry.get(team_id=team.id, scope="personal", agent_id=AGENT, embedder=embedder)
    out["index_load_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    out["index_rows"] = int(ix.alive_count)
    out["index_nbytes"] = int(ix.nbytes)
    out["index_vectors_nbytes"] = int(ix.vectors.nbytes)
    out["rss_after_load_kib"] = rss_kib(pid)
    out["load_at"] = machine_load()

    def run(queries: list[tuple[str, str | None]], include_cold: bool) -> dict[str, Any]:
        lat: list[float] = []
        hits = needles = 0
        for question, target in queries:
            t = time.perf_counter()
            res = memory_search(
                SearchQuery(
                    team=team,
                    scope="personal",
                    agent_id=AGENT,
                    text=question,
                    limit=10,
                    include_cold=include_cold,
                )
            )
            lat.append((time.perf_counter() - t) * 1000)
            if target is not None:
                needles += 1
                hits += any(h.memory.content == target for h in res)
        return {
            "ms": summarise(lat),
            "needle_hit_at_10": round(hits / needles, 3) if needles else None,
            "needles": needles,
            "load": machine_load(),
        }

    for i, (question, _) in enumerate(spec["warm"]):
        # Two of them with include_cold: its first use reads (or, on a fresh DATA_DIR, builds)
        # the cross-script dictionary cache (retrieval.gloss), a one-off of the process.
        memory_search(
            SearchQuery(
                team=team, scope="personal", agent_id=AGENT, text=question, include_cold=i < 2
            )
        )
    out["default"] = run(spec["default"], include_cold=False)
    out["rss_after_default_kib"] = rss_kib(pid)
    log(f"  default search {out['default']['ms']} hit@10 {out['default']['needle_hit_at_10']}")
    if spec["cold"]:
        out["include_cold"] = run(spec["cold"], include_cold=True)
        out["rss_after_include_cold_kib"] = rss_kib(pid)
        log(
            f"  include_cold search {out['include_cold']['ms']} "
            f"hit@10 {out['include_cold']['needle_hit_at_10']}"
        )
    return out


# --- parent --------------------------------------------------------------------------------------


def _child(srv: BenchServer, *args: str, stdin: str | None = None) -> dict[str, Any]:
    res = subprocess.run(
        [PYTHON, str(Path(__file__).resolve()), *args],
        cwd=ROOT,
        env=srv.env(),
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=None,  # the child's log lines go straight to ours
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed ({res.returncode}):\n{res.stdout[-2000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def run_one(lang: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    srv = BenchServer(keep=args.keep)
    result: dict[str, Any] = {"lang": lang, "size": n, "database": "sqlite", "fractions": []}
    try:
        srv.prepare()
        log(f"[{lang} {n}] seeding; {machine_load()}")
        result["seed"] = _child(srv, "--_seed", lang, str(n), srv.team, str(args.max_embed))
        log(f"[{lang} {n}] seeded {result['seed']}")
        if result["seed"]["rows"] != n:
            raise RuntimeError(f"expected {n} rows, seeded {result['seed']['rows']}")
        embedded = int(result["seed"]["embedded"])

        items = corpus.generate(lang, n)
        half = args.searches // 2
        cold_half = args.cold_searches // 2
        needles = pick_needles(lang, n, embedded, args.fractions, max(half, cold_half))
        others = corpus.fresh(lang, half + cold_half + 10, "query", {i.text for i in items})
        rng = random.Random(f"tiers-queries:{lang}:{n}")
        default = [(items[r].question, items[r].text) for r in needles["hot"][:half]]
        default += [(i.question, None) for i in others[: args.searches - half]]
        rng.shuffle(default)
        cold = [(items[r].question, items[r].text) for r in needles["cold"][:cold_half]]
        cold += [(i.question, None) for i in others[half : half + args.cold_searches - cold_half]]
        rng.shuffle(cold)
        warm = [(i.question, None) for i in others[-10:]]

        for fraction in args.fractions:
            log(f"[{lang} {n}] cold fraction {fraction}; {machine_load()}")
            row: dict[str, Any] = {"fraction": fraction}
            row.update(_child(srv, "--_cold", str(fraction)))
            spec = {
                "team": srv.team,
                "warm": warm,
                "default": default,
                # With nothing cold the cold needles are hot: only the latency means anything.
                "cold": cold if args.cold_searches else [],
            }
            row.update(_child(srv, "--_measure", stdin=json.dumps(spec)))
            if fraction == 0 and "include_cold" in row:
                row["include_cold"]["needle_hit_at_10"] = None
            log(
                f"[{lang} {n}] f={fraction}: load {row['index_load_ms']} ms, "
                f"index {row['index_nbytes'] / 2**20:.1f} MiB, "
                f"rss {row['rss_after_load_kib'].get('rss', 0) / 1024:.0f} MiB"
            )
            result["fractions"].append(row)
    finally:
        srv.cleanup()
    return result


def _mib(kib: dict[str, int] | None, key: str = "rss") -> str:
    return f"{kib[key] / 1024:.0f}" if kib and key in kib else "-"


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(f"\n## Tiers — {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, Python {m['python']}")
    print(f"code {report['code']}; load at start: {report['load_at_start']}\n")
    print(
        "| lang | N | cold | index rows | load ms | index MiB | RSS before / after load MiB "
        "| HWM MiB | search p50 / p95 ms | hot hit@10 | include_cold p50 / p95 ms "
        "| cold hit@10 | HWM after include_cold MiB |"
    )
    print("|" + "---|" * 13)
    for run in report["runs"]:
        if "error" in run:
            print(f"| {run['lang']} | {run['size']} | FAILED: {run['error'][:80]} |")
            continue
        for f in run["fractions"]:
            d, c = f["default"], f.get("include_cold")
            print(
                f"| {run['lang']} | {run['size']:,} | {f['fraction']:.0%} ({f['cold_rows']:,}) "
                f"| {f['index_rows']:,} | {f['index_load_ms']:.0f} "
                f"| {f['index_nbytes'] / 2**20:.1f} "
                f"| {_mib(f['rss_before_load_kib'])} / {_mib(f['rss_after_load_kib'])} "
                f"| {_mib(f['rss_after_default_kib'], 'hwm')} "
                f"| {d['ms']['p50']:.1f} / {d['ms']['p95']:.1f} | {d['needle_hit_at_10']} "
                + (
                    f"| {c['ms']['p50']:.0f} / {c['ms']['p95']:.0f} "
                    f"| {c['needle_hit_at_10'] if c['needle_hit_at_10'] is not None else '-'} "
                    f"| {_mib(f.get('rss_after_include_cold_kib'), 'hwm')} |"
                    if c
                    else "| - | - | - |"
                )
            )
    print(f"\nload at end: {report.get('load_at_end')}")


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "--_seed":
        lang, n, team, max_embed = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
        print(json.dumps(latency.seed(lang, n, team, max_embed)))
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == "--_cold":
        print(json.dumps(set_cold(float(sys.argv[2]))))
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == "--_measure":
        print(json.dumps(measure(json.loads(sys.stdin.read()))))
        return 0

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="100000")
    p.add_argument("--lang", default="en")
    p.add_argument("--fractions", default="0,0.5,0.9")
    p.add_argument("--searches", type=int, default=200)
    p.add_argument("--cold-searches", type=int, default=40)
    p.add_argument("--max-embed", type=int, default=0)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    langs = [x.strip() for x in args.lang.split(",") if x.strip()]
    args.fractions = sorted({float(x) for x in args.fractions.split(",") if x.strip()})
    for lang in langs:
        if lang not in corpus.MAKERS:
            p.error(f"unknown language {lang!r} (en, zh)")
    if any(not 0 <= f < 1 for f in args.fractions):
        p.error("fractions are in [0, 1)")

    report: dict[str, Any] = {
        "machine": machine_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_at_start": machine_load(),
        "code": code_version(),
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "runs": [],
    }
    # Vectors first (bench/latency.py caches them, in a child), so no timed step waits for them.
    log(f"preparing vectors; {machine_load()}")
    subprocess.run(
        [
            PYTHON,
            str(Path(latency.__file__).resolve()),
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
            except Exception as exc:  # one failed run must not lose the others
                log(f"[{lang} {n}] FAILED: {exc}")
                report["runs"].append({"lang": lang, "size": n, "error": str(exc)[:500]})
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    report["load_at_end"] = machine_load()
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
