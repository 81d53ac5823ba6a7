"""Consolidations of one agent at once, in separate server processes on one database: each group
is written under the agent's scope lock and only while none of its fragments is cold yet, so
however the runs interleave, every fragment is demoted to cold exactly once, linked to the one fact
of its group."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from memoryplatform.client import MemoryClient

from .fake_openai import FakeOpenAI
from .livestack import live_stack, stack_python

pytestmark = pytest.mark.django_db(transaction=True)

GROUPS = [
    [
        "The user wants short answers without long explanations.",
        "The user asked again for shorter answers, no long explanations.",
        "The user prefers short answers and dislikes long explanations.",
    ],
    [
        "Deploys to production happen every Friday at 5pm.",
        "Production deploys are scheduled every Friday at 5pm.",
        "We deploy to production on Fridays at 5pm.",
    ],
]
ALONE = "The user drinks green tea every morning."
RUNS = 3

# What the stack's database holds for the agent, read by a process of its own.
STATE = """
import json
from memories.models import Memory, MemoryRevision, TrashedMemory
rows = list(
    Memory.objects.filter(agent_id="coder").values("id", "superseded_by_id", "tier", "metadata")
)
# The revisions that wrote a fragment's link to its fact.
links = [
    r.memory_id
    for r in MemoryRevision.objects.order_by("id")
    if "consolidated_into" in (r.after.get("metadata") or {})
]
print(json.dumps({"rows": rows, "links": links, "trashed": TrashedMemory.objects.count()}))
"""


def test_concurrent_consolidations_demote_each_fragment_once(tmp_path):
    with FakeOpenAI() as fake:
        # Any run may get any reply: the fact's text does not matter here, only who writes it.
        fake.chat_replies.extend(
            json.dumps(
                {
                    "summaries": [
                        {
                            "content": f"consolidated point {i}",
                            "importance": 0.8,
                            "source_indexes": [0, 1, 2],
                        }
                    ]
                }
            )
            for i in range(RUNS * len(GROUPS))
        )
        env = {
            "LLM_BASE_URL": fake.base_url,
            "LLM_MODEL": "fake-chat",
            "LLM_API_KEY": "sk-test",
            "LLM_TIMEOUT_SECONDS": "150",  # longer than the gate may hold a request
        }
        with live_stack(tmp_path, servers=RUNS, extra_env=env) as stack:
            clients = [
                MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=180)
                for u in stack.urls
            ]
            fragments = [
                [
                    clients[0].write_memory("coder", text, importance=0.6, enable_dedup=False)["id"]
                    for text in group
                ]
                for group in GROUPS
            ]
            alone = clients[0].write_memory("coder", ALONE, enable_dedup=False)["id"]
            for client in clients:  # each process loads its model and index before the race
                client.search("coder", "warm up")

            # Each run reads the live fragments, then asks the LLM for each group; the fake
            # answers a group's three requests only once all three arrived, so every run has
            # read every fragment live before the first one writes anything.
            fake.chat_gate = threading.Barrier(RUNS, timeout=120)
            start = threading.Barrier(RUNS)

            def consolidate(client: MemoryClient) -> dict:
                start.wait()
                return client.consolidate("coder")

            with ThreadPoolExecutor(RUNS) as pool:
                answers = list(pool.map(consolidate, clients))

            chat_calls = [r for r in fake.requests if r["path"].endswith("/chat/completions")]
            assert len(chat_calls) == RUNS * len(GROUPS), "the runs did not overlap"
            done = [c for a in answers for c in a["consolidated"]]
            assert sorted(sorted(c["fragments"]) for c in done) == sorted(
                sorted(f) for f in fragments
            ), "each group consolidated by exactly one run"

            state = stack_python(stack, STATE)
            rows = {r["id"]: r for r in state["rows"]}
            facts = [r for r in state["rows"] if r["metadata"].get("source") == "consolidation"]
            # One fact per group, no other row written, nothing deleted or trashed.
            assert len(facts) == len(GROUPS) and len(rows) == 7 + len(GROUPS)
            assert state["trashed"] == 0
            assert sorted(sorted(f["metadata"]["consolidated_from"]) for f in facts) == sorted(
                sorted(f) for f in fragments
            )
            for fact in facts:
                assert rows[fact["id"]]["tier"] == "hot"
                for pk in fact["metadata"]["consolidated_from"]:
                    assert rows[pk]["tier"] == "cold"
                    assert rows[pk]["metadata"]["consolidated_into"] == fact["id"]
                    assert rows[pk]["superseded_by_id"] is None  # kept, searchable when asked
            # Each fragment linked once: one revision each, none for anything else.
            assert sorted(state["links"]) == sorted(pk for g in fragments for pk in g)
            assert (
                rows[alone]["tier"] == "hot" and "consolidated_into" not in rows[alone]["metadata"]
            )
