"""Working-memory endpoints on whichever backend the settings select."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import caches

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db


def test_write_list_and_clear(api):
    items = [
        "正在重构 memory_system.py 中的 compress 方法",
        "目标：将返回值改为结构化 dict",
        "需要同步更新：routes.py, docs/index.html",
        "测试方法：E2E curl 验证响应格式",
    ]
    for item in items:
        r = api.post("/memories/working", {"agent_id": "coder", "content": item})
        assert r.status_code == 201
        data = ok_data(r)
        assert set(data) == {"id", "agent_id", "content", "created_at", "expires_at"}
    listed = ok_data(api.get("/memories/working/coder"))
    assert [i["content"] for i in listed] == items  # oldest first, byte-exact Chinese
    assert [i["content"] for i in ok_data(api.get("/memories/working/coder?limit=2"))] == items[:2]
    assert ok_data(api.delete("/memories/working/coder")) == {"cleared": 4}
    assert ok_data(api.get("/memories/working/coder")) == []
    assert ok_data(api.delete("/memories/working/coder")) == {"cleared": 0}


def test_an_item_carries_the_run_it_was_written_in(api):
    data = ok_data(
        api.post("/memories/working", {"agent_id": "a", "content": "x", "run_id": "s-1"})
    )
    assert data["run_id"] == "s-1"
    api.post("/memories/working", {"agent_id": "a", "content": "y", "run_id": ""})
    listed = ok_data(api.get("/memories/working/a"))
    assert [i.get("run_id") for i in listed] == ["s-1", None]  # shown only when named


def test_default_ttl_is_72_hours(api):
    data = ok_data(api.post("/memories/working", {"agent_id": "a", "content": "x"}))
    from datetime import datetime

    created = datetime.fromisoformat(data["created_at"].replace("Z", "+00:00"))
    expires = datetime.fromisoformat(data["expires_at"].replace("Z", "+00:00"))
    assert (expires - created).total_seconds() == 259200


def test_items_expire_on_their_own_ttl(api, monkeypatch):
    api.post("/memories/working", {"agent_id": "a", "content": "short", "ttl": 1})
    api.post("/memories/working", {"agent_id": "a", "content": "long", "ttl": 3600})
    # Expiry is decided by the store's clock (memories.working.base._now), on either backend (a
    # Redis key outlives its items): moved on instead of sleeping. The request signatures keep
    # the real time, so the clock is not frozen process-wide.
    later = datetime.now(UTC) + timedelta(seconds=1.2)
    monkeypatch.setattr("memories.working.base._now", lambda: later)
    assert [i["content"] for i in ok_data(api.get("/memories/working/a"))] == ["long"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"content": "x"}, "agent_id"),
        ({"agent_id": "a"}, "content"),
        ({"agent_id": "a", "content": " "}, "content"),
        ({"agent_id": "a", "content": "x", "ttl": 0}, "ttl"),
        ({"agent_id": "a", "content": "x", "ttl": 30 * 86400 + 1}, "ttl"),
        ({"agent_id": "a", "content": "x", "ttl": "1h"}, "ttl"),
        ({"agent_id": "a", "content": "x" * 32001}, "content"),
        ({"agent_id": "a", "content": "x", "run_id": "two words"}, "run_id"),
        ({"agent_id": "a", "content": "x", "run_id": "r" * 65}, "run_id"),
        ({"agent_id": "a", "content": "x", "run_id": 42}, "run_id"),
    ],
)
def test_it_validates(api, body, field):
    r = api.post("/memories/working", body)
    assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
    assert field in r.json()["details"]


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "limit=1001"])
def test_list_limit_is_validated(api, query):
    assert error_code(api.get(f"/memories/working/a?{query}")) == "VALIDATION_ERROR"


def test_writing_registers_the_agent(api):
    api.post("/memories/working", {"agent_id": "newbie", "content": "hello"})
    assert ok_data(api.get("/agents/team_a/newbie"))["name"] == "newbie"


def test_working_memory_is_isolated_between_teams(api, other_api):
    api.post("/memories/working", {"agent_id": "agent_1", "content": "A's context"})
    other_api.post("/memories/working", {"agent_id": "agent_1", "content": "B's context"})
    assert [i["content"] for i in ok_data(api.get("/memories/working/agent_1"))] == ["A's context"]
    assert ok_data(other_api.delete("/memories/working/agent_1")) == {"cleared": 1}
    assert [i["content"] for i in ok_data(api.get("/memories/working/agent_1"))] == ["A's context"]
    assert ok_data(api.get("/stats"))["working_memories"] == 1


def test_deleting_the_agent_clears_its_working_memory(api, django_capture_on_commit_callbacks):
    api.post("/memories/working", {"agent_id": "tmp", "content": "x"})
    with django_capture_on_commit_callbacks(execute=True):
        api.delete("/agents/team_a/tmp")
    assert ok_data(api.get("/memories/working/tmp")) == []


@pytest.fixture
def redis_down(settings):
    """A Redis-backed configuration whose Redis does not answer (nothing listens on port 1)."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 0.2,
                "SOCKET_TIMEOUT": 0.2,
            },
        }
    }
    caches._settings = None  # type: ignore[attr-defined]
    yield
    caches._settings = None  # type: ignore[attr-defined]


def test_redis_down_degrades_only_working_memory(api, redis_down):
    r = api.post("/memories/working", {"agent_id": "a", "content": "x"})
    assert (r.status_code, error_code(r)) == (503, "WORKING_MEMORY_UNAVAILABLE")
    assert error_code(api.get("/memories/working/a")) == "WORKING_MEMORY_UNAVAILABLE"
    assert error_code(api.delete("/memories/working/a")) == "WORKING_MEMORY_UNAVAILABLE"
    stats = ok_data(api.get("/stats"))
    assert stats["redis_ok"] is False
    # Long-term memory keeps working.
    r = api.post("/memories/personal", {"agent_id": "a", "content": "long-term still works"})
    assert r.status_code == 201
    found = ok_data(
        api.post("/memories/personal/search", {"agent_id": "a", "query": "long-term still works"})
    )
    assert found and found[0]["content"] == "long-term still works"
