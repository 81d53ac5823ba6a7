"""Fidelity benchmark through the service's own HTTP API (not a test): does dedup lose facts, and
does search find a memory across languages?

Usage (from the project root):

    .venv/bin/python bench/fidelity.py --data DIR
    .venv/bin/python bench/fidelity.py --data DIR --sets dedup --limit 100 --json var/fid.json
    .venv/bin/python bench/fidelity.py --data DIR --base-url http://127.0.0.1:8000 \
        --api-key mk_… --secret …   # an already running server (loopback only)

DIR holds `dedup_pairs.jsonl`, `xquad.json` and `xling.tsv` (read only, never copied). Options:
--sets (dedup,xquad,xquad-all,xling or a subset), --limit N (quick runs: at most N pairs per
language and label for dedup, N paragraphs for xquad, N pairs for xling; a fixed-seed sample), --json FILE,
--server gunicorn|runserver, --server-env KEY=VALUE (repeatable), --keep, --max-minutes M (default
60: a set still running then stops where it is and its result says `truncated`).

Protocol, deterministic, no LLM, default settings everywhere unless said:

* dedup — each pair in an agent of its own: write `a`, then write `b` (default dedup); count
  `dedup_skipped` for `b`, per language (en = SICK, zh = OCNLI) and label. "Lost" = skipped
  contradiction + neutral pairs (`b` said something new). "Hardest" = the pairs whose token
  Jaccard(a, b) is in the top 20 % of their language (English: lower-cased words; Chinese: CJK
  characters and Latin/digit words), the threshold taken over the whole file before sampling.
* xquad — the sentences of each paragraph in one language are the memories of one agent
  (`enable_dedup: false`: no sentence may be lost). Every question is asked in both languages
  against both agents (en→en, zh→zh, en→zh, zh→en): R@1 / R@5 of the answer sentence from a
  `limit=5, min_score=0` search, and "default" = the answer sentence returned by a default
  search (`limit=5`, no `min_score` sent). False positives: each question, in both languages,
  against both agents of a paragraph of *another* article, and of the *next* paragraph of the
  same article (the same topic: a harder test, the one `min_score`'s meaning across scripts is
  set by, docs/search.md), by a default search: the share of those searches returning anything,
  per direction.
* xquad-all — the same questions against one agent per language holding the sentences of
  *every* paragraph (about 600: a memory store on many topics, where the answer has to come
  first among all of them): R@1 / R@5 and "default" as above, per direction. No false-positive
  count here (every question has its answer in the store).
* xling — one agent holds one side (en, then zh), each sentence of the other side is a query:
  R@1 (`limit=5, min_score=0`) and "default" (the translation is the first result of a default
  search, i.e. it passes the default `min_score`).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BenchServer, code_version, log, machine_info, machine_load, summarise

from memoryplatform.client import MemoryClient

SETS = ("dedup", "xquad", "xquad-all", "xling")
LABELS = ("contradiction", "neutral", "entailed", "paraphrase")
LANG_OF_SRC = {"sick": "en", "ocnli": "zh"}
HARD_SHARE = 0.2
_deadline = float("inf")  # time.monotonic() after which every set stops (--max-minutes)


def out_of_time(what: str) -> bool:
    if time.monotonic() < _deadline:
        return False
    log(f"{what}: out of time (--max-minutes), stopping this set here")
    return True


_EN_TOKEN = re.compile(r"[a-z0-9']+")
_ZH_TOKEN = re.compile(r"[\u3400-\u9fff]|[a-z0-9]+")


def overlap_tokens(text: str, lang: str) -> set[str]:
    low = text.lower()
    return set((_EN_TOKEN if lang == "en" else _ZH_TOKEN).findall(low))


def jaccard(a: str, b: str, lang: str) -> float:
    ta, tb = overlap_tokens(a, lang), overlap_tokens(b, lang)
    return len(ta & tb) / len(ta | tb) if ta | tb else 1.0


def default_search(client: MemoryClient, agent: str, query: str) -> list[dict[str, Any]]:
    """A search with the server's defaults: limit 5, no min_score in the body."""
    return list(
        client.post("/memories/personal/search", {"agent_id": agent, "query": query, "limit": 5})
    )


def ranked_search(client: MemoryClient, agent: str, query: str) -> list[dict[str, Any]]:
    return list(client.search(agent, query, limit=5, min_score=0.0))


def rate(num: int, den: int) -> float | None:
    return round(100.0 * num / den, 2) if den else None


# --- dedup ------------------------------------------------------------------------------------


def load_dedup(data: Path, limit: int | None) -> list[dict[str, Any]]:
    rows = []
    with (data / "dedup_pairs.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                row["lang"] = LANG_OF_SRC.get(row["src"], row["src"])
                row["jaccard"] = jaccard(row["a"], row["b"], row["lang"])
                rows.append(row)
    # The hardest pairs: the top 20 % by overlap of each language, over the whole file.
    for lang in {r["lang"] for r in rows}:
        js = sorted((r["jaccard"] for r in rows if r["lang"] == lang), reverse=True)
        cut = js[max(0, int(len(js) * HARD_SHARE) - 1)]
        for r in rows:
            if r["lang"] == lang:
                r["hard"] = r["jaccard"] >= cut
    if limit:
        cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            cells[(r["lang"], r["label"])].append(r)
        rng = random.Random(0)
        rows = [r for cell in cells.values() for r in rng.sample(cell, min(limit, len(cell)))]
    return rows


def run_dedup(client: MemoryClient, rows: list[dict[str, Any]]) -> dict[str, Any]:
    write_ms: list[float] = []
    truncated = False
    for i, row in enumerate(rows):
        if out_of_time("dedup"):
            rows, truncated = rows[:i], True
            break
        agent = f"fid-dedup-{i}"
        client.write_memory(agent, row["a"])
        t = time.perf_counter()
        res = client.write_memory(agent, row["b"])
        write_ms.append((time.perf_counter() - t) * 1000)
        row["skipped"] = bool(res.get("dedup_skipped"))
        row["related_to"] = (res.get("metadata") or {}).get("related_to")
        if (i + 1) % 500 == 0:
            log(f"dedup: {i + 1}/{len(rows)} pairs; {machine_load()}")

    def cell(sel: list[dict[str, Any]]) -> dict[str, Any]:
        return {"n": len(sel), "skipped_%": rate(sum(r["skipped"] for r in sel), len(sel))}

    table: dict[str, Any] = {}
    for lang in sorted({r["lang"] for r in rows}):
        for part, pick in (("all", lambda r: True), ("hardest", lambda r: r["hard"])):
            sel = [r for r in rows if r["lang"] == lang and pick(r)]
            line = {label: cell([r for r in sel if r["label"] == label]) for label in LABELS}
            new_facts = [r for r in sel if r["label"] in ("contradiction", "neutral")]
            line["lost (contr.+neutral)"] = cell(new_facts)
            table[f"{lang} {part}"] = line
    examples = [
        {k: r[k] for k in ("src", "id", "label", "jaccard")}
        for r in rows
        if r["skipped"] and r["label"] in ("contradiction", "neutral")
    ]
    return {
        "table": table,
        "write_b_ms": summarise(write_ms),
        "lost_examples": examples[:50],
        "truncated": truncated,
    }


def print_dedup(result: dict[str, Any]) -> None:
    cols = [*LABELS, "lost (contr.+neutral)"]
    print("\ndedup: % of `b` writes skipped as duplicates (n pairs)")
    print(f"{'':14}" + "".join(f"{c:>24}" for c in cols))
    for name, line in result["table"].items():
        cells = []
        for c in cols:
            v = line[c]
            cells.append(f"{'-' if v['skipped_%'] is None else v['skipped_%']:>8} ({v['n']:>5})")
        print(f"{name:14}" + "".join(f"{x:>24}" for x in cells))
    print(f"write of b, client ms: {result['write_b_ms']}")


# --- xquad ------------------------------------------------------------------------------------


def load_xquad(data: Path, limit: int | None) -> list[dict[str, Any]]:
    paragraphs = json.loads((data / "xquad.json").read_text(encoding="utf-8"))
    if limit:
        paragraphs = random.Random(0).sample(paragraphs, min(limit, len(paragraphs)))
    return list(paragraphs)


def tally_ranking(
    counts: dict[str, dict[str, int]], key: str, got: list[int], dflt: list[int], gold: int
) -> None:
    c = counts[key]
    c["n"] += 1
    c["r1"] += got[:1] == [gold]
    c["r5"] += gold in got[:5]
    c["default"] += gold in dflt


def ranking_table(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, Any]]:
    return {
        key: {
            "n": c["n"],
            "R@1": rate(c["r1"], c["n"]),
            "R@5": rate(c["r5"], c["n"]),
            "default": rate(c["default"], c["n"]),
        }
        for key, c in counts.items()
    }


def run_xquad(client: MemoryClient, data: Path, limit: int | None) -> dict[str, Any]:
    paragraphs = load_xquad(data, limit)
    ids: dict[tuple[int, str], list[int]] = {}
    for p, para in enumerate(paragraphs):
        for lang in ("en", "zh"):
            agent = f"fid-xq-{p}-{lang}"
            ids[(p, lang)] = [
                int(client.write_memory(agent, s, enable_dedup=False)["id"])
                for s in para["sentences"][lang]
            ]
    log(f"xquad: {len(paragraphs)} paragraphs stored; {machine_load()}")
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    fp: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # per direction
    n = len(paragraphs)
    truncated = False
    for p, para in enumerate(paragraphs):
        if out_of_time("xquad"):
            truncated = True
            break
        # Another article's paragraph for the false-positive searches.
        other = next(
            (
                (p + d) % n
                for d in range(max(1, n // 2), max(1, n // 2) + n)
                if paragraphs[(p + d) % n]["title"] != para["title"]
            ),
            None,
        )
        # The next paragraph of the same article (the same topic), if there is one.
        near = next(
            ((p + d) % n for d in range(1, n) if paragraphs[(p + d) % n]["title"] == para["title"]),
            None,
        )
        for q in para["questions"]:
            for qlang in ("en", "zh"):
                for mlang in ("en", "zh"):
                    key = f"{qlang}→{mlang}"
                    gold = ids[(p, mlang)][q["answer_sentence"][mlang]]
                    agent = f"fid-xq-{p}-{mlang}"
                    got = [int(r["id"]) for r in ranked_search(client, agent, q[qlang])]
                    dflt = [int(r["id"]) for r in default_search(client, agent, q[qlang])]
                    tally_ranking(counts, key, got, dflt, gold)
                    f = fp[key]
                    if other is not None:
                        f["n"] += 1
                        f["any"] += bool(
                            default_search(client, f"fid-xq-{other}-{mlang}", q[qlang])
                        )
                    if near is not None:
                        f["near_n"] += 1
                        f["near"] += bool(
                            default_search(client, f"fid-xq-{near}-{mlang}", q[qlang])
                        )
    table = ranking_table(counts)
    fp_table = {
        key: {
            "n": c["n"],
            "any_%": rate(c["any"], c["n"]),
            "near_n": c["near_n"],
            "near_%": rate(c["near"], c["near_n"]),
        }
        for key, c in fp.items()
    }
    return {"paragraphs": n, "table": table, "false_positives": fp_table, "truncated": truncated}


def run_xquad_all(client: MemoryClient, data: Path, limit: int | None) -> dict[str, Any]:
    paragraphs = load_xquad(data, limit)
    ids: dict[tuple[int, str], list[int]] = {}
    for lang in ("en", "zh"):
        for p, para in enumerate(paragraphs):
            ids[(p, lang)] = [
                int(client.write_memory(f"fid-xqa-{lang}", s, enable_dedup=False)["id"])
                for s in para["sentences"][lang]
            ]
    log(f"xquad-all: {sum(map(len, ids.values()))} sentences stored; {machine_load()}")
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    truncated = False
    for p, para in enumerate(paragraphs):
        if out_of_time("xquad-all"):
            truncated = True
            break
        for q in para["questions"]:
            for qlang in ("en", "zh"):
                for mlang in ("en", "zh"):
                    gold = ids[(p, mlang)][q["answer_sentence"][mlang]]
                    agent = f"fid-xqa-{mlang}"
                    got = [int(r["id"]) for r in ranked_search(client, agent, q[qlang])]
                    dflt = [int(r["id"]) for r in default_search(client, agent, q[qlang])]
                    tally_ranking(counts, f"{qlang}→{mlang}", got, dflt, gold)
    table = ranking_table(counts)
    return {"sentences": sum(map(len, ids.values())), "table": table, "truncated": truncated}


def print_xquad_table(table: dict[str, dict[str, Any]]) -> None:
    print(f"{'':8}{'n':>6}{'R@1':>8}{'R@5':>8}{'default':>9}")
    for key, row in table.items():
        print(f"{key:8}{row['n']:>6}{row['R@1']:>8}{row['R@5']:>8}{row['default']:>9}")


def print_xquad_all(result: dict[str, Any]) -> None:
    print(
        f"\nxquad-all (one agent per language, {result['sentences']} sentences in all): "
        "answer sentence found, %"
    )
    print_xquad_table(result["table"])


def print_xquad(result: dict[str, Any]) -> None:
    print(f"\nxquad ({result['paragraphs']} paragraphs): answer sentence found, %")
    print_xquad_table(result["table"])
    print("false positives, % (a default search returns anything), against a paragraph of:")
    print(f"{'':8}{'n':>6}{'another article':>17}{'n':>6}{'the same article':>18}")
    for key, row in result["false_positives"].items():
        cells = [str(row[k]) if row[k] is not None else "–" for k in ("any_%", "near_%")]
        print(f"{key:8}{row['n']:>6}{cells[0]:>17}{row['near_n']:>6}{cells[1]:>18}")


# --- xling ------------------------------------------------------------------------------------


def run_xling(client: MemoryClient, data: Path, limit: int | None) -> dict[str, Any]:
    with (data / "xling.tsv").open(encoding="utf-8", newline="") as fh:
        pairs = [(r["en"], r["zh"]) for r in csv.DictReader(fh, delimiter="\t")]
    if limit:
        pairs = random.Random(0).sample(pairs, min(limit, len(pairs)))
    table = {}
    for store, query in (("en", "zh"), ("zh", "en")):
        agent = f"fid-xling-{store}"
        side = 0 if store == "en" else 1
        ids = [int(client.write_memory(agent, p[side], enable_dedup=False)["id"]) for p in pairs]
        r1 = default_ok = asked = 0
        for gold, pair in zip(ids, pairs, strict=True):
            if out_of_time("xling"):
                break
            asked += 1
            q = pair[1 - side]
            got = [int(r["id"]) for r in ranked_search(client, agent, q)]
            dflt = [int(r["id"]) for r in default_search(client, agent, q)]
            r1 += got[:1] == [gold]
            default_ok += dflt[:1] == [gold]
        table[f"{query}→{store}"] = {
            "n": asked,
            "R@1": rate(r1, asked),
            "default": rate(default_ok, asked),
        }
        log(f"xling {query}→{store} done; {machine_load()}")
    return {"table": table}


def print_xling(result: dict[str, Any]) -> None:
    print("\nxling: the translation first (R@1) / first and passing the default min_score, %")
    for key, row in result["table"].items():
        print(f"  {key}: n {row['n']}, R@1 {row['R@1']}, default {row['default']}")


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--secret", default=None)
    ap.add_argument("--server", default="gunicorn", choices=("gunicorn", "runserver"))
    ap.add_argument("--server-env", action="append", default=[])
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--max-minutes", type=float, default=60.0)
    args = ap.parse_args()
    global _deadline
    _deadline = time.monotonic() + 60 * args.max_minutes
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = set(sets) - set(SETS)
    if unknown:
        ap.error(f"unknown sets: {', '.join(sorted(unknown))}")
    if args.base_url and not re.match(
        r"^https?://(127\.0\.0\.1|localhost|\[::1\])[:/]", args.base_url
    ):
        ap.error("--base-url must be a loopback address")

    report: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": machine_info(),
        "code": code_version(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_before": machine_load(),
        "limit": args.limit,
    }
    server = None
    if args.base_url:
        base_url, api_key, secret = args.base_url, args.api_key, args.secret
    else:
        env = dict(kv.split("=", 1) for kv in args.server_env)
        server = BenchServer(server=args.server, extra_env=env, keep=args.keep, team="fidelity")
        server.__enter__()
        base_url, api_key, secret = server.base_url, server.api_key, server.secret
    t0 = time.perf_counter()
    try:
        client = MemoryClient(api_key, secret, base_url=base_url, timeout=120)
        client.get_stats()
        if "dedup" in sets:
            report["dedup"] = run_dedup(client, load_dedup(args.data, args.limit))
            print_dedup(report["dedup"])
        if "xquad" in sets:
            report["xquad"] = run_xquad(client, args.data, args.limit)
            print_xquad(report["xquad"])
        if "xquad-all" in sets:
            report["xquad-all"] = run_xquad_all(client, args.data, args.limit)
            print_xquad_all(report["xquad-all"])
        if "xling" in sets:
            report["xling"] = run_xling(client, args.data, args.limit)
            print_xling(report["xling"])
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["load_after"] = machine_load()
    print(
        f"\n{report['seconds']} s; before: {report['load_before']}; after: {report['load_after']}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
