"""The MCP server (docs/mcp.md), driven by the official SDK's own client: over streamable HTTP
against a live server (pytest-django live_server: the WSGI stack with every middleware), and
over stdio against `manage.py mcp_stdio` in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.core.management import call_command
from django.utils import timezone
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from memories import purge
from memories.models import Memory, Procedure, ProcedureRevision, TrashedMemory
from tenants.models import McpToken
from tenants.services import mcp_token_revoke

from .factories import AgentFactory, EntityFactory, McpTokenFactory, RelationFactory, TeamFactory
from .helpers import inside_one_rate_window
from .livestack import manage_json

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent

TOOLS = {
    "memory_add": ["content"],
    "memory_search": ["query"],
    "memory_get": ["memory_id"],
    "memory_update": ["memory_id"],
    "memory_forget": ["memory_id"],
    "memory_update_many": ["items"],
    "memory_forget_many": ["memory_ids"],
    "memory_history": ["memory_id"],
    "working_add": ["content"],
    "working_list": [],
    "ingest_messages": ["messages"],
    "archive_search": [],
    "persona_get": [],
    "profile_get": [],
    "graph_neighbors": ["entity"],
    "episode_add": ["outcome", "task"],
    "episode_search": ["task"],
    "procedure_list": [],
    "procedure_add": ["rule"],
    "procedure_update": ["procedure_id"],
    "procedure_delete": ["procedure_id"],
    "procedure_restore": ["procedure_id"],
}


@asynccontextmanager
async def session(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def data(result: Any) -> dict[str, Any]:
    """A tool result's JSON (the text block every client shows the model)."""
    return json.loads(result.content[0].text)


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content == data(result)
    return data(result)


def error_code(result: Any) -> str:
    assert result.is_error
    body = data(result)
    assert body["ok"] is False
    return body["code"]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def mcp_url(live_server) -> str:
    return f"{live_server.url}/mcp"


@pytest.fixture
def team_a():
    return TeamFactory(id="mcp_a")


@pytest.fixture
def agent_token(team_a):
    return McpTokenFactory(team=team_a, agent=AgentFactory(team=team_a, agent_id="a1")).token


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_tool_list(mcp_url, agent_token, mode):
    """Names and required arguments are the contract agents are written against. Both the
    2026 per-request protocol (auto) and the initialize handshake (legacy) are served."""

    async def go():
        async with session(mcp_url, agent_token, mode) as c:
            return (await c.list_tools()).tools

    tools = run(go())
    assert {t.name: sorted(t.input_schema.get("required", [])) for t in tools} == TOOLS
    add = next(t for t in tools if t.name == "memory_add")
    assert add.input_schema["properties"]["scope"]["enum"] == ["personal", "team"]
    neighbors = next(t for t in tools if t.name == "graph_neighbors")
    depth = neighbors.input_schema["properties"]["depth"]
    assert (depth["minimum"], depth["maximum"]) == (1, 3)
    hints = {t.name: t.annotations for t in tools}
    assert hints["memory_search"].read_only_hint is True
    assert hints["memory_forget"].destructive_hint is True
    assert hints["memory_forget_many"].destructive_hint is True
    many = next(t for t in tools if t.name == "memory_forget_many").input_schema
    assert (
        many["properties"]["memory_ids"]["minItems"],
        many["properties"]["memory_ids"]["maxItems"],
    ) == (1, 100)


def test_chinese_round_trip(mcp_url, agent_token):
    async def go():
        async with session(mcp_url, agent_token) as c:
            added = ok(
                await c.call_tool(
                    "memory_add",
                    {"content": "我最喜欢的编程语言是 Rust，周末常去香山爬山", "category": "偏好"},
                )
            )
            again = ok(
                await c.call_tool(
                    "memory_add", {"content": "我最喜欢的编程语言是 Rust，周末常去香山爬山"}
                )
            )
            found = ok(await c.call_tool("memory_search", {"query": "我喜欢什么编程语言？"}))
            got = ok(await c.call_tool("memory_get", {"memory_id": added["id"]}))
            return added, again, found, got

    added, again, found, got = run(go())
    assert added["agent_id"] == "a1" and added["scope"] == "personal"
    assert added["category"] == "偏好"
    assert again["dedup_skipped"] is True and again["id"] == added["id"]
    assert found["memories"][0]["id"] == added["id"]
    assert found["memories"][0]["content"] == "我最喜欢的编程语言是 Rust，周末常去香山爬山"
    assert got["content"] == added["content"]
    assert Memory.objects.filter(team_id="mcp_a").count() == 1


def test_many_memories_updated_and_forgotten_in_one_call_each_as_alone(
    mcp_url, team_a, agent_token
):
    """memory_update_many / memory_forget_many: each item as its own memory_update /
    memory_forget, in order, both scopes in one call; another agent's personal memory is a 403
    and another team's a 404 exactly like a missing id, and neither is touched."""
    other_agent = Memory.objects.create(
        team=team_a, scope="personal", agent_id="a2", content="a2 keeps the spare key"
    )
    team_b = TeamFactory(id="mcp_b")
    other_team = Memory.objects.create(
        team=team_b, scope="team", content="Team B's vault code is 4711"
    )
    missing = other_team.pk + 1000

    async def go():
        async with session(mcp_url, agent_token) as c:
            own = [
                ok(await c.call_tool("memory_add", {"content": text}))["id"]
                for text in ("a1 likes green tea", "a1 lives in Lyon")
            ]
            shared = ok(
                await c.call_tool("memory_add", {"content": "Standup is at 9:30", "scope": "team"})
            )["id"]
            ok(
                await c.call_tool(
                    "memory_update", {"memory_id": own[1], "expires_at": "2031-01-01"}
                )
            )
            updated = ok(
                await c.call_tool(
                    "memory_update_many",
                    {
                        "items": [
                            {"memory_id": own[0], "content": "a1 likes black tea"},
                            {"memory_id": other_agent.pk, "importance": 0.9},
                            {"memory_id": own[1], "expires_at": None, "pinned": True},
                            {"memory_id": other_team.pk, "content": "x"},
                            {"memory_id": shared, "expires_at": "2001-01-01T00:00:00Z"},
                            {"memory_id": missing, "category": "x"},
                        ]
                    },
                )
            )
            twice = data(
                await c.call_tool(
                    "memory_update_many",
                    {"items": [{"memory_id": own[0], "pinned": True}] * 2},
                )
            )
            repeated = data(
                await c.call_tool("memory_forget_many", {"memory_ids": [own[0], own[0]]})
            )
            too_many = error_code(
                await c.call_tool("memory_forget_many", {"memory_ids": list(range(1, 102))})
            )
            forgot = ok(
                await c.call_tool(
                    "memory_forget_many",
                    {"memory_ids": [shared, other_agent.pk, own[0], other_team.pk, missing]},
                )
            )
            history = ok(await c.call_tool("memory_history", {"memory_id": own[1]}))
        return own, shared, updated, twice, repeated, too_many, forgot, history

    own, shared, updated, twice, repeated, too_many, forgot, history = run(go())
    assert [(r["id"], r["status"]) for r in updated["results"]] == [
        (own[0], 200),
        (other_agent.pk, 403),
        (own[1], 200),
        (other_team.pk, 404),
        (shared, 400),
        (missing, 404),
    ]
    assert updated["updated"] == 2
    assert updated["results"][0]["memory"]["content"] == "a1 likes black tea"
    # An explicit null removes the expiry; the pin is applied with it.
    assert "expires_at" not in updated["results"][2]["memory"]
    assert updated["results"][2]["memory"]["pinned"] is True
    assert "expires_at" in updated["results"][4]["details"]
    assert updated["results"][3] == updated["results"][5] | {"id": other_team.pk}
    assert history["revisions"][0]["actor"].startswith("mcp token mcp_")
    # A memory listed twice refuses the whole call, and nothing is changed.
    assert twice["code"] == "VALIDATION_ERROR" and "items[1].id" in twice["details"]
    assert repeated["code"] == "VALIDATION_ERROR" and "ids" in repeated["details"]
    assert too_many == "VALIDATION_ERROR"
    assert [(r["id"], r["status"]) for r in forgot["results"]] == [
        (shared, 200),
        (other_agent.pk, 403),
        (own[0], 200),
        (other_team.pk, 404),
        (missing, 404),
    ]
    assert forgot["removed"] == 2
    assert forgot["results"][3] == forgot["results"][4] | {"id": other_team.pk}
    trashed = TrashedMemory.objects.filter(memory_id__in=[shared, own[0]])
    assert sorted(t.memory_id for t in trashed) == sorted([shared, own[0]])
    assert all(t.removed_by == "api" and "through MCP" in t.reason for t in trashed)
    assert set(Memory.objects.values_list("pk", flat=True)) == {
        own[1],
        other_agent.pk,
        other_team.pk,
    }
    other_agent.refresh_from_db()
    other_team.refresh_from_db()
    assert other_agent.importance == 0.5 and other_team.content == "Team B's vault code is 4711"
    assert Memory.objects.get(pk=own[1]).expires_at is None


def test_writes_sent_again_with_their_key_are_answered_once(mcp_url, team_a, agent_token):
    """memory_add, memory_update_many, memory_forget_many and ingest_messages with an
    `idempotency_key`: sent again, the first answer and nothing written twice; the same key with
    other arguments is CONFLICT; another team's same key is its own; an erasure reaches the kept
    answer, as REST's Idempotency-Key does."""
    token_b = McpTokenFactory(team=TeamFactory(id="mcp_b")).token
    add = {"content": "a1 keeps the spare key in the blue box", "idempotency_key": "k-add"}
    said = [{"role": "user", "content": "I moved to Lyon in May and I work on the payments team."}]

    async def go():
        async with session(mcp_url, agent_token) as c:
            first, again = [ok(await c.call_tool("memory_add", add)) for _ in range(2)]
            other = await c.call_tool("memory_add", {**add, "content": "something else"})
            change = {
                "items": [{"memory_id": first["id"], "importance": 0.9}],
                "idempotency_key": "k-upd",
            }
            changed = [ok(await c.call_tool("memory_update_many", change)) for _ in range(2)]
            ingest = {"messages": said, "idempotency_key": "k-ingest"}
            ingested = [ok(await c.call_tool("ingest_messages", ingest)) for _ in range(2)]
            too_long = await c.call_tool("memory_add", {**add, "idempotency_key": "k" * 201})
            unprintable = await c.call_tool("memory_add", {**add, "idempotency_key": "k\n1"})
        async with session(mcp_url, token_b) as b:
            theirs = ok(await b.call_tool("memory_add", {**add, "scope": "team"}))
        return first, again, other, changed, ingested, too_long, unprintable, theirs

    first, again, other, changed, ingested, too_long, unprintable, theirs = run(go())
    assert again == first and first["content"] == add["content"]
    assert error_code(other) == "CONFLICT" and error_code(too_long) == "VALIDATION_ERROR"
    assert error_code(unprintable) == "VALIDATION_ERROR"
    assert data(unprintable)["details"] == {"idempotency_key": ["1..200 printable characters"]}
    assert changed[1] == changed[0] and changed[0]["updated"] == 1
    assert Memory.objects.get(pk=first["id"]).revisions.count() == 1
    assert ingested[1] == ingested[0] and ingested[0]["facts"]
    facts = {f["memory"]["id"] for f in ingested[0]["facts"]}
    assert set(Memory.objects.filter(team=team_a).values_list("pk", flat=True)) == {
        first["id"],
        *facts,
    }
    assert theirs["id"] != first["id"] and Memory.objects.filter(team_id="mcp_b").count() == 1

    async def forget_twice():
        forget = {"memory_ids": [first["id"]], "idempotency_key": "k-forget"}
        async with session(mcp_url, agent_token) as c:
            return [ok(await c.call_tool("memory_forget_many", forget)) for _ in range(2)]

    forgotten = run(forget_twice())
    # Sent again: the first answer (200), not a second run's 404 for a memory already trashed.
    assert forgotten[1] == forgotten[0] and forgotten[0]["results"][0]["status"] == 200
    assert TrashedMemory.objects.filter(memory_id=first["id"]).count() == 1

    # Erased from the trash: the kept memory_add answer no longer shows it.
    purge.trash_erase(team=team_a, memory_id=first["id"], acting_agent=None)

    async def replay():
        async with session(mcp_url, agent_token) as c:
            return ok(await c.call_tool("memory_add", add))

    assert run(replay()) == {"id": first["id"], "erased": True}


def test_an_expiry_through_mcp_is_set_refused_when_past_and_ends_the_search(mcp_url, agent_token):
    async def write():
        async with session(mcp_url, agent_token) as c:
            content = "The user is away until the audit ends"
            added = ok(
                await c.call_tool("memory_add", {"content": content, "expires_at": "2031-01-01"})
            )
            mid = added["id"]
            past = await c.call_tool(
                "memory_update", {"memory_id": mid, "expires_at": "2001-01-01T00:00:00Z"}
            )
            later = "2031-06-01T12:00:00+02:00"
            moved = ok(await c.call_tool("memory_update", {"memory_id": mid, "expires_at": later}))
            never = ok(
                await c.call_tool("memory_update", {"memory_id": mid, "expires_at": "never"})
            )
            again = ok(await c.call_tool("memory_update", {"memory_id": mid, "expires_at": later}))
            return added, error_code(past), moved, never, again

    async def search():
        async with session(mcp_url, agent_token) as c:
            return ok(await c.call_tool("memory_search", {"query": "away audit", "min_score": 0}))

    added, past, moved, never, again = run(write())
    assert added["expires_at"] == "2031-01-01T00:00:00Z"
    assert past == "VALIDATION_ERROR"
    assert moved["expires_at"] == "2031-06-01T10:00:00Z"
    assert "expires_at" not in never and again["expires_at"] == "2031-06-01T10:00:00Z"
    assert [m["id"] for m in run(search())["memories"]] == [added["id"]]
    Memory.objects.filter(pk=added["id"]).update(expires_at=timezone.now())  # time passes
    assert run(search())["memories"] == []


def test_half_a_surrogate_pair_in_a_tools_arguments_is_a_parse_error_not_a_500(
    mcp_url, agent_token
):
    """The REST parser refuses one itself (tests/security/test_body_text.py); over MCP the SDK's
    JSON parser does, before any tool runs (the SDK's client cannot even encode one)."""
    headers = {
        "Authorization": f"Bearer {agent_token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    raw = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_add", '
        '"arguments": {"content": "x", "metadata": {"k\\ud800": 1}}}}'
    )
    answer = httpx2.post(mcp_url, content=raw.encode(), headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == -32700  # JSON-RPC's parse error
    assert not Memory.objects.exists()


def test_concurrent_requests_each_get_their_own_answer(mcp_url, team_a, agent_token):
    """Requests served at once (threads of the live server, each with its own event loop) do
    not mix principals. (Reads only: the test database is an in-memory SQLite shared between
    the server's threads, which refuses concurrent writes.)"""
    other = McpTokenFactory(team=team_a, agent=AgentFactory(team=team_a, agent_id="a2")).token

    async def add(token: str, content: str) -> int:
        async with session(mcp_url, token) as c:
            return ok(await c.call_tool("memory_add", {"content": content}))["id"]

    async def reads(token: str, ids: list[int]) -> list[str]:
        async with session(mcp_url, token) as c:
            results = await asyncio.gather(
                *[c.call_tool("memory_get", {"memory_id": i}) for i in ids * 4]
            )
            return [
                r.structured_content.get("content") or r.structured_content["code"] for r in results
            ]

    async def go():
        ids = [await add(agent_token, "a1 likes teal"), await add(other, "a2 likes amber")]
        return await asyncio.gather(reads(agent_token, ids), reads(other, ids))

    first, second = run(go())
    assert first == ["a1 likes teal", "FORBIDDEN"] * 4
    assert second == ["FORBIDDEN", "a2 likes amber"] * 4


def test_teams_are_isolated(mcp_url, agent_token):
    """Team B sees nothing of team A: get, update, forget, history answer NOT_FOUND exactly as
    for an id that does not exist, and search finds nothing."""
    token_b = McpTokenFactory(team=TeamFactory(id="mcp_b")).token

    async def go():
        async with session(mcp_url, agent_token) as a:
            mid = ok(await a.call_tool("memory_add", {"content": "The vault code is 4711"}))["id"]
        async with session(mcp_url, token_b) as b:
            codes = [
                error_code(await b.call_tool(name, args))
                for name, args in [
                    ("memory_get", {"memory_id": mid}),
                    ("memory_get", {"memory_id": mid + 1000}),
                    ("memory_update", {"memory_id": mid, "content": "x"}),
                    ("memory_forget", {"memory_id": mid}),
                    ("memory_history", {"memory_id": mid}),
                ]
            ]
            found = ok(
                await b.call_tool(
                    "memory_search", {"query": "vault code", "agent_id": "a1", "min_score": 0}
                )
            )
            team_found = ok(
                await b.call_tool("memory_search", {"query": "vault code", "min_score": 0})
            )
        return mid, codes, found, team_found

    mid, codes, found, team_found = run(go())
    assert codes == ["NOT_FOUND"] * 5
    assert found["memories"] == [] and team_found["memories"] == []
    assert Memory.objects.get(pk=mid).content == "The vault code is 4711"


def test_an_agent_token_cannot_use_another_agents_memory(mcp_url, team_a, agent_token):
    other = McpTokenFactory(team=team_a, agent=AgentFactory(team=team_a, agent_id="a2")).token

    async def go():
        async with session(mcp_url, agent_token) as a1:
            mid = ok(await a1.call_tool("memory_add", {"content": "a1 likes green tea"}))["id"]
        async with session(mcp_url, other) as a2:
            return mid, [
                error_code(await a2.call_tool(name, args))
                for name, args in [
                    ("memory_get", {"memory_id": mid}),
                    ("memory_update", {"memory_id": mid, "importance": 0.1}),
                    ("memory_forget", {"memory_id": mid}),
                    ("memory_add", {"content": "x", "agent_id": "a1"}),
                    ("memory_search", {"query": "tea", "agent_id": "a1"}),
                    ("working_list", {"agent_id": "a1"}),
                ]
            ]

    mid, codes = run(go())
    assert codes == ["FORBIDDEN"] * 6
    assert Memory.objects.get(pk=mid).importance == 0.5


def test_no_token_bad_token_and_revoked_token_are_401_before_mcp(mcp_url, team_a):
    token = McpTokenFactory(team=team_a)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}

    def post(auth: str | None) -> httpx2.Response:
        h = dict(headers, **({"Authorization": auth} if auth is not None else {}))
        return httpx2.post(mcp_url, json=body, headers=h)

    assert post(f"Bearer {token.token}").status_code == 200
    for method in ("GET", "DELETE"):
        # No SSE stream to hold a worker open, no session to end.
        refused = httpx2.request(
            method, mcp_url, headers=dict(headers, Authorization=f"Bearer {token.token}"), timeout=5
        )
        assert refused.status_code == 405 and refused.headers["Allow"] == "POST"
    assert httpx2.get(mcp_url, headers=headers, timeout=5).status_code == 401
    missing = post(None)
    assert missing.status_code == 401
    assert missing.json()["code"] == "MISSING_AUTH"
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert post("Basic abc").json()["code"] == "MISSING_AUTH"
    assert post(f"Bearer {token.token}x").json()["code"] == "INVALID_API_KEY"
    mcp_token_revoke(mcp_token=token)
    revoked = post(f"Bearer {token.token}")
    assert revoked.status_code == 401 and revoked.json()["code"] == "INVALID_API_KEY"

    async def go():
        async with session(mcp_url, token.token) as c:
            await c.list_tools()

    # The SDK's client gives up on the 401 (inside its task groups).
    with pytest.raises(ExceptionGroup) as refused:
        run(go())
    assert refused.group_contains(MCPError, match="error response")


def test_deep_json_is_refused_like_a_rest_body(mcp_url, team_a, settings):
    token = McpTokenFactory(team=team_a).token
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}

    def add(metadata: Any) -> httpx2.Response:
        arguments = {"content": "deep", "agent_id": "a1", "metadata": metadata}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_add", "arguments": arguments},
        }
        return httpx2.post(mcp_url, json=body, headers=headers)

    nested: Any = 1
    for _ in range(settings.MAX_JSON_DEPTH - 1):
        nested = {"k": nested}
    assert add(nested).status_code == 200  # as deep as a REST body may be
    refused = add({"k": nested})
    assert refused.status_code == 400 and refused.json()["code"] == "VALIDATION_ERROR"


def test_rate_limit_counts_each_request(mcp_url, team_a):
    token = McpTokenFactory(team=team_a, rate_limit=2).token
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    inside_one_rate_window()
    answers = [httpx2.post(mcp_url, json=body, headers=headers) for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[2].json()["code"] == "RATE_LIMITED" and answers[2].headers["Retry-After"]


def test_the_other_tools_with_a_team_wide_token(mcp_url, team_a):
    """Update, history, forget (to the trash), working memory, ingest, persona and graph, each
    over the same service as its REST endpoint; errors carry the REST codes."""
    token = McpTokenFactory(team=team_a).token
    alice = EntityFactory(team=team_a, name="Alice", entity_type="person")
    acme = EntityFactory(team=team_a, name="Acme", entity_type="organization")
    berlin = EntityFactory(team=team_a, name="Berlin", entity_type="location")
    RelationFactory(source=alice, target=acme, relation_type="works_at")
    RelationFactory(source=acme, target=berlin, relation_type="located_in")

    async def go():
        out: dict[str, Any] = {}
        async with session(mcp_url, token) as c:
            out["needs_agent"] = error_code(await c.call_tool("memory_add", {"content": "x"}))
            out["bad"] = data(
                await c.call_tool("memory_add", {"content": "x", "importance": 2, "agent_id": "b"})
            )
            out["empty"] = data(
                await c.call_tool("memory_add", {"content": "  ", "agent_id": "bob"})
            )
            team_mem = ok(
                await c.call_tool("memory_add", {"content": "Standup is at 9:30", "scope": "team"})
            )
            out["team_mem"] = team_mem
            mid = ok(
                await c.call_tool("memory_add", {"content": "Bob prefers vim", "agent_id": "bob"})
            )["id"]
            out["updated"] = ok(
                await c.call_tool(
                    "memory_update", {"memory_id": mid, "content": "Bob prefers neovim"}
                )
            )
            out["no_change"] = error_code(await c.call_tool("memory_update", {"memory_id": mid}))
            out["history"] = ok(await c.call_tool("memory_history", {"memory_id": mid}))
            out["team_search"] = ok(await c.call_tool("memory_search", {"query": "standup"}))
            out["forgot"] = ok(await c.call_tool("memory_forget", {"memory_id": mid}))
            out["gone"] = error_code(await c.call_tool("memory_get", {"memory_id": mid}))
            out["working"] = ok(
                await c.call_tool(
                    "working_add", {"content": "user is in Berlin", "agent_id": "bob"}
                )
            )
            out["ingested"] = ok(
                await c.call_tool(
                    "ingest_messages",
                    {
                        "agent_id": "bob",
                        "messages": [
                            {"role": "user", "content": "我下周去上海出差"},
                            {"role": "assistant", "content": "好的，已记下"},
                        ],
                    },
                )
            )
            out["listed"] = ok(await c.call_tool("working_list", {"agent_id": "bob"}))
            out["persona"] = error_code(await c.call_tool("persona_get", {"agent_id": "bob"}))
            out["by_name"] = ok(await c.call_tool("graph_neighbors", {"entity": "alice"}))
            out["deep"] = ok(
                await c.call_tool("graph_neighbors", {"entity": str(alice.pk), "depth": 2})
            )
            out["no_entity"] = error_code(await c.call_tool("graph_neighbors", {"entity": "Zed"}))
            out["too_deep"] = data(
                await c.call_tool("graph_neighbors", {"entity": "Alice", "depth": 4})
            )
            out["unknown"] = error_code(await c.call_tool("memory_frobnicate", {}))
        return mid, out

    mid, out = run(go())
    assert out["needs_agent"] == "VALIDATION_ERROR"
    assert out["bad"]["code"] == "VALIDATION_ERROR" and "importance" in out["bad"]["details"]
    assert out["empty"]["code"] == "VALIDATION_ERROR" and "content" in out["empty"]["details"]
    assert out["team_mem"]["scope"] == "team" and out["team_mem"]["agent_id"] is None
    assert out["updated"]["content"] == "Bob prefers neovim"
    assert out["no_change"] == "VALIDATION_ERROR"
    (rev,) = out["history"]["revisions"]
    assert rev["before"] == {"content": "Bob prefers vim"}
    assert rev["after"] == {"content": "Bob prefers neovim"}
    assert rev["actor"].startswith("mcp token mcp_")
    assert [m["id"] for m in out["team_search"]["memories"]] == [out["team_mem"]["id"]]
    assert out["forgot"] == {"forgotten": mid, "trash": True}
    assert out["gone"] == "NOT_FOUND"
    trashed = TrashedMemory.objects.get(memory_id=mid)
    assert trashed.removed_by == "api" and "mcp token" in trashed.reason
    assert out["working"]["content"] == "user is in Berlin"
    # The conversation is archived and the user's fact decided, not put in working memory.
    assert out["ingested"]["archived"] == 2
    assert [(f["decision"], f["memory"]["content"]) for f in out["ingested"]["facts"]] == [
        ("ADD", "我下周去上海出差")
    ]
    assert out["ingested"]["facts"][0]["memory"]["agent_id"] == "bob"
    assert [i["content"] for i in out["listed"]["items"]] == ["user is in Berlin"]
    assert out["persona"] == "NOT_FOUND"
    assert out["by_name"]["seeds"] == [str(alice.pk)]
    assert {e["name"] for e in out["by_name"]["entities"]} == {"Alice", "Acme"}
    assert {e["name"] for e in out["deep"]["entities"]} == {"Alice", "Acme", "Berlin"}
    assert len(out["deep"]["relations"]) == 2
    assert out["no_entity"] == "NOT_FOUND"
    assert out["too_deep"]["code"] == "VALIDATION_ERROR" and "depth" in out["too_deep"]["details"]
    assert out["unknown"] == "NOT_FOUND"


def test_token_commands(team_a, capsys):
    call_command("create_mcp_token", "--team", "mcp_cmd", "--agent", "a9", "--json")
    issued = json.loads(capsys.readouterr().out)
    assert issued["team_id"] == "mcp_cmd" and issued["agent_id"] == "a9"
    assert issued["token"].startswith(issued["token_id"] + "_")
    from tenants.models import McpToken

    stored = McpToken.objects.get(team_id="mcp_cmd")
    assert issued["token"] not in stored.token_hash and len(stored.token_hash) == 64
    call_command("list_mcp_tokens", "--team", "mcp_cmd")
    assert f"{issued['token_id']}\tmcp_cmd\ta9\tactive" in capsys.readouterr().out
    call_command("revoke_mcp_token", issued["token_id"])
    stored.refresh_from_db()
    assert stored.status == "revoked"


def test_stdio(tmp_path):
    """`manage.py mcp_stdio` spawned by the SDK's stdio client, on a file SQLite database (the
    subprocess cannot see the test run's database)."""
    env = {
        **os.environ,
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)

    token = manage_json(env, "create_mcp_token", "--team", "stdio_team", "--agent", "s1")

    async def go():
        params = StdioServerParameters(
            command=sys.executable,
            args=["manage.py", "mcp_stdio"],
            cwd=str(ROOT),
            env={**env, "MEMORY_MCP_TOKEN": token["token"]},
        )
        async with Client(params) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            added = ok(await c.call_tool("memory_add", {"content": "用户住在杭州西湖边"}))
            found = ok(await c.call_tool("memory_search", {"query": "用户住在哪里"}))
            subprocess.run(
                [sys.executable, "manage.py", "revoke_mcp_token", token["token_id"]],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )
            revoked = error_code(await c.call_tool("memory_get", {"memory_id": added["id"]}))
        return names, added, found, revoked

    names, added, found, revoked = run(go())
    assert names == set(TOOLS)
    assert added["agent_id"] == "s1"
    assert found["memories"][0]["id"] == added["id"]
    assert revoked == "INVALID_API_KEY"

    bad = subprocess.run(
        [sys.executable, "manage.py", "mcp_stdio"],
        cwd=ROOT,
        env={**env, "MEMORY_MCP_TOKEN": "mcp_nope_nope"},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode != 0 and "unknown, revoked or expired" in bad.stderr


def test_an_ingest_batch_with_one_bad_message_stores_none(mcp_url, agent_token, settings):
    from lifecycle.models import WorkingArchive

    too_long = "x" * (settings.MEMORY_MAX_CONTENT_CHARS + 1)

    async def go():
        async with session(mcp_url, agent_token) as c:
            refused = data(
                await c.call_tool(
                    "ingest_messages",
                    {"messages": [{"role": "user", "content": "fine"}, {"content": too_long}]},
                )
            )
            return refused, ok(await c.call_tool("working_list", {}))

    refused, listed = run(go())
    assert refused["code"] == "VALIDATION_ERROR"
    assert any("content" in name for name in refused["details"]), refused
    assert listed["items"] == []
    assert not WorkingArchive.objects.exists()


def test_profile_get_reads_the_agents_own_profile(mcp_url, team_a, agent_token):
    from memories.services import Actor, profile_set

    profile_set(team=team_a, agent_id="a1", fields={"timezone": "UTC+8"}, actor=Actor())
    profile_set(team=team_a, agent_id="a2", fields={"timezone": "UTC-5"}, actor=Actor())

    async def go():
        async with session(mcp_url, agent_token) as c:
            own = ok(await c.call_tool("profile_get", {}))
            other = error_code(await c.call_tool("profile_get", {"agent_id": "a2"}))
        return own, other

    own, other = run(go())
    assert own["agent_id"] == "a1" and own["fields"]["timezone"]["value"] == "UTC+8"
    assert own["fields"]["timezone"]["source"] == "api"
    assert other == "FORBIDDEN"


def test_archive_search_finds_what_was_ingested_and_only_the_callers(mcp_url, team_a, agent_token):
    """The archive of ingested messages, through MCP as over REST: an agent token searches its
    own agent's archive, another agent is FORBIDDEN, another team sees nothing."""
    token_b = McpTokenFactory(team=TeamFactory(id="mcp_b")).token

    async def go():
        async with session(mcp_url, agent_token) as a:
            ok(
                await a.call_tool(
                    "ingest_messages",
                    {
                        "run_id": "s-1",
                        "infer": False,
                        "messages": [
                            {"role": "user", "content": "我下周去上海出差"},
                            {"role": "assistant", "content": "Noted: Shanghai next week."},
                        ],
                    },
                )
            )
            found = ok(await a.call_tool("archive_search", {"query": "上海"}))
            english = ok(await a.call_tool("archive_search", {"query": "SHANGHAI"}))
            users = ok(await a.call_tool("archive_search", {"run_id": "s-1", "role": "user"}))
            other = error_code(await a.call_tool("archive_search", {"agent_id": "a2"}))
            bad = data(await a.call_tool("archive_search", {"since": "yesterday"}))
        async with session(mcp_url, token_b) as b:
            theirs = ok(await b.call_tool("archive_search", {"query": "上海"}))
        return found, english, users, other, bad, theirs

    found, english, users, other, bad, theirs = run(go())
    assert [i["content"] for i in found["items"]] == ["我下周去上海出差"]
    assert found["items"][0]["agent_id"] == "a1" and found["next_cursor"] is None
    assert [i["role"] for i in english["items"]] == ["assistant"]
    assert [i["content"] for i in users["items"]] == ["我下周去上海出差"]
    assert other == "FORBIDDEN"
    assert bad["code"] == "VALIDATION_ERROR" and "since" in bad["details"]
    assert theirs["items"] == []


def test_an_agent_keeps_its_rules_through_mcp(mcp_url, team_a, agent_token):
    """Rules (procedural memory) through MCP as over REST: added once however often restated,
    edited, accepted, removed; another agent's are FORBIDDEN, another team's id NOT_FOUND."""
    token_b = McpTokenFactory(team=TeamFactory(id="mcp_b")).token
    proposal = Procedure.objects.create(
        team=team_a, agent_id="a1", rule="Cite sources.", status="proposed", source="lifecycle"
    )

    async def go():
        out: dict[str, Any] = {}
        async with session(mcp_url, agent_token) as a:
            out["added"] = ok(await a.call_tool("procedure_add", {"rule": "Answer in Chinese."}))
            out["again"] = ok(await a.call_tool("procedure_add", {"rule": "answer in  chinese."}))
            rid = out["added"]["id"]
            out["edited"] = ok(
                await a.call_tool(
                    "procedure_update", {"procedure_id": rid, "rule": "Answer in English."}
                )
            )
            out["accepted"] = ok(
                await a.call_tool(
                    "procedure_update", {"procedure_id": proposal.pk, "status": "active"}
                )
            )
            out["none_given"] = error_code(
                await a.call_tool("procedure_update", {"procedure_id": rid})
            )
            out["twin"] = data(
                await a.call_tool(
                    "procedure_update", {"procedure_id": rid, "rule": "cite SOURCES."}
                )
            )
            out["active"] = ok(await a.call_tool("procedure_list", {"status": "active"}))
            out["other_agent"] = [
                error_code(await a.call_tool(name, {**args, "agent_id": "a2"}))
                for name, args in [
                    ("procedure_list", {}),
                    ("procedure_add", {"rule": "x"}),
                    ("procedure_update", {"procedure_id": rid, "rule": "x"}),
                    ("procedure_delete", {"procedure_id": rid}),
                ]
            ]
        async with session(mcp_url, token_b) as b:
            out["needs_agent"] = error_code(await b.call_tool("procedure_list", {}))
            out["bad_agent"] = error_code(
                await b.call_tool("procedure_add", {"rule": "x", "agent_id": "not an id"})
            )
            out["theirs"] = ok(await b.call_tool("procedure_list", {"agent_id": "a1"}))
            out["foreign"] = [
                data(await b.call_tool(name, {"procedure_id": rid, "agent_id": "a1", **args}))
                for name, args in [("procedure_update", {"rule": "x"}), ("procedure_delete", {})]
            ]
            out["missing"] = data(
                await b.call_tool("procedure_delete", {"procedure_id": 99999999, "agent_id": "a1"})
            )
        async with session(mcp_url, agent_token) as a:
            out["deleted"] = ok(await a.call_tool("procedure_delete", {"procedure_id": rid}))
            out["gone"] = error_code(await a.call_tool("procedure_delete", {"procedure_id": rid}))
        async with session(mcp_url, token_b) as b:
            # Another team cannot bring this team's removed rule back, nor tell it was there.
            out["foreign_restore"] = data(
                await b.call_tool("procedure_restore", {"procedure_id": rid, "agent_id": "a1"})
            )
        async with session(mcp_url, agent_token) as a:
            out["restored"] = ok(await a.call_tool("procedure_restore", {"procedure_id": rid}))
            out["restored_again"] = error_code(
                await a.call_tool("procedure_restore", {"procedure_id": rid})
            )
        return out

    out = run(go())
    added = out["added"]
    assert (added["rule"], added["status"], added["source"]) == (
        "Answer in Chinese.",
        "active",
        "agent",
    )
    assert "existing" not in added
    assert out["again"] == {**added, "existing": True}
    assert out["edited"]["rule"] == "Answer in English."
    assert out["accepted"]["status"] == "active"
    assert out["none_given"] == "VALIDATION_ERROR"
    # Edited into the words of another of its rules: refused, naming that rule.
    assert out["twin"]["code"] == "CONFLICT" and str(proposal.pk) in out["twin"]["error"]
    assert [p["rule"] for p in out["active"]["procedures"]] == [
        "Cite sources.",
        "Answer in English.",
    ]
    assert out["other_agent"] == ["FORBIDDEN"] * 4
    assert (out["needs_agent"], out["bad_agent"]) == ("VALIDATION_ERROR", "VALIDATION_ERROR")
    # Another team: nothing under the same agent id, and this team's rule id is as missing as
    # one that never was.
    assert out["theirs"] == {"procedures": []}
    assert out["foreign"] == [out["missing"]] * 2 and out["missing"]["code"] == "NOT_FOUND"
    assert out["deleted"] == {"deleted": added["id"]} and out["gone"] == "NOT_FOUND"
    assert out["foreign_restore"]["code"] == "NOT_FOUND"
    assert out["foreign_restore"]["error"] == out["missing"]["error"].replace(
        "procedure", "removed procedure"
    )
    restored = out["restored"]
    assert (restored["id"], restored["rule"], restored["status"]) == (
        added["id"],
        "Answer in English.",
        "active",
    )
    assert out["restored_again"] == "CONFLICT"
    assert sorted(Procedure.objects.values_list("team_id", "rule")) == [
        ("mcp_a", "Answer in English."),
        ("mcp_a", "Cite sources."),
    ]
    # Each change is in the rule's history under the token that made it (ids, never secrets).
    changes = ProcedureRevision.objects.filter(procedure_id=added["id"]).order_by("id")
    assert [c.change for c in changes] == ["added", "changed", "removed", "restored"]
    assert {c.by for c in changes} == {
        f"mcp token mcp_{McpToken.objects.get(team=team_a).token_id}"
    }


def test_episodes_through_mcp_are_the_agents_own(mcp_url, team_a, agent_token):
    token_a2 = McpTokenFactory(team=team_a, agent=AgentFactory(team=team_a, agent_id="a2")).token
    token_b = McpTokenFactory(team=TeamFactory(id="mcp_b")).token
    deploy = {
        "task": "Deploy the billing service to production",
        "outcome": "failure",
        "steps": ["built the image", "ran the migration"],
        "lesson": "Run the migration before building the image.",
    }

    async def go():
        async with session(mcp_url, agent_token) as a:
            made = ok(await a.call_tool("episode_add", deploy))
            found = ok(await a.call_tool("episode_search", {"task": "deploy billing to prod"}))
            wins = ok(
                await a.call_tool(
                    "episode_search", {"task": "deploy billing to prod", "outcome": "success"}
                )
            )
            bad = data(await a.call_tool("episode_add", {**deploy, "outcome": "meh"}))
            ok(await a.call_tool("memory_add", {"content": "Deploy the billing service today"}))
            only_episodes = ok(await a.call_tool("episode_search", {"task": "deploy billing"}))
        async with session(mcp_url, token_a2) as a2:
            other_agent = error_code(
                await a2.call_tool("episode_search", {"task": "deploy", "agent_id": "a1"})
            )
            own = ok(await a2.call_tool("episode_search", {"task": "deploy billing to prod"}))
        async with session(mcp_url, token_b) as b:
            theirs = ok(
                await b.call_tool(
                    "episode_search", {"task": "deploy billing to prod", "agent_id": "a1"}
                )
            )
        return made, found, wins, bad, only_episodes, other_agent, own, theirs

    made, found, wins, bad, only_episodes, other_agent, own, theirs = run(go())
    assert (made["agent_id"], made["outcome"], made["steps"], made["lesson"]) == (
        "a1",
        "failure",
        deploy["steps"],
        deploy["lesson"],
    )
    assert [e["id"] for e in found["episodes"]] == [made["id"]]
    assert found["episodes"][0]["score"] >= 0.3
    assert wins == {"episodes": []}
    assert bad["code"] == "VALIDATION_ERROR"
    assert [e["id"] for e in only_episodes["episodes"]] == [made["id"]]
    assert other_agent == "FORBIDDEN"
    assert own == {"episodes": []} and theirs == {"episodes": []}
