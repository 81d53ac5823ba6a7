"""The hourly tiering pass (and the rewarm) against a pin, an importance or a read given at the
same moment, each in its own process on one MariaDB database. The pass read the memory idle and
unpinned, then moved it to the cold tier after the lead's pin had committed: a pinned memory out
of everyday search until the next pass. Now the pass locks the rows it would move and judges
them again.

The order is forced: a third process holds the memory's row, the pin queues on it first, then
the pass (which has already read the row as it was); releasing the holder lets the pin commit
first (InnoDB grants a row's lock in the order it was asked for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import Stack, live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

IDLE = """
import json
from datetime import timedelta
from django.utils import timezone
from memories.models import Memory
when = timezone.now() - timedelta(days=300)
Memory.objects.filter(pk={mid}).update(last_accessed=when, created_at=when)
print(json.dumps(True))
"""

RETIER = """
import json
from memories.tiers import memories_retier
print(json.dumps(memories_retier().moves))
"""

ROW = """
import json
from memories.models import Memory
m = Memory.objects.get(pk={mid})
print(json.dumps([m.tier, m.pinned, m.importance]))
"""


def _client(stack: Stack) -> MemoryClient:
    return MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=180)


def _queued(stack: Stack, mid: int, first: Callable[[], Any], code: str) -> tuple[Any, Any]:
    """`first` (a request) queued on the memory's row, then `code` (a pass, in a process of its
    own) behind it: both answers."""
    return queued_in_order(
        stack,
        ("memories.models", "Memory", mid),
        first,
        lambda: stack_python(stack, code),
    )


def _idle_memory(stack: Stack, client: MemoryClient, text: str) -> int:
    mid = client.write_memory("coder", text, importance=0.3)["id"]
    stack_python(stack, IDLE.format(mid=mid))
    return mid


@pytest.mark.parametrize(
    "change, expected",
    [({"pinned": True}, [True, 0.3]), ({"importance": 0.9}, [False, 0.9])],
    ids=["pin", "importance"],
)
def test_a_pass_queued_behind_a_pin_leaves_the_memory_hot(tmp_path, change, expected):
    with live_stack(tmp_path, servers=1) as stack:
        client = _client(stack)
        mid = _idle_memory(stack, client, "The staging cluster's admin password rotates monthly.")
        edited, moves = _queued(stack, mid, lambda: client.update_memory(mid, **change), RETIER)
        assert (edited["pinned"], edited["importance"]) == tuple(expected)
        assert moves == {}
        assert stack_python(stack, ROW.format(mid=mid)) == ["hot", *expected]


def test_the_pass_still_moves_an_idle_memory(tmp_path):
    """The same memory, nothing in the way: the pass moves it cold (the test above is not a pass
    that never moves anything)."""
    with live_stack(tmp_path, servers=1) as stack:
        client = _client(stack)
        mid = _idle_memory(stack, client, "The staging cluster's admin password rotates monthly.")
        moves: Any = stack_python(stack, RETIER)
        assert moves == {"hot->cold": 1}
        assert stack_python(stack, ROW.format(mid=mid)) == ["cold", False, 0.3]


# The rewarm after an operator lowered the cold threshold to 0: nothing is cold by the rule.
REWARM = """
import json
from django.conf import settings
from memories.tiers import memories_rewarm
settings.TIER_COLD_RETENTION = 0.0
print(json.dumps(memories_rewarm().moves))
"""


def _cooled_memory(stack: Stack, client: MemoryClient, text: str) -> int:
    mid = _idle_memory(stack, client, text)
    assert stack_python(stack, RETIER) == {"hot->cold": 1}
    return mid


@pytest.mark.parametrize(
    "recall, expected",
    [
        (lambda client, mid: client.get_memory(mid), ["hot", False]),
        (lambda client, mid: client.update_memory(mid, pinned=True), ["hot", True]),
    ],
    ids=["read-by-id", "pin"],
)
def test_a_rewarm_queued_behind_a_recall_leaves_the_memory_hot(tmp_path, recall, expected):
    """The rewarm read the memory cold and idle and would make it warm; a read by id (or a pin)
    made it hot first. Judged again under the row's lock, the rewarm leaves it hot."""
    with live_stack(tmp_path, servers=1) as stack:
        client = _client(stack)
        mid = _cooled_memory(stack, client, "The billing service retries a failed charge twice.")
        _, moves = _queued(stack, mid, lambda: recall(client, mid), REWARM)
        assert moves == {}
        assert stack_python(stack, ROW.format(mid=mid))[:2] == expected


def test_the_rewarm_still_warms_a_cooled_memory(tmp_path):
    """Nothing in the way: the same rewarm warms the memory (the test above can fail)."""
    with live_stack(tmp_path, servers=1) as stack:
        client = _client(stack)
        mid = _cooled_memory(stack, client, "The billing service retries a failed charge twice.")
        assert stack_python(stack, REWARM) == {"cold->warm": 1}
        assert stack_python(stack, ROW.format(mid=mid)) == ["warm", False, 0.3]
