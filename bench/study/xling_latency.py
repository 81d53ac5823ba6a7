"""Extra cost of the cross-script dictionary bridge per search, in-process.

One scope of N synthetic memories, half English half Chinese (bench/corpus.py, the vectors of
bench/latency.py's cache), loaded into a ScopeIndex; the corpus questions of both languages are
scored by memories.retrieval.search._score_candidates (the hybrid search's whole scoring step:
dense top-k, BM25, bridge, neighbours) with SEARCH_XLING_LEXICAL_WEIGHT 0 and the default,
interleaved, every question --passes times (later passes find the query's glosses cached). Prints p50 / p95
in ms of each, and the glossary's load time in this process.

--phonetic compares the phonetic name match instead (SEARCH_XLING_PHONETIC off and on, at the
default weight, interleaved) and prints the time of the first build of the scope's phonetic table
(phonetic.PhoneticTable: every term of the scope read once; later searches only read new terms).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/study/xling_latency.py [--n 10000] \
        [--cache-dir var/bench-cache]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--max-vectors", type=int, default=10000)
    ap.add_argument("--phonetic", action="store_true")
    args = ap.parse_args()
    import django

    django.setup()
    import numpy as np
    from django.conf import settings

    import corpus
    import latency
    from memories.retrieval import gloss, index, search
    from memories.retrieval.embeddings import embed_query, get_embedder, to_bytes
    from memories.retrieval.text import is_cjk, tokenize, tokens_for_storage

    if args.cache_dir:
        latency.CACHE_DIR = Path(args.cache_dir)
    half = args.n // 2
    embedder = get_embedder()
    ix = index.ScopeIndex("bench|personal|x", embedder.dim, embedder.model_name)
    rows = []
    questions = []
    for lang in ("en", "zh"):
        items = corpus.generate(lang, half)
        # Beyond the cached vectors (10k a language), reuse them cyclically: timing only.
        vecs = latency.cached_vectors(lang, min(half, args.max_vectors))
        vecs = np.resize(vecs, (half, vecs.shape[1]))
        for i, (item, vec) in enumerate(zip(items, vecs, strict=True)):
            rows.append(
                index.Row(
                    len(rows) + 1,
                    item.text,
                    to_bytes(vec),
                    embedder.model_name,
                    False,
                    tokens_for_storage(item.text),
                    float(len(rows)) * 7200,  # no neighbours: 2 h apart
                )
            )
            if i < args.queries // 2:
                questions.append(item.question)
    ix.upsert_many(rows)
    t0 = time.perf_counter()
    table = gloss.glossary()
    load = time.perf_counter() - t0
    if args.phonetic:
        t0 = time.perf_counter()
        with ix.lock:
            ix.phonetic_matches("x", table)  # reads every term of the scope once
        build = time.perf_counter() - t0
        print(
            f"phonetic table: {len(ix.terms)} terms read in {build:.3f}s, "
            f"~{ix.phonetic.nbytes / 1e6:.1f} MB"
        )
    prepared = [(q, embed_query(q), tokenize(q), is_cjk(q)) for q in questions]
    weight = settings.SEARCH_XLING_LEXICAL_WEIGHT
    times: dict[float, list[float]] = {0.0: [], weight: []}
    for _ in range(args.passes):
        for q, qvec, qtokens, qcjk in prepared:
            for w in (0.0, weight):
                if args.phonetic:  # "weight 0" is the phonetic match off, the bridge on
                    settings.SEARCH_XLING_PHONETIC = w > 0
                else:
                    settings.SEARCH_XLING_LEXICAL_WEIGHT = w
                t = time.perf_counter()
                with ix.lock:
                    search._score_candidates(ix, qvec, qtokens, "hybrid", 30, None, 0.5, qcjk)
                times[w].append(1000 * (time.perf_counter() - t))
    print(f"scope {ix.n} memories ({half} en + {half} zh); glossary load {load:.3f}s")
    for w, ts in times.items():
        m = len(prepared)
        for name, a in [(f"pass {i + 1}", ts[i * m : (i + 1) * m]) for i in range(args.passes)]:
            print(
                f"weight {w}, {name}: p50 {np.percentile(a, 50):.2f} ms, "
                f"p95 {np.percentile(a, 95):.2f} ms"
            )


if __name__ == "__main__":
    main()
