"""Moving from mem0: its `get_all()` listing imported through POST /import?from=mem0, the
`import_team --from mem0` command and the clients, by the bundle import's own code (embedded
here, checked, met instead of doubled, all or nothing, the key's team and agent only)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command

from graph.models import Entity, Relation
from memories.models import Memory, MemoryRevision
from memories.purge import memories_expire
from memoryplatform.client import MemoryAPIError, MemoryClient
from tenants.services import api_key_issue, team_upsert

from .factories import AgentFactory
from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

LISTING = {
    "results": [
        {
            "id": "0b6c2b5e-1",
            "memory": "Likes to play tennis on weekends",
            "hash": "9f1c",
            "metadata": {"topic": "sport"},
            "created_at": "2024-07-20T01:23:45.123456-07:00",
            "updated_at": None,
            "user_id": "alice",
            "run_id": "session-7",
        },
        {
            "id": "0b6c2b5e-2",
            "memory": "Is vegetarian and allergic to peanuts",
            "created_at": "2024-07-21T10:00:00-07:00",
            "updated_at": "2024-08-01T09:30:00-07:00",
            "user_id": "alice",
            "agent_id": "chef",
            "categories": ["food", "health"],
        },
        {"id": "0b6c2b5e-3", "memory": "Prefers dark mode in every editor", "user_id": "bob"},
    ]
}


# One row of mem0's history table, as `Memory.history(id)` returns it.
UPDATE = {
    "id": "h-2",
    "memory_id": "0b6c2b5e-9",
    "old_memory": "Lives in Berlin",
    "new_memory": "Lives in Lisbon",
    "event": "UPDATE",
    "created_at": "2024-07-01T10:00:00+00:00",
    "updated_at": "2024-09-15T08:00:00+00:00",
    "is_deleted": 0,
    "actor_id": "alice",
    "role": "user",
}


# One edge of mem0's graph memory, as get_all() lists it beside "results".
EDGE = {"source": "alice", "relationship": "enjoys", "target": "tennis"}


def _import(api, body, **params):
    query = "&".join(f"{k}={v}" for k, v in {"from": "mem0", **params}.items())
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return api.post(f"/import?{query}", raw=raw)


def test_a_mem0_listing_becomes_each_users_personal_memories(team, api):
    answer = ok_data(_import(api, LISTING))
    assert (answer["imported"]["memory"], answer["skipped"]["memory"], answer["reembedded"]) == (
        3,
        0,
        3,
    )
    assert sum(answer["imported"].values()) == 3
    alice = Memory.objects.filter(team=team, agent_id="alice").order_by("created_at")
    tennis, food = alice
    assert (tennis.scope, tennis.content, tennis.run_id) == (
        "personal",
        "Likes to play tennis on weekends",
        "session-7",
    )
    assert tennis.metadata == {"topic": "sport", "source": "mem0", "mem0_id": "0b6c2b5e-1"}
    # Its times are kept (an absent update time is the creation time).
    assert tennis.created_at == datetime(2024, 7, 20, 8, 23, 45, 123456, tzinfo=UTC)
    assert tennis.updated_at == tennis.created_at
    assert food.updated_at == datetime(2024, 8, 1, 16, 30, tzinfo=UTC)
    # The platform's first category is the category; the other ids stay in metadata.
    assert food.category == "food"
    assert food.metadata["agent_id"] == "chef"
    assert food.metadata["categories"] == ["food", "health"]
    assert Memory.objects.get(team=team, agent_id="bob").content.startswith("Prefers dark mode")
    # Embedded here: found by meaning, as a memory written through the API.
    found = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "alice", "query": "which sport does she play?"},
        )
    )
    assert found[0]["content"] == "Likes to play tennis on weekends"
    # The same listing again adds nothing.
    again = ok_data(_import(api, LISTING))
    assert (again["imported"]["memory"], again["skipped"]["memory"]) == (0, 3)
    assert Memory.objects.filter(team=team).count() == 3


def test_the_agent_may_come_from_agent_id_with_a_default(team, api):
    ok_data(_import(api, LISTING, agent_from="agent_id", default_agent="assistant"))
    assert sorted(Memory.objects.filter(team=team).values_list("agent_id", "content")) == [
        ("assistant", "Likes to play tennis on weekends"),
        ("assistant", "Prefers dark mode in every editor"),
        ("chef", "Is vegetarian and allergic to peanuts"),
    ]
    moved = Memory.objects.get(team=team, agent_id="chef")
    assert moved.metadata["user_id"] == "alice"


@pytest.mark.parametrize(
    "body, params, message",
    [
        ({"results": [{"memory": "x", "user_id": "not an id!"}]}, {}, "memory 0: user_id"),
        ({"results": [{"memory": "ok", "user_id": "a"}, {"user_id": "a"}]}, {}, "memory 1"),
        ({"results": [{"memory": "no agent"}]}, {}, "no user_id, and no default agent"),
        ({"results": [{"memory": "x", "user_id": "a", "created_at": "soon"}]}, {}, "memory 0"),
        ({"results": [{"memory": "x" * 100_001, "user_id": "a"}]}, {}, "memory 0: its text"),
        ({"results": "nope"}, {}, "expected a list"),
        (b"\xff\xfe", {}, "not UTF-8"),
        (b"{not json", {}, "neither JSON nor JSON Lines"),
        (LISTING, {"agent_from": "actor_id"}, "agent_from"),
        (LISTING, {"default_agent": "a/b"}, "default_agent"),
        (LISTING, {"from": "chroma"}, "from"),
        ({"results": [{"memory": "x", "user_id": "a", "history": "v1"}]}, {}, "must be a list"),
        ({"results": [{"memory": "x", "user_id": "a", "history": [1]}]}, {}, "history entry 0"),
        (
            {"results": [{"memory": "x", "user_id": "a", "history": [{"event": "MERGE"}]}]},
            {},
            "memory 0, history entry 0: event 'MERGE'",
        ),
        (
            {"results": [{"memory": "x", "user_id": "a", "history": [{"event": "UPDATE"}]}]},
            {},
            "needs its old_memory and new_memory",
        ),
        (
            {
                "results": [
                    {"memory": "x", "user_id": "a"},
                    {"memory": "y", "user_id": "a", "history": [{**UPDATE, "updated_at": "then"}]},
                ]
            },
            {},
            "memory 1, history entry 0: updated_at",
        ),
        ({"results": [], "relations": {"a": 1}}, {}, "relations: expected a list"),
        ({"results": [], "relations": [EDGE]}, {}, "relation 0: no user_id, and no memory"),
        (LISTING | {"relations": [EDGE]}, {}, "relation 0: no user_id, and the listing's"),
        (
            {"results": [], "relations": [{**EDGE, "target": ""}]},
            {"default_agent": "a"},
            'relation 0: "target"',
        ),
        (
            {"results": [], "relations": [{**EDGE, "relationship": None}]},
            {"default_agent": "a"},
            'relation 0: "relationship"',
        ),
        (
            {"results": [], "relations": [{**EDGE, "user_id": "no way"}]},
            {},
            "relation 0: user_id 'no way'",
        ),
    ],
)
def test_a_bad_listing_is_a_400_naming_what_and_writes_nothing(team, api, body, params, message):
    answer = _import(api, body, **params)
    assert (answer.status_code, error_code(answer)) == (400, "VALIDATION_ERROR")
    assert message in answer.json()["error"]
    assert not Memory.objects.filter(team=team).exists()


def test_a_run_id_this_server_cannot_take_is_kept_in_metadata(team, api):
    # mem0 takes any string as a run id; the column takes an id. Nothing of the item is lost.
    listing = [
        {"memory": "Asked about flights to Lisbon", "user_id": "alice", "run_id": "trip plan #2"},
        {"memory": "Booked the 9 am train", "user_id": "alice", "run_id": "r" * 65},
        {"memory": "Wants a window seat", "user_id": "alice", "run_id": None},
    ]
    ok_data(_import(api, listing))
    rows = {m.content: m for m in Memory.objects.filter(team=team)}
    flights = rows["Asked about flights to Lisbon"]
    assert (flights.run_id, flights.metadata["run_id"]) == ("", "trip plan #2")
    assert rows["Booked the 9 am train"].metadata["run_id"] == "r" * 65
    seat = rows["Wants a window seat"]
    assert seat.run_id == "" and "run_id" not in seat.metadata


def test_a_mem0_expiration_date_becomes_the_memorys_expiry(team, api):
    """mem0's expiration_date is a plain date, UTC, inclusive: the memory is found all that day.
    One it cannot read it treats as "not expired"; so does the import, and keeps the value."""
    listing = [
        {"memory": "On the Pro trial", "user_id": "alice", "expiration_date": "2031-01-31"},
        {"memory": "Trial code T-7", "user_id": "alice", "expiration_date": "2031-01-31T09:00"},
        {"memory": "The old plan was Basic", "user_id": "alice", "expiration_date": "2020-05-01"},
        {"memory": "Prefers email", "user_id": "alice", "expiration_date": None},
        {"memory": "Uses a VPN", "user_id": "alice", "expiration_date": "next year"},
        {"memory": "Renews in Q3", "user_id": "alice", "expiration_date": "9999-12-31"},
        {"memory": "Left in Q4", "user_id": "alice", "expiration_date": "9999-12-31T23:00-05:00"},
        {"memory": "Joined in 999", "user_id": "alice", "expiration_date": "0999-01-01"},
    ]
    ok_data(_import(api, listing))
    rows = {m.content: m for m in Memory.objects.filter(team=team)}
    assert rows["On the Pro trial"].expires_at == datetime(2031, 2, 1, tzinfo=UTC)
    assert rows["Trial code T-7"].expires_at == datetime(2031, 1, 31, 9, tzinfo=UTC)
    assert "expiration_date" not in rows["On the Pro trial"].metadata
    assert rows["Prefers email"].expires_at is None
    assert "expiration_date" not in rows["Prefers email"].metadata
    for unread, given in (
        ("Uses a VPN", "next year"),
        ("Renews in Q3", "9999-12-31"),
        ("Left in Q4", "9999-12-31T23:00-05:00"),  # no time in UTC
        ("Joined in 999", "0999-01-01"),  # before what the databases store
    ):
        assert rows[unread].expires_at is None
        assert rows[unread].metadata["expiration_date"] == given
    # Expired in mem0 (hidden there, not deleted): imported, out of search here, and the
    # trash pass moves it where it can still be restored.
    found = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "alice", "query": "which plan", "min_score": 0.0},
        )
    )
    assert rows["The old plan was Basic"].pk not in [m["id"] for m in found]
    assert memories_expire() == 1
    assert not Memory.objects.filter(content="The old plan was Basic").exists()


def test_json_lines_are_read_too(team, api):
    lines = b"\n".join(json.dumps(m).encode() for m in LISTING["results"])
    assert ok_data(_import(api, lines))["imported"]["memory"] == 3


def test_an_agent_key_imports_its_own_memories_only_and_only_into_its_team(
    team, agent, agent_api, other_team, other_api
):
    mine = {"results": [{"memory": "Uses vim", "user_id": "researcher"}]}
    assert ok_data(_import(agent_api, mine))["imported"]["memory"] == 1
    refused = _import(agent_api, LISTING)
    assert (refused.status_code, error_code(refused)) == (403, "FORBIDDEN")
    # Another agent's graph neither.
    refused = _import(agent_api, {"results": [], "relations": [EDGE | {"user_id": "alice"}]})
    assert (refused.status_code, error_code(refused)) == (403, "FORBIDDEN")
    assert not Entity.objects.filter(team=team).exists()
    assert Memory.objects.filter(team=team).count() == 1
    # Another team's import of the same listing is its own: nothing here changes or shows.
    assert ok_data(_import(other_api, LISTING))["imported"]["memory"] == 3
    assert Memory.objects.filter(team=team).count() == 1
    assert Memory.objects.filter(team=other_team).count() == 3


def test_the_import_command_reads_a_mem0_listing(team, tmp_path):
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(LISTING))
    out = io.StringIO()
    call_command(
        "import_team", str(path), team=team.id, source="mem0", stdout=out, stderr=io.StringIO()
    )
    assert json.loads(out.getvalue())["imported"]["memory"] == 3
    path.write_text(json.dumps({"results": [{"memory": "x"}]}))
    with pytest.raises(CommandError, match="no user_id"):
        call_command("import_team", str(path), team=team.id, source="mem0", stderr=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_the_client_imports_what_mem0_get_all_returned(live_server):
    team, _ = team_upsert(team_id="from_mem0", name="m")
    AgentFactory(team=team, agent_id="alice")
    key = api_key_issue(team=team)
    client = MemoryClient(key.key_id, key.secret, base_url=live_server.url)
    try:
        assert client.import_mem0(LISTING)["imported"]["memory"] == 3
        assert client.import_mem0(json.dumps(LISTING).encode())["skipped"]["memory"] == 3
        with pytest.raises(MemoryAPIError) as err:
            client.import_mem0({"results": [{"memory": "x"}]})
        assert err.value.code == "VALIDATION_ERROR"
    finally:
        client.session.close()
    assert Memory.objects.filter(team=team).count() == 3


def test_a_memorys_mem0_history_becomes_its_revisions(team, api):
    """What mem0's history(id) returned, attached to its memory: each UPDATE is a revision (the
    texts before and after, when, who); ADD is the memory's own creation. The older table's
    names are read too. Importing it again adds nothing."""
    moved = {
        "id": "0b6c2b5e-9",
        "memory": "Lives in Porto",
        "created_at": "2024-07-01T10:00:00+00:00",
        "updated_at": "2024-10-02T12:00:00+00:00",
        "user_id": "alice",
        "history": [
            {
                **UPDATE,
                "id": "h-1",
                "event": "ADD",
                "old_memory": None,
                "new_memory": "Lives in Berlin",
                "updated_at": None,
            },
            UPDATE,
            # mem0's older history table: prev_value, new_value, timestamp; no actor.
            {
                "id": "h-3",
                "memory_id": "0b6c2b5e-9",
                "prev_value": "Lives in Lisbon",
                "new_value": "Lives in Porto",
                "event": "update",
                "timestamp": "2024-10-02T12:00:00+00:00",
                "is_deleted": 0,
            },
        ],
    }
    listing = {"results": [LISTING["results"][0], moved]}
    answer = ok_data(_import(api, listing))
    assert (answer["imported"]["memory"], answer["imported"]["revision"]) == (2, 2)
    memory = Memory.objects.get(team=team, content="Lives in Porto")
    assert "history" not in memory.metadata  # read into revisions, not carried as metadata
    history = ok_data(api.get(f"/memories/{memory.pk}/history"))["revisions"]  # oldest first
    assert [(r["change"], r["before"], r["after"], r["by"], r["at"]) for r in history] == [
        (
            "update",
            {"content": "Lives in Berlin"},
            {"content": "Lives in Lisbon"},
            "mem0 alice user",
            "2024-09-15T08:00:00Z",
        ),
        (
            "update",
            {"content": "Lives in Lisbon"},
            {"content": "Lives in Porto"},
            "mem0",
            "2024-10-02T12:00:00Z",
        ),
    ]
    # The tennis memory had no history: it has no revision.
    assert MemoryRevision.objects.filter(team=team).count() == 2
    again = ok_data(_import(api, listing))
    assert (again["skipped"]["memory"], again["skipped"]["revision"]) == (2, 2)
    assert MemoryRevision.objects.filter(team=team).count() == 2


def test_a_mem0_graph_becomes_the_agents_entities_and_relations(team, api):
    """mem0's graph edges (get_all's "relations", one user's per call) become a personal graph of
    the listing's agent: nodes as entities, the agent itself a person; a relationship that says
    one of this server's types (as the graph reads an LLM's: "likes" is prefers) has that type,
    any other is related_to and keeps its words; two edges that end as one relation keep both
    names. Importing it again adds nothing."""
    listing = {
        "results": [LISTING["results"][0]],
        "relations": [
            EDGE,
            {"source": "alice", "relationship": "WORKS_AT", "target": "acme_corp"},
            {"source": "alice", "relationship": "admires", "target": "tennis"},
            # mem0's search output says destination.
            {"source": "tennis", "relationship": "located_in", "destination": "lisbon_club"},
            {"source": "alice", "relationship": "likes", "target": "tennis"},
        ],
    }
    answer = ok_data(_import(api, listing))
    assert (answer["imported"]["entity"], answer["imported"]["relation"]) == (4, 4)
    entities = {e.name: e for e in Entity.objects.filter(team=team)}
    assert {(e.name, e.agent_id, e.entity_type) for e in entities.values()} == {
        ("alice", "alice", "person"),
        ("tennis", "alice", "custom"),
        ("acme_corp", "alice", "custom"),
        ("lisbon_club", "alice", "custom"),
    }
    assert all(e.embedding for e in entities.values())  # embedded here: found by meaning
    relations = {
        (r.source.name, r.relation_type, r.target.name): r
        for r in Relation.objects.filter(team=team).select_related("source", "target")
    }
    assert set(relations) == {
        ("alice", "related_to", "tennis"),
        ("alice", "prefers", "tennis"),
        ("alice", "works_at", "acme_corp"),
        ("tennis", "located_in", "lisbon_club"),
    }
    enjoyed = relations[("alice", "related_to", "tennis")]
    assert enjoyed.description == "enjoys; admires"
    assert enjoyed.properties == {"source": "mem0", "mem0_relationships": ["enjoys", "admires"]}
    liked = relations[("alice", "prefers", "tennis")]
    assert (liked.description, liked.properties["mem0_relationships"]) == ("likes", ["likes"])
    works = relations[("alice", "works_at", "acme_corp")]
    assert (works.description, works.properties["mem0_relationships"]) == ("", ["WORKS_AT"])
    # Through the graph API, as the agent's own graph.
    listed = ok_data(api.get("/graph/entities?agent_id=alice"))["items"]
    assert len(listed) == 4
    found = ok_data(api.get("/graph/entities?agent_id=alice&q=tennis"))["items"]
    assert found[0]["name"] == "tennis"
    again = ok_data(_import(api, listing))
    assert (again["imported"]["entity"], again["imported"]["relation"]) == (0, 0)
    assert (Entity.objects.filter(team=team).count(), Relation.objects.count()) == (4, 4)


def test_mem0_nodes_differing_only_in_case_are_one_entity_holding_every_edge(team, api):
    """mem0 may name one node `Tennis` in one edge and `tennis` in another, and its own id in
    another case (`Alice`). They are one entity here, as the graph matches names everywhere: its
    first name, the others kept; the agent itself still a person; two edges that end as one
    relation keep both of mem0's words, none counted as skipped."""
    listing = {
        "results": [LISTING["results"][0]],
        "relations": [
            {"source": "Alice", "relationship": "enjoys", "target": "Tennis"},
            {"source": "alice", "relationship": "admires", "target": "tennis"},
            {"source": "alice", "relationship": "plays", "target": "ＴＥＮＮＩＳ"},
        ],
    }
    answer = ok_data(_import(api, listing))
    assert (answer["imported"]["entity"], answer["imported"]["relation"]) == (2, 1)
    assert (answer["skipped"]["entity"], answer["skipped"]["relation"]) == (0, 0)
    entities = {e.name: e for e in Entity.objects.filter(team=team)}
    assert {(n, e.entity_type) for n, e in entities.items()} == {
        ("Alice", "person"),
        ("Tennis", "custom"),
    }
    assert entities["Alice"].properties["mem0_names"] == ["Alice", "alice"]
    assert entities["Tennis"].properties["mem0_names"] == ["Tennis", "tennis", "ＴＥＮＮＩＳ"]
    (relation,) = Relation.objects.filter(team=team)
    assert relation.properties["mem0_relationships"] == ["enjoys", "admires", "plays"]
    assert relation.description == "enjoys; admires; plays"


def test_a_graph_of_several_users_names_each_edges_agent(team, api, other_team):
    """A listing joining several users' memories: each edge names its user, or it is refused
    (above); a relation of an edge's own user_id goes to that agent. Another team sees none."""
    listing = LISTING | {
        "relations": [EDGE | {"user_id": "alice"}, {**EDGE, "source": "bob", "user_id": "bob"}],
    }
    ok_data(_import(api, listing))
    assert sorted(Entity.objects.filter(team=team).values_list("agent_id", "name")) == [
        ("alice", "alice"),
        ("alice", "tennis"),
        ("bob", "bob"),
        ("bob", "tennis"),
    ]
    assert not Entity.objects.filter(team=other_team).exists()
