"""A re-embed run (`reembed_memories`, `reembed_entities`) racing an edit through the API, each in
its own process on one MariaDB database. The run reads its batch, embeds it without a lock, then
writes under row locks; an edit that committed in between has embedded its new text itself, and
must keep that vector rather than be given the one of the text the run read.

The interleaving is forced, not hoped for: a third process holds the row's lock, so the edit
(already embedded) waits on it; the run then reads the old text, embeds it and queues behind the
edit; releasing the holder lets the edit commit first (InnoDB grants a row's lock in the order it
was asked for), then the run."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import ROOT, Stack, live_stack, row_held, stack_python, wait_for_lock_waits

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

# The stored vector of a row and the one its current text embeds to now, read in another process.
VECTORS = """
import json
import numpy as np
from {module} import {model}
from memories.retrieval.embeddings import embed_passages
row = {model}.objects.get(pk={pk!r})
print(json.dumps({{
    "text": {text},
    "stored": np.frombuffer(bytes(row.embedding), dtype="<f4").tolist(),
    "fresh": embed_passages([{text}])[0].tolist(),
}}))
"""


def manage(stack: Stack, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def vectors(stack: Stack, module: str, model: str, pk: Any, text: str) -> dict[str, Any]:
    return stack_python(stack, VECTORS.format(module=module, model=model, pk=pk, text=text))


def test_a_memory_edited_during_reembed_memories_keeps_the_vector_of_its_new_text(tmp_path):
    edited = "The user now prefers detailed explanations with worked examples."
    with live_stack(tmp_path, servers=1) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        target = client.write_memory("coder", "The user prefers short answers.")["id"]
        other = client.write_memory("coder", "Deploys happen on Fridays at 5pm.")["id"]
        client.search("coder", "warm up")  # the server's model is loaded before the race

        with ThreadPoolExecutor(1) as pool:
            with row_held(stack, "memories.models", "Memory", target):
                edit = pool.submit(client.update_memory, target, content=edited)
                wait_for_lock_waits(stack, 1)  # the edit has embedded and waits to write
                run = manage(stack, "reembed_memories", "--all", "--team", "xproc")
                wait_for_lock_waits(stack, 2)  # the run has read the old text and embedded it
            assert edit.result(timeout=60)["content"] == edited
            out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        state = vectors(stack, "memories.models", "Memory", target, "row.content")
        assert state["text"] == edited
        np.testing.assert_allclose(state["stored"], state["fresh"], rtol=1e-5, atol=1e-6)
        # The untouched memory was re-embedded; the edited one was left to its edit.
        assert "re-embedded 1 memories" in out, out
        untouched = vectors(stack, "memories.models", "Memory", other, "row.content")
        np.testing.assert_allclose(untouched["stored"], untouched["fresh"], rtol=1e-5, atol=1e-6)
        found = client.search("coder", "detailed explanations with worked examples")
        assert found and found[0]["id"] == target and found[0]["score"] > 0.8


def test_an_entity_renamed_during_reembed_entities_keeps_the_vector_of_its_new_name(tmp_path):
    with live_stack(tmp_path, servers=1) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        target = client.request(
            "POST", "/graph/entities", {"name": "Zebrafish", "entity_type": "concept"}
        )["id"]
        client.request("POST", "/graph/entities", {"name": "Kubernetes", "entity_type": "skill"})

        with ThreadPoolExecutor(1) as pool:
            with row_held(stack, "graph.models", "Entity", target):
                rename = pool.submit(
                    client.request,
                    "PUT",
                    f"/graph/entities/{target}",
                    {"name": "Lighthouse", "description": "a tower guiding ships"},
                )
                wait_for_lock_waits(stack, 1)
                run = manage(stack, "reembed_entities", "--all", "--team", "xproc")
                wait_for_lock_waits(stack, 2)
            assert rename.result(timeout=60)["name"] == "Lighthouse"
            out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        text = "embedding_text(row.name, row.description)"
        state = stack_python(
            stack,
            "from graph.services import embedding_text\n"
            + VECTORS.format(module="graph.models", model="Entity", pk=target, text=text),
        )
        np.testing.assert_allclose(state["stored"], state["fresh"], rtol=1e-5, atol=1e-6)
        assert "re-embedded 1 entities" in out, out
