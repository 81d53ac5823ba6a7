"""The dedup decision in-process, pair by pair: a fast loop for work on the dedup rules.

Reads `dedup_pairs.jsonl` from the directory given with --data (never copied; see
bench/fidelity.py) and, for every pair, decides whether writing `b` after `a` is skipped the
way `memories.services.memory_create` decides it, without HTTP or a database:

* the same normalised content (`content_hash`) is a duplicate;
* otherwise the stored memory is a candidate only when its calibrated memory→memory similarity
  (`same_score`) reaches the default `dedup_threshold` (0.85). The raw cosine is taken the way
  the local index takes it: `a`'s vector stored in a fresh `VectorBlocks` of the configured
  codec (sq8 by default: one byte per value) and `b`'s exact vector scored against it;
* then `conflict_reason(b, a)` must find nothing new in `b`.

Printed: the share of `b` skipped per language, part (all / hardest 20 % by overlap, as the
bench) and label, for three deciders: "rules" (conflict_reason alone, no similarity gate),
"gate exact" (float cosine) and "as HTTP" (the index's quantised cosine), so that a change of
the rules and the gate's own effect can be told apart. With --show LABEL the pairs of that
label whose decision differs from what the label wants are printed with the reason (to the
terminal only; the data's licence forbids copying it into the repository).

    PYTHONPATH=. .venv/bin/python bench/study/dedup_study.py --data <fidelity-dev dir> \\
        [--lang en] [--show paraphrase] [--cache /tmp/dedup_vecs.npz]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")

DECIDERS = ("rules", "gate exact", "as HTTP")
THRESHOLD = 0.85  # the API's default dedup_threshold (memories/apis.py)


def vectors(texts: list[str], cache: Path | None) -> dict[str, np.ndarray]:
    """Embeddings of the distinct texts, from a cache file outside the repository if given."""
    from memories.retrieval.embeddings import embed_passages, get_embedder

    model = get_embedder().model_name
    distinct = sorted(set(texts))
    if cache is not None and cache.exists():
        saved = np.load(cache, allow_pickle=False)
        if str(saved["model"]) == model and list(saved["texts"]) == distinct:
            return dict(zip(distinct, saved["vecs"], strict=True))
    vecs = np.vstack([embed_passages(distinct[i : i + 256]) for i in range(0, len(distinct), 256)])
    if cache is not None:
        np.savez(cache, model=model, texts=np.array(distinct), vecs=vecs)
    return dict(zip(distinct, vecs, strict=True))


def quantised_cosine(stored: np.ndarray, new: np.ndarray) -> float:
    """The raw cosine the local index gives `new` against a scope holding only `stored`."""
    from memories.retrieval.index import VectorBlocks

    blocks = VectorBlocks(len(stored))
    blocks.append(stored[None, :])
    _, raw = blocks.top(new, 1, np.ones(1, dtype=bool))
    return float(raw[0])


def decide(row: dict[str, Any], vecs: dict[str, np.ndarray]) -> dict[str, bool]:
    from memories.retrieval.dedup import conflict_reason
    from memories.retrieval.embeddings import get_embedder
    from memories.retrieval.text import content_hash

    same = get_embedder().same_score
    if content_hash(row["a"]) == content_hash(row["b"]):
        row["reason"] = "same content"
        return dict.fromkeys(DECIDERS, True)
    t = time.perf_counter()
    reason = conflict_reason(row["b"], row["a"])
    row["check_ms"] = (time.perf_counter() - t) * 1000
    row["reason"] = reason
    va, vb = vecs[row["a"]], vecs[row["b"]]
    row["score"] = float(same(float(np.dot(va, vb))))
    row["score_q"] = float(same(quantised_cosine(va, vb)))
    ok = reason is None
    return {
        "rules": ok,
        "gate exact": ok and row["score"] >= THRESHOLD,
        "as HTTP": ok and row["score_q"] >= THRESHOLD,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--lang", default="", help="en or zh (default: both)")
    parser.add_argument("--show", default="", help="print the pairs of this label decided wrong")
    parser.add_argument("--cache", type=Path, default=None, help="embedding cache (outside repo)")
    args = parser.parse_args()

    import django

    django.setup()
    from fidelity import LABELS, load_dedup

    rows = [r for r in load_dedup(args.data, None) if not args.lang or r["lang"] == args.lang]
    vecs = vectors([t for r in rows for t in (r["a"], r["b"])], args.cache)
    start = time.perf_counter()
    for row in rows:
        row["decided"] = decide(row, vecs)
    took = time.perf_counter() - start

    for decider in DECIDERS:
        print(f"\n% of b skipped — {decider}")
        print(f"{'':12}" + "".join(f"{c:>15}" for c in (*LABELS, "lost")))
        for lang in sorted({r["lang"] for r in rows}):
            for part in ("all", "hardest"):
                sel = [r for r in rows if r["lang"] == lang and (part == "all" or r["hard"])]
                cells = []
                for label in (*LABELS, "lost"):
                    want = ("contradiction", "neutral") if label == "lost" else (label,)
                    pick = [r for r in sel if r["label"] in want]
                    hit = sum(r["decided"][decider] for r in pick)
                    cells.append(f"{100 * hit / len(pick):6.2f} ({hit:4d})" if pick else "-")
                print(f"{lang + ' ' + part:12}" + "".join(f"{c:>15}" for c in cells))
    costs = sorted(r["check_ms"] for r in rows if "check_ms" in r)
    if costs:
        print(
            f"\nconflict_reason: p50 {costs[len(costs) // 2]:.3f} ms, "
            f"p95 {costs[int(len(costs) * 0.95)]:.3f} ms, max {costs[-1]:.1f} ms; "
            f"{len(rows)} pairs in {took:.1f} s"
        )
    if args.show:
        wants_skip = args.show in ("paraphrase", "entailed")
        wrong = [
            r for r in rows if r["label"] == args.show and r["decided"]["as HTTP"] != wants_skip
        ]
        print(f"\n{args.show}: {len(wrong)} decided against the label")
        for reason, n in Counter(
            str(r["reason"]).split(":")[0] if r["reason"] else "below gate" for r in wrong
        ).most_common():
            print(f"  {n:5d}  {reason}")
        for r in wrong:
            score = f"{r.get('score_q', 1.0):.3f}"
            print(f"[{r['id']}] {score} {r['reason']}\n   a: {r['a']}\n   b: {r['b']}")


if __name__ == "__main__":
    main()
