"""A console restore racing the API's erase or restore of the same trash item, each in its own
process on one MariaDB database. The console restores items it listed a moment before; what was
erased meanwhile must stay erased (an erasure request is final), and what was restored meanwhile
is restored once, the other attempt reported, never a 500 or a second copy.

The order is forced, not hoped for: a third process holds the trash row, the API request queues
on it first, then the console's restore; releasing the holder lets the API go first (InnoDB grants
a row's lock in the order it was asked for). Two erasures rewriting one answer kept for retries
are queued the same way, on that answer's row."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryAPIError, MemoryClient

from .livestack import (
    ROOT,
    Stack,
    live_stack,
    queued_in_order,
    row_held,
    stack_process,
    stack_python,
    wait_for_lock_waits,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

# What the console's restore view does with an item its page listed: the item read before, then
# memories.purge.trash_restore.
CONSOLE_RESTORE = """
import json
from memories.models import TrashedMemory
from memories.purge import trash_restore
item = TrashedMemory.objects.get(memory_id={mid})
print("read", flush=True)
result = trash_restore(team=item.team, items=[item])
print(json.dumps({{"restored": result.restored, "problems": result.problems}}))
"""

STATE = """
import json
from memories.models import Memory, TrashedMemory
print(json.dumps({{
    "live": Memory.objects.filter(pk={mid}).count(),
    "trashed": TrashedMemory.objects.filter(memory_id={mid}).count(),
}}))
"""


def console_restore(stack: Stack, mid: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", CONSOLE_RESTORE.format(mid=mid)],
        cwd=ROOT,
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    while (line := proc.stdout.readline()) and line.strip() != "read":
        pass
    assert line, proc.communicate()
    return proc


def trashed_memory(stack: Stack) -> tuple[MemoryClient, int, int]:
    client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
    mid = client.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]
    client.delete_memory(mid)
    item = stack_python(
        stack,
        "import json\nfrom memories.models import TrashedMemory\n"
        f"print(json.dumps(TrashedMemory.objects.get(memory_id={mid}).pk))",
    )
    return client, mid, item


def race(stack: Stack, item: int, mid: int, api_call: Any) -> tuple[Any, dict[str, Any]]:
    """`api_call` and the console's restore of `mid`, queued in that order on the trash row."""
    with ThreadPoolExecutor(1) as pool:
        with row_held(stack, "memories.models", "TrashedMemory", item):
            api = pool.submit(api_call)
            wait_for_lock_waits(stack, 1)
            console = console_restore(stack, mid)
            wait_for_lock_waits(stack, 2)
        out, err = console.communicate(timeout=120)
        assert console.returncode == 0, err
        return api.result(timeout=60), json.loads(out.strip().splitlines()[-1])


def test_an_erasure_is_not_undone_by_a_console_restore_that_raced_it(tmp_path):
    with live_stack(tmp_path, servers=1) as stack:
        client, mid, item = trashed_memory(stack)
        erased, console = race(stack, item, mid, lambda: client.erase_memory(mid))
        assert erased is None
        assert stack_python(stack, STATE.format(mid=mid)) == {"live": 0, "trashed": 0}
        assert console["restored"] == []
        assert "no longer in the trash" in console["problems"][0]
        assert client.search("coder", "home address Elm Street", min_score=0.0) == []


def test_two_restores_at_once_put_the_memory_back_once(tmp_path):
    with live_stack(tmp_path, servers=1) as stack:
        client, mid, item = trashed_memory(stack)
        restored, console = race(stack, item, mid, lambda: client.restore_memory(mid))
        assert restored["id"] == mid
        assert stack_python(stack, STATE.format(mid=mid)) == {"live": 1, "trashed": 0}
        assert console["restored"] == [] and len(console["problems"]) == 1
        found = client.search("coder", "home address Elm Street")
        assert [m["id"] for m in found] == [mid]
        with pytest.raises(MemoryAPIError) as gone:
            client.restore_memory(mid)
        assert gone.value.status == 404


# Idle for 200 days; `cold`: in the cold tier for longer than the grace (the cleanup trashes it),
# else warm (the cleanup moves it to the cold tier).
STALE = """
import json
from datetime import timedelta
from django.conf import settings
from django.utils import timezone
from memories.models import Memory, MemoryTier
now = timezone.now()
Memory.objects.filter(pk__in={ids}).update(
    created_at=now - timedelta(days=200),
    last_accessed=now - timedelta(days=200),
    tier=MemoryTier.COLD if {cold} else MemoryTier.WARM,
    tier_changed_at=now - timedelta(days=settings.CLEANUP_COLD_GRACE_DAYS + 1),
)
print(json.dumps(True))
"""

TIER = """
import json
from memories.models import Memory
print(json.dumps(Memory.objects.get(pk={mid}).tier))
"""


@pytest.mark.parametrize("cold", [True, False], ids=["trash", "cool"])
def test_a_memory_pinned_while_a_cleanup_runs_stays_where_it_was(tmp_path, cold):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        a.request("POST", "/lifecycle/auto-config", {"enabled": False})
        pinned, other = (
            a.write_memory("coder", text, importance=0.1)["id"]
            for text in ("The staging password rotates monthly.", "Lunch is at noon.")
        )
        assert stack_python(stack, STALE.format(ids=[pinned, other], cold=cold))

        # The pin queues first on the row; the cleanup reads both as candidates (the pin is
        # not committed), then queues behind it for the rows' locks.
        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "memories.models", "Memory", pinned):
                pin = pool.submit(a.update_memory, pinned, pinned=True)
                wait_for_lock_waits(stack, 1)
                cleanup = pool.submit(
                    b.request,
                    "POST",
                    "/lifecycle/cleanup",
                    {"max_age_days": 90, "min_importance": 0.2},
                )
                wait_for_lock_waits(stack, 2)
            assert pin.result(timeout=60)["pinned"] is True
            done = cleanup.result(timeout=60)
        assert (done["trashed"], done["cooled"]) == (([other], []) if cold else ([], [other]))
        state = stack_python(stack, STATE.format(mid=pinned))
        assert state == {"live": 1, "trashed": 0}
        # The pin made it hot (a pinned memory is hot at once), and the cleanup, which had read
        # it as a candidate, left it there: neither trashed nor cooled.
        assert stack_python(stack, TIER.format(mid=pinned)) == "hot"
        assert a.get_memory(pinned)["pinned"] is True


@pytest.mark.parametrize("first", ["restore", "write"])
def test_a_restore_racing_the_same_content_leaves_one_memory(tmp_path, first):
    """Two trash items saying the same (written, deleted, written again, deleted): a restore of
    the second races a restore of the first, or a new write of the same text, through another
    server. One memory comes back; the restore answers 409 and its item stays in the trash.

    The order is forced on the team's row, which every INSERT of a memory reads (the foreign
    key's shared lock): without the scope's write lock in the restore, both had passed their
    "a live memory says the same" check before either inserted, and both were stored."""
    text = "Deploys to production need two approvals."
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        ids = []
        for _ in range(2):
            ids.append(a.write_memory("coder", text)["id"])
            a.delete_memory(ids[-1])
        team = stack_python(
            stack,
            "import json\nfrom tenants.models import Team\nprint(json.dumps(Team.objects.get().pk))",
        )

        def restore() -> Any:
            try:
                return b.restore_memory(ids[1])
            except MemoryAPIError as e:
                return e.status

        def winner() -> Any:
            return a.restore_memory(ids[0]) if first == "restore" else a.write_memory("coder", text)

        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "tenants.models", "Team", team):
                won = pool.submit(winner)
                wait_for_lock_waits(stack, 1)
                lost = pool.submit(restore)
                wait_for_lock_waits(stack, 2)
            kept = won.result(timeout=60)
            assert lost.result(timeout=60) == 409
        assert kept.get("dedup_skipped") is not True
        assert stack_python(stack, STATE.format(mid=ids[1])) == {"live": 0, "trashed": 1}
        found = a.search("coder", "production approvals")
        assert [m["id"] for m in found] == [kept["id"]]
        assert kept["id"] == ids[0] if first == "restore" else kept["id"] not in ids


@pytest.mark.parametrize(
    "method, suffix, body",
    [
        ("PUT", "", {"content": "The user's home address is 7 Oak Road."}),
        ("POST", "/share", {"agent_ids": ["reviewer"], "permission": "read"}),
        ("DELETE", "", None),
    ],
    ids=["update", "share", "delete"],
)
def test_a_request_queued_behind_a_delete_finds_the_memory_gone(tmp_path, method, suffix, body):
    """An edit, a share or a second delete that found the memory, then waited for its row while
    a DELETE moved it to the trash, answers 404 as it would have a moment later (it was a 500),
    and the trash keeps the memory as the DELETE saw it."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        mid = a.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]

        def late() -> Any:
            try:
                return b.request(method, f"/memories/personal/{mid}{suffix}", body)
            except MemoryAPIError as e:
                return e.status, e.code

        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "memories.models", "Memory", mid):
                deleted = pool.submit(a.delete_memory, mid)
                wait_for_lock_waits(stack, 1)
                queued = pool.submit(late)
                wait_for_lock_waits(stack, 2, unless=queued)
            assert deleted.result(timeout=60) is None
            assert queued.result(timeout=60) == (404, "NOT_FOUND")
        assert stack_python(stack, STATE.format(mid=mid)) == {"live": 0, "trashed": 1}
        (item,) = a.list_trash()["items"]
        assert item["content"] == "The user's home address is 12 Elm Street."
        restored = a.restore_memory(mid)
        assert restored["content"] == "The user's home address is 12 Elm Street."


def test_an_mcp_forget_queued_behind_a_delete_finds_the_memory_gone(tmp_path):
    """The MCP `memory_forget` tool that read the memory, then waited for its row while an API
    DELETE moved it to the trash: NOT_FOUND, as a moment later (it said "forgotten" although it
    trashed nothing), and the trash item is the DELETE's."""
    from .test_mcp import error_code, session

    with live_stack(tmp_path, servers=2) as stack:
        a = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        mid = a.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]
        token = stack_python(
            stack,
            "import json\nfrom tenants.models import Team\n"
            "from tenants.services import mcp_token_issue\n"
            "print(json.dumps(mcp_token_issue(team=Team.objects.get()).token))",
        )

        async def forget() -> str:
            async with session(f"{stack.urls[1]}/mcp", token) as c:
                return error_code(await c.call_tool("memory_forget", {"memory_id": mid}))

        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "memories.models", "Memory", mid):
                deleted = pool.submit(a.delete_memory, mid)
                wait_for_lock_waits(stack, 1)
                queued = pool.submit(asyncio.run, forget())
                wait_for_lock_waits(stack, 2, unless=queued)
            assert deleted.result(timeout=60) is None
            assert queued.result(timeout=60) == "NOT_FOUND"
        assert stack_python(stack, STATE.format(mid=mid)) == {"live": 0, "trashed": 1}
        (item,) = a.list_trash()["items"]
        assert "MCP" not in item["reason"]


@pytest.mark.parametrize("first", ["delete", "update"])
def test_an_erasure_queued_behind_another_request_still_erases(tmp_path, first):
    """`DELETE ?purge=true` that found the memory, then waited for its row: behind a DELETE that
    moved it to the trash it erases the trash item (it answered 200 and left the memory there for
    the retention); behind an edit it erases the edited memory and the revision the edit wrote
    (the database refused the delete for that revision: a 500)."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        mid = a.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]
        before = (
            (lambda: a.delete_memory(mid))
            if first == "delete"
            else (lambda: a.update_memory(mid, content="The user's home address is 7 Oak Road."))
        )
        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "memories.models", "Memory", mid):
                done = pool.submit(before)
                wait_for_lock_waits(stack, 1)
                erased = pool.submit(b.delete_memory, mid, purge=True)
                wait_for_lock_waits(stack, 2)
            done.result(timeout=60)
            assert erased.result(timeout=60) is None
        assert stack_python(stack, STATE.format(mid=mid)) == {"live": 0, "trashed": 0}
        assert a.list_trash()["items"] == []
        assert a.search("coder", "home address", min_score=0.0) == []


def test_two_erasures_of_one_batchs_memories_at_once_both_leave_its_answer(tmp_path):
    """Each erasure (two purges, which lock only their own memory) rewrites the batch's answer
    kept for retries. Both read it before either wrote: written back from that read, the second
    would put the first's memory back into it."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        items = [
            {"agent_id": "coder", "content": text, "enable_dedup": False}
            for text in ("The user's PIN is 9911.", "The user's locker is 42.")
        ]
        results = a.write_memories(items, idempotency_key="batch-1")["results"]
        first, second = (r["memory"]["id"] for r in results)
        answer = stack_python(
            stack,
            "import json\nfrom tenants.models import IdempotentRequest\n"
            "print(json.dumps(IdempotentRequest.objects.get(key='batch-1').pk))",
        )
        erased = queued_in_order(
            stack,
            ("tenants.models", "IdempotentRequest", answer),
            lambda: a.delete_memory(first, purge=True),
            lambda: b.delete_memory(second, purge=True),
        )
        assert erased == (None, None)
        replayed = a.write_memories(items, idempotency_key="batch-1")["results"]
        assert [r["memory"] for r in replayed] == [
            {"id": first, "erased": True},
            {"id": second, "erased": True},
        ]


# A memory's own expiry: moved to the past as time passing would; the hourly pass run alone.
EXPIRED = """
import json
from datetime import timedelta
from django.utils import timezone
from memories.models import Memory
Memory.objects.filter(pk__in={ids}).update(expires_at=timezone.now() - timedelta(minutes=1))
print(json.dumps(True))
"""

EXPIRE_PASS = """
import json
from memories.purge import memories_expire
print(json.dumps(memories_expire()))
"""

TRASHED = """
import json
from memories.models import Memory, TrashedMemory
print(json.dumps({{
    "live": sorted(Memory.objects.filter(pk__in={ids}).values_list("pk", flat=True)),
    "trashed": sorted(TrashedMemory.objects.values_list("memory_id", flat=True)),
}}))
"""


def expired_memories(stack: Stack, texts: tuple[str, ...]) -> tuple[MemoryClient, list[int]]:
    client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
    ahead = "2031-01-01T00:00:00Z"
    ids = [client.write_memory("coder", t, expires_at=ahead)["id"] for t in texts]
    assert stack_python(stack, EXPIRED.format(ids=ids))
    return client, ids


def test_two_expiry_passes_at_once_trash_each_memory_once(tmp_path):
    """Two workers' hourly passes (beat on two nodes, or a late one) read the same expired
    memories; queued on one of their rows, the second finds them gone, never trashed twice."""
    with live_stack(tmp_path, servers=1) as stack:
        client, ids = expired_memories(
            stack, ("The office is closed for renovation.", "The user is in Lisbon.")
        )
        with row_held(stack, "memories.models", "Memory", ids[-1]):
            passes = [stack_process(stack, EXPIRE_PASS) for _ in range(2)]
            wait_for_lock_waits(stack, 2)
        counts = []
        for proc in passes:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            counts.append(json.loads(out.strip().splitlines()[-1]))
        assert sorted(counts) == [0, 2]
        assert stack_python(stack, TRASHED.format(ids=ids)) == {"live": [], "trashed": ids}
        assert sorted(t["id"] for t in client.list_trash()["items"]) == ids


def test_an_expiry_cleared_while_the_pass_waits_keeps_the_memory(tmp_path):
    """The pass chose the memory as expired; the agent's update clearing its expiry commits
    first: the pass, reading the row again under lock, leaves it."""
    with live_stack(tmp_path, servers=1) as stack:
        client, (mid,) = expired_memories(stack, ("The user is on call this week.",))
        cleared, moved = queued_in_order(
            stack,
            ("memories.models", "Memory", mid),
            lambda: client.update_memory(mid, expires_at=None),
            lambda: stack_python(stack, EXPIRE_PASS),
        )
        assert "expires_at" not in cleared and moved == 0
        assert stack_python(stack, TRASHED.format(ids=[mid])) == {"live": [mid], "trashed": []}
        assert [m["id"] for m in client.search("coder", "on call this week")] == [mid]


def batch_of_two(stack: Stack) -> tuple[MemoryClient, MemoryClient, list[int]]:
    """Two memories, and a client on each of the stack's two servers."""
    first, second = (
        MemoryClient(stack.api_key, stack.secret, base_url=url, timeout=120) for url in stack.urls
    )
    texts = ("The user's locker code is 4412.", "The user parks on level 3.")
    ids = [first.write_memory("coder", t, enable_dedup=False)["id"] for t in texts]
    return first, second, ids


@pytest.mark.parametrize("purge", [False, True], ids=["delete", "erase"])
def test_a_batch_delete_queued_behind_another(tmp_path, purge):
    """Two batch deletes of the same memories on two servers, queued on the first one's row.
    The first moves both to the trash. The second, a delete, finds them gone (404 each): nothing
    is trashed twice. The second, an erasure (`purge: true`), erases them in the trash: gone
    everywhere, as its caller is told."""
    with live_stack(tmp_path, servers=2) as stack:
        first, second, ids = batch_of_two(stack)
        one, two = queued_in_order(
            stack,
            ("memories.models", "Memory", ids[0]),
            lambda: first.delete_memories(ids),
            lambda: second.delete_memories(ids[::-1], purge=purge),
        )
        assert one == {"results": [{"id": i, "status": 200} for i in ids], "removed": 2}
        assert [r["status"] for r in two["results"]] == ([200, 200] if purge else [404, 404])
        state = stack_python(stack, TRASHED.format(ids=ids))
        assert state == {"live": [], "trashed": [] if purge else ids}


def test_a_batch_update_queued_behind_a_delete_reports_that_memory_gone(tmp_path):
    """A batch update that found both memories, then waited for one's row while a DELETE on the
    other server moved it to the trash: that item is a 404 as a PUT would be, the other is
    applied, and the trash keeps the memory as the DELETE saw it."""
    with live_stack(tmp_path, servers=2) as stack:
        first, second, ids = batch_of_two(stack)
        changes = [{"id": i, "content": f"Changed text number {n}."} for n, i in enumerate(ids)]
        deleted, updated = queued_in_order(
            stack,
            ("memories.models", "Memory", ids[0]),
            lambda: first.delete_memory(ids[0]),
            lambda: second.update_memories(changes),
        )
        assert deleted is None
        assert [(r["id"], r["status"]) for r in updated["results"]] == [
            (ids[0], 404),
            (ids[1], 200),
        ]
        assert updated["updated"] == 1
        assert stack_python(stack, TRASHED.format(ids=ids)) == {
            "live": [ids[1]],
            "trashed": [ids[0]],
        }
        (item,) = first.list_trash()["items"]
        assert item["content"] == "The user's locker code is 4412."
