"""Phonetic name match across scripts: a transliterated name meets its English spelling.

Why: the dictionary bridge (gloss.py) cannot connect names CC-CEDICT lacks or spells otherwise
(Gaga / 卡卡, Matlin / 麦特琳, Elway / 埃尔维), and a name is often the one word a question and
its answer share (docs/search.md, "Phonetic name match").

Both sides are reduced to a **key**: the classes of their consonants in order, vowels dropped
(a leading vowel kept as "V"). Chinese words go through the toneless pinyin of their characters
(the character data of the `pypinyin` package: `char_readings`), English words through a few
spelling rules. The classes merge what transliteration does not tell apart: voicing (卡 ka
writes "g" and "k"), the sibilants and affricates (s, sh, ch, j, z ↔ pinyin s, x, sh, q, j, zh, z, c), f / v / w (维 wei is "v" or
"w"), l / r (Mandarin writes r with l, 尔 er a final l or r). A pinyin nasal coda is optional
(坎 kan writes "k" as often as "kan"), an English r before a consonant or at the end is not
written (Carter 卡特). So 麦特琳 mai-te-lin → MTL / MTLN and matlin → MTLN meet.

Which words get a key (`token_keys`): a Chinese word of 2+ characters the dictionary does not
know, at least half of whose characters are typical of transliteration (gloss.Glossary.translit,
derived from CC-CEDICT's own transliterated names); an English word of 3+ letters the dictionary
does not gloss (a name, not a common word: "short" never meets 肖特). Keys shorter than
MIN_KEY symbols are dropped. Two keys match when equal, or when one is a prefix of the other and
the shorter has PREFIX_MIN symbols or more: search tokens are stemmed ("kuechly" → "kuech") and
jieba cuts some names short (约塞米 | 蒂).

`PhoneticTable` keeps, per index, the keys of its terms (read once per term: at index load for a
scope holding both scripts, else on its first cross-script search; then new terms only), so a
search costs a few dictionary look-ups per query word.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING

from .text import is_cjk

if TYPE_CHECKING:
    from .gloss import Glossary

# Keys shorter than this (a leading "V" counts) are dropped: one consonant matches anything.
MIN_KEY = 2
# A key that is a prefix of another matches it when it has at least this many symbols.
PREFIX_MIN = 3
# Caps the variants of one word (each ambiguous letter or nasal coda doubles them).
MAX_VARIANTS = 32
VOWEL = "V"

_PINYIN_INITIAL = {
    "b": "P",
    "p": "P",
    "d": "T",
    "t": "T",
    "g": "K",
    "k": "K",
    "h": "H",
    "j": "S",
    "q": "S",
    "x": "S",
    "zh": "S",
    "ch": "S",
    "sh": "S",
    "z": "S",
    "c": "S",
    "s": "S",
    "r": "L",
    "l": "L",
    "m": "M",
    "n": "N",
    "f": "W",
    "w": "W",
    "y": "",  # a spelling of the vowel i / ü (yue = üe)
}
_PINYIN_RE = re.compile(r"^(zh|ch|sh|[bpmfdtnlgkhjqxrzcsyw]?)([a-zü]*)$")


def _syllable(syllable: str) -> tuple[str, ...]:
    """Key variants of one toneless pinyin syllable: its initial's class, with or without a
    nasal coda (transliteration adds -n / -ng for euphony as often as for an English n)."""
    if syllable == "er":  # 尔: a final l or r
        return ("L",)
    m = _PINYIN_RE.match(syllable)
    if m is None:
        return ("",)
    initial, final = m.groups()
    head = _PINYIN_INITIAL[initial] if initial else ""
    if final.endswith("n") or final.endswith("ng"):
        return (head, head + "N")
    return (head,)


def pinyin_keys(syllables: Sequence[str]) -> frozenset[str]:
    """Keys of a Chinese word from its toneless pinyin syllables (e.g. ("mai", "te", "lin"))."""
    if not syllables:
        return frozenset()
    first = syllables[0]
    lead = VOWEL if first[:1] in ("a", "e", "i", "o", "u", "y") else ""
    return _combine(lead, [_syllable(s) for s in syllables])


# English spelling → consonant classes, tried in order at each position (longest first).
_EN_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sch", ("S",)),
    ("tch", ("S",)),
    ("ch", ("S", "K")),  # church, Christ
    ("ck", ("K",)),
    ("sh", ("S",)),
    ("ph", ("W",)),
    ("th", ("T", "S")),  # Thomas 托马斯, Smith 史密斯
    ("gh", ("",)),
    ("qu", ("KW",)),
    ("ce", ("S",)),
    ("ci", ("S",)),
    ("cy", ("S",)),
    ("c", ("K",)),
    ("x", ("KS",)),
    ("b", ("P",)),
    ("p", ("P",)),
    ("d", ("T",)),
    ("t", ("T",)),
    ("g", ("K",)),
    ("k", ("K",)),
    ("q", ("K",)),
    ("j", ("S",)),
    ("z", ("S",)),
    ("s", ("S",)),
    ("f", ("W",)),
    ("v", ("W",)),
    ("w", ("W",)),
    ("l", ("L",)),
    ("m", ("M",)),
    ("n", ("N",)),
)
_VOWELS = frozenset("aeiouy")
_DOUBLE = re.compile(r"(.)\1")


@lru_cache(maxsize=20_000)
def english_keys(word: str) -> frozenset[str]:
    """Keys of an English word (lower-case ASCII letters), e.g. "matlin" → {"MTLN"}."""
    w = _DOUBLE.sub(r"\1", word)  # a double letter is one sound
    lead = VOWEL if w[:1] in _VOWELS else ""
    parts: list[tuple[str, ...]] = []
    i = 0
    while i < len(w):
        c = w[i]
        if c in _VOWELS:
            i += 1
        elif c == "r":
            # Non-rhotic: an r before a consonant or at the end is not written (Carter 卡特).
            parts.append(("L",) if w[i + 1 : i + 2] in _VOWELS else ("",))
            i += 1
        elif c == "h":
            # An initial h is written (哈 ha); elsewhere it is silent (Sarah) or in a digraph.
            if i == 0:
                parts.append(("H",))
            i += 1
        else:
            for pattern, classes in _EN_RULES:
                if w.startswith(pattern, i):
                    parts.append(classes)
                    i += len(pattern)
                    break
            else:
                i += 1  # not a letter of English
    return _combine(lead, parts)


def _combine(lead: str, parts: list[tuple[str, ...]]) -> frozenset[str]:
    keys: set[str] = set()
    for combo in product(*parts):
        keys.add(lead + "".join(combo))
        if len(keys) >= MAX_VARIANTS:
            break
    return frozenset(k for k in keys if len(k) >= MIN_KEY)


_TONE_MARKS = frozenset("\u0300\u0301\u0304\u030c")  # grave, acute, macron, caron
_readings: dict[str, str] | None = None
_readings_lock = threading.Lock()


def _toneless(reading: str) -> str:
    """ "lǜ" → "lü": the tone marks dropped, the diaeresis kept."""
    kept = (c for c in unicodedata.normalize("NFD", reading) if c not in _TONE_MARKS)
    return unicodedata.normalize("NFC", "".join(kept))


def char_readings() -> dict[str, str]:
    """Character → its first (most common) toneless pinyin reading, from the data file the
    `pypinyin` package ships (pinned in pyproject.toml), read once per process under a lock.

    Read directly instead of through `pypinyin.lazy_pinyin`: importing the package loads its
    phrase dictionary too (~0.9 s and ~45 MB more in every worker), which only settles the
    reading of a polyphonic character inside a common word, and those words are not names
    (measured: the same XQuAD numbers either way). This table is ~42k characters (~6 MB)."""
    global _readings
    if _readings is None:
        with _readings_lock:
            if _readings is None:
                spec = importlib.util.find_spec("pypinyin")  # locates it without importing it
                if spec is None or not spec.submodule_search_locations:
                    raise ImportError("the pypinyin package is not installed")
                path = Path(next(iter(spec.submodule_search_locations))) / "pinyin_dict.json"
                data = json.loads(path.read_text(encoding="utf-8"))
                _readings = {
                    chr(int(code)): _toneless(readings.split(",")[0])
                    for code, readings in data.items()
                }
    return _readings


def _pinyin(word: str) -> list[str]:
    readings = char_readings()
    return [readings[c] for c in word if c in readings]


# A query's words come again and again; an index's terms are read once (PhoneticTable).
@lru_cache(maxsize=8192)
def token_keys(token: str, glossary: Glossary) -> frozenset[str]:
    """Keys of a search token that may be a name written in another script; empty otherwise.

    A Chinese token: 2+ characters, unknown to the dictionary, at least half of its characters
    typical of transliteration. An English token: 3+ ASCII letters the dictionary does not gloss.
    """
    if is_cjk(token):
        if len(token) < 2 or token in glossary.forward:
            return frozenset()
        typical = sum(char in glossary.translit for char in token)
        if 2 * typical < len(token):
            return frozenset()
        return pinyin_keys(_pinyin(token))
    if len(token) < 3 or not token.isascii() or not token.isalpha() or token in glossary.reverse:
        return frozenset()
    return english_keys(token)


class PhoneticTable:
    """The keys of an index's terms, Chinese and English apart: key → the terms having it, and
    key prefix (PREFIX_MIN symbols or more) → the terms whose key starts with it.

    Extended with the terms added since the last search (`extend`), under the index's lock."""

    __slots__ = ("done", "tables")

    def __init__(self) -> None:
        self.done = 0  # terms of the index already read
        # [English, Chinese] x [whole key, proper prefix of a key] -> terms
        self.tables: tuple[tuple[dict[str, list[str]], dict[str, list[str]]], ...] = (
            ({}, {}),
            ({}, {}),
        )

    def extend(self, terms: Sequence[str], glossary: Glossary) -> None:
        for term in terms[self.done :]:
            keys = token_keys(term, glossary)
            if not keys:
                continue
            whole, prefix = self.tables[is_cjk(term)]
            for key in keys:
                whole.setdefault(key, []).append(term)
                for end in range(PREFIX_MIN, len(key)):
                    prefix.setdefault(key[:end], []).append(term)
        self.done = len(terms)

    def matches(self, token: str, glossary: Glossary) -> frozenset[str]:
        """Terms of the other script whose key matches one of `token`'s keys."""
        keys = token_keys(token, glossary)
        if not keys:
            return frozenset()
        whole, prefix = self.tables[not is_cjk(token)]
        found: set[str] = set()
        for key in keys:
            found.update(whole.get(key, ()))
            if len(key) >= PREFIX_MIN:
                found.update(prefix.get(key, ()))  # the term's key is longer
                for end in range(PREFIX_MIN, len(key)):
                    found.update(whole.get(key[:end], ()))  # the term's key is shorter
        return frozenset(found)

    @property
    def nbytes(self) -> int:
        """Rough: ~100 bytes per table entry and 8 per listed term (the strings are the index's)."""
        return sum(
            100 * len(table) + 8 * sum(map(len, table.values()))
            for pair in self.tables
            for table in pair
        )
