"""Cross-lingual search study: questions against the sentences of their paragraph, in-process.

Stores the sentences of each paragraph (one language) as the personal memories of one agent
through memories.services (default dedup off only to keep the load fast), then asks every
question in both languages through memories.retrieval.search.memory_search (which only reads)
and counts:

* R@1, R@5 — rank of the answer sentence in a search with limit 5, min_score 0;
* returned — the answer sentence is in a default search (limit 5, default min_score 0.3);
* fp — the same question asked against the agent of ANOTHER paragraph (same memory
  language): the share of default searches that return anything at all.

--anchors <tsv with en, zh columns> derives the cross-script curves instead (the anchors of
memories.retrieval.embeddings.DEFAULT_CROSS_CALIBRATIONS): over all pairs (i != j) of parallel
sentences, the cross-script cosine cos(q_i, m_j in the other script) is matched by quantile to the
same-script cosine cos(q_i, m_j in the query's script) of the same pair, at each anchor of the
search curve, so a cross-script pair gets the score its same-script twin would. The anchors in
the code come from the Tatoeba pairs (xling.tsv), not from the XQuAD questions measured here.

--weights 0,0.5,1 sweeps SEARCH_XLING_LEXICAL_WEIGHT instead: returned and false positives of
the two cross-script directions per weight, over one ingest.

Also dumps raw USE cosines (query -> gold, query -> other-paragraph sentence) per direction
with --raw, for the calibration curves (docs/search.md, "Cross-script scores").

Run from the repository root (SQLite in /tmp, nothing else touched):

    DATABASE_URL=sqlite:////tmp/xling_study.sqlite3 OMP_NUM_THREADS=1 \
        .venv/bin/python bench/study/xling_search.py --data <path to xquad.json> [--raw out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="")
    parser.add_argument("--anchors", default="")
    parser.add_argument("--raw", default="")
    parser.add_argument("--limit-paragraphs", type=int, default=0)
    parser.add_argument(
        "--weights",
        default="",
        help="comma-separated SEARCH_XLING_LEXICAL_WEIGHT values: the cross-script directions "
        "once per weight over one ingest (the bridge's sweep, docs/search.md)",
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    import numpy as np

    if args.anchors:
        anchors(args.anchors)
        return
    call_command("migrate", verbosity=0)

    from memories.retrieval.embeddings import embed_passages, embed_query

    paragraphs = json.load(open(args.data, encoding="utf-8"))
    if args.limit_paragraphs:
        paragraphs = paragraphs[: args.limit_paragraphs]
    t0 = time.time()
    team, ids = ingest(paragraphs)
    print(f"loaded in {time.time() - t0:.0f}s", file=sys.stderr)

    if args.weights:
        from django.conf import settings

        for w in (float(x) for x in args.weights.split(",")):
            settings.SEARCH_XLING_LEXICAL_WEIGHT = w
            cells = []
            for ql, ml in (("en", "zh"), ("zh", "en")):
                ret = fp = 0
                for p, para in enumerate(paragraphs):
                    other = (p + 1) % len(paragraphs)
                    for q in para["questions"]:
                        gold_id = ids[(p, ml)][q["answer_sentence"][ml]]
                        ret += gold_id in search_ids(team, f"p{p}_{ml}", q[ql])
                        fp += bool(search_ids(team, f"p{other}_{ml}", q[ql]))
                n = sum(len(para["questions"]) for para in paragraphs)
                cells.append(f"{ql}->{ml} {100 * ret / n:.1f} at {100 * fp / n:.1f}")
            print(f"w {w:g}: returned at false positives: " + ", ".join(cells), flush=True)
        return
    stats: dict[str, dict[str, float]] = {}
    raw: dict[str, dict[str, list[float]]] = {}
    n_para = len(paragraphs)
    for p, para in enumerate(paragraphs):
        other = (p + 1) % n_para
        for q in para["questions"]:
            for ql in ("en", "zh"):
                for ml in ("en", "zh"):
                    key = f"{ql}->{ml}"
                    s = stats.setdefault(key, dict(n=0, r1=0, r5=0, ret=0, fp=0, gold=[]))
                    gold_id = ids[(p, ml)][q["answer_sentence"][ml]]
                    agent = f"p{p}_{ml}"
                    ranked = search_ids(team, agent, q[ql], min_score=0.0)
                    default = search_ids(team, agent, q[ql])
                    wrong = search_ids(team, f"p{other}_{ml}", q[ql])
                    s["n"] += 1
                    s["r1"] += bool(ranked[:1] == [gold_id])
                    s["r5"] += gold_id in ranked
                    s["ret"] += gold_id in default
                    s["fp"] += bool(wrong)
                    if args.raw:
                        qv = embed_query(q[ql])
                        d = raw.setdefault(key, {"gold": [], "other": []})
                        sents = para["sentences"][ml]
                        d["gold"].append(float(embed_passages([sents[q["answer_sentence"][ml]]])[0] @ qv))
                        others = paragraphs[other]["sentences"][ml]
                        d["other"].extend(float(x) for x in embed_passages(others) @ qv)
    print("| direction | n | R@1 | R@5 | returned by default | false positives |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key, s in stats.items():
        n = s["n"]
        print(
            f"| {key} | {n} | {100 * s['r1'] / n:.1f} | {100 * s['r5'] / n:.1f} "
            f"| {100 * s['ret'] / n:.1f} | {100 * s['fp'] / n:.1f} |"
        )
    if args.raw:
        json.dump(raw, open(args.raw, "w"))
        for key, d in raw.items():
            g, o = np.array(d["gold"]), np.array(d["other"])
            print(
                f"{key}: gold p5/p50/p99 {np.percentile(g, 5):.3f}/{np.percentile(g, 50):.3f}/"
                f"{np.percentile(g, 99):.3f}  other p50/p99 {np.percentile(o, 50):.3f}/"
                f"{np.percentile(o, 99):.3f}"
            )


def search_ids(team: object, agent: str, query: str, **kw: object) -> list[int]:
    """The ids a personal search of `agent` returns, best first (limit 5; the default
    min_score unless given), through the search service itself."""
    from memories.models import MemoryScope
    from memories.retrieval import search

    hits = search.memory_search(
        search.SearchQuery(
            team=team,  # type: ignore[arg-type]
            scope=MemoryScope.PERSONAL,
            agent_id=agent,
            text=query,
            limit=5,
            **kw,  # type: ignore[arg-type]
        )
    )
    return [h.memory.pk for h in hits]


def ingest(paragraphs: list[dict]) -> tuple[object, dict[tuple[int, str], list[int]]]:
    """The team of the study, its agents `p<paragraph>_<lang>` holding the sentences of each
    paragraph (written once: a later run over the same database reuses them), and the memory
    ids of each (paragraph, language) in sentence order. Django must be set up and migrated."""
    from memories import services
    from memories.models import Memory, MemoryScope
    from tenants.models import Team

    team, _ = Team.objects.get_or_create(id="xling_study", defaults={"name": "xling study"})
    if not Memory.objects.filter(team=team).exists():
        for p, para in enumerate(paragraphs):
            for lang in ("en", "zh"):
                for sentence in para["sentences"][lang]:
                    services.memory_create(
                        team=team,
                        scope=MemoryScope.PERSONAL,
                        agent_id=f"p{p}_{lang}",
                        content=sentence,
                        enable_dedup=False,
                    )
    ids: dict[tuple[int, str], list[int]] = {}
    for m in Memory.objects.filter(team=team).order_by("id").only("id", "agent_id"):
        p, lang = m.agent_id[1:].split("_")
        ids.setdefault((int(p), lang), []).append(m.pk)
    return team, ids


def anchors(path: str) -> None:
    import csv

    import numpy as np

    from memories.retrieval.embeddings import DEFAULT_CALIBRATIONS, get_embedder

    embedder = get_embedder()
    rows = list(csv.DictReader(open(path, encoding="utf-8"), delimiter="\t"))
    en = embedder.encode_passages([r["en"] for r in rows])
    zh = embedder.encode_passages([r["zh"] for r in rows])
    off = ~np.eye(len(rows), dtype=bool)
    search_raw = [a for a, _ in DEFAULT_CALIBRATIONS["usem3"][1:-1]]
    for name, q, same, cross in (("en->zh", en, en, zh), ("zh->en", zh, zh, en)):
        y = (q @ same.T)[off]
        x = (q @ cross.T)[off]
        mapped = [float(np.quantile(x, 1.0 - (y >= a).mean())) for a in search_raw]
        print(name, " ".join(f"{a:.3f}->{m:.3f}" for a, m in zip(search_raw, mapped, strict=True)))


if __name__ == "__main__":
    main()
