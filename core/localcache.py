"""Small per-process caches with a time to live, for hot-path lookups whose staleness across
processes is bounded and documented. Never used for anything that authorises a request.

Every cache registers itself so tests (and `clear_all`) can empty them: ids are reused between
tests, and a cached answer must not outlive the rows it came from.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_all: list[TTLCache[object, object]] = []


class TTLCache(Generic[K, V]):
    def __init__(self, *, ttl_seconds: float, max_entries: int = 10_000) -> None:
        self.ttl = ttl_seconds
        self.max_entries = max_entries
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        _all.append(self)  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        if self.ttl <= 0:
            return None
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return None
            if hit[0] < time.monotonic():
                del self._data[key]
                return None
            return hit[1]

    def set(self, key: K, value: V) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._data[key] = (time.monotonic() + self.ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def clear_all() -> None:
    for cache in _all:
        cache.clear()
