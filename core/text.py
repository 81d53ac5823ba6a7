"""Text primitives every app shares: the CJK character range and jieba, loaded once per process.

Search (memories), the offline lifecycle engine and the offline graph engine all segment Chinese
with jieba and tell Chinese from other text by the same range; one definition keeps them agreeing
(a memory the index calls Chinese is Chinese to the lifecycle too) and loads jieba's dictionary
(~1 s) once, never at import time.
"""

from __future__ import annotations

import threading
from typing import Any

# CJK Unified Ideographs, Extension A and the compatibility block: a character class body.
CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"

_lock = threading.Lock()
_ready = False
_posseg: Any = None


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
