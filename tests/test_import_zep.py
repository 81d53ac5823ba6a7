"""Moving from Zep: a user's graph (nodes, edges) and threads imported through
POST /import?from=zep, the `import_team --from zep` command and the clients, by the bundle
import's own code (embedded here, met instead of doubled, all or nothing, the key's team and
agent only). The documents below are written here in the shapes Zep's API answers with."""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from graph.models import Entity, EntityMention, Relation
from lifecycle.models import WorkingArchive
from memories.models import Memory
from memories.purge import memories_expire
from memoryplatform.client import MemoryAPIError, MemoryClient
from tenants.services import api_key_issue, team_upsert

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

ALICE, ACME, GLOBEX, TEA = "n-alice", "n-acme", "n-globex", "n-tea"
NODES = [
    {
        "uuid": ALICE,
        "name": "Alice",
        "labels": ["Entity", "User"],
        "summary": "Alice is a data engineer who moved to Lisbon.",
        "attributes": {"first_name": "Alice"},
        "created_at": "2025-03-01T09:00:00Z",
    },
    {
        "uuid": ACME,
        "name": "Acme Corp",
        "labels": ["Entity", "Organization"],
        "summary": "Alice's former employer.",
        "created_at": "2025-03-01T09:00:00Z",
    },
    {
        "uuid": GLOBEX,
        "name": "Globex",
        "labels": ["Entity", "Organization"],
        "summary": "Alice's employer since 2025.",
        "created_at": "2025-06-01T09:00:00Z",
    },
    {
        "uuid": TEA,
        "name": "green tea",
        "labels": ["Entity", "Preference"],
        "summary": "",
        "created_at": "2025-03-01T09:00:00Z",
    },
]
EDGES = [
    {
        "uuid": "e-1",
        "name": "WORKS_AT",
        "fact": "Alice works at Acme Corp as a data engineer.",
        "source_node_uuid": ALICE,
        "target_node_uuid": ACME,
        "episodes": ["ep-1"],
        "created_at": "2025-03-01T09:00:00Z",
        "valid_at": "2024-01-01T00:00:00Z",
        # Superseded when she said she moved to Globex.
        "invalid_at": "2025-06-01T00:00:00Z",
        "expired_at": "2025-06-01T09:00:00Z",
        "fact_embedding": [0.1, 0.2],
    },
    {
        "uuid": "e-2",
        "name": "WORKS_AT",
        "fact": "Alice works at Globex.",
        "source_node_uuid": ALICE,
        "target_node_uuid": GLOBEX,
        "episodes": ["ep-2"],
        "created_at": "2025-06-01T09:00:00Z",
        "valid_at": "2025-06-01T00:00:00Z",
        "invalid_at": None,
        "expired_at": None,
    },
    {
        "uuid": "e-3",
        "name": "LIKES",
        "fact": "Alice drinks green tea every morning.",
        "source_node_uuid": ALICE,
        "target_node_uuid": TEA,
        "created_at": "2025-03-02T09:00:00Z",
        "attributes": {"frequency": "daily"},
    },
    {
        "uuid": "e-4",
        "name": "PREFERS",
        "fact": "Alice enjoys green tea with jasmine.",
        "source_node_uuid": ALICE,
        "target_node_uuid": TEA,
        "created_at": "2025-03-03T09:00:00Z",
        # Still true, until a date ahead: it expires then here.
        "invalid_at": "2031-01-01T00:00:00Z",
    },
]
THREADS = [
    {
        "thread_id": "onboarding",
        "messages": [
            {
                "uuid": "m-1",
                "role": "system",
                "name": "",
                "content": "You are a helpful assistant.",
                "created_at": "2025-03-01T08:59:00Z",
            },
            {
                "uuid": "m-2",
                "role": "user",
                "name": "Alice",
                "content": "I just started at Acme Corp.",
                "created_at": "2025-03-01T09:00:00Z",
            },
            {
                "uuid": "m-3",
                "role": "assistant",
                "name": "Helper",
                "content": "Congratulations on the new job!",
                "created_at": "2025-03-01T09:00:05Z",
                "metadata": {"model": "x"},
            },
            {
                "uuid": "m-4",
                "role": "tool",
                "content": '{"ok": true}',
                "created_at": "2025-03-01T09:00:06Z",
            },
        ],
    }
]
EXPORT = {"user_id": "alice", "nodes": NODES, "edges": EDGES, "threads": THREADS}


def _import(api, body, **params):
    query = "&".join(f"{k}={v}" for k, v in {"from": "zep", **params}.items())
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return api.post(f"/import?{query}", raw=raw)


def test_a_zep_users_graph_becomes_facts_entities_relations_and_the_archive(team, api):
    answer = ok_data(_import(api, EXPORT))
    imported = answer["imported"]
    assert (imported["memory"], imported["entity"], imported["relation"]) == (4, 4, 2)
    assert (imported["mention"], imported["archive"]) == (8, 2)
    facts = {m.content: m for m in Memory.objects.filter(team=team)}
    assert set(facts) == {e["fact"] for e in EDGES}
    assert {(m.agent_id, m.scope, m.category) for m in facts.values()} == {
        ("alice", "personal", "general")
    }
    globex = facts["Alice works at Globex."]
    assert globex.created_at == datetime(2025, 6, 1, 9, tzinfo=UTC)
    assert globex.expires_at is None
    assert globex.metadata == {
        "source": "zep",
        "zep_uuid": "e-2",
        "zep_name": "WORKS_AT",
        "source_node_uuid": ALICE,
        "target_node_uuid": GLOBEX,
        "episodes": ["ep-2"],
        "valid_at": "2025-06-01T00:00:00Z",
        "zep_source_node": "Alice",
        "zep_target_node": "Globex",
    }
    # No longer true in Zep: kept, expired when it stopped being true, out of search, and the
    # trash pass moves it where it can still be restored. Zep's embedding is not kept.
    acme = facts["Alice works at Acme Corp as a data engineer."]
    assert acme.expires_at == datetime(2025, 6, 1, tzinfo=UTC)
    assert acme.metadata["invalid_at"] == "2025-06-01T00:00:00Z"
    assert "fact_embedding" not in acme.metadata
    assert facts["Alice enjoys green tea with jasmine."].expires_at == datetime(
        2031, 1, 1, tzinfo=UTC
    )
    found = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "alice", "query": "Where does Alice work?", "min_score": 0.0},
        )
    )
    ids = [m["id"] for m in found]
    assert globex.pk in ids and acme.pk not in ids
    # The nodes: entities of the agent, typed where this server has Zep's label.
    entities = {e.name: e for e in Entity.objects.filter(team=team)}
    assert {(n, e.agent_id, e.entity_type) for n, e in entities.items()} == {
        ("Alice", "alice", "person"),
        ("Acme Corp", "alice", "organization"),
        ("Globex", "alice", "organization"),
        ("green tea", "alice", "preference"),
    }
    alice = entities["Alice"]
    assert alice.description == "Alice is a data engineer who moved to Lisbon."
    assert alice.properties == {
        "attributes": {"first_name": "Alice"},
        "source": "zep",
        "zep_uuids": [ALICE],
        "zep_labels": ["Entity", "User"],
    }
    assert all(e.embedding for e in entities.values())
    # The edges still true: relations pointing at their fact. LIKES says prefers, as the graph
    # reads an LLM's relations: one prefers relation holding both names and both facts. The Acme
    # edge no longer holds: no relation, its fact (expired) still mentions both ends.
    relations = {
        (r.source.name, r.relation_type, r.target.name): r
        for r in Relation.objects.filter(team=team).select_related("source", "target")
    }
    assert set(relations) == {("Alice", "works_at", "Globex"), ("Alice", "prefers", "green tea")}
    works = relations[("Alice", "works_at", "Globex")]
    assert (works.source_memory_id, works.description) == (globex.pk, "Alice works at Globex.")
    tea = relations[("Alice", "prefers", "green tea")]
    assert tea.description == (
        "Alice drinks green tea every morning.\nAlice enjoys green tea with jasmine."
    )
    assert tea.properties == {
        "source": "zep",
        "zep_names": ["LIKES", "PREFERS"],
        "zep_uuids": ["e-3", "e-4"],
    }
    mentioned = {
        (m.entity.name, m.memory.content)
        for m in EntityMention.objects.filter(team=team).select_related("entity", "memory")
    }
    assert ("Acme Corp", acme.content) in mentioned and ("Alice", acme.content) in mentioned
    assert len(mentioned) == 8  # each fact mentions both its ends
    # The conversation: the user's and the assistant's words, the thread its run.
    items = list(WorkingArchive.objects.filter(team=team).order_by("item_created_at"))
    assert [(i.agent_id, i.role, i.name, i.run_id, i.content) for i in items] == [
        ("alice", "user", "Alice", "onboarding", "I just started at Acme Corp."),
        ("alice", "assistant", "Helper", "onboarding", "Congratulations on the new job!"),
    ]
    # Through the graph API, as the agent's own graph.
    listed = ok_data(api.get("/graph/entities?agent_id=alice"))["items"]
    assert len(listed) == 4
    # The same export again adds nothing; the expired fact goes to the trash at the next pass.
    again = ok_data(_import(api, EXPORT))
    assert sum(again["imported"].values()) == 0
    assert (again["skipped"]["memory"], again["skipped"]["archive"]) == (4, 2)
    assert memories_expire() == 1
    assert not Memory.objects.filter(pk=acme.pk).exists()


def test_zeps_earlier_message_shape_and_a_bare_message_list_are_read(team, api):
    """Zep's v2 API called the role `role_type` and the speaker `role`; a document may hold one
    conversation as `messages`, and facts without their nodes (no graph then)."""
    doc = {
        "user_id": "bob",
        "edges": [{"fact": "Bob is allergic to peanuts.", "created_at": "2024-05-01T10:00:00"}],
        "messages": [
            {"role_type": "user", "role": "Bob", "content": "Hi", "created_at": "2024-05-01"},
            {"role_type": "norole", "content": "a document", "created_at": "2024-05-01"},
            {"role_type": "assistant", "content": "Hello Bob", "created_at": "2024-05-01T10:01"},
        ],
    }
    answer = ok_data(_import(api, doc))
    assert (answer["imported"]["memory"], answer["imported"]["entity"]) == (1, 0)
    fact = Memory.objects.get(team=team)
    # A time written without an offset is Zep's UTC.
    assert (fact.agent_id, fact.created_at) == ("bob", datetime(2024, 5, 1, 10, tzinfo=UTC))
    items = WorkingArchive.objects.filter(team=team).order_by("item_created_at")
    assert [(i.role, i.name, i.run_id, i.content) for i in items] == [
        ("user", "Bob", "", "Hi"),
        ("assistant", "", "", "Hello Bob"),
    ]


def test_zeps_current_api_edges_name_their_nodes_and_messages_their_time(team, api):
    """Zep's v4 API writes an edge's nodes' names and labels on the edge, and a message's
    reference time (when it was said, for a conversation added later): a document of edges alone
    draws its graph from them, and the archive keeps when each message was said. The SDK's
    objects, dumped, are sent as they are (`.dict()`: `uuid`, no empty fields)."""
    doc = {
        "user_id": "alice",
        "edges": [
            {
                "uuid": "e-9",
                "name": "LOCATED_IN",
                "fact": "Alice lives in Lisbon.",
                "scope": "entity",
                "source_node_uuid": ALICE,
                "source_node_name": "Alice",
                "source_node_labels": ["Entity", "User"],
                "target_node_uuid": "n-lisbon",
                "target_node_name": "Lisbon",
                "target_node_labels": ["Entity", "Location"],
                "episode_uuids": ["ep-9"],
                "graph_uuid": "g-alice",
                "created_at": "2025-08-01T09:00:00Z",
            },
            {"uuid": "e-10", "fact": "Alice has a cat.", "created_at": "2025-08-02T09:00:00Z"},
        ],
        "threads": [
            {
                "uuid": "t-0001",
                "user_uuid": "u-alice",
                "messages": [
                    {
                        "uuid": "m-9",
                        "role": "user",
                        "name": "Alice",
                        "content": "I moved to Lisbon in July.",
                        "created_at": "2025-08-01T09:00:00Z",
                        "reference_time": "2025-07-15T18:30:00Z",
                        "processed": True,
                        "thread_uuid": "t-0001",
                    }
                ],
            }
        ],
    }
    answer = ok_data(_import(api, doc))
    assert (answer["imported"]["memory"], answer["imported"]["entity"]) == (2, 2)
    lives = Relation.objects.select_related("source", "target").get(team=team)
    assert (lives.source.name, lives.relation_type, lives.target.name) == (
        "Alice",
        "located_in",
        "Lisbon",
    )
    assert (lives.source.entity_type, lives.target.entity_type) == ("person", "location")
    assert lives.target.properties["zep_uuids"] == ["n-lisbon"]
    assert Memory.objects.get(content="Alice lives in Lisbon.").metadata["episode_uuids"] == [
        "ep-9"
    ]
    # The edge that names no node is a fact alone.
    assert EntityMention.objects.filter(team=team).count() == 2
    said = WorkingArchive.objects.get(team=team)
    assert (said.item_created_at, said.run_id) == (
        datetime(2025, 7, 15, 18, 30, tzinfo=UTC),
        "t-0001",
    )
    # A node the document holds is met by its uuid, the edge's own words aside.
    doc["nodes"] = [dict(NODES[0], name="Alice Smith")]
    doc["edges"][1].update(source_node_uuid=ALICE, target_node_uuid="n-x")
    refused = _import(api, doc)
    assert "edge 1: target_node_uuid 'n-x' is no node of the document" in refused.json()["error"]
    doc["edges"].pop()
    ok_data(_import(api, doc))
    assert Relation.objects.get(team=team, source__name="Alice Smith").target.name == "Lisbon"


# What graphiti-core's EntityNode, EntityEdge and EpisodicNode give with model_dump(mode="json"):
# Zep's fields, a group instead of a user, the embeddings beside them.
GRAPHITI = {
    "group_id": "support-kb",
    "nodes": [
        {
            "uuid": "g-n1",
            "name": "Order 1042",
            "group_id": "support-kb",
            "labels": ["Entity"],
            "created_at": "2025-02-01T10:00:00Z",
            "name_embedding": [0.5, 0.1],
            "summary": "An order placed on 1 February.",
            "attributes": {},
        },
        {
            "uuid": "g-n2",
            "name": "Lisbon warehouse",
            "group_id": "support-kb",
            "labels": ["Entity", "Location"],
            "created_at": "2025-02-01T10:00:00Z",
            "name_embedding": None,
            "summary": "",
            "attributes": {},
        },
    ],
    "edges": [
        {
            "uuid": "g-e1",
            "group_id": "support-kb",
            "source_node_uuid": "g-n1",
            "target_node_uuid": "g-n2",
            "created_at": "2025-02-01T10:00:05Z",
            "name": "SHIPS_FROM",
            "fact": "Order 1042 ships from the Lisbon warehouse.",
            "fact_embedding": [0.1, 0.9],
            "episodes": ["g-ep1"],
            "expired_at": None,
            "valid_at": "2025-02-01T10:00:00Z",
            "invalid_at": None,
            "reference_time": "2025-02-01T10:00:00Z",
            "attributes": {},
        }
    ],
    "episodes": [
        {
            "uuid": "g-ep1",
            "name": "support chat 1",
            "group_id": "support-kb",
            "labels": [],
            "created_at": "2025-02-03T08:00:00Z",
            "source": "message",
            "source_description": "support chat",
            "content": "customer: Where does order 1042 ship from?",
            "valid_at": "2025-02-01T10:00:00Z",
            "entity_edges": ["g-e1"],
            "episode_metadata": None,
        }
    ],
}


def test_a_graphiti_group_imports_as_zeps_graph_and_its_episodes_into_the_archive(team, api):
    """Graphiti, Zep's open-source core, stores the same nodes and edges in groups: a group is
    the team's graph (its episodes then have no agent to go to), or an agent's with agent_id.
    Its episodes are what was said: the archive keeps them, at the time they happened."""
    refused = _import(api, GRAPHITI)
    assert (refused.status_code, error_code(refused)) == (400, "VALIDATION_ERROR")
    assert "episodes: a shared graph's document has no agent" in refused.json()["error"]
    team_wide = ok_data(_import(api, {k: v for k, v in GRAPHITI.items() if k != "episodes"}))
    assert (team_wide["imported"]["memory"], team_wide["imported"]["relation"]) == (1, 1)
    assert Memory.objects.get(team=team).scope == "team"
    answer = ok_data(_import(api, GRAPHITI, agent_id="support"))
    assert (answer["imported"]["memory"], answer["imported"]["archive"]) == (1, 1)
    fact = Memory.objects.get(team=team, agent_id="support")
    assert "fact_embedding" not in fact.metadata and fact.metadata["group_id"] == "support-kb"
    # A name that says none of this server's types is related_to, Zep's name kept.
    ships = Relation.objects.get(team=team, source__agent_id="support")
    assert (ships.relation_type, ships.properties["zep_names"]) == ("related_to", ["SHIPS_FROM"])
    order = Entity.objects.get(team=team, agent_id="support", name="Order 1042")
    assert "name_embedding" not in order.properties
    said = WorkingArchive.objects.get(team=team)
    assert (said.agent_id, said.role, said.content, said.item_created_at) == (
        "support",
        "",
        "customer: Where does order 1042 ship from?",
        datetime(2025, 2, 1, 10, tzinfo=UTC),
    )


def test_zep_episodes_no_thread_holds_go_to_the_archive(team, api):
    """Zep's episodes hold the data added to the graph directly (text, JSON) beside the threads'
    messages: one of a thread the document holds is read from its thread, a system message is
    the application's runtime, the rest is kept."""
    doc = copy.deepcopy(EXPORT)
    doc["episodes"] = [
        {
            "uuid": "ep-1",
            "content": "I just started at Acme Corp.",
            "role": "user",
            "role_name": "Alice",
            "thread_uuid": "t-1",
            "created_at": "2025-03-01T09:00:01Z",
        },
        {
            "uuid": "ep-2",
            "content": '{"plan": "Pro", "seats": 3}',
            "source": "json",
            "created_at": "2025-03-05T09:00:00Z",
        },
        {"uuid": "ep-3", "content": "Be brief.", "role": "system", "created_at": "2025-03-05"},
    ]
    ok_data(_import(api, doc))
    items = WorkingArchive.objects.filter(team=team).order_by("item_created_at")
    assert [(i.role, i.content) for i in items] == [
        ("user", "I just started at Acme Corp."),
        ("assistant", "Congratulations on the new job!"),
        ("", '{"plan": "Pro", "seats": 3}'),
    ]
    # Without the threads, a thread's message episode is what is left of it: kept.
    WorkingArchive.objects.filter(team=team).delete()
    ok_data(_import(api, {k: v for k, v in doc.items() if k != "threads"}))
    assert WorkingArchive.objects.filter(team=team, name="Alice").count() == 1


def test_what_the_docs_sdk_example_reads_from_zep_imports(team, api):
    """tests/data/zep_sdk_4_export.json is what the docs' example wrote, run with zep-cloud
    4.0.1 against a stand-in Zep server (one item per page, so the SDK's pagers read every page):
    the SDK's own objects, `.dict()`."""
    data = (Path(__file__).parent / "data" / "zep_sdk_4_export.json").read_bytes()
    answer = ok_data(_import(api, data))
    assert (answer["imported"]["memory"], answer["imported"]["archive"]) == (2, 2)
    relations = {
        (r.source.name, r.relation_type, r.target.name)
        for r in Relation.objects.filter(team=team).select_related("source", "target")
    }
    assert relations == {("Alice", "works_at", "Globex"), ("Alice", "located_in", "Lisbon")}
    assert WorkingArchive.objects.filter(team=team, run_id="onboarding").count() == 2


def test_a_shared_graph_becomes_team_memories_and_a_team_graph(team, api):
    doc = {"graph_id": "company-kb", "nodes": NODES[1:3], "edges": []}
    doc["edges"] = [
        {
            "uuid": "g-1",
            "name": "PART_OF",
            "fact": "Globex acquired Acme Corp in 2025.",
            "source_node_uuid": ACME,
            "target_node_uuid": GLOBEX,
            "created_at": "2025-07-01T00:00:00Z",
        }
    ]
    assert ok_data(_import(api, doc))["imported"]["relation"] == 1
    fact = Memory.objects.get(team=team)
    assert (fact.scope, fact.agent_id) == ("team", "")
    assert set(Entity.objects.filter(team=team).values_list("agent_id", flat=True)) == {""}
    assert Relation.objects.get(team=team).relation_type == "part_of"
    # A shared graph has no agent to archive a conversation to.
    refused = _import(api, doc | {"threads": THREADS})
    assert (refused.status_code, error_code(refused)) == (400, "VALIDATION_ERROR")
    assert "thread 0: a shared graph" in refused.json()["error"]


def test_the_user_may_be_given_its_agent_here(team, api):
    emailed = EXPORT | {"user_id": "Alice Smith"}
    refused = _import(api, emailed)
    assert (refused.status_code, error_code(refused)) == (400, "VALIDATION_ERROR")
    assert "user_id: 'Alice Smith' is not a valid agent id here" in refused.json()["error"]
    ok_data(_import(api, emailed, agent_id="alice"))
    assert set(Memory.objects.filter(team=team).values_list("agent_id", flat=True)) == {"alice"}
    assert set(WorkingArchive.objects.filter(team=team).values_list("agent_id", flat=True)) == {
        "alice"
    }


def _changed(change):
    doc = copy.deepcopy(EXPORT)
    change(doc)
    return doc


@pytest.mark.parametrize(
    "body, params, message",
    [
        (b"\xff\xfe", {}, "not UTF-8"),
        (b"{not json", {}, "not JSON"),
        ([EXPORT], {}, "expected a JSON object"),
        ({"results": []}, {}, 'not a Zep export: no "nodes"'),
        ({"edges": []}, {}, 'no "user_id" (or "graph_id"'),
        (EXPORT, {"agent_id": "a/b"}, "agent_id: not a valid agent id"),
        (EXPORT | {"edges": {"fact": "x"}}, {}, "edges: expected a list"),
        (EXPORT | {"nodes": ["Alice"]}, {}, "node 0: not an object"),
        (_changed(lambda d: d["edges"][1].pop("fact")), {}, 'edge 1: "fact"'),
        (_changed(lambda d: d["edges"][2].update(target_node_uuid="n-x")), {}, "edge 2: target_"),
        (_changed(lambda d: d["edges"][0].update(valid_at="soon")), {}, "edge 0: valid_at 'soon'"),
        (_changed(lambda d: d["nodes"][0].update(name="")), {}, 'node 0: "name" is required'),
        (_changed(lambda d: d["nodes"][3].pop("uuid")), {}, 'node 3: "uuid" is required'),
        (_changed(lambda d: d["nodes"][0].update(labels="User")), {}, 'node 0: "labels"'),
        (
            _changed(lambda d: d["edges"][0].update(invalid_at="9999-12-31T23:00:00-05:00")),
            {},
            "edge 0: invalid_at '9999-12-31T23:00:00-05:00' is out of range",
        ),
        (
            _changed(lambda d: d["threads"][0]["messages"][2].update(created_at="0999-01-01")),
            {},
            "thread 0, message 2: created_at '0999-01-01' is out of range",
        ),
        (
            _changed(lambda d: d["threads"][0]["messages"][1].update(created_at=None)),
            {},
            "thread 0, message 1: created_at None",
        ),
        (
            _changed(lambda d: d["threads"][0]["messages"][2].update(content=["hi"])),
            {},
            'thread 0, message 2: "content" must be text',
        ),
    ],
)
def test_a_bad_export_is_a_400_naming_what_and_writes_nothing(team, api, body, params, message):
    answer = _import(api, body, **params)
    assert (answer.status_code, error_code(answer)) == (400, "VALIDATION_ERROR")
    assert message in answer.json()["error"]
    assert not Memory.objects.filter(team=team).exists()
    assert not Entity.objects.filter(team=team).exists()
    assert not WorkingArchive.objects.filter(team=team).exists()


@pytest.mark.parametrize(
    "body",
    [
        _changed(lambda d: d["edges"][0].update(name=None)),
        _changed(lambda d: d["edges"][0].update(name=["WORKS_AT"])),
        _changed(lambda d: d["edges"][1].update(attributes="x", episodes=None)),
        _changed(lambda d: d["edges"][1].update(fact="x" * 40_000)),
        _changed(lambda d: d["nodes"][0].update(summary=7)),
        _changed(lambda d: d["nodes"][0].update(name="A" * 300)),
        _changed(lambda d: d["nodes"].append(dict(d["nodes"][0], uuid="n-alice-2", name="ALICE"))),
        _changed(lambda d: d["nodes"][1].update(labels=["Entity", "Spaceship"])),
        _changed(lambda d: d["threads"][0].update(thread_id="a thread with spaces")),
        _changed(lambda d: d["threads"][0].update(messages="hello")),
        _changed(lambda d: d["threads"][0]["messages"][1].update(role=["user"], name=5)),
        _changed(lambda d: d.update(threads=[["not", "a", "thread"]])),
        _changed(lambda d: d.update(user_id=7)),
    ],
)
def test_an_odd_export_is_imported_or_refused_never_a_server_error(team, api, body):
    answer = _import(api, body)
    assert answer.status_code in (200, 400), answer.content
    if answer.status_code == 400:
        assert error_code(answer) == "VALIDATION_ERROR"


def test_nodes_of_one_name_are_one_entity_holding_every_edge(team, api):
    doc = copy.deepcopy(EXPORT)
    doc["nodes"].append(dict(NODES[0], uuid="n-alice-2", name="ALICE", summary="Likes tea."))
    doc["edges"][2]["source_node_uuid"] = "n-alice-2"
    ok_data(_import(api, doc))
    alice = Entity.objects.get(team=team, entity_type="person")
    assert alice.properties["zep_uuids"] == [ALICE, "n-alice-2"]
    assert alice.properties["zep_names"] == ["Alice", "ALICE"]
    assert alice.description.endswith("\nLikes tea.")
    assert Relation.objects.filter(team=team, source=alice).count() == 2


def test_a_fact_said_again_after_it_ended_is_one_memory_that_still_holds(team, api):
    """Zep keeps a fact that stopped being true and, said again later, a new edge of the same
    words: one memory here, as the import meets one text once, and it must not expire with the
    old edge. The old edge draws no relation, the new one does."""
    doc = copy.deepcopy(EXPORT)
    doc["edges"].append(
        dict(
            EDGES[0],
            uuid="e-5",
            created_at="2026-01-10T09:00:00Z",
            valid_at="2026-01-10T00:00:00Z",
            invalid_at=None,
            expired_at=None,
        )
    )
    answer = ok_data(_import(api, doc))
    assert (answer["imported"]["memory"], answer["imported"]["relation"]) == (4, 3)
    acme = Memory.objects.get(team=team, content=EDGES[0]["fact"])
    assert acme.expires_at is None
    assert acme.metadata["zep_uuid"] == "e-1"
    assert [r["zep_uuid"] for r in acme.metadata["zep_repeats"]] == ["e-5"]
    works = Relation.objects.get(team=team, target__name="Acme Corp")
    assert (works.relation_type, works.source_memory_id) == ("works_at", acme.pk)
    assert memories_expire() == 0
    # Said the other way round (the open edge first), it holds all the same.
    doc["edges"] = [doc["edges"][4], doc["edges"][0]]
    Memory.objects.filter(team=team).delete()
    Relation.objects.filter(team=team).delete()
    ok_data(_import(api, doc))
    assert Memory.objects.get(team=team, content=EDGES[0]["fact"]).expires_at is None
    # The relation is the open edge's alone: the ended one is not drawn.
    works = Relation.objects.get(team=team, target__name="Acme Corp")
    assert works.properties["zep_uuids"] == ["e-5"]


def test_an_agent_key_imports_its_own_agent_only_and_only_into_its_team(
    team, agent, agent_api, other_team, other_api
):
    mine = ok_data(_import(agent_api, EXPORT, agent_id="researcher"))
    assert (mine["imported"]["memory"], mine["imported"]["archive"]) == (4, 2)
    refused = _import(agent_api, EXPORT)  # as "alice"
    assert (refused.status_code, error_code(refused)) == (403, "FORBIDDEN")
    shared = _import(agent_api, {"graph_id": "kb", "edges": [{"fact": "The office is in Porto."}]})
    assert (shared.status_code, error_code(shared)) == (403, "FORBIDDEN")
    assert not Memory.objects.filter(team=team, agent_id__in=("alice", "")).exists()
    # Another team's import of the same export is its own: nothing here changes or shows.
    assert ok_data(_import(other_api, EXPORT))["imported"]["memory"] == 4
    assert Memory.objects.filter(team=team).count() == 4
    assert Memory.objects.filter(team=other_team, agent_id="alice").count() == 4
    assert Entity.objects.filter(team=team, agent_id="alice").count() == 0


def test_the_import_command_reads_a_zep_export(team, tmp_path):
    path = tmp_path / "alice.json"
    path.write_text(json.dumps(EXPORT))
    out = io.StringIO()
    call_command(
        "import_team",
        str(path),
        team=team.id,
        source="zep",
        agent_id="ally",
        stdout=out,
        stderr=io.StringIO(),
    )
    assert json.loads(out.getvalue())["imported"]["relation"] == 2
    assert Memory.objects.filter(team=team, agent_id="ally").count() == 4
    path.write_text(json.dumps({"nodes": []}))
    with pytest.raises(CommandError, match='no "user_id"'):
        call_command("import_team", str(path), team=team.id, source="zep", stderr=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_the_client_imports_a_zep_export(live_server):
    team, _ = team_upsert(team_id="from_zep", name="z")
    key = api_key_issue(team=team)
    client = MemoryClient(key.key_id, key.secret, base_url=live_server.url)
    try:
        # The SDK's models dumped as Python objects hold datetimes: the client sends them.
        dumped = copy.deepcopy(EXPORT)
        dumped["edges"][1]["created_at"] = datetime(2025, 6, 1, 9, tzinfo=UTC)
        assert client.import_zep(dumped)["imported"]["memory"] == 4
        raw = json.dumps(EXPORT).encode()
        assert client.import_zep(raw, agent_id="helpdesk")["imported"]["archive"] == 2
        with pytest.raises(MemoryAPIError) as err:
            client.import_zep({"nodes": []})
        assert err.value.code == "VALIDATION_ERROR"
    finally:
        client.session.close()
    assert Memory.objects.filter(team=team, agent_id="helpdesk").count() == 4
    assert Memory.objects.get(team=team, agent_id="alice", content="Alice works at Globex.")
