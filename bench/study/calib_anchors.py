"""Derive piecewise-linear calibration anchors (raw cosine -> [0,1]) from results/calib.json.

Two mappings per model, because e5 embeds queries and memories with different prefixes:
  dedup  (memory <-> memory): (p50 unrelated -> 0), (p99 unrelated -> 0.30),
                              (lowest p5 of near-dup / paraphrase classes, same language -> 0.85), (1 -> 1)
  search (query -> memory):   (p50 random non-evidence -> 0), (p99 random non-evidence -> 0.30),
                              (p99 of query->evidence -> 0.85), (1 -> 1)
Prints the anchors and, for every pair class, the share that lands >= 0.30 and >= 0.85.
    .venv/bin/python calib_anchors.py
"""
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def apply(x, anchors):
    xs, ys = zip(*anchors)
    return np.interp(x, xs, ys, left=0.0, right=1.0)


def main():
    c = json.load(open(os.path.join(HERE, "results", "calib.json")))
    out = {}
    for m, d in c.items():
        raw = {k: np.asarray(v) for k, v in d["_raw"].items()}
        sim_lo = min(float(np.percentile(raw[k], 5)) for k in
                     ("c_near_dup_generated", "near_dup_handwritten", "paraphrase"))
        un = raw["unrelated_memory_pairs"]
        dedup = [(float(np.percentile(un, 50)), 0.0), (float(np.percentile(un, 99)), 0.30),
                 (sim_lo, 0.85), (1.0, 1.0)]
        rn = raw["b_query_to_random_nonevidence"]
        ev = raw["a_query_to_evidence"]
        search = [(float(np.percentile(rn, 50)), 0.0), (float(np.percentile(rn, 99)), 0.30),
                  (float(np.percentile(ev, 99)), 0.85), (1.0, 1.0)]
        for name, a in (("dedup", dedup), ("search", search)):
            xs = [p[0] for p in a]
            if any(x2 <= x1 for x1, x2 in zip(xs, xs[1:])):
                print("WARNING %s %s anchors not increasing: %s" % (m, name, xs))
        rows = {}
        for k, v in raw.items():
            for name, a in (("dedup", dedup), ("search", search)):
                s = apply(v, a)
                rows["%s|%s" % (name, k)] = (float((s >= 0.3).mean()), float((s >= 0.85).mean()), len(v))
        out[m] = dict(dedup=dedup, search=search, shares=rows)
        print("\n### %s" % m)
        print("dedup  anchors (raw -> score): " + ", ".join("%.3f->%.2f" % p for p in dedup))
        print("search anchors (raw -> score): " + ", ".join("%.3f->%.2f" % p for p in search))
        print("| mapping | pair class | n | share >= 0.30 | share >= 0.85 |")
        print("|---|---|---|---|---|")
        show = {"dedup": ["unrelated_memory_pairs", "c_near_dup_generated", "near_dup_handwritten", "paraphrase",
                          "translation_zh_en", "d_contradiction_generated_number",
                          "d_contradiction_generated_negation", "contradiction_handwritten"],
                "search": ["b_query_to_random_nonevidence", "b2_query_best_wrong_per_question",
                           "a_query_to_evidence", "bilingual_query_to_gold", "bilingual_query_to_wrong"]}
        for name, ks in show.items():
            for k in ks:
                key = "%s|%s" % (name, k)
                if key in rows:
                    a3, a85, n = rows[key]
                    print("| %s | %s | %d | %.0f %% | %.0f %% |" % (name, k, n, 100 * a3, 100 * a85))
    with open(os.path.join(HERE, "results", "calib_anchors.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
