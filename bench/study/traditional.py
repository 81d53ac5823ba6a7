"""Simplified against traditional Chinese, in-process (docs/search.md, "Diacritics and traditional
characters").

The Chinese sentences of each XQuAD paragraph are stored twice, as the memories of two agents:
as written (simplified) and converted to traditional characters by OpenCC (`--convert s2t`:
the script only; `s2twp`: Taiwan's own words too). Every Chinese question is asked in both forms
(and the English question, across scripts) against both agents with the default search, and
against the next paragraph's agents for the false positives, as `xling_search.py` counts them (R@1 with min_score 0; returned = the answer in
a default search; false positives = a default search of the next paragraph returns anything).

    DATABASE_URL=sqlite:////tmp/traditional.sqlite3 OMP_NUM_THREADS=1 \\
        .venv/bin/python bench/study/traditional.py --data <path to xquad.json> [--convert s2twp]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--convert", default="s2t", choices=["s2t", "s2twp", "s2hk"])
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import opencc

    from memories import services
    from memories.models import Memory, MemoryScope
    from tenants.models import Team
    from xling_search import search_ids

    convert = opencc.OpenCC(f"{args.convert}.json").convert
    paragraphs = json.load(open(args.data, encoding="utf-8"))
    team, _ = Team.objects.get_or_create(
        id=f"traditional_{args.convert}", defaults={"name": "traditional study"}
    )
    if not Memory.objects.filter(team=team).exists():
        for p, para in enumerate(paragraphs):
            for form in ("simplified", "traditional"):
                for sentence in para["sentences"]["zh"]:
                    services.memory_create(
                        team=team,
                        scope=MemoryScope.PERSONAL,
                        agent_id=f"p{p}_{form}",
                        content=sentence if form == "simplified" else convert(sentence),
                        enable_dedup=False,
                    )
    ids: dict[tuple[int, str], list[int]] = {}
    for m in Memory.objects.filter(team=team).order_by("id").only("id", "agent_id"):
        p, form = m.agent_id[1:].split("_")
        ids.setdefault((int(p), form), []).append(m.pk)

    print("| question → memories | R@1 | returned | false positives (next paragraph) |")
    print("| --- | --- | --- | --- |")
    for asked in ("simplified", "traditional", "english"):
        for stored in ("simplified", "traditional"):
            n = r1 = returned = fp = 0
            for p, para in enumerate(paragraphs):
                nxt = (p + 1) % len(paragraphs)
                for q in para["questions"]:
                    query = {
                        "simplified": q["zh"],
                        "traditional": convert(q["zh"]),
                        "english": q["en"],
                    }[asked]
                    gold = ids[(p, stored)][q["answer_sentence"]["zh"]]
                    n += 1
                    r1 += search_ids(team, f"p{p}_{stored}", query, min_score=0.0)[:1] == [gold]
                    returned += gold in search_ids(team, f"p{p}_{stored}", query)
                    fp += bool(search_ids(team, f"p{nxt}_{stored}", query))
            print(
                f"| {asked} → {stored} | {100 * r1 / n:.1f} | {100 * returned / n:.1f} "
                f"| {100 * fp / n:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
