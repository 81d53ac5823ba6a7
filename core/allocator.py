"""glibc's allocator tuned for a long-lived process that holds large search indexes.

A scope's index is built from tens of megabytes of short-lived arrays, in a background thread
when a recall timeout is set (memories.retrieval.index). glibc raises its mmap threshold each
time such a block is freed (up to 32 MB), so the index's own blocks then come from the heap, and
the ones replaced as the index grows, or freed in the loading thread's arena, stay in the
process. Measured at 100k memories (docs/benchmarks.md, "After the row-lock fixes"): the worker's
RSS grew 386 -> 412 MB over a run of writes and searches. Two calls take that back:

* `configure`: a fixed mmap threshold (mallopt M_MMAP_THRESHOLD), so every block over it has its
  own mapping, given back to the system when freed;
* `release_free_memory`: malloc_trim(0) after an index load returns the free pages the load left
  in every arena.

Both are no-ops off glibc (macOS, musl); `configure` also when the operator set glibc's own
MALLOC_MMAP_THRESHOLD_ in the environment, which then wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache
from typing import Any

_M_MMAP_THRESHOLD = -3  # malloc.h


@cache
def _glibc() -> Any | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        # Only glibc has both (musl has neither malloc_trim nor the version call).
        if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "malloc_trim")):
            return None
    except OSError:
        return None
    return libc


def configure(mmap_threshold: int) -> bool:
    """Fixes glibc's mmap threshold at `mmap_threshold` bytes (0: leave glibc's dynamic one).
    True when set."""
    libc = _glibc()
    if libc is None or mmap_threshold <= 0 or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)))


def release_free_memory() -> bool:
    """Returns free heap pages of every arena to the system (a few ms); True if glibc did."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
