"""Text normalisation and tokenisation for BM25 and for dedup (Chinese via jieba, words otherwise)."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import tempfile
import threading
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings

from core.text import CJK, combining_marks, han_pieces, jieba_module

_CJK = CJK
# Runs of CJK characters, or runs of other letters/digits (with inner ' . - _ kept, e.g. "don't",
# "3.5"). A change of script ends a token: Chinese text glues numbers and Latin names to the next
# word ("1991年", "BSkyB是什么"), and one token "1991年" would match neither "1991" nor "年".
# (Splitting at hyphens as well was measured and not kept: docs/search.md, "Tokens across scripts".)
# Letters carry their combining marks (a Devanagari vowel sign, a virama): without them "नमस्ते"
# was "नमस" + "त", and single letters matched every other Hindi memory. Not in the scripts
# written without spaces (Thai…), whose marks are where such a run splits into syllable-sized
# pieces: with them a whole sentence would be one token.
# (A mark only after a letter: a lone one — an emoji's variation selector — is no word.)
# Japanese kana: katakana and hiragana are scripts of their own, so a run of kana ends where
# one gives way to the other — katakana words (loanwords and names: パスワード, サーバー) stand
# between hiragana particles and endings (サーバーのパスワードは → サーバー / の / パスワード /
# は), the cut a character-type segmenter makes first; one token for the whole run matched
# nothing but itself.
_KATAKANA = "\u30a0-\u30ff\u31f0-\u31ff"
_HIRAGANA = "\u3040-\u309f\u30fc"  # with the long-vowel mark: すごーい
_WORD = rf"(?:[^\W_{_CJK}{_KATAKANA}{_HIRAGANA}][{combining_marks(unspaced=False)}]*)"
_TOKEN_RE = re.compile(
    rf"[{_CJK}]+|[{_KATAKANA}]+|[{_HIRAGANA}]+|{_WORD}+(?:['’.\-_]{_WORD}+)*", re.UNICODE
)
# An English possessive is its noun ("Kublai's" -> "kublai", as Snowball's step 0 would do if the
# apostrophe reached it).
_POSSESSIVE = re.compile(r"['’]s$")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")

# English function words: they match everything and carry no topic (LOCOMO questions are full of
# them). Short on purpose; Chinese stop words are handled by jieba's segmentation + idf.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
        "的",
        "了",
        "和",
        "是",
        "在",
        "也",
        "就",
        "都",
        "而",
        "及",
        "与",
        "或",
        "一个",
        "这个",
        "那个",
        "吗",
        "呢",
        "吧",
        "啊",
        "呀",
    ]
)

_jieba_lock = threading.Lock()  # builds the search tokenizer once


_search_tokenizer_obj: Any = None


def search_tokenizer():  # type: ignore[no-untyped-def]
    """The jieba tokenizer of search: jieba's dictionary without its rarest words.

    jieba's full dictionary costs ~55 MB in every web worker; words seen fewer than
    SEARCH_JIEBA_MIN_FREQ times in its corpus (default 20: 80k of 349k words kept, ~6 MB) are
    left to its HMM, which still keeps names whole ("张伟", "永续合约" → 永续/合约). Index and query
    use the same tokenizer, so BM25 stays consistent; measured: docs/benchmarks.md. The lifecycle
    and graph engines keep the full dictionary (`core.text.jieba_module()`), in the workers that run them.
    The filtered file is written once under DATA_DIR (jieba caches its model by that path).
    """
    global _search_tokenizer_obj
    if _search_tokenizer_obj is not None:
        return _search_tokenizer_obj
    min_freq = settings.SEARCH_JIEBA_MIN_FREQ
    if min_freq <= 0:
        return jieba_module()
    with _jieba_lock:
        if _search_tokenizer_obj is None:
            import jieba

            jieba.setLogLevel(30)
            name = f"jieba-{jieba.__version__}-search-dict-{min_freq}.txt"
            path = Path(settings.DATA_DIR) / name
            if not path.exists():
                source = Path(jieba.__file__).with_name("dict.txt")
                kept = [
                    line
                    for line in source.read_text(encoding="utf-8").splitlines()
                    if len(parts := line.split()) >= 2 and int(parts[1]) >= min_freq
                ]
                try:
                    _write_atomically(path, "\n".join(kept) + "\n")
                except OSError:  # a read-only DATA_DIR: the temporary directory will do
                    path = Path(tempfile.gettempdir()) / name
                    _write_atomically(path, "\n".join(kept) + "\n")
            tokenizer = jieba.Tokenizer(dictionary=str(path))
            tokenizer.initialize()
            _search_tokenizer_obj = tokenizer
    return _search_tokenizer_obj


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # atomic: another process may be writing the same file


_stemmer_lock = threading.Lock()
_stemmer = None


@lru_cache(maxsize=50_000)
def _stem(word: str) -> str:
    """Snowball (Porter 2) stem of an English word, so "hikes"/"hiking"/"hiked" meet.

    Measured on LOCOMO: +4 points of BM25 recall@10 (docs/benchmarks.md). Non-ASCII words are
    left alone. Cached: the stemmer costs ~60 µs a word, the cache ~0.1 µs.
    """
    global _stemmer
    if not word.isascii() or not word.isalpha():
        return word
    if _stemmer is None:
        with _stemmer_lock:
            if _stemmer is None:
                import snowballstemmer

                _stemmer = snowballstemmer.stemmer("english")
    with _stemmer_lock:  # snowball stemmer objects keep state between calls
        return str(_stemmer.stemWord(word))


# Scripts written in one language mostly, and the Snowball stemmer of that language: so
# "живёт" meets "живет" and "пользователя" meets "пользователь", as "hiking" meets "hikes".
# A Latin word is English to the stemmer whatever its language (above): the script does not
# tell French from English. Hebrew has no Snowball stemmer.
_SCRIPT_STEMMERS = {
    "CYRILLIC": "russian",
    "GREEK": "greek",
    "DEVANAGARI": "hindi",
    "ARABIC": "arabic",
    "ARMENIAN": "armenian",
    "TAMIL": "tamil",
}
_native_lock = threading.Lock()
_native_stemmers: dict[str, Any] = {}


@lru_cache(maxsize=50_000)
def _native_stem(word: str) -> str:
    """The stem of a word in a script that mostly writes one language (_SCRIPT_STEMMERS), by
    that language's Snowball stemmer; any other word as it is."""
    first = next((c for c in word if c.isalpha()), None)
    if first is None:  # digits of another script, marks: nothing to stem
        return word
    script = unicodedata.name(first, "").split(" ")[0]
    language = _SCRIPT_STEMMERS.get(script)
    if language is None:
        return word
    with _native_lock:  # snowball stemmer objects keep state between calls
        stemmer = _native_stemmers.get(language)
        if stemmer is None:
            import snowballstemmer

            stemmer = _native_stemmers[language] = snowballstemmer.stemmer(language)
        return str(stemmer.stemWord(word)) or word


_CJK_CHAR = re.compile(rf"[{_CJK}]")
_WORD_CHAR = re.compile(r"[^\W_]")


def is_cjk(text: str) -> bool:
    """Mostly written in Chinese (or Japanese kanji): at least a third of its letters are CJK.

    Search uses it to see that a query and a memory are in different scripts, where BM25 cannot
    match anything and only the embedding can (docs/search.md, "cross-script").
    """
    if text.isascii():  # no CJK character at all (most memories of an English scope): fast
        return False
    letters = len(_WORD_CHAR.findall(text))
    return letters > 0 and 3 * len(_CJK_CHAR.findall(text)) >= letters


# Letters that, among the languages written in Latin letters, Vietnamese alone writes: the tone
# letters of Latin Extended Additional (ạ ả ấ … ỹ), ơ, ư, ĩ, ũ and đ.
_VI_MARKED = re.compile(
    "[\u1ea0-\u1ef9\u01a0\u01a1\u01af\u01b0\u0128\u0129\u0168\u0169\u0110\u0111]"
)
# Every other Latin letter Vietnamese writes (plain ASCII aside): à á â ã è é ê ì í ò ó ô õ ù ú
# ý ă. A Latin letter outside both (č, ñ, ß, ş, ł…) says another language ("Đakovo" is Croatian).
_VI_SHARED = re.compile(
    "[\u00c0-\u00c3\u00c8-\u00ca\u00cc\u00cd\u00d2-\u00d5\u00d9\u00da\u00dd"
    "\u00e0-\u00e3\u00e8-\u00ea\u00ec\u00ed\u00f2-\u00f5\u00f9\u00fa\u00fd\u0102\u0103]"
)
_LETTER_RUN = re.compile(r"[^\W\d_]+")


def is_vietnamese(text: str) -> bool:
    """Vietnamese, told by its letters: a letter only Vietnamese writes (_VI_MARKED), at least
    half of the words accented (nearly every Vietnamese syllable is), and no letter foreign to
    it — another Latin letter, or another script (a Chinese sentence naming "Nguyễn Văn An" is
    Chinese). A sentence of shared letters only ("Tôi là sinh viên") is not recognised; an
    English sentence with a Vietnamese name or two ("Meeting with Nguyễn Văn An") is English."""
    if text.isascii():
        return False
    words = _LETTER_RUN.findall(unicodedata.normalize("NFC", text))
    marked = accented = 0
    for word in words:
        if not all(c.isascii() or _VI_MARKED.match(c) or _VI_SHARED.match(c) for c in word):
            return False
        marked += bool(_VI_MARKED.search(word))
        accented += not word.isascii()
    return marked > 0 and 2 * accented >= len(words)


# Small on purpose: index loads tokenise every memory once, and a large cache would keep every
# memory's text and tokens alive (measured: RSS 538 MB with 100k memories and a 65k-entry cache).
@lru_cache(maxsize=2048)
def tokenize(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens (stop words dropped, lightly stemmed) plus jieba words for Chinese."""
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    for match in _TOKEN_RE.finditer(text):
        tok = match.group(0)
        if _CJK_RUN.match(tok):
            # In pieces (core.text.han_pieces). Not a new TOKENIZER_VERSION: only a run of more
            # than 200 characters without a mark is cut differently, and its tokens as stored
            # before still meet a query's (queries hold no such run).
            for word in (
                w
                for piece in han_pieces(_simplified(tok))
                for w in search_tokenizer().cut_for_search(piece)
            ):
                word = word.strip()
                if word and word not in STOP_WORDS:
                    out.append(word)
        else:
            word = written = _POSSESSIVE.sub("", tok.strip("'’.-_"))
            if not word.isascii():
                word = _fold_latin(word)
            # A stop word as written ("it's" is "it"): a word that only folds into one is a word
            # of another language — Vietnamese "ăn" (eat), "án" (case), "hệ", "sở" are not
            # "an", "he", "so".
            if written not in STOP_WORDS:
                out.append(_stem(word) if word.isascii() else _native_stem(word))
    return tuple(t for t in out if t)


_simplifier_lock = threading.Lock()
_simplifier: Any = None


def _simplified(run: str) -> str:
    """A run of Chinese characters in simplified characters (OpenCC's `t2s`: characters and
    the phrases whose conversion depends on them, never regional vocabulary), so a memory
    written in traditional characters (用戶偏好簡潔的回覆) and a question in simplified ones
    (用户偏好简洁的回复) share their words, and jieba, whose dictionary is simplified, cuts
    traditional text as well as simplified. Simplified text passes through unchanged but for a
    stray traditional character (內 -> 内). ~3 µs a sentence."""
    global _simplifier
    if _simplifier is None:
        with _simplifier_lock:
            if _simplifier is None:
                import opencc

                _simplifier = opencc.OpenCC("t2s.json")
    with _simplifier_lock:  # one converter per process; its thread safety is not documented
        return str(_simplifier.convert(run))


_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")


def for_embedding(text: str) -> str:
    """The text the embedding model reads: Chinese in simplified characters (`_simplified`),
    the rest as written. The model scores a traditional text against its simplified twin lower
    than two texts in one form, and two traditional texts higher (a looser `min_score` in a
    traditional scope); reading one form closes both (docs/search.md, "Diacritics and
    traditional characters"). Text with kana is Japanese and stays as written: its kanji are
    not traditional Chinese, and the model reads Japanese in its own spelling. Text without a
    Chinese character is returned as is (no conversion, the same vector as before)."""
    if text.isascii() or not _CJK_CHAR.search(text) or _KANA.search(text):
        return text
    return _simplified(text)


@lru_cache(maxsize=50_000)
def _fold_latin(word: str) -> str:
    """A Latin word without its diacritics, so a name typed without them still meets it:
    "müller" -> "muller", "ergänzungsschulen" -> "erganzungsschulen", "straße" -> "strasse",
    pinyin "nǐ" -> "ni" (and an ASCII word is then stemmed: "cafés" meets "cafe"). Only when the
    folded word is plain ASCII: Cyrillic, Greek or Vietnamese "đ" keep their letters, whose marks
    tell words apart."""
    folded = "".join(
        c for c in unicodedata.normalize("NFD", word.casefold()) if not unicodedata.combining(c)
    )
    return folded if folded.isascii() else word


# Bump when tokenize() changes: tokens stored with another version are recomputed at index load.
# 3: Latin diacritics folded (_fold_latin); Chinese in simplified characters (_simplified).
# 4: combining marks are part of their word (Devanagari, Bengali, Tamil… words whole); Cyrillic,
#    Greek, Devanagari, Arabic, Armenian and Tamil words stemmed (_native_stem); katakana and
#    hiragana runs cut apart.
# 5: a word is a stop word only as written, not once folded (Vietnamese "ăn" is not "an").
TOKENIZER_VERSION = 5


def tokens_stamp() -> str:
    """What the stored tokens depend on: this code, the dictionary cut and jieba's version."""
    import jieba  # the module only: its dictionary loads on first use

    return f"t{TOKENIZER_VERSION}.{settings.SEARCH_JIEBA_MIN_FREQ}.{jieba.__version__}|"


def tokens_for_storage(text: str) -> str:
    """The search tokens of `text` as stored on the memory, stamped with the tokenizer version.

    Written with the memory, so an index load reads them instead of segmenting 100k texts again
    (jieba made a Chinese 100k load take 17 s).
    """
    return tokens_stamp() + " ".join(tokenize(text))


def tokens_from_storage(stored: str) -> tuple[str, ...] | None:
    """The stored tokens, or None when missing or made by another tokenizer (recompute then)."""
    stamp = tokens_stamp()
    if not stored.startswith(stamp):
        return None
    return tuple(stored[len(stamp) :].split())


# A run of letters and digits, or a run of anything else.
_CASE_RUN = re.compile(r"[^\W_]+|[\W_]+")


def case_carries_meaning(word: str) -> bool:
    """Whether a word's case is part of what it says: one that mixes letters and digits
    ("x7Qz", "Hunter2", "A1B2") or has a capital after a small letter ("iPhone", "aBcD") is an
    identifier, a key, a password or a code, where "x7Qz" and "x7QZ" are two values. An ordinary
    word's case ("The", "API", "ALICE") only follows the sentence or the writer's habit."""
    if not any(c.isupper() or c.islower() for c in word):
        return False  # no letters, or a script without case
    if any(c.isdigit() for c in word):
        return True
    return any(a.islower() and b.isupper() for a, b in itertools.pairwise(word))


def _fold(match: re.Match[str]) -> str:
    run = match.group(0)
    return run if case_carries_meaning(run) else run.casefold()


def normalise(text: str) -> str:
    """What counts as "the same content": NFKC, case-folded (not where case carries meaning:
    "key x7Qz" is not "key x7QZ"), whitespace collapsed."""
    return " ".join(_CASE_RUN.sub(_fold, unicodedata.normalize("NFKC", text)).split())


def content_hash(text: str) -> str:
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()
