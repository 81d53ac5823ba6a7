"""The graph flows (create, merge, relate, detail, subgraph) through the Python client, over HTTP,
with this API's envelope and HMAC signatures (v1 and v2: v2 also signs the query string)."""

from __future__ import annotations

import pytest

from memoryplatform.client import MemoryAPIError, MemoryClient
from tenants.services import api_key_issue, team_upsert

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("signature_version", [1, 2])
def test_graph_flows_through_the_client(live_server, signature_version):
    team, _ = team_upsert(team_id="graph_team", name="graph")
    key = api_key_issue(team=team)
    client = MemoryClient(
        key.key_id, key.secret, base_url=live_server.url, signature_version=signature_version
    )
    python = client.post(
        "/graph/entities",
        {
            "name": "Python",
            "entity_type": "preference",
            "description": "Prefers concise Python snippets using async/await syntax.",
            "properties": {"level": "expert"},
        },
    )
    merged = client.post(
        "/graph/entities",
        {"name": "Python", "entity_type": "preference", "properties": {"years": 5}},
    )
    assert merged["id"] == python["id"]
    assert merged["properties"] == {"level": "expert", "years": 5}
    asyncio = client.post("/graph/entities", {"name": "asyncio", "entity_type": "skill"})
    user = client.post("/graph/entities", {"name": "用户", "entity_type": "person"})
    uses = client.post(
        "/graph/relations",
        {
            "source_entity_id": python["id"],
            "target_entity_id": asyncio["id"],
            "relation_type": "uses",
        },
    )
    client.post(
        "/graph/relations",
        {
            "source_entity_id": user["id"],
            "target_entity_id": python["id"],
            "relation_type": "prefers",
        },
    )
    detail = client.get(f"/graph/entities/{python['id']}")
    assert [r["id"] for r in detail["outgoing_relations"]] == [uses["id"]]
    assert len(detail["incoming_relations"]) == 1
    sub = client.get("/graph", {"entity_ids": [user["id"]], "max_depth": 2})
    assert {e["name"] for e in sub["entities"]} == {"用户", "Python", "asyncio"}
    assert len(sub["relations"]) == 2 and sub["truncated"] is False
    page = client.get("/graph/entities", {"entity_type": "preference", "page": 1, "page_size": 20})
    assert (page["total"], page["items"][0]["id"]) == (1, python["id"])
    updated = client.put(f"/graph/entities/{python['id']}", {"name": "Python 3.13"})
    assert updated["name"] == "Python 3.13"
    client.delete(f"/graph/entities/{python['id']}")
    assert client.get("/graph/relations")["total"] == 0
    with pytest.raises(MemoryAPIError) as exc:
        client.get(f"/graph/entities/{python['id']}")
    assert (exc.value.status, exc.value.code) == (404, "NOT_FOUND")
    with pytest.raises(MemoryAPIError) as exc:
        client.get("/graph", {"entity_ids": [user["id"]], "max_depth": 4})
    assert (exc.value.status, exc.value.code) == (400, "VALIDATION_ERROR")
