"""Moving from Letta: an agent file (`.af`) imported through POST /import?from=letta, the
`import_team --from letta` command and the clients, by the bundle import's own code (embedded
here, met instead of doubled, all or nothing, the key's team and agent only). The files below are
written here in the two shapes Letta has exported, with what its agents put in them."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from lifecycle.models import WorkingArchive
from memories.models import Memory
from memoryplatform.client import MemoryAPIError, MemoryClient
from tenants.services import api_key_issue, team_upsert

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

SYSTEM = "<base_instructions>You are a helpful agent with memory.</base_instructions>"

# The current shape: the agents, the blocks they name by id, tools and the rest beside them.
AGENT_FILE = {
    "agents": [
        {
            "id": "agent-0",
            "name": "companion",
            "agent_type": "letta_v1_agent",
            "system": SYSTEM,
            "block_ids": ["block-0", "block-1"],
            "memory_blocks": [],
            "tool_ids": ["tool-0"],
            "llm_config": {"model": "gpt-4o-mini", "context_window": 32000},
            "messages": [
                {
                    "type": "message",
                    "role": "system",
                    "content": [{"type": "text", "text": SYSTEM}],
                    "id": "message-0",
                    "created_at": "2025-11-21T03:05:34.027937+00:00",
                },
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "text", "text": "I moved to Lisbon last month."}],
                    "id": "message-1",
                    "name": "chad",
                    "created_at": "2025-11-21T03:06:00+00:00",
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "reasoning", "reasoning": "The user moved; update memory."},
                        {"type": "text", "text": "Welcome to Lisbon! How is the new flat?"},
                    ],
                    "id": "message-2",
                    "created_at": "2025-11-21T03:06:02+00:00",
                },
                {
                    "type": "message",
                    "role": "tool",
                    "content": [{"type": "text", "text": '{"status": "OK"}'}],
                    "tool_call_id": "call-1",
                    "id": "message-3",
                    "created_at": "2025-11-21T03:06:03+00:00",
                },
            ],
        }
    ],
    "blocks": [
        {
            "id": "block-0",
            "label": "human",
            "value": "\nFirst name: Chad\nOccupation: Computer science PhD student\n\n"
            "Interests: Formula 1, sailing\n",
            "limit": 20000,
            "description": "The human block: key details about the person.",
        },
        {
            "id": "block-1",
            "label": "persona",
            "value": "I am Sam.\nMy communication style is insightful and engaging.\n",
            "limit": 20000,
        },
    ],
    "tools": [{"id": "tool-0", "name": "conversation_search", "tool_type": "letta_core"}],
    "files": [],
    "sources": [],
    "groups": [],
}

# The earlier shape: the agent itself, its blocks in core_memory; a MemGPT agent wrapped what the
# user said in a JSON envelope and spoke through the send_message tool (its content was thoughts).
EARLIER = {
    "agent_type": "memgpt_agent",
    "name": "support",
    "system": SYSTEM,
    "core_memory": [
        {
            "label": "human",
            "value": "The human needs help with order 1042.",
            "limit": 5000,
            "created_at": "2025-02-01T10:00:00",
            "updated_at": "2025-02-01T10:00:00",
            "description": None,
            "is_template": False,
            "template_name": None,
        }
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": json.dumps({"type": "login", "last_login": "never", "time": "now"}),
                }
            ],
            "created_at": "2025-02-01T10:00:01",
            "tool_calls": [],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": json.dumps(
                        {"type": "user_message", "message": "Where is my order 1042?", "time": "t"}
                    ),
                }
            ],
            "name": None,
            "created_at": "2025-02-01T10:00:05",
            "tool_calls": [],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "The user asks about an order. Check it."}],
            "created_at": "2025-02-01T10:00:06",
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {
                        "name": "send_message",
                        "arguments": json.dumps({"message": "Order 1042 ships tomorrow."}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "content": [{"type": "text", "text": '{"status": "OK", "message": "None"}'}],
            "created_at": "2025-02-01T10:00:07",
            "tool_calls": [],
        },
        {
            "role": "user",
            "content": [{"type": "text", "text": json.dumps({"type": "heartbeat"})}],
            "created_at": "2025-02-01T10:00:08",
            "tool_calls": [],
        },
    ],
    "tools": [],
    "version": "0.6.1",
}


def _import(api, body, **params):
    query = "&".join(f"{k}={v}" for k, v in {"from": "letta", **params}.items())
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return api.post(f"/import?{query}", raw=raw)


def test_an_agent_file_becomes_pinned_memories_and_the_agents_archive(team, api):
    answer = ok_data(_import(api, AGENT_FILE))
    assert answer["imported"] == {"memory": 5, "archive": 2} | {
        k: 0 for k in answer["imported"] if k not in ("memory", "archive")
    }
    rows = list(Memory.objects.filter(team=team).order_by("id"))
    assert [(m.agent_id, m.scope, m.category, m.content) for m in rows] == [
        ("companion", "personal", "human", "First name: Chad"),
        ("companion", "personal", "human", "Occupation: Computer science PhD student"),
        ("companion", "personal", "human", "Interests: Formula 1, sailing"),
        ("companion", "personal", "persona", "I am Sam."),
        ("companion", "personal", "persona", "My communication style is insightful and engaging."),
    ]
    # Letta kept core memory in every prompt: pinned, so cleanup never forgets it.
    assert all(m.pinned for m in rows)
    assert rows[2].metadata == {"source": "letta", "letta_block": "human", "letta_line": 4}
    # The conversation: the user's and the assistant's words (not the system prompt, the tool's
    # answer or the reasoning), with their times, in the archive.
    items = list(WorkingArchive.objects.filter(team=team).order_by("item_created_at"))
    assert [(i.agent_id, i.role, i.name, i.content, i.reason) for i in items] == [
        ("companion", "user", "chad", "I moved to Lisbon last month.", "ingested"),
        ("companion", "assistant", "", "Welcome to Lisbon! How is the new flat?", "ingested"),
    ]
    assert items[0].item_created_at.isoformat() == "2025-11-21T03:06:00+00:00"
    # Embedded here: found by meaning; the archive's search finds the words.
    found = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "companion", "query": "What are Chad's interests?"},
        )
    )
    assert "Interests: Formula 1, sailing" in [m["content"] for m in found]
    archive = ok_data(
        api.post("/lifecycle/archive/search", {"agent_id": "companion", "query": "Lisbon"})
    )
    assert {i["role"] for i in archive["items"]} == {"user", "assistant"}
    # The same file again adds nothing; so does a later export, renumbered, with one new line.
    again = ok_data(_import(api, AGENT_FILE))
    assert (again["imported"]["memory"], again["skipped"]["memory"]) == (0, 5)
    assert (again["imported"]["archive"], again["skipped"]["archive"]) == (0, 2)
    later = copy.deepcopy(AGENT_FILE)
    for n, message in enumerate(later["agents"][0]["messages"]):
        message["id"] = f"message-{n + 7}"
    later["blocks"][0]["value"] += "City: Lisbon\n"
    grown = ok_data(_import(api, later))
    assert (grown["imported"]["memory"], grown["imported"]["archive"]) == (1, 0)
    assert Memory.objects.filter(team=team, content="City: Lisbon", pinned=True).exists()


def test_a_block_agents_share_becomes_team_memories(team, api):
    shared = copy.deepcopy(AGENT_FILE)
    shared["blocks"].append(
        {"id": "block-9", "label": "project", "value": "The launch is on 3 March."}
    )
    shared["agents"][0]["block_ids"].append("block-9")
    helper = {
        "id": "agent-1",
        "name": "scheduler",
        "block_ids": ["block-9"],
        "memory_blocks": [{"label": "notes", "value": "Prefers morning meetings."}],
        "messages": [],
    }
    shared["agents"].append(helper)
    assert ok_data(_import(api, shared))["imported"]["memory"] == 7
    launch = Memory.objects.get(team=team, content="The launch is on 3 March.")
    assert (launch.scope, launch.agent_id, launch.category) == ("team", "", "project")
    assert launch.metadata["letta_agents"] == ["companion", "scheduler"]
    notes = Memory.objects.get(team=team, content="Prefers morning meetings.")
    assert (notes.scope, notes.agent_id, notes.category) == ("personal", "scheduler", "notes")


def test_the_earlier_format_and_memgpts_envelopes_are_read(team, api):
    ok_data(_import(api, EARLIER))
    memory = Memory.objects.get(team=team)
    assert (memory.agent_id, memory.category, memory.content) == (
        "support",
        "human",
        "The human needs help with order 1042.",
    )
    # Its block's times (UTC, written without an offset) are the memory's.
    assert memory.created_at.isoformat() == "2025-02-01T10:00:00+00:00"
    items = WorkingArchive.objects.filter(team=team).order_by("item_created_at")
    # What the user said, out of its envelope; what the agent said through send_message, not
    # its thoughts; no login, heartbeat or tool answer.
    assert [(i.role, i.content) for i in items] == [
        ("user", "Where is my order 1042?"),
        ("assistant", "Order 1042 ships tomorrow."),
    ]
    # Its times were written without an offset: Letta's, in UTC.
    assert items[0].item_created_at.isoformat() == "2025-02-01T10:00:05+00:00"


def test_a_file_as_lettas_own_schema_writes_it_is_read(team, api):
    """tests/data/letta_agent_file_0.11.json is AGENT_FILE validated and dumped by letta
    0.11.7's own `AgentFileSchema` (`model_dump(mode="json")`): every field that version writes,
    its defaults and nulls included (its agent type and reasoning parts as that version has
    them)."""
    data = (Path(__file__).parent / "data" / "letta_agent_file_0.11.json").read_bytes()
    answer = ok_data(_import(api, data))
    assert (answer["imported"]["memory"], answer["imported"]["archive"]) == (5, 2)
    items = WorkingArchive.objects.filter(team=team).order_by("item_created_at")
    assert [(i.role, i.content) for i in items] == [
        ("user", "I moved to Lisbon last month."),
        ("assistant", "Welcome to Lisbon! How is the new flat?"),
    ]


def test_a_file_encoded_as_a_json_string_is_read_too(team, api):
    # Letta's own export endpoint has answered with the document as a JSON string.
    assert ok_data(_import(api, json.dumps(AGENT_FILE)))["imported"]["memory"] == 5


def test_the_agent_may_be_given_its_id_here(team, api):
    renamed = copy.deepcopy(AGENT_FILE)
    renamed["agents"][0]["name"] = "Sam the companion"
    refused = _import(api, renamed)
    assert (refused.status_code, error_code(refused)) == (400, "VALIDATION_ERROR")
    assert (
        "agent 0: its name 'Sam the companion' is not a valid agent id" in refused.json()["error"]
    )
    ok_data(_import(api, renamed, agent_id="sam"))
    assert set(Memory.objects.filter(team=team).values_list("agent_id", flat=True)) == {"sam"}
    assert set(WorkingArchive.objects.filter(team=team).values_list("agent_id", flat=True)) == {
        "sam"
    }


def _two_agents():
    doc = copy.deepcopy(AGENT_FILE)
    doc["agents"].append({"name": "other", "block_ids": [], "messages": []})
    return doc


def _without_block():
    doc = copy.deepcopy(AGENT_FILE)
    doc["blocks"].pop()
    return doc


def _bad_message_time():
    doc = copy.deepcopy(AGENT_FILE)
    doc["agents"][0]["messages"][1]["created_at"] = "yesterday"
    return doc


def _bad_block_value():
    doc = copy.deepcopy(AGENT_FILE)
    doc["blocks"][0]["value"] = ["not", "text"]
    return doc


@pytest.mark.parametrize(
    "body, params, message",
    [
        (b"\xff\xfe", {}, "not UTF-8"),
        (b"{not json", {}, "not JSON"),
        ([AGENT_FILE], {}, "expected a JSON object"),
        ({"results": []}, {}, 'no "agents"'),
        ({"agents": []}, {}, "holds no agent"),
        ({"agents": {"name": "a"}}, {}, "agents: expected a list"),
        (_two_agents(), {"agent_id": "sam"}, "the file holds 2 agents, not one"),
        (AGENT_FILE, {"agent_id": "a/b"}, "agent_id: not a valid agent id"),
        (_without_block(), {}, "agent 0: block 'block-1' is not in the file"),
        (_bad_message_time(), {}, "agent companion, message 1: created_at 'yesterday'"),
        (_bad_block_value(), {}, "block 'human': \"value\""),
        (
            {**EARLIER, "core_memory": [{**EARLIER["core_memory"][0], "updated_at": "later"}]},
            {},
            "block 'human': updated_at 'later'",
        ),
    ],
)
def test_a_bad_file_is_a_400_naming_what_and_writes_nothing(team, api, body, params, message):
    answer = _import(api, body, **params)
    assert (answer.status_code, error_code(answer)) == (400, "VALIDATION_ERROR")
    assert message in answer.json()["error"]
    assert not Memory.objects.filter(team=team).exists()
    assert not WorkingArchive.objects.filter(team=team).exists()


def _odd(change):
    doc = copy.deepcopy(AGENT_FILE)
    change(doc)
    return doc


@pytest.mark.parametrize(
    "body",
    [
        _odd(lambda d: d["agents"][0].update(block_ids=[["block-0"]])),
        _odd(lambda d: d["agents"][0].update(messages={"role": "user"})),
        _odd(lambda d: d["agents"][0]["messages"].append(["not", "a", "message"])),
        _odd(lambda d: d["agents"][0]["messages"][1].update(content=5)),
        _odd(lambda d: d["agents"][0]["messages"][1].update(content={"text": "hi"})),
        _odd(lambda d: d["agents"][0]["messages"][2].update(tool_calls=7)),
        _odd(lambda d: d["agents"][0]["messages"][2].update(tool_calls=[{"function": "x"}])),
        _odd(lambda d: d["agents"][0]["messages"][1].update(role=["user"])),
        _odd(lambda d: d["blocks"][0].update(label="Notes (2025) / ünïcode ✓")),
        _odd(lambda d: d["blocks"][0].update(label=None)),
        _odd(lambda d: d["blocks"].append("block")),
        _odd(lambda d: d["agents"][0].update(name=None)),
        _odd(lambda d: d["agents"][0].update(memory_blocks=[{"label": "x", "value": 3}])),
        {"core_memory": "human: Chad"},
        {"agents": [{"name": "a", "block_ids": "block-0"}]},
    ],
)
def test_an_odd_file_is_imported_or_refused_never_a_server_error(team, api, body):
    answer = _import(api, body)
    assert answer.status_code in (200, 400), answer.content
    if answer.status_code == 400:
        assert error_code(answer) == "VALIDATION_ERROR"


def test_an_agent_key_imports_its_own_agent_only_and_only_into_its_team(
    team, agent, agent_api, other_team, other_api
):
    mine = ok_data(_import(agent_api, AGENT_FILE, agent_id="researcher"))
    assert (mine["imported"]["memory"], mine["imported"]["archive"]) == (5, 2)
    refused = _import(agent_api, AGENT_FILE)  # as "companion"
    assert (refused.status_code, error_code(refused)) == (403, "FORBIDDEN")
    assert not Memory.objects.filter(team=team, agent_id="companion").exists()
    # Another team's import of the same file is its own: nothing here changes or shows.
    assert ok_data(_import(other_api, AGENT_FILE))["imported"]["memory"] == 5
    assert Memory.objects.filter(team=team).count() == 5
    assert Memory.objects.filter(team=other_team, agent_id="companion").count() == 5


def test_the_import_command_reads_an_agent_file(team, tmp_path):
    path = tmp_path / "companion.af"
    path.write_text(json.dumps(AGENT_FILE))
    out = io.StringIO()
    call_command(
        "import_team",
        str(path),
        team=team.id,
        source="letta",
        agent_id="sam",
        stdout=out,
        stderr=io.StringIO(),
    )
    assert json.loads(out.getvalue())["imported"]["archive"] == 2
    assert Memory.objects.filter(team=team, agent_id="sam").count() == 5
    path.write_text(json.dumps({"agents": []}))
    with pytest.raises(CommandError, match="holds no agent"):
        call_command("import_team", str(path), team=team.id, source="letta", stderr=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_the_client_imports_an_agent_file(live_server):
    team, _ = team_upsert(team_id="from_letta", name="l")
    key = api_key_issue(team=team)
    client = MemoryClient(key.key_id, key.secret, base_url=live_server.url)
    try:
        assert client.import_letta(AGENT_FILE)["imported"]["memory"] == 5
        raw = json.dumps(EARLIER).encode()
        assert client.import_letta(raw, agent_id="helpdesk")["imported"]["archive"] == 2
        with pytest.raises(MemoryAPIError) as err:
            client.import_letta({"agents": []})
        assert err.value.code == "VALIDATION_ERROR"
    finally:
        client.session.close()
    assert Memory.objects.filter(team=team, agent_id="helpdesk").count() == 1
