"""Filter operators in search (`$eq` … `$lte`, `$and` / `$or`) on importance, created_at,
category and metadata.<key>, through the API, on SQLite and MariaDB; bad filters are a 400 naming
what is wrong; a filter never widens what the key's team and agent may see."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memories.models import Memory

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

ROWS = [
    # content, importance, category, metadata
    ("the deploy runs on Tuesday", 0.9, "process", {"source": "chat", "priority": 3}),
    ("the deploy freeze starts in December", 0.5, "rule", {"source": "doc", "priority": 1}),
    ("the deploy checklist has nine steps", 0.2, "process", {"source": "chat"}),
    ("the deploy owner is Alice", 0.7, "fact", {"source": "import", "priority": 2}),
]


@pytest.fixture
def stored(api):
    ids = []
    for content, importance, category, metadata in ROWS:
        r = api.post(
            "/memories/personal",
            {
                "agent_id": "a1",
                "content": content,
                "importance": importance,
                "category": category,
                "metadata": metadata,
            },
        )
        assert r.status_code == 201, r.content
        ids.append(ok_data(r)["id"])
    # The last one is old.
    Memory.objects.filter(pk=ids[3]).update(created_at=timezone.now() - timedelta(days=30))
    return ids


def found(api, filters, agent="a1"):
    r = api.post(
        "/memories/personal/search",
        {"agent_id": agent, "query": "deploy", "min_score": 0, "limit": 20, "filters": filters},
    )
    assert r.status_code == 200, r.content
    return {m["content"] for m in ok_data(r)}


def contents(*indexes):
    return {ROWS[i][0] for i in indexes}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"importance": {"$gte": 0.7}}, (0, 3)),
        ({"importance": {"$gt": 0.2, "$lt": 0.9}}, (1, 3)),
        ({"category": "process"}, (0, 2)),
        ({"category": {"$ne": "process"}}, (1, 3)),
        ({"category": {"$in": ["rule", "fact"]}}, (1, 3)),
        ({"category": {"$nin": ["rule", "fact"]}}, (0, 2)),
        ({"metadata.source": "chat"}, (0, 2)),
        ({"metadata.priority": {"$gte": 2}}, (0, 3)),
        ({"metadata.source": {"$in": ["doc", "import"]}}, (1, 3)),
        ({"metadata.priority": {"$ne": 3}}, (1, 2, 3)),  # a memory without the key included
        ({"metadata": {"source": "chat", "priority": 3}}, (0,)),  # the earlier form still works
        ({"$or": [{"category": "rule"}, {"importance": {"$gte": 0.9}}]}, (0, 1)),
        (
            {
                "$and": [
                    {"category": "process"},
                    {"$or": [{"metadata.priority": 3}, {"importance": 0.2}]},
                ]
            },
            (0, 2),
        ),
        ({"category": "process", "importance": {"$lte": 0.5}}, (2,)),
    ],
)
def test_operators(api, stored, filters, expected):
    assert found(api, filters) == contents(*expected)


def test_dates(api, stored):
    week_ago = (timezone.now() - timedelta(days=7)).isoformat()
    assert found(api, {"created_at": {"$lt": week_ago}}) == contents(3)
    assert found(api, {"created_at": {"$gte": week_ago}}) == contents(0, 1, 2)
    assert found(api, {"created_before": week_ago}) == contents(3)


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        ({"importance": {"$regex": "x"}}, "$regex"),
        ({"$not": {"category": "rule"}}, "$not"),
        ({"colour": "red"}, "colour"),
        ({"importance": {"$gt": "high"}}, "importance"),
        ({"created_at": {"$lt": "yesterday"}}, "created_at"),
        ({"metadata.a__contains": "x"}, "a__contains"),
        ({"$or": []}, "$or"),
        ({"category": {"$in": "rule"}}, "$in"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(api, stored, filters, named):
    r = api.post(
        "/memories/personal/search", {"agent_id": "a1", "query": "deploy", "filters": filters}
    )
    assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
    assert named in str(r.json()["details"])


def test_a_filter_never_widens_the_scope(api, other_api, stored):
    other_api.post(
        "/memories/personal",
        {"agent_id": "a1", "content": "the deploy of team B", "metadata": {"source": "chat"}},
    )
    api.post("/memories/personal", {"agent_id": "a2", "content": "the deploy of agent a2"})
    assert "the deploy of team B" not in found(
        api, {"$or": [{"metadata.source": "chat"}, {"importance": {"$gte": 0}}]}
    )
    assert "the deploy of agent a2" not in found(api, {"importance": {"$gte": 0}})


def test_text_values_compare_exactly_on_every_database(api):
    """A run id, a category or a metadata string means the same on SQLite and MariaDB: "Run-A"
    and "run-a" are two runs, "Rule" and "rule" two categories (MariaDB's default collation
    would fold case and accents, and a filter would return the other one's memories too)."""
    rows = [
        ("the deploy of run A", "Run-A", "Rule", "Chat"),
        ("the deploy of the lower-case run", "run-a", "rule", "chat"),
        ("the deploy of the café", "cafe", "café", "café"),
    ]
    for content, run_id, category, source in rows:
        r = api.post(
            "/memories/personal",
            {
                "agent_id": "a1",
                "content": content,
                "run_id": run_id,
                "category": category,
                "metadata": {"source": source},
            },
        )
        assert r.status_code == 201, r.content
    assert found(api, {"run_id": "Run-A"}) == {"the deploy of run A"}
    assert found(api, {"run_id": {"$in": ["run-a"]}}) == {"the deploy of the lower-case run"}
    assert found(api, {"run_id": {"$ne": "run-a"}}) == {
        "the deploy of run A",
        "the deploy of the café",
    }
    assert found(api, {"category": "Rule"}) == {"the deploy of run A"}
    assert found(api, {"category": "cafe"}) == set()
    assert found(api, {"category": "café"}) == {"the deploy of the café"}
    assert found(api, {"metadata.source": "Chat"}) == {"the deploy of run A"}
    assert found(api, {"metadata.source": "cafe"}) == set()
    # The `run_id` shorthand of search and of the list.
    r = api.post(
        "/memories/personal/search",
        {"agent_id": "a1", "query": "deploy", "min_score": 0, "run_id": "run-a"},
    )
    assert [m["content"] for m in ok_data(r)] == ["the deploy of the lower-case run"]
    r = api.get("/memories?agent_id=a1&run_id=Run-A")
    assert r.status_code == 200, r.content
    assert [m["content"] for m in ok_data(r)["items"]] == ["the deploy of run A"]
