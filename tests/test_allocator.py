"""core.allocator: glibc's mmap threshold fixed at start and free pages returned after an index
load. What it saves is measured in bench/latency.py (docs/benchmarks.md), not asserted here."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import pytest

from core import allocator

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's (no-op elsewhere)"
)


@glibc
def test_the_threshold_is_set_unless_the_operator_set_glibcs_own(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert allocator.configure(131072) is True
    assert allocator.configure(0) is False  # 0: glibc's dynamic threshold stays
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert allocator.configure(131072) is False


@glibc
def test_free_pages_go_back_after_a_large_temporary_allocation():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    # Many blocks under the threshold: they come from the heap, and freeing them leaves free
    # pages inside it that only a trim gives back.
    blocks = [libc.malloc(64 * 1024) for _ in range(256)]
    for block in blocks[:-1]:
        libc.free(block)
    assert allocator.release_free_memory() is True
    libc.free(blocks[-1])


def test_a_large_index_load_trims(team, monkeypatch):
    """The registry trims once a large scope's index is loaded (published first, then trimmed);
    a small one's load does not pay for a trim."""
    from memories.retrieval import index
    from memories.retrieval.embeddings import get_embedder
    from memories.services import memory_create

    memory_create(team=team, scope="personal", agent_id="a", content="Deploys run on Fridays.")
    calls = []
    monkeypatch.setattr(allocator, "release_free_memory", lambda: calls.append(1) or True)

    def load() -> int:
        index.registry.clear()
        ix = index.registry.get(
            team_id=team.id, scope="personal", agent_id="a", embedder=get_embedder()
        )
        return ix.alive_count

    assert load() == 1 and calls == []
    monkeypatch.setattr(index, "TRIM_AFTER_LOAD_ROWS", 1)
    assert load() == 1 and calls == [1]
