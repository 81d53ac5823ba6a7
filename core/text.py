"""Text primitives every app shares: the CJK character range and jieba, loaded once per process.

Search (memories), the offline lifecycle engine and the offline graph engine all segment Chinese
with jieba and tell Chinese from other text by the same range; one definition keeps them agreeing
(a memory the index calls Chinese is Chinese to the lifecycle too) and loads jieba's dictionary
(~1 s) once, never at import time.
"""

from __future__ import annotations

import functools
import threading
import unicodedata
from typing import Any

# CJK Unified Ideographs, Extension A and the compatibility block: a character class body.
CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Other scripts written without spaces between words — Thai, Lao, Myanmar, Khmer, and kana: a
# character class body. A run of them is a phrase or a sentence, not a word.
UNSPACED = r"\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff"
_UNSPACED_BLOCKS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF))


@functools.cache
def combining_marks(*, unspaced: bool) -> str:
    """The combining marks (Unicode categories Mn, Mc, Me) of the Basic Multilingual Plane as a
    character class body; without those of the UNSPACED scripts unless `unspaced`.

    Python's `\\w` leaves marks out, so a word that carries them — nearly every Devanagari,
    Bengali or Tamil word: "नमस्ते" — falls apart at each vowel sign into pieces of one or two
    letters that match the pieces of any other word. ~7 ms, once per process and flag (cached)."""
    out: list[str] = []
    start = prev = -2
    for cp in range(0x300, 0x10000):
        if not unicodedata.category(chr(cp)).startswith("M"):
            continue
        if not unspaced and any(lo <= cp <= hi for lo, hi in _UNSPACED_BLOCKS):
            continue
        if cp != prev + 1:
            if start >= 0:
                out.append(f"\\u{start:04x}-\\u{prev:04x}")
            start = cp
        prev = cp
    out.append(f"\\u{start:04x}-\\u{prev:04x}")
    return "".join(out)


_lock = threading.Lock()
_ready = False
_posseg: Any = None

# jieba's HMM copies its best path at each character it reads: a run its dictionary cuts into
# single characters ("哈哈哈…", random characters) takes time in the square of its length
# (32,000 of them: ~5 s to tokenise once, 18 s through dedup's rules). A run is cut into pieces
# of this many characters first. A Chinese sentence without one punctuation mark is far shorter,
# so only such runs are cut differently: a word across a cut becomes two.
HAN_PIECE_CHARS = 200


def han_pieces(run: str) -> list[str]:
    """`run` in pieces of at most HAN_PIECE_CHARS characters, for jieba to cut one by one."""
    return [run[i : i + HAN_PIECE_CHARS] for i in range(0, len(run), HAN_PIECE_CHARS)]


def jieba_module() -> Any:
    """jieba with its full dictionary, initialised once and quietly."""
    global _ready
    import jieba

    if not _ready:
        with _lock:
            if not _ready:
                jieba.setLogLevel(30)
                jieba.initialize()
                _ready = True
    return jieba


def jieba_posseg() -> Any:
    """jieba.posseg (part-of-speech tagging) on the same, once-initialised dictionary."""
    global _posseg
    if _posseg is None:
        jieba_module()
        with _lock:
            if _posseg is None:
                import jieba.posseg

                _posseg = jieba.posseg
    return _posseg
