"""An agent deleted through one server process, then written for through another that had
registered it before: two real server processes on one database (a SQLite file or MariaDB).

Each process keeps a cache of the agents it registered (tenants.services._known_agents), which
a deletion made by another process does not clear. A long-term write (memory, profile, rule,
share) registers its agent without that cache, so the agent exists again at once: listed, and
erasable with what was written. Working-memory writes keep the cache and trust an entry only
while the deletion notice in the shared cache (Redis) is the one it was made under; processes
that share no cache miss the notice, so there the write reads the agent's row once its item is
stored. The compress those writes queue also registers the agent when it is queued, so the job
runs instead of failing 404.

The cache is set to outlive the test (AGENT_CACHE_SECONDS), so the entry the first process
holds cannot expire before the write that must not trust it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from memoryplatform.client import MemoryClient

from .livestack import Stack, live_stack, stack_python

pytestmark = pytest.mark.django_db(transaction=True)

LEFT = """
import json
from memories.models import Memory, MemoryShare, Procedure, ProfileField
from tenants.models import Agent
print(json.dumps({
    "agent": Agent.objects.filter(agent_id="coder").count(),
    "memories": Memory.objects.filter(agent_id="coder").count(),
    "profile": ProfileField.objects.filter(agent_id="coder").count(),
    "rules": Procedure.objects.filter(agent_id="coder").count(),
    "shares": MemoryShare.objects.filter(agent_id="coder").count(),
}))
"""
NOTHING = {"agent": 0, "memories": 0, "profile": 0, "rules": 0, "shares": 0}

COMPRESS_JOBS = """
import json
from lifecycle.models import JobKind, JobRun
print(json.dumps([
    [j.status, j.error]
    for j in JobRun.objects.filter(kind=JobKind.COMPRESS, agent_id="coder").order_by("pk")
]))
"""


def _memory(a: MemoryClient, stack: Stack) -> dict[str, int]:
    a.write_memory("coder", "Prefers tabs to spaces in Python code.")
    return {"memories": 1}


def _profile(a: MemoryClient, stack: Stack) -> dict[str, int]:
    a.set_profile("coder", {"editor": "vim"})
    return {"profile": 1}


def _rule(a: MemoryClient, stack: Stack) -> dict[str, int]:
    a.add_procedure("coder", "Run the tests before every commit.")
    return {"rules": 1}


def _share(a: MemoryClient, stack: Stack) -> dict[str, int]:
    owned = a.write_memory("reviewer", "The release checklist lives in docs/release.md.")
    a.post(f"/memories/personal/{owned['id']}/share", {"agent_ids": ["coder"]})
    return {"shares": 1}


def _working(a: MemoryClient, stack: Stack) -> dict[str, int]:
    # The second item reaches compress_every_n: a compress is queued and runs in the process.
    a.write_working("coder", "I live in Singapore and trade crypto on Binance.")
    a.write_working("coder", "My leverage limit is 3x on every account.")
    deadline = time.monotonic() + 120
    jobs = stack_python(stack, COMPRESS_JOBS)
    while (not jobs or jobs[-1][0] in ("queued", "running")) and time.monotonic() < deadline:
        time.sleep(0.5)
        jobs = stack_python(stack, COMPRESS_JOBS)
    # Before, the job failed 404 on its agent and the items stayed in working memory.
    assert jobs and jobs[-1] == ["succeeded", ""], jobs
    assert not a.get_working("coder")
    return {"memories": stack_python(stack, LEFT)["memories"]}


WRITES: dict[str, Callable[[MemoryClient, Stack], dict[str, int]]] = {
    "memory": _memory,
    "profile": _profile,
    "rule": _rule,
    "share": _share,
    "working memory, then its compress": _working,
}


def _clients(stack: Stack) -> tuple[MemoryClient, MemoryClient]:
    a, b = (MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls)
    return a, b


@pytest.mark.parametrize("kind", list(WRITES))
def test_a_write_through_another_process_than_the_agents_deletion_registers_it_again(
    tmp_path, kind
):
    with live_stack(tmp_path, servers=2, extra_env={"AGENT_CACHE_SECONDS": "600"}) as stack:
        a, b = _clients(stack)
        team = stack.team_id
        a.set_pipeline_config(compress_every_n=2, warmup_max_memories=0)
        # Registered by process A, through its cache (one item: below compress_every_n).
        a.write_working("coder", "Drafting the release notes for 2.4.")
        b.delete_agent(team, "coder")
        assert stack_python(stack, LEFT) == NOTHING

        written = WRITES[kind](a, stack)

        left: dict[str, Any] = stack_python(stack, LEFT)
        assert left == {**NOTHING, "agent": 1, **written}
        assert left["memories"] or left["profile"] or left["rules"] or left["shares"]
        assert "coder" in [agent["id"] for agent in b.list_agents(team)]
        # Erasable with the agent: before, this answered 404 and what was written stayed.
        b.delete_agent(team, "coder")
        assert stack_python(stack, LEFT) == NOTHING


@pytest.mark.parametrize("shared", ["redis", "none"])
def test_a_working_memory_write_through_another_process_registers_the_agent_again(
    tmp_path, shared, request
):
    """With a shared cache (Redis: production requires one), the deletion's notice reaches the
    process that cached the agent; without one (the embedded default: each process its own
    cache), the write reads the agent's row once its item is stored. Either way a working-memory
    write registers the agent again at once, without the compress (the pipeline is off here)."""
    redis = request.getfixturevalue("redis_required") if shared == "redis" else ""
    env = {"AGENT_CACHE_SECONDS": "600", "REDIS_URL": redis}
    with live_stack(tmp_path, servers=2, extra_env=env) as stack:
        a, b = _clients(stack)
        team = stack.team_id
        a.write_working("coder", "Drafting the release notes for 2.4.")
        b.delete_agent(team, "coder")
        assert stack_python(stack, LEFT) == NOTHING

        a.write_working("coder", "The release is due on Friday.")

        # Before, the agent stayed deleted for AGENT_CACHE_SECONDS while its item waited.
        assert stack_python(stack, LEFT) == {**NOTHING, "agent": 1}
        assert "coder" in [agent["id"] for agent in b.list_agents(team)]
        assert [i["content"] for i in b.get_working("coder")] == ["The release is due on Friday."]
        assert stack_python(stack, COMPRESS_JOBS) == []
        b.delete_agent(team, "coder")
        assert not a.get_working("coder")
        assert stack_python(stack, LEFT) == NOTHING
