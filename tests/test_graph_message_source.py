"""Graph extraction from memories that came from an ingested conversation: entities and relations
carry `source_conversation_id` (the run) and `source_message_id` (the archived message), shown in
the graph API only when set, so every other body stays as it was."""

from __future__ import annotations

import pytest

from graph.models import Entity, Relation
from lifecycle.models import WorkingArchive
from memories.models import Memory

from .helpers import ok_data

pytestmark = pytest.mark.django_db

ENTITY_KEYS = [
    "id",
    "team_id",
    "agent_id",
    "name",
    "entity_type",
    "description",
    "properties",
    "source_memory_id",
    "access_count",
    "last_accessed_at",
    "created_at",
    "updated_at",
]
RELATION_KEYS = [
    "id",
    "team_id",
    "source_entity_id",
    "target_entity_id",
    "relation_type",
    "description",
    "properties",
    "source_memory_id",
    "created_at",
    "updated_at",
]


def _ingest(api, run_id: str) -> None:
    data = ok_data(
        api.post(
            "/memories/ingest",
            {
                "agent_id": "researcher",
                "run_id": run_id,
                "messages": [
                    {"role": "user", "content": "Alice works at Google and lives in Zurich."},
                    {"role": "assistant", "content": "Noted."},
                    {"role": "user", "content": "Bob is my colleague. He lives in Berlin."},
                ],
            },
        )
    )
    assert len(data["facts"]) >= 2


def test_entities_and_relations_name_the_conversation_and_message(api):
    _ingest(api, "chat-7")
    data = ok_data(api.post("/lifecycle/extract-graph", {"agent_id": "researcher"}))
    assert data["entities"] and data["relations"]
    messages = {
        r.item_id: r.content
        for r in WorkingArchive.objects.filter(team_id="team_a", run_id="chat-7", role="user")
    }
    for body in data["entities"]:
        entity = Entity.objects.get(pk=body["id"])
        assert body["source_conversation_id"] == entity.source_conversation_id == "chat-7"
        assert body["source_message_id"] == entity.source_message_id
        memory = Memory.objects.get(pk=body["source_memory_id"])
        # The message is the archived one the source memory was read from.
        assert body["source_message_id"] in memory.metadata["source_items"]
        assert body["source_message_id"] in messages
        assert list(body)[:12] == ENTITY_KEYS
    for body in data["relations"]:
        relation = Relation.objects.get(pk=body["id"])
        if relation.source_memory_id is None:
            assert "source_message_id" not in body
            continue
        assert body["source_conversation_id"] == "chat-7"
        assert body["source_message_id"] in messages
    # And the other endpoints show them too, and the message leads back to the archive.
    entity_id = data["entities"][0]["id"]
    detail = ok_data(api.get(f"/graph/entities/{entity_id}"))["entity"]
    assert detail["source_conversation_id"] == "chat-7"
    listed = ok_data(api.get("/graph/entities"))["items"]
    assert all(e["source_conversation_id"] == "chat-7" for e in listed)
    whole = ok_data(api.get("/graph"))
    assert all("source_message_id" in e for e in whole["entities"])
    item = ok_data(api.get(f"/lifecycle/archive/{detail['source_message_id']}"))
    assert item["run_id"] == "chat-7" and item["role"] == "user"


def test_memories_written_directly_keep_the_bodies_as_they_were(api):
    for text in ("Alice works at Google and lives in Zurich.", "Bob lives in Berlin."):
        r = api.post(
            "/memories/personal", {"agent_id": "researcher", "content": text, "run_id": "r-1"}
        )
        assert r.status_code == 201, r.content
    data = ok_data(api.post("/lifecycle/extract-graph", {"agent_id": "researcher"}))
    assert data["entities"] and data["relations"]
    for body in data["entities"]:
        assert list(body) == [*ENTITY_KEYS, "created"]
    for body in data["relations"]:
        assert list(body) == RELATION_KEYS
    assert not Entity.objects.exclude(source_conversation_id="").exists()
    whole = ok_data(api.get("/graph"))
    assert all(list(e) == ENTITY_KEYS for e in whole["entities"])


def test_an_ingest_without_a_run_names_only_the_message(api):
    _ingest(api, "")
    data = ok_data(api.post("/lifecycle/extract-graph", {"agent_id": "researcher"}))
    for body in data["entities"]:
        assert "source_conversation_id" not in body
        assert len(body["source_message_id"]) == 32


def test_another_teams_entity_is_as_missing_as_a_made_up_one(api, other_api):
    _ingest(api, "chat-7")
    entity_id = ok_data(api.post("/lifecycle/extract-graph", {"agent_id": "researcher"}))[
        "entities"
    ][0]["id"]
    theirs = other_api.get(f"/graph/entities/{entity_id}")
    missing = other_api.get("/graph/entities/00000000-0000-4000-8000-000000000000")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
