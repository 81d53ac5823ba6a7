"""A console change reaching a memory that an agent's DELETE removed after the console read it,
each in its own process on one MariaDB database. The lead's page listed the memory a moment
before; the change must say the memory is gone (nothing changed, the trash keeps it) instead of
a 500 or a redirect to a page that is now a 404, and a bulk change still changes the others.

The order is forced: a third process holds the memory's row, the API's DELETE queues on it
first, then the console's POST; releasing the holder lets the DELETE go first (InnoDB grants a
row's lock in the order it was asked for)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import ROOT, Stack, live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

# A lead of the stack's team logged in on Django's test client, in a process of its own, posting
# one console form; prints the answer and the messages it left for the next page.
CONSOLE_POST = """
import json
from django.test.utils import setup_test_environment
setup_test_environment()  # the test client's host
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client
from tenants.models import Team, TeamMembership, TeamRole
team = Team.objects.get()
user = get_user_model().objects.create_user("lead", password="pw-123456", is_staff=True)
TeamMembership.objects.create(user=user, team=team, role=TeamRole.LEAD)
client = Client()
client.force_login(user)
response = client.post(f"/review/{{team.id}}/{path}", {data})
print(json.dumps({{
    "status": response.status_code,
    "location": response.get("Location", ""),
    "base": f"/review/{{team.id}}/",
    "messages": [str(m) for m in get_messages(response.wsgi_request)],
}}))
"""

STATE = """
import json
from memories.models import Memory, MemoryShare, TrashedMemory
print(json.dumps({{
    "live": Memory.objects.filter(pk={mid}).count(),
    "trashed": TrashedMemory.objects.filter(memory_id={mid}).count(),
    "pinned": list(Memory.objects.filter(pinned=True).values_list("pk", flat=True)),
    "shared": list(MemoryShare.objects.values_list("memory_id", "agent_id")),
}}))
"""


def console_post(stack: Stack, path: str, data: dict[str, Any]) -> dict[str, Any]:
    """POST `data` to the team's console page `path` (under /review/<team>/) as a lead."""
    proc = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            CONSOLE_POST.format(path=path, data=repr(data)),
        ],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def behind_a_delete(
    stack: Stack, client: MemoryClient, mid: int, path: str, data: dict[str, Any]
) -> dict[str, Any]:
    """The console's POST of `path`, queued on memory `mid`'s row behind an API DELETE of it."""
    deleted, answer = queued_in_order(
        stack,
        ("memories.models", "Memory", mid),
        lambda: client.delete_memory(mid),
        lambda: console_post(stack, path, data),
    )
    assert deleted is None
    return answer


@pytest.mark.parametrize(
    "action",
    ["quick edit", "correction", "share", "promote"],
)
def test_a_console_change_queued_behind_a_delete_says_the_memory_is_gone(tmp_path, action):
    """Quick edit and the correction form answered 500; share and promote redirected to the
    memory's page, now a 404, with their message."""
    with live_stack(tmp_path, servers=1) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        client.write_memory("reviewer", "The reviewer checks every migration twice.")
        mid = client.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]
        path, data = {
            "quick edit": (f"{mid}/quick/", {"importance": "0.9", "pinned": "1"}),
            "correction": (
                f"{mid}/",
                {
                    "content": "The user's home address is 7 Oak Road.",
                    "importance": "0.5",
                    "category": "general",
                },
            ),
            "share": (f"{mid}/share/", {"agents": ["reviewer"], "permission": "read"}),
            "promote": (f"{mid}/promote/", {}),
        }[action]
        answer = behind_a_delete(stack, client, mid, f"memories/{path}", data)
        assert (answer["status"], answer["location"]) == (302, answer["base"] + "memories/")
        assert answer["messages"] == [
            f"Memory #{mid} was removed by another request meanwhile; nothing was changed. "
            "If it went to the trash, it can be restored from there."
        ]
        state = stack_python(stack, STATE.format(mid=mid))
        assert (state["live"], state["trashed"], state["pinned"], state["shared"]) == (0, 1, [], [])
        # Nothing was promoted either: the team scope holds nothing.
        assert client.search_team("home address", min_score=0.0) == []
        # The trash kept the memory as the DELETE saw it.
        assert client.restore_memory(mid)["content"] == "The user's home address is 12 Elm Street."


@pytest.mark.parametrize("action", ["pin", "share", "delete"])
def test_a_console_bulk_change_leaves_out_a_memory_deleted_meanwhile(tmp_path, action):
    """A bulk change whose selection lost a memory to another request changes the rest and says
    how many it left out (pin and share answered 500 after changing the memories before that
    one; delete said nothing of it)."""
    with live_stack(tmp_path, servers=1) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=120)
        client.write_memory("reviewer", "The reviewer checks every migration twice.")
        gone = client.write_memory("coder", "The user's home address is 12 Elm Street.")["id"]
        kept = client.write_memory("coder", "The user's favourite editor is Helix.")["id"]
        data: dict[str, Any] = {"ids": [str(gone), str(kept)], "action": action}
        if action == "share":
            data.update(agents=["reviewer"], permission="read")
        answer = behind_a_delete(stack, client, gone, "memories/bulk/", data)
        assert (answer["status"], answer["location"]) == (302, answer["base"] + "memories/")
        assert answer["messages"] == [
            {
                "pin": "Pinned 1 memories. 1 were removed by another request meanwhile and left"
                " out.",
                "share": "Shared 1 memories with reviewer (read). 1 were removed by another"
                " request meanwhile and left out.",
                "delete": "Deleted 1 memories. They stay restorable in the trash. Left 1 as they"
                " were: removed or pinned by another request meanwhile.",
            }[action]
        ]
        state = stack_python(stack, STATE.format(mid=gone))
        assert (state["live"], state["trashed"]) == (0, 1)
        assert (state["pinned"], state["shared"]) == {
            "pin": ([kept], []),
            "share": ([], [[kept, "reviewer"]]),
            "delete": ([], []),
        }[action]
        trash = sorted(i["id"] for i in client.list_trash()["items"])
        assert trash == ([gone, kept] if action == "delete" else [gone])
