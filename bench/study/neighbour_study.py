"""Conversation neighbours in-process: LOCOMO dev, Tatoeba translations and XQuAD through
memories.retrieval.search.memory_search (the API's code path, without HTTP).

* LOCOMO — every turn one memory of its conversation's agent, as bench/locomo.py writes it;
  each question with limit 20, min_score 0: recall@1/5/10/20 of its evidence turns.
* Tatoeba (--xling, a TSV with en and zh columns) — each side written in file order as the
  memories of one agent (a burst of unrelated sentences); each sentence queried in the other
  language with limit 5, min_score 0: R@1 of its translation.
* XQuAD (--xquad) — the sentences of each paragraph as the memories of one agent per language;
  each question in both languages: R@1 and R@5 (min_score 0) and returned by a default search.

Variants are settings applied in-process between runs over one ingest, e.g.
`SEARCH_NEIGHBOUR_SECONDS=0` or `SEARCH_NEIGHBOUR_WEIGHT=0.5@SEARCH_FUSION=weighted` ("" is the
defaults). Run from the repository root (SQLite in /tmp, nothing else touched):

    DATABASE_URL=sqlite:////tmp/neighbour_study.sqlite3 OMP_NUM_THREADS=1 PYTHONPATH=. \\
        .venv/bin/python bench/study/neighbour_study.py --locomo <dir> --xling <xling.tsv> \\
        --xquad <xquad.json> "" SEARCH_NEIGHBOUR_SECONDS=0
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--locomo", default="")
    parser.add_argument("--xling", default="")
    parser.add_argument("--xquad", default="")
    parser.add_argument("variants", nargs="*", default=[""])
    args = parser.parse_args()

    import django

    django.setup()
    import numpy as np
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from locomo import load_conversation

    from memories import services
    from memories.models import Memory, MemoryScope
    from memories.retrieval import search
    from tenants.models import Team

    team, _ = Team.objects.get_or_create(id="neighbour_study", defaults={"name": "study"})

    def write(agent: str, content: str, **kw: Any) -> int:
        memory, _ = services.memory_create(
            team=team,
            scope=MemoryScope.PERSONAL,
            agent_id=agent,
            content=content,
            enable_dedup=False,
            **kw,
        )
        return memory.pk

    def ids_of(agent: str) -> list[int]:
        return list(
            Memory.objects.filter(team=team, agent_id=agent)
            .order_by("id")
            .values_list("id", flat=True)
        )

    def run(text: str, agent: str, limit: int, **kw: Any) -> list[int]:
        query = search.SearchQuery(
            team=team, scope=MemoryScope.PERSONAL, agent_id=agent, text=text, limit=limit, **kw
        )
        return [h.memory.pk for h in search.memory_search(query)]

    fresh = not Memory.objects.filter(team=team).exists()
    t0 = time.time()
    convs = (
        [load_conversation(p) for p in sorted(Path(args.locomo).glob("*.json"))]
        if args.locomo
        else []
    )
    pairs = (
        list(
            csv.DictReader(
                Path(args.xling).read_text(encoding="utf-8").splitlines(), delimiter="\t"
            )
        )
        if args.xling
        else []
    )
    paras = json.loads(Path(args.xquad).read_text(encoding="utf-8")) if args.xquad else []
    if fresh:
        for c in convs:
            for t in c.turns:
                write(f"lc_{c.name}", t.content, metadata={"dia_id": t.dia_id})
        for lang in ("en", "zh"):
            for r in pairs:
                write(f"tt_{lang}", r[lang])
        for p, para in enumerate(paras):
            for lang in ("en", "zh"):
                for sentence in para["sentences"][lang]:
                    write(f"xq{p}_{lang}", sentence)
    print(f"ingest {time.time() - t0:.0f}s", file=sys.stderr)
    dia = {
        m.pk: (m.metadata or {}).get("dia_id", "")
        for m in Memory.objects.filter(team=team, agent_id__startswith="lc_").only("id", "metadata")
    }
    tt_ids = {lang: ids_of(f"tt_{lang}") for lang in ("en", "zh")} if pairs else {}
    xq_ids = {
        (p, lang): ids_of(f"xq{p}_{lang}") for p in range(len(paras)) for lang in ("en", "zh")
    }

    for variant in args.variants:
        changed = dict(x.split("=", 1) for x in variant.split("@") if x)
        saved = {k: getattr(settings, k) for k in changed}
        for k, v in changed.items():
            setattr(settings, k, type(saved[k])(v))
        line = [variant or "defaults"]
        if convs:
            rec: dict[int, list[float]] = {1: [], 5: [], 10: [], 20: []}
            for c in convs:
                for q in c.questions:
                    got = [dia[i] for i in run(q.text, f"lc_{c.name}", 20, min_score=0.0)]
                    for k, values in rec.items():
                        values.append(sum(e in got[:k] for e in q.evidence) / len(q.evidence))
            line.append(
                "LOCOMO R@1/5/10/20 " + "/".join(f"{100 * np.mean(v):.1f}" for v in rec.values())
            )
        for ql, ml in (("en", "zh"), ("zh", "en")) if pairs else ():
            ok = sum(
                run(r[ql], f"tt_{ml}", 5, min_score=0.0)[:1] == [tt_ids[ml][i]]
                for i, r in enumerate(pairs)
            )
            line.append(f"Tatoeba {ql}->{ml} R@1 {100 * ok / len(pairs):.1f}")
        for ql in ("en", "zh") if paras else ():
            for ml in ("en", "zh"):
                n = r1 = r5 = ret = 0
                for p, para in enumerate(paras):
                    for q in para["questions"]:
                        gold = xq_ids[(p, ml)][q["answer_sentence"][ml]]
                        ranked = run(q[ql], f"xq{p}_{ml}", 5, min_score=0.0)
                        n += 1
                        r1 += ranked[:1] == [gold]
                        r5 += gold in ranked
                        ret += gold in run(q[ql], f"xq{p}_{ml}", 5)
                line.append(
                    f"XQuAD {ql}->{ml} R@1 {100 * r1 / n:.1f} R@5 {100 * r5 / n:.1f} "
                    f"returned {100 * ret / n:.1f}"
                )
        print(" | ".join(line), flush=True)
        for k, v in saved.items():
            setattr(settings, k, v)


if __name__ == "__main__":
    main()
