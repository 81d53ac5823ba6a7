"""A text as long as a memory may be (MEMORY_MAX_CONTENT_CHARS) and shaped to be slow is read in
about linear time by every offline reader of what agents write.

The shapes: a run of spaces before a word, one long word, a run of digits (and of digits and
points), one character repeated, many short capitalised words. The readers: sentence splitting
and the offline engine's extraction, classification and compress (with the e5 topic model),
expiry, profile fields, dedup's conflict rules, the search tokenizer and the graph's rules.

Before, several of them took from 35 s to minutes on one such text: a pattern tried from every
character of a long run, jieba's HMM over a long run of characters, the e5 engine reading every
token past the 512 it learnt. A request or a worker was held for as long. Each call now takes at
most about five seconds here, four times as long for four times the text. The test compares
those two times (quadratic time is sixteen times as long), and holds each under a bound far
above them; neither is a performance figure (bench/ measures those)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings

from graph.offline import extract_offline, third_party_subject
from lifecycle.offline import OfflineEngine, classify, split_sentences, whole_expiry
from memories.profile import profile_fields_in
from memories.retrieval.dedup import conflict_reason
from memories.retrieval.text import tokenize

# A text this long read in less time than this is fine whatever its growth.
FAST_S = 0.5
# Four times the text: about four times the time when linear, sixteen when quadratic.
GROWTH = 8.0
# Linear but this slow is a held worker too (jieba's part-of-speech HMM: ~1 ms a character).
HELD_S = 20.0

_SHAPES: dict[str, Callable[[int], str]] = {
    "spaces before a word": lambda n: ("I work at Acme" + " " * n)[: n - 1] + "x",
    "newlines before a clause": lambda n: ("My name is Bob" + "\n" * n)[: n - 4] + " and",
    "one long word": lambda n: "A" * n,
    "one long lower-case word": lambda n: "a" * (n - 1) + "!",
    "digits": lambda n: "1" * n,
    "digits and points": lambda n: "1." * (n // 2),
    "one character": lambda n: "中" * n,
    "laughter": lambda n: "哈" * n,
    "short capitalised words": lambda n: ("Bob is a " + "Ab " * n)[:n],
    "a name and then a long word": lambda n: ("Alice asked " + "B" * n)[:n],
}


_SAID = datetime(2031, 1, 8, 10, tzinfo=UTC)
_READERS: dict[str, Callable[[str], Any]] = {
    "split_sentences": split_sentences,
    "extract_facts": lambda text: OfflineEngine().extract_facts([text]),
    "compress": lambda text: OfflineEngine().compress([text, "The desk is by the window."], 1),
    "classify": classify,
    "whole_expiry": lambda text: whole_expiry(text, _SAID),
    "profile_fields_in": profile_fields_in,
    "conflict_reason": lambda text: conflict_reason(text, text[:-1] + "y"),
    "tokenize": tokenize,
    "graph": lambda text: extract_offline([(1, text)]),
    "third_party_subject": third_party_subject,
}


def _took(read: Callable[[str], Any], text: str) -> float:
    tokenize.cache_clear()  # shared by several readers: each reads the text afresh
    started = time.perf_counter()
    read(text)
    return time.perf_counter() - started


@pytest.mark.parametrize("reader", list(_READERS))
def test_every_reader_takes_a_long_text_in_about_linear_time(reader):
    read = _READERS[reader]
    read("Bob works at Acme until Friday. 张伟住在北京。")  # models and dictionaries loaded
    n = settings.MEMORY_MAX_CONTENT_CHARS
    slow = {}
    for shape, make in _SHAPES.items():
        assert len(make(n)) <= n
        quarter, full = _took(read, make(n // 4)), _took(read, make(n))
        if full > HELD_S or (full > FAST_S and full > GROWTH * quarter):
            slow[shape] = f"{quarter:.2f} s for a quarter, {full:.2f} s for all"
    assert not slow, f"{reader} reads these too slowly: {slow}"
