"""Agent-scoped keys and explicit sharing of personal memories."""

from __future__ import annotations

import pytest
from django.test import Client

from memories.models import Memory, MemoryShare
from tenants.services import agent_ensure, api_key_issue

from .helpers import SignedClient, error_code, ok_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def coder_api(team):
    agent = agent_ensure(team=team, agent_id="coder")
    k = api_key_issue(team=team, agent=agent)
    return SignedClient(Client(), k.key_id, k.secret)


@pytest.fixture
def researcher_memory(agent_api):
    r = agent_api.post(
        "/memories/personal", {"agent_id": "researcher", "content": "研究员的实验记录：样本量 120"}
    )
    assert r.status_code == 201
    return ok_data(r)["id"]


def test_an_agent_key_reads_and_writes_its_own_personal_memories(agent_api, researcher_memory):
    r = agent_api.post("/memories/personal/search", {"agent_id": "researcher", "query": "实验记录"})
    assert [m["id"] for m in ok_data(r)] == [researcher_memory]
    assert (
        agent_api.put(f"/memories/personal/{researcher_memory}", {"importance": 0.9}).status_code
        == 200
    )
    assert agent_api.get("/memories/personal/recent/researcher").status_code == 200


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.post(
            "/memories/personal", {"agent_id": "researcher", "content": "impersonation"}
        ),
        lambda c: c.post("/memories/personal/search", {"agent_id": "researcher", "query": "实验"}),
        lambda c: c.get("/memories/personal/recent/researcher"),
        lambda c: c.post("/memories/working", {"agent_id": "researcher", "content": "x"}),
        lambda c: c.get("/memories/working/researcher"),
        lambda c: c.delete("/memories/working/researcher"),
    ],
)
def test_another_agents_personal_scope_is_forbidden(coder_api, researcher_memory, call):
    r = call(coder_api)
    assert (r.status_code, error_code(r)) == (403, "FORBIDDEN")


def test_unshared_memories_of_another_agent_are_forbidden_by_id(coder_api, researcher_memory):
    r = coder_api.put(f"/memories/personal/{researcher_memory}", {"content": "tampered"})
    assert (r.status_code, error_code(r)) == (403, "FORBIDDEN")
    assert error_code(coder_api.delete(f"/memories/personal/{researcher_memory}")) == "FORBIDDEN"
    assert Memory.objects.get(pk=researcher_memory).content == "研究员的实验记录：样本量 120"


def test_a_read_share_allows_reading_through_include_shared_only(
    agent_api, coder_api, researcher_memory
):
    r = agent_api.post(
        f"/memories/personal/{researcher_memory}/share",
        {"agent_ids": ["coder"], "permission": "read"},
    )
    assert ok_data(r) == {
        "memory_id": researcher_memory,
        "shares": [{"agent_id": "coder", "permission": "read"}],
    }
    found = ok_data(
        coder_api.post(
            "/memories/personal/search",
            {"agent_id": "coder", "query": "实验记录 样本量", "include_shared": True},
        )
    )
    assert [m["id"] for m in found] == [researcher_memory]
    assert (
        ok_data(
            coder_api.post(
                "/memories/personal/search", {"agent_id": "coder", "query": "实验记录 样本量"}
            )
        )
        == []
    )
    assert (
        error_code(coder_api.put(f"/memories/personal/{researcher_memory}", {"content": "x"}))
        == "FORBIDDEN"
    )
    assert error_code(coder_api.delete(f"/memories/personal/{researcher_memory}")) == "FORBIDDEN"


def test_a_write_share_allows_updating_but_not_deleting(agent_api, coder_api, researcher_memory):
    agent_api.post(
        f"/memories/personal/{researcher_memory}/share",
        {"agent_ids": ["coder"], "permission": "write"},
    )
    r = coder_api.put(
        f"/memories/personal/{researcher_memory}", {"content": "研究员的实验记录：样本量 150"}
    )
    assert r.status_code == 200
    assert error_code(coder_api.delete(f"/memories/personal/{researcher_memory}")) == "FORBIDDEN"
    assert agent_api.delete(f"/memories/personal/{researcher_memory}").status_code == 200


def test_only_the_owner_may_share_or_unshare(agent_api, coder_api, researcher_memory):
    r = coder_api.post(
        f"/memories/personal/{researcher_memory}/share",
        {"agent_ids": ["coder"], "permission": "write"},
    )
    assert error_code(r) == "FORBIDDEN"
    assert not MemoryShare.objects.exists()
    agent_api.post(f"/memories/personal/{researcher_memory}/share", {"agent_ids": ["coder"]})
    assert (
        error_code(coder_api.delete(f"/memories/personal/{researcher_memory}/share")) == "FORBIDDEN"
    )
    r = agent_api.delete(f"/memories/personal/{researcher_memory}/share")
    assert ok_data(r)["shares"] == []
    found = ok_data(
        coder_api.post(
            "/memories/personal/search",
            {"agent_id": "coder", "query": "实验记录", "include_shared": True},
        )
    )
    assert found == []


def test_share_validation_and_cross_team(api, other_api, agent_api, researcher_memory):
    r = agent_api.post(
        f"/memories/personal/{researcher_memory}/share", {"agent_ids": [], "permission": "read"}
    )
    assert error_code(r) == "VALIDATION_ERROR"
    r = agent_api.post(
        f"/memories/personal/{researcher_memory}/share", {"agent_ids": ["x"], "permission": "admin"}
    )
    assert error_code(r) == "VALIDATION_ERROR"
    r = other_api.post(f"/memories/personal/{researcher_memory}/share", {"agent_ids": ["spy"]})
    assert (r.status_code, error_code(r)) == (404, "NOT_FOUND")
    assert not MemoryShare.objects.exists()


def test_a_team_wide_key_may_do_everything_in_its_team(api, researcher_memory):
    assert (
        api.put(f"/memories/personal/{researcher_memory}", {"importance": 0.2}).status_code == 200
    )
    assert (
        api.post(
            f"/memories/personal/{researcher_memory}/share", {"agent_ids": ["coder"]}
        ).status_code
        == 200
    )
    assert api.delete(f"/memories/personal/{researcher_memory}").status_code == 200


def test_agent_keys_share_team_memories(agent_api, coder_api):
    r = coder_api.post("/memories/team", {"content": "团队规范：提交前跑测试"})
    assert ok_data(r)["agent_id"] == "coder"  # written as its own agent
    mid = ok_data(r)["id"]
    assert (
        ok_data(agent_api.post("/memories/team/search", {"query": "提交前跑测试"}))[0]["id"] == mid
    )
    assert agent_api.put(f"/memories/team/{mid}", {"importance": 0.9}).status_code == 200
    r = coder_api.post("/memories/team", {"content": "as someone else", "agent_id": "researcher"})
    assert error_code(r) == "FORBIDDEN"


def test_deleting_an_agent_deletes_its_personal_memories_and_grants(
    api, agent_api, researcher_memory, team
):
    api.post("/memories/team", {"content": "团队知识不随作者删除", "agent_id": "researcher"})
    agent_api.post(f"/memories/personal/{researcher_memory}/share", {"agent_ids": ["coder"]})
    assert api.delete("/agents/team_a/researcher").status_code == 200
    assert not Memory.objects.filter(scope="personal", agent_id="researcher").exists()
    assert Memory.objects.filter(scope="team").count() == 1
    assert not MemoryShare.objects.exists()
