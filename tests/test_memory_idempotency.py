"""Memory writes honour `Idempotency-Key`: a write sent again (its node died, the answer was lost)
is stored once and answered as the first time; the same key with another body is refused; keys
are per team. Concurrent twins through separate server processes leave one row."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memories.models import Memory
from memoryplatform.client import MemoryClient
from tenants.models import IdempotentRequest, UsageDay
from tenants.usage import usage_flush

from .helpers import error_code
from .livestack import live_stack, manage_json

T = TypeVar("T")

KEY = {"Idempotency-Key": "write-7f3a"}
BODIES = {
    "/memories/personal": {
        "agent_id": "ops",
        "content": "发布窗口改到周四晚上",
        "enable_dedup": False,
    },
    "/memories/team": {"content": "值班表每周一更新", "enable_dedup": False},
    "/memories/personal/batch": {
        "items": [
            {"agent_id": "ops", "content": "周报周五发", "enable_dedup": False},
            {"agent_id": "ops", "content": "周会改到周二", "enable_dedup": False},
        ]
    },
}


@pytest.mark.parametrize("path", list(BODIES))
def test_a_write_sent_again_with_its_key_is_stored_once_and_answered_the_same(api, path):
    body = BODIES[path]
    first = api.post(path, body, headers=KEY)
    assert first.status_code in (200, 201) and "Idempotent-Replayed" not in first.headers
    rows = Memory.objects.count()
    assert rows == len(body.get("items", [body]))
    again = api.post(path, body, headers=KEY)
    assert again.status_code == first.status_code
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Memory.objects.count() == rows
    # Counted once in the team's usage.
    usage_flush()
    assert sum(d.writes for d in UsageDay.objects.filter(team_id="team_a")) == rows
    # Without the key the same body is a new write (dedup is off in these bodies).
    assert api.post(path, body).status_code in (200, 201)
    assert Memory.objects.count() == 2 * rows


def test_the_same_key_with_another_body_is_a_409_and_writes_nothing(api):
    assert (
        api.post("/memories/personal", BODIES["/memories/personal"], headers=KEY).status_code == 201
    )
    other = {**BODIES["/memories/personal"], "content": "发布窗口改到周五晚上"}
    response = api.post("/memories/personal", other, headers=KEY)
    assert response.status_code == 409 and error_code(response) == "CONFLICT"
    assert not Memory.objects.filter(content="发布窗口改到周五晚上").exists()


def test_keys_are_per_endpoint_and_per_team(api, other_api):
    personal = api.post("/memories/personal", BODIES["/memories/personal"], headers=KEY)
    team = api.post("/memories/team", BODIES["/memories/team"], headers=KEY)
    assert personal.status_code == team.status_code == 201
    assert "Idempotent-Replayed" not in team.headers
    # Another team's use of the same key and body is its own write: nothing replayed, nothing of
    # team_a's answer (its ids) revealed.
    theirs = other_api.post("/memories/personal", BODIES["/memories/personal"], headers=KEY)
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs.headers
    assert theirs.json()["data"]["team_id"] == "team_b"
    assert theirs.json()["data"]["id"] != personal.json()["data"]["id"]
    assert Memory.objects.filter(team_id="team_b").count() == 1


def test_keys_differing_only_by_case_are_two_keys_on_every_database(api):
    """A key is compared exactly, as clients and the HTTP spec treat it: on MariaDB too, whose
    default collation folds case (there the second write got the first one's 409)."""
    first = api.post("/memories/personal", BODIES["/memories/personal"], headers=KEY)
    other = {**BODIES["/memories/personal"], "content": "发布窗口改到周五晚上"}
    upper = api.post(
        "/memories/personal", other, headers={"Idempotency-Key": KEY["Idempotency-Key"].upper()}
    )
    assert first.status_code == upper.status_code == 201
    assert "Idempotent-Replayed" not in upper.headers
    assert upper.json()["data"]["id"] != first.json()["data"]["id"]
    assert Memory.objects.filter(content="发布窗口改到周五晚上").count() == 1
    # Each key still replays its own answer.
    again = api.post("/memories/personal", BODIES["/memories/personal"], headers=KEY)
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert IdempotentRequest.objects.filter(team_id="team_a").count() == 2


def test_a_refused_write_records_nothing_so_a_corrected_retry_is_written(api, agent_api):
    # An agent key may not write another agent's personal memory: 403, nothing recorded.
    refused = agent_api.post(
        "/memories/personal", {**BODIES["/memories/personal"], "agent_id": "other"}, headers=KEY
    )
    assert refused.status_code == 403
    assert not IdempotentRequest.objects.exists() and not Memory.objects.exists()


def test_a_bad_key_is_a_400_and_writes_nothing(api):
    response = api.post(
        "/memories/personal", BODIES["/memories/personal"], headers={"Idempotency-Key": "x" * 201}
    )
    assert response.status_code == 400 and error_code(response) == "VALIDATION_ERROR"
    assert not Memory.objects.exists()


def test_a_duplicate_skipped_under_a_key_is_replayed_as_skipped(api):
    body = {"agent_id": "ops", "content": "发布窗口改到周四晚上"}
    api.post("/memories/personal", body)
    first = api.post("/memories/personal", body, headers=KEY)
    assert first.status_code == 200 and first.json()["data"]["dedup_skipped"] is True
    again = api.post("/memories/personal", body, headers=KEY)
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert Memory.objects.count() == 1


def _at_once(clients: list[T], call: Callable[[T], Any]) -> list[Any]:
    """`call` made by every client at the same moment, each from its own thread: the answers."""
    answers: list[Any] = []
    start = threading.Barrier(len(clients))

    def send(client: T) -> None:
        start.wait()
        answers.append(call(client))

    threads = [threading.Thread(target=send, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == len(clients)
    return answers


@pytest.mark.django_db(transaction=True)
def test_concurrent_twins_through_two_processes_leave_one_row(tmp_path):
    """The same write and key sent at once by 8 threads to two gunicorn processes (each its own
    database connection): one commits, the others roll back and replay its answer."""
    with live_stack(tmp_path, servers=2) as stack:
        clients = [
            MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[i % 2], retries=0)
            for i in range(8)
        ]
        reader = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
        for round_ in range(3):
            content = f"压测窗口 {round_} 号改到凌晨两点"
            answers = _at_once(
                clients,
                lambda c, content=content, round_=round_: c.write_memory(
                    "ops", content, enable_dedup=False, idempotency_key=f"twin-{round_}"
                ),
            )
            assert {a["id"] for a in answers} == {answers[0]["id"]}
            found = [m for m in reader.iter_memories(agent_id="ops") if m["content"] == content]
            assert len(found) == 1
        # A batch update and a batch delete sent at once under one key: run once, every twin
        # answered alike (each memory one revision, trashed once).
        ids = sorted(m["id"] for m in reader.iter_memories(agent_id="ops"))
        assert len(ids) == 3
        changes = [{"id": i, "importance": 0.8} for i in ids]
        updated = _at_once(clients, lambda c: c.update_memories(changes, idempotency_key="twin-u"))
        assert [len(reader.memory_history(i)["revisions"]) for i in ids] == [1, 1, 1]
        deleted = _at_once(clients, lambda c: c.delete_memories(ids, idempotency_key="twin-d"))
        for answers in (updated, deleted):
            assert all(a == answers[0] for a in answers)
            assert {r["status"] for r in answers[0]["results"]} == {200}
        trash = reader.list_trash(agent_id="ops", page_size=50)["items"]
        assert sorted(t["id"] for t in trash) == ids

        # MCP's memory_add with one idempotency_key, at once through both processes: one memory.
        token = manage_json(
            stack.env, "create_mcp_token", "--team", stack.team_id, "--agent", "ops"
        )
        add = {"content": "发布冻结到周五", "idempotency_key": "twin-mcp"}

        async def call(url: str) -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {token['token']}"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
            ):
                return json.loads((await mcp.call_tool("memory_add", add)).content[0].text)

        answers = _at_once([stack.urls[i % 2] for i in range(8)], lambda u: asyncio.run(call(u)))
        assert all(a == answers[0] for a in answers) and answers[0]["content"] == add["content"]
        found = [m for m in reader.iter_memories(agent_id="ops") if m["content"] == add["content"]]
        assert [m["id"] for m in found] == [answers[0]["id"]]


def test_a_write_without_the_header_records_nothing(api):
    """Writes without the header behave as before (the seed's client sends none)."""
    assert api.post("/memories/personal", BODIES["/memories/personal"]).status_code == 201
    assert not IdempotentRequest.objects.exists()
