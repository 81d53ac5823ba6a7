"""Batch writes: up to 100 memories in one request, one embedding call, results in input order,
duplicates inside the batch caught, refused items reported (or, atomic, nothing written)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from memories.models import Memory

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db


def batch(client, items, scope="personal", **extra):
    r = client.post(f"/memories/{scope}/batch", {"items": items, **extra})
    return r


def embedding_calls() -> float:
    """Calls into the embedding model so far (the /metrics counter)."""
    return (
        REGISTRY.get_sample_value(
            "memoryplatform_embedding_duration_seconds_count", {"kind": "passage"}
        )
        or 0.0
    )


def test_results_in_order_with_duplicates_caught(api):
    before = embedding_calls()
    items = [
        {"agent_id": "a1", "content": "用户每周二部署生产环境", "importance": 0.8},
        {"agent_id": "a1", "content": "The user drinks green tea every morning."},
        {"agent_id": "a1", "content": "用户每周二部署生产环境"},  # a duplicate of the first
        {"agent_id": "a1", "content": "Alice reviews every unsafe block."},
    ]
    r = batch(api, items)
    assert r.status_code == 200, r.content
    results = ok_data(r)["results"]
    assert [x["status"] for x in results] == [201, 201, 200, 201]
    assert results[2]["dedup_skipped"] is True
    assert results[2]["memory"]["id"] == results[0]["memory"]["id"]
    assert [x["memory"]["content"] for x in results] == [i["content"] for i in items]
    assert embedding_calls() - before == 1  # one embedding call for the whole batch
    assert Memory.objects.filter(team_id="team_a").count() == 3


def test_refused_items_are_reported_and_the_others_written(api):
    items = [
        {"agent_id": "a1", "content": "first good item"},
        {"agent_id": "a1", "content": ""},
        {"agent_id": "bad/id", "content": "x"},
        "not an object",
        {"agent_id": "a1", "content": "second good item", "importance": 0.4},
    ]
    results = ok_data(batch(api, items))["results"]
    assert [x["status"] for x in results] == [201, 400, 400, 400, 201]
    assert "content" in results[1]["details"] and "agent_id" in results[2]["details"]
    assert Memory.objects.filter(team_id="team_a").count() == 2


def test_atomic_writes_all_or_nothing(api):
    items = [{"agent_id": "a1", "content": "would be written"}, {"agent_id": "a1"}]
    r = batch(api, items, atomic=True)
    assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
    assert "items[1].content" in r.json()["details"]
    assert not Memory.objects.filter(team_id="team_a").exists()
    good = [{"agent_id": "a1", "content": f"atomic item {i}"} for i in range(3)]
    assert [x["status"] for x in ok_data(batch(api, good, atomic=True))["results"]] == [201] * 3


def test_team_batch_and_agent_scoped_keys(api, agent_api):
    results = ok_data(batch(api, [{"content": "the team meets on Mondays"}], scope="team"))
    assert results["results"][0]["memory"]["scope"] == "team"
    mixed = [
        {"agent_id": "researcher", "content": "my own note"},
        {"agent_id": "coder", "content": "someone else's note"},
    ]
    statuses = [x["status"] for x in ok_data(batch(agent_api, mixed))["results"]]
    assert statuses == [201, 403]
    assert not Memory.objects.filter(agent_id="coder").exists()


@pytest.mark.parametrize(
    "body",
    [{"items": []}, {"items": [{"agent_id": "a1", "content": "x"}] * 101}, {"items": "nope"}],
)
def test_bad_batches_are_a_400(api, body):
    r = api.post("/memories/personal/batch", body)
    assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")


def test_another_team_never_sees_a_batch(api, other_api):
    ok_data(batch(api, [{"agent_id": "a1", "content": "team A batch secret"}]))
    found = ok_data(
        other_api.post(
            "/memories/personal/search", {"agent_id": "a1", "query": "batch secret", "min_score": 0}
        )
    )
    assert found == []
