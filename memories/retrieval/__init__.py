"""Retrieval: how memories are found, and how a new one is recognised as already known.

* `text` — the tokeniser (jieba for Chinese, Snowball stems), content hashes, stored tokens;
* `embeddings` — the embedding backends and their calibrated scores;
* `index` — the in-process index of one scope (quantised vectors + BM25 postings), kept up to
  date from the `IndexChange` log;
* `scoring` — pure functions over score arrays: the fusions of dense and lexical evidence,
  conversation neighbours, memory strength;
* `search` — a query from start to finish: candidates, fusion, order, re-read rows, budgets;
* `dedup` — the write-time test of whether a new memory says nothing an old one does not.

Reads only: writes (recall bookkeeping, dedup decisions) are `memories.services`'.
"""
