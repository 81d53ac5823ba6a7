"""Turn results/*.json into markdown tables (results/all_variants.md + snippets printed to stdout).

    .venv/bin/python make_tables.py            # full dump -> results/all_variants.md
    .venv/bin/python make_tables.py ROWNAME... # print the rows named (overall + per category)
"""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
R = os.path.join(HERE, "results")
CAT = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}


def load():
    res = {}
    for tag in ("main", "round2"):
        p = os.path.join(R, "retrieval_%s.json" % tag)
        if os.path.exists(p):
            for k, v in json.load(open(p)).items():
                res.setdefault(k, v)
    return res


def fmt(v):
    return "%.1f / %.1f / %.1f / %.1f" % (v["1"], v["5"], v["10"], v["20"])


def table(res, names):
    n = {c: res[names[0]][c]["n"] for c in ("all", "1", "2", "3", "4")}
    out = ["| variant | R@1 | R@5 | R@10 | R@20 | " + " | ".join(
        "cat %s %s (n=%d) R@1/5/10/20" % (c, CAT[c], n[c]) for c in "1234") + " |",
        "|---" * 9 + "|"]
    for k in names:
        v = res[k]
        a = v["all"]
        out.append("| %s | %.1f | %.1f | %.1f | %.1f | " % (k, a["1"], a["5"], a["10"], a["20"]) +
                   " | ".join(fmt(v[c]) for c in "1234") + " |")
    return "\n".join(out)


def main():
    res = load()
    if len(sys.argv) > 1:
        print(table(res, [a for a in sys.argv[1:] if a in res]))
        missing = [a for a in sys.argv[1:] if a not in res]
        if missing:
            print("missing:", missing, file=sys.stderr)
        return
    names = list(res)
    with open(os.path.join(R, "all_variants.md"), "w") as fh:
        fh.write("# All LOCOMO variants (759 questions, 2,760 turns)\n\nR@k in %; per-category cells are "
                 "R@1 / R@5 / R@10 / R@20.\n\n")
        fh.write(table(res, names) + "\n")
        fh.write("\n## Sorted by R@10 (top 40)\n\n")
        fh.write(table(res, sorted(names, key=lambda k: -res[k]["all"]["10"])[:40]) + "\n")
    print("wrote", os.path.join(R, "all_variants.md"), len(names), "variants")


if __name__ == "__main__":
    main()
