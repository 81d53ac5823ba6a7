"""Loading, before a process takes requests, what its first write or search would load.

The embedding model, jieba's dictionary and the dictionary bridge's glossary are loaded on first
use, once per process: ~1.3 s for the model alone, ~0.2 s for the Chinese tokenizer, several
seconds the first time the glossary's cache is built in DATA_DIR. Without this, each gunicorn
worker's first write or search after a start or restart waited for them (1.5–2.7 s in
bench/import_writes.py, docs/benchmarks.md). gunicorn.conf.py calls `warm_up_at_start` as each
worker starts, before it takes a request; `manage.py mcp_stdio` in a thread while its client
connects. Nothing here reads or writes the database.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings

from . import gloss
from .embeddings import OpenAIEmbedder, embed_passages, embed_query, get_embedder
from .text import tokenize, tokens_for_storage

logger = logging.getLogger(__name__)

# A write and a question in the scripts whose first use loads something of its own: English
# (the stemmer), Chinese in simplified and traditional characters (jieba, the simplifier, the
# glossary).
_SAMPLES = (
    "The user prefers short answers and does not like long explanations.",
    "用户喜欢喝乌龙茶，不喜欢咖啡。",
    "用戶偏好簡潔直接的回覆",
)


def warm_up() -> dict[str, int]:
    """Loads the models and dictionaries; returns the milliseconds each step took."""
    timings: dict[str, int] = {}

    def step(name: str, work: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        work()
        timings[name] = round((time.perf_counter() - t0) * 1000)

    if not isinstance(get_embedder(), OpenAIEmbedder):
        # A remote model has nothing to load here; a call to it that hangs or fails would hold
        # up (or, past gunicorn's timeout, kill) a worker that can answer without it.
        step("embedding", lambda: (embed_passages(list(_SAMPLES)), embed_query(_SAMPLES[0])))
    step("tokens", lambda: [(tokens_for_storage(s), tokenize(s)) for s in _SAMPLES])
    step("glossary", lambda: [gloss.words(tokenize(s)) for s in _SAMPLES])
    logger.info("warmed up in %d ms: %s", sum(timings.values()), timings)
    return timings


def warm_up_at_start() -> None:
    """`warm_up` unless WARM_UP_AT_START is off. A failure is logged and the process serves
    anyway: what failed loads on first use, as without a warm-up."""
    if not settings.WARM_UP_AT_START:
        return
    try:
        warm_up()
    except Exception:
        logger.exception("warm-up failed")
