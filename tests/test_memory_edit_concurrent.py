"""Two edits of one memory at once, each in its own server process on one MariaDB database. The
second edit read the memory before the first committed and sets the text back to what it read:
the memory must end with that text *and its embedding*, not the embedding of the text the first
edit wrote (the second compared its text with its stale copy, found it unchanged and skipped the
embedding, so search found the memory by a meaning it no longer had).

The order is forced: a third process holds the memory's row, the first edit queues on it, then
the second; releasing the holder lets them go in that order (InnoDB grants a row's lock in the
order it was asked for)."""

from __future__ import annotations

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

# The stored embedding of memory {mid} against its text's own (the cosine; 1.0 when they agree).
AGREES = """
import json
import numpy as np
from memories.models import Memory
from memories.retrieval.embeddings import embed_passages
m = Memory.objects.get(pk={mid})
stored = np.frombuffer(m.embedding, dtype=np.float32)
print(json.dumps([m.content, float(stored @ embed_passages([m.content])[0])]))
"""


def test_an_edit_back_to_the_text_it_read_gets_that_texts_embedding(tmp_path):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        original = "The user's home address is 12 Elm Street."
        mid = a.write_memory("coder", original)["id"]
        queued_in_order(
            stack,
            ("memories.models", "Memory", mid),
            lambda: a.update_memory(mid, content="The deploy window is Friday at 5pm."),
            lambda: b.update_memory(mid, content=original),
        )
        content, cosine = stack_python(stack, AGREES.format(mid=mid))
        assert content == original
        assert cosine > 0.99
        # Search agrees: the memory is found by its own meaning, not the other text's.
        assert [h["id"] for h in a.search("coder", "home address of the user")] == [mid]
        assert a.search("coder", "deploy window Friday") == []
