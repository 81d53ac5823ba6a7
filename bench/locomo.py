"""LOCOMO retrieval benchmark through the service's own HTTP API (not a test).

Usage (from the project root):

    .venv/bin/python bench/locomo.py --data path/to/locomo-dev
    .venv/bin/python bench/locomo.py --data path/to/locomo-dev --mode hybrid,vector,keyword \
        --json var/bench-logs/locomo.json
    .venv/bin/python bench/locomo.py --data path/to/locomo-dev \
        --base-url http://127.0.0.1:8000 --api-key mk_… --secret …   # an already running server

Options: --limit-conversations N (first N files), --mode (hybrid | vector | keyword | default,
or several separated by commas: the conversations are ingested once and searched in each; an
entry may carry settings for the own server while it is searched, e.g.
`--mode hybrid,hybrid@SEARCH_FUSION=weighted@SEARCH_DENSE_WEIGHT=0.4`; default: no mode sent,
i.e. the server's default). Own server only: --server gunicorn|runserver, --keep
(keep the temporary DATA_DIR), --server-env KEY=VALUE (repeatable, e.g. SEARCH_FUSION=weighted),
--same-process (by default the server is restarted between modes, so that no mode profits from
the query vectors cached by the previous one).

Protocol, deterministic, no LLM:

* every dialogue turn is one personal memory of its conversation's agent (one agent per
  conversation): `"{speaker} ({session_date_time}): {text}"` plus
  `" [shares a photo: {blip_caption}]"` when present, `metadata={"dia_id": …}`; written in the
  conversation's order (sessions by number, turns in order) with `enable_dedup: false` — a
  benchmark must not lose turns to dedup;
* questions of categories 1–4 only (5 is adversarial); evidence ids that are not turns of the
  conversation are dropped, questions left without evidence are skipped;
* each question is searched with `limit=20, min_score=0.0`; the results' `metadata.dia_id` are
  compared with the evidence: recall@k = share of the question's evidence turns in the top k,
  averaged over questions (overall and per category).

Also printed: ingest rate (memories/s, one sequential client) and client-side wall time per HTTP
call (p50/p95) for writes and searches, with the machine's load average.

Without --base-url the script runs its own server: a fresh temporary DATA_DIR and SQLite
database, `manage.py migrate`, `manage.py create_api_key --team bench --rate-limit 0 --json`,
then gunicorn (one worker; or `runserver --noreload`) with API_RATE_LIMIT=0 on a free loopback
port, stopped at the end. The data is only read from --data, never copied: LOCOMO is not part of
this repository (snap-research/locomo, licensed CC BY-NC 4.0); download it yourself and pass the
folder of its conversation files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BenchServer, code_version, log, machine_info, machine_load, summarise

from memoryplatform.client import MemoryAPIError, MemoryClient

KS = (1, 5, 10, 20)
CATEGORIES = (1, 2, 3, 4)
SESSION_RE = re.compile(r"^session_(\d+)$")


@dataclass
class Turn:
    dia_id: str
    content: str


@dataclass
class Question:
    index: int  # position in the file's qa list
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[Question]
    dropped_evidence: int = 0
    skipped_questions: int = 0


def load_conversation(path: Path) -> Conversation:
    """Turns in order and the usable questions of one LOCOMO conversation file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data)  # locomo10.json nests it; the v2 layout does not
    sessions = sorted(
        (int(m.group(1)), key)
        for key in conv
        if (m := SESSION_RE.match(key)) and isinstance(conv[key], list)
    )
    turns: list[Turn] = []
    for number, key in sessions:
        when = str(conv.get(f"session_{number}_date_time", "")).strip()
        for t in conv[key]:
            content = f"{t['speaker']} ({when}): {t['text']}"
            caption = t.get("blip_caption")
            if caption:
                content += f" [shares a photo: {caption}]"
            turns.append(Turn(str(t["dia_id"]), content))
    ids = {t.dia_id for t in turns}
    if len(ids) != len(turns):
        log(f"warning: {path.name} has {len(turns) - len(ids)} repeated dia_ids")
    out = Conversation(path.stem, turns, [])
    for i, qa in enumerate(data.get("qa", [])):
        cat = qa.get("category")
        if cat not in CATEGORIES:
            continue
        raw = [str(e) for e in qa.get("evidence", [])]
        kept = list(dict.fromkeys(e for e in raw if e in ids))
        out.dropped_evidence += len(raw) - len([e for e in raw if e in ids])
        if not kept:
            out.skipped_questions += 1
            continue
        out.questions.append(Question(i, str(qa["question"]), int(cat), kept))
    return out


@dataclass
class ModeResult:
    mode: str
    per_question: list[dict[str, Any]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    short_results: int = 0  # searches that returned fewer than 20 results
    errors: list[str] = field(default_factory=list)
    load: str = ""


def recall_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{"all": {"n", "R@1", …}, "1": {…}, …} as percentages."""

    def agg(sel: list[dict[str, Any]]) -> dict[str, float]:
        out: dict[str, float] = {"n": len(sel)}
        for k in KS:
            out[f"R@{k}"] = round(100 * sum(r[f"r{k}"] for r in sel) / len(sel), 1) if sel else 0.0
        return out

    table = {"all": agg(rows)}
    for c in CATEGORIES:
        table[str(c)] = agg([r for r in rows if r["category"] == c])
    return table


def ingest(client: MemoryClient, agent: str, conv: Conversation) -> tuple[list[float], int]:
    """Writes every turn in order; returns per-call milliseconds and the number not created."""
    lat: list[float] = []
    not_created = 0
    for turn in conv.turns:
        t = time.perf_counter()
        res = client.write_memory(
            agent,
            turn.content,
            importance=0.5,
            metadata={"dia_id": turn.dia_id},
            enable_dedup=False,
        )
        lat.append((time.perf_counter() - t) * 1000)
        if res.get("dedup_skipped") or res.get("metadata", {}).get("dia_id") != turn.dia_id:
            not_created += 1
    return lat, not_created


def evaluate(
    client: MemoryClient, agent: str, conv: Conversation, mode: str | None, res: ModeResult
) -> None:
    extra: dict[str, Any] = {"mode": mode} if mode else {}
    for q in conv.questions:
        t = time.perf_counter()
        try:
            results = client.search(agent, q.text, limit=20, min_score=0.0, **extra)
        except MemoryAPIError as exc:
            res.errors.append(f"{conv.name}#{q.index}: {exc.status} {exc.code}")
            results = []
        ms = (time.perf_counter() - t) * 1000
        res.latencies_ms.append(ms)
        if len(results) < 20:
            res.short_results += 1
        got = [str((r.get("metadata") or {}).get("dia_id", "")) for r in results]
        ranks = {e: (got.index(e) + 1 if e in got else None) for e in q.evidence}
        row: dict[str, Any] = {
            "conversation": conv.name,
            "qa_index": q.index,
            "category": q.category,
            "evidence": q.evidence,
            "ranks": ranks,
            "returned": len(results),
            "ms": round(ms, 1),
        }
        for k in KS:
            row[f"r{k}"] = sum(1 for r in ranks.values() if r is not None and r <= k) / len(
                q.evidence
            )
        res.per_question.append(row)


def print_table(title: str, table: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}")
    print("| questions | n | R@1 | R@5 | R@10 | R@20 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key, row in table.items():
        label = "all (cat. 1–4)" if key == "all" else f"category {key}"
        print(
            f"| {label} | {int(row['n'])} | {row['R@1']} | {row['R@5']} | {row['R@10']} | "
            f"{row['R@20']} |"
        )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", type=Path, required=True, help="folder of LOCOMO *.json (or a file)")
    p.add_argument("--base-url")
    p.add_argument("--api-key")
    p.add_argument("--secret")
    p.add_argument("--limit-conversations", type=int, default=0)
    p.add_argument("--mode", default="", help="hybrid|vector|keyword (comma-separated for several)")
    p.add_argument("--server", choices=["gunicorn", "runserver"], default="gunicorn")
    p.add_argument("--keep", action="store_true", help="keep the temporary DATA_DIR")
    p.add_argument(
        "--same-process",
        action="store_true",
        help="own server: search every mode in the same server process (default: restart it "
        "between modes, so no mode profits from the server's query-vector cache)",
    )
    p.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="own server: an extra environment setting, e.g. SEARCH_FUSION=weighted (repeatable)",
    )
    p.add_argument("--json", type=Path, help="write the numbers (and per-question ranks) here")
    args = p.parse_args()

    # Each entry: "mode" or "mode@KEY=VALUE@KEY=VALUE" (settings for the own server while that
    # entry is searched); "default" = no mode sent.
    variants: list[tuple[str, str | None, dict[str, str]]] = []
    for entry in [m.strip() for m in args.mode.split(",") if m.strip()] or ["default"]:
        head, *settings = entry.split("@")
        if head not in ("default", "hybrid", "vector", "keyword"):
            p.error(f"unknown mode {head!r}")
        env = dict(kv.split("=", 1) for kv in settings if "=" in kv)
        if env and args.base_url:
            p.error("per-mode settings (mode@KEY=VALUE) need the script's own server")
        variants.append((entry, None if head == "default" else head, env))
    files = sorted(args.data.glob("*.json")) if args.data.is_dir() else [args.data]
    if args.limit_conversations:
        files = files[: args.limit_conversations]
    if not files:
        p.error(f"no LOCOMO json files in {args.data}")
    convs = [load_conversation(f) for f in files]
    n_turns = sum(len(c.turns) for c in convs)
    n_q = sum(len(c.questions) for c in convs)
    log(
        f"{len(convs)} conversations, {n_turns} turns, {n_q} questions (categories 1-4; "
        f"{sum(c.skipped_questions for c in convs)} skipped without evidence, "
        f"{sum(c.dropped_evidence for c in convs)} evidence ids dropped)"
    )

    server: BenchServer | None = None
    if args.base_url:
        if not (args.api_key and args.secret):
            p.error("--base-url needs --api-key and --secret")
        base_url, api_key, secret = args.base_url, args.api_key, args.secret
        suffix = "-" + time.strftime("%Y%m%d%H%M%S")  # a fresh agent per run on a shared server
    else:
        # Searches do not count as recall here (no score reaches 2): the touches of one question or
        # mode would otherwise change the memory strength the next one is ranked with.
        base_env = {
            "SEARCH_TOUCH_MIN_SCORE": "2",
            **dict(kv.split("=", 1) for kv in args.server_env),
        }
        server = BenchServer(
            server=args.server, keep=args.keep, extra_env={**base_env, **variants[0][2]}
        )
        server.__enter__()
        base_url, api_key, secret = server.base_url, server.api_key, server.secret
        suffix = ""
    report: dict[str, Any] = {
        "machine": machine_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "server": base_url if args.base_url else f"own ({args.server}, 1 worker, SQLite)",
        "code": code_version(),
        "server_env": args.server_env,
        "conversations": [c.name for c in convs],
        "turns": n_turns,
        "questions": n_q,
    }
    try:
        client = MemoryClient(api_key, secret, base_url=base_url, timeout=300)
        client.get_stats()  # fails fast on bad credentials

        # 1. ingest
        write_ms: list[float] = []
        not_created = 0
        t0 = time.perf_counter()
        load_before = machine_load()
        for conv in convs:
            lat, bad = ingest(client, f"locomo-{conv.name}{suffix}", conv)
            write_ms += lat
            not_created += bad
            log(f"ingested {conv.name}: {len(conv.turns)} turns; {machine_load()}")
        ingest_s = time.perf_counter() - t0
        report["ingest"] = {
            "memories": n_turns,
            "seconds": round(ingest_s, 1),
            "rate_per_s": round(n_turns / ingest_s, 1),
            "write_ms": summarise(write_ms),
            "not_created": not_created,
            "load_before": load_before,
            "load_after": machine_load(),
        }
        if not_created:
            log(f"WARNING: {not_created} turns were not written as new memories")

        # 2. search, per mode
        report["modes"] = {}
        for i, (entry, mode, env) in enumerate(variants):
            if server is not None and i > 0:
                wanted = {**base_env, **env}
                # A fresh process per mode: the server caches query vectors, so a second mode
                # would otherwise skip the query embedding and look faster than it is.
                if not args.same_process or wanted != server.extra_env:
                    server.extra_env = wanted
                    server.stop()
                    server.start()
                    client = MemoryClient(api_key, secret, base_url=server.base_url, timeout=300)
            name = entry
            if name in report["modes"]:  # the same mode twice: keep both
                name = f"{name}#{i + 1}"
            res = ModeResult(name)
            for conv in convs:
                evaluate(client, f"locomo-{conv.name}{suffix}", conv, mode, res)
            res.load = machine_load()
            table = recall_table(res.per_question)
            per_conv = {
                c.name: recall_table([r for r in res.per_question if r["conversation"] == c.name])[
                    "all"
                ]
                for c in convs
            }
            report["modes"][res.mode] = {
                "recall": table,
                "per_conversation": per_conv,
                "search_ms": summarise(res.latencies_ms),
                "load": res.load,
                "short_results": res.short_results,
                "errors": res.errors[:20],
                "per_question": res.per_question,
            }
            log(f"mode {res.mode}: R@10 {table['all']['R@10']}; {res.load}")
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")

    ing = report["ingest"]
    code = report["code"]
    print(
        f"\ncode: HEAD {code['head']} (+{code['changed_files']} changed files), search code "
        f"{code['search_code_sha256']}"
    )
    print(
        f"\n{len(convs)} conversations, {n_turns} turns, {n_q} questions; "
        f"server: {report['server']}; machine: {report['machine']['cores']} cores"
    )
    print(
        f"ingest: {ing['rate_per_s']} memories/s ({ing['seconds']} s), write p50 "
        f"{ing['write_ms']['p50']} ms, p95 {ing['write_ms']['p95']} ms; not created: "
        f"{ing['not_created']}; {ing['load_after']}"
    )
    for name, m in report["modes"].items():
        print_table(f"mode: {name}", m["recall"])
        s = m["search_ms"]
        print(
            f"search latency: p50 {s['p50']} ms, p95 {s['p95']} ms, p99 {s['p99']} ms "
            f"(n={s['n']}); fewer than 20 results: {m['short_results']}; errors: "
            f"{len(m['errors'])}; {m['load']}"
        )
        print(
            "per conversation R@10: "
            + ", ".join(f"{k} {v['R@10']}" for k, v in m["per_conversation"].items())
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
