"""Personal and team long-term memory endpoints, through the real stack."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories.models import Memory, MemoryRevision
from tenants.models import Agent

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

PREF = "用户偏好简洁直接的回复，不喜欢冗长的解释"
STACK = "用户的技术栈：Java 后端 + WSL2 + 腾讯云新加坡"
JAVA = "Java 接口规范：ResultBean 统一返回格式，@ControllerAdvice 全局异常处理"
DEPLOY = "部署规范：代码变更后必须三同步——代码逻辑、内部文档、公网文档"


def write(api, content, agent="assistant", **extra):
    r = api.post("/memories/personal", {"agent_id": agent, "content": content, **extra})
    assert r.status_code in (200, 201), r.content
    return r


def search(api, query, agent="assistant", **extra):
    r = api.post("/memories/personal/search", {"agent_id": agent, "query": query, **extra})
    assert r.status_code == 200, r.content
    return ok_data(r)


class TestCreate:
    def test_it_writes_a_personal_memory_and_registers_the_agent(self, api):
        r = write(api, PREF, importance=0.9, metadata={"source": "chat"})
        assert r.status_code == 201
        data = ok_data(r)
        assert {
            k: data[k]
            for k in (
                "team_id",
                "agent_id",
                "scope",
                "content",
                "importance",
                "category",
                "metadata",
                "access_count",
                "last_accessed",
            )
        } == {
            "team_id": "team_a",
            "agent_id": "assistant",
            "scope": "personal",
            "content": PREF,
            "importance": 0.9,
            "category": "general",
            "metadata": {"source": "chat"},
            "access_count": 0,
            "last_accessed": None,
        }
        assert isinstance(data["id"], int)
        assert Agent.objects.get(team_id="team_a", agent_id="assistant").name == "assistant"
        m = Memory.objects.get(pk=data["id"])
        assert m.embedding and m.embedding_model

    @pytest.mark.parametrize(
        "body,field",
        [
            ({"content": "x"}, "agent_id"),
            ({"agent_id": "a"}, "content"),
            ({"agent_id": "a", "content": ""}, "content"),
            ({"agent_id": "a", "content": "   \n"}, "content"),
            ({"agent_id": "a", "content": "x" * 32001}, "content"),
            ({"agent_id": "a", "content": 5}, "content"),
            ({"agent_id": "a", "content": "x", "importance": 1.5}, "importance"),
            ({"agent_id": "a", "content": "x", "importance": "high"}, "importance"),
            ({"agent_id": "a", "content": "x", "metadata": [1]}, "metadata"),
            ({"agent_id": "a", "content": "x", "enable_dedup": "yes"}, "enable_dedup"),
            ({"agent_id": "a", "content": "x", "dedup_threshold": -0.1}, "dedup_threshold"),
            ({"agent_id": "a b", "content": "x"}, "agent_id"),
        ],
    )
    def test_it_validates(self, api, body, field):
        r = api.post("/memories/personal", body)
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
        assert field in r.json()["details"]
        assert not Memory.objects.exists()

    def test_content_of_32000_characters_is_accepted(self, api):
        assert write(api, "长" * 32000).status_code == 201

    def test_metadata_may_hold_nulls_and_a_filter_finds_them(self, api):
        """Metadata is any JSON object: a null value (mem0 and many clients write them) was a
        400 once; it is kept, updated, and matched by a null in a filter."""
        meta = {"ticket": None, "owner": {"team": None}, "tags": [None, "x"]}
        r = write(api, "the deploy key rotates monthly", metadata=meta)
        assert r.status_code == 201, r.content
        mid = ok_data(r)["id"]
        assert Memory.objects.get(pk=mid).metadata == meta
        write(api, "the deploy key lives in the vault", metadata={"ticket": "OPS-1"})
        found = search(api, "deploy key", filters={"metadata.ticket": None}, min_score=0.0)
        assert [m["id"] for m in found] == [mid]
        updated = api.put(f"/memories/personal/{mid}", {"metadata": {"ticket": None, "n": 1}})
        assert ok_data(updated)["metadata"] == {"ticket": None, "n": 1}

    def test_team_memory_with_category_and_optional_author(self, api):
        r = api.post("/memories/team", {"content": JAVA, "importance": 0.8, "category": "规范"})
        assert r.status_code == 201
        data = ok_data(r)
        assert (data["scope"], data["agent_id"], data["category"]) == ("team", None, "规范")
        r = api.post("/memories/team", {"content": DEPLOY, "agent_id": "coder"})
        assert ok_data(r)["agent_id"] == "coder"


class TestDedup:
    def test_an_identical_write_returns_the_existing_memory(self, api):
        first = ok_data(write(api, PREF))
        r = write(api, PREF)
        assert r.status_code == 200
        data = ok_data(r)
        assert (data["id"], data["dedup_skipped"], data["dedup_score"]) == (first["id"], True, 1.0)
        assert Memory.objects.count() == 1

    def test_whitespace_and_case_do_not_make_a_new_memory(self, api):
        first = ok_data(write(api, "The deploy script lives in the ops repository."))
        data = ok_data(write(api, "the deploy script  lives in the OPS repository."))
        assert data["id"] == first["id"] and data["dedup_skipped"] is True

    @pytest.mark.parametrize(
        "old,new",
        [
            (
                "用户偏好简洁直接的回复，不喜欢冗长的解释",
                "用户偏好简洁、直接的回复，不喜欢冗长解释。",
            ),
            (
                "用户偏好简洁直接的回复，不喜欢冗长的解释",
                "用户不喜欢冗长的解释，偏好简洁直接的回复",
            ),
            (
                "Alice prefers Python for data pipelines",
                "For data pipelines, Alice prefers Python.",
            ),
        ],
    )
    def test_a_paraphrase_is_a_duplicate(self, api, old, new):
        first = ok_data(write(api, old))
        data = ok_data(write(api, new))
        assert data.get("dedup_skipped") is True, data
        assert data["id"] == first["id"]
        assert 0.85 <= data["dedup_score"] < 1.0

    @pytest.mark.parametrize(
        "old,new",
        [
            ("Redis 缓存命中率从 75% 提升到 92%", "Redis 缓存命中率从 92% 提升到 75%"),
            ("单策略最大仓位 30%，总杠杆不超过 3x", "单策略最大仓位 40%，总杠杆不超过 3x"),
            ("用户喜欢喝咖啡", "用户不喜欢喝咖啡"),
            ("The user likes tea in the morning", "The user does not like tea in the morning"),
            ("The user prefers tea", "The user prefers coffee"),
            ("Team sync is on Monday at 10:00", "Team sync is on Tuesday at 10:00"),
            ("deploy notes for service alpha", "deploy notes for service beta"),
            ("The user likes tea", "The user likes tea with oat milk"),
        ],
    )
    def test_a_changed_number_negation_preference_or_date_is_written(self, api, old, new):
        write(api, old)
        r = write(api, new)
        assert r.status_code == 201, r.content
        assert Memory.objects.count() == 2

    def test_dedup_is_per_agent(self, api):
        write(api, PREF, agent="a1")
        assert write(api, PREF, agent="a2").status_code == 201

    def test_dedup_can_be_disabled(self, api):
        write(api, PREF)
        assert write(api, PREF, enable_dedup=False).status_code == 201

    def test_a_threshold_of_one_still_catches_exact_copies_only(self, api):
        write(api, "用户偏好简洁直接的回复，不喜欢冗长的解释")
        assert (
            write(
                api, "用户偏好简洁、直接的回复，不喜欢冗长解释。", dedup_threshold=1.0
            ).status_code
            == 201
        )
        assert (
            write(api, "用户偏好简洁直接的回复，不喜欢冗长的解释", dedup_threshold=1.0).status_code
            == 200
        )


class TestSearch:
    @pytest.fixture
    def ranking_corpus(self, api):
        write(api, PREF, importance=0.9)
        write(api, STACK, importance=0.7)
        api.post("/memories/team", {"content": JAVA, "importance": 0.8})
        api.post("/memories/team", {"content": DEPLOY, "importance": 0.95})

    def test_personal_ranking(self, api, ranking_corpus):
        results = search(api, "用户的沟通风格偏好", limit=3, min_score=0.3)
        assert results[0]["content"] == PREF
        assert all(0.3 <= m["score"] <= 1.0 for m in results)
        assert [m["score"] for m in results] == sorted((m["score"] for m in results), reverse=True)

    def test_team_ranking(self, api, ranking_corpus):
        r = api.post(
            "/memories/team/search", {"query": "接口返回格式规范", "limit": 3, "min_score": 0.3}
        )
        results = ok_data(r)
        assert results[0]["content"] == JAVA
        assert results[0]["scope"] == "team"

    def test_min_score_drops_the_irrelevant(self, api, ranking_corpus):
        assert search(api, "量子色动力学的渐近自由", min_score=0.3) == []
        assert search(api, "the migratory routes of arctic terns", min_score=0.3) == []

    def test_english_and_mixed_queries(self, api):
        write(api, "The staging database is refreshed every Sunday night from production backups.")
        write(api, "Alice prefers Python for data pipelines and Go for services.")
        write(api, "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今")
        assert search(api, "when is staging refreshed?")[0]["content"].startswith(
            "The staging database"
        )
        assert search(api, "which language does Alice use for services")[0]["content"].startswith(
            "Alice"
        )
        assert search(api, "Binance 回测数据")[0]["content"].startswith("回测数据源")

    def test_cross_lingual_queries_find_the_other_language(self, api):
        """BM25 cannot see a Chinese memory for an English query: the embedding alone must."""
        write(api, "用户对青霉素过敏，开药前必须确认")
        write(api, "The user is allergic to peanuts.")
        write(api, "部署在周二下午进行，需要两人审核")
        write(api, "Alice adopted a golden retriever puppy last spring.")
        found = [m["content"] for m in search(api, "what medicine is the user allergic to")]
        assert "用户对青霉素过敏，开药前必须确认" in found[:2]
        found = [m["content"] for m in search(api, "用户对什么药物过敏", min_score=0.3)]
        assert set(found) == {
            "用户对青霉素过敏，开药前必须确认",
            "The user is allergic to peanuts.",
        }

    def test_limit(self, api):
        for i in range(5):
            write(api, f"部署 checklist step {i}: run migrations on node {i}", enable_dedup=False)
        assert len(search(api, "部署 checklist migrations", limit=2, min_score=0.0)) == 2

    def test_empty_query_returns_the_most_recent(self, api):
        write(api, "first memory about apples")
        write(api, "second memory about pears")
        results = search(api, "", limit=1)
        assert [m["content"] for m in results] == ["second memory about pears"]

    def test_char_budgets(self, api):
        long = "预算" * 100 + " budget test"
        write(api, long)
        write(api, "budget test short", enable_dedup=False)
        results = search(api, "budget test", max_chars_per_memory=10, min_score=0.0)
        assert all(len(m["content"]) <= 13 for m in results)
        assert any(m["content"].endswith("...") for m in results)
        results = search(api, "budget test", max_total_chars=30, min_score=0.0)
        assert sum(len(m["content"]) for m in results) <= 30
        assert len(results) == 1

    def test_search_marks_results_as_recalled_in_one_query(self, api):
        ids = [
            ok_data(write(api, f"recall test memory number {w}"))["id"]
            for w in ("one", "two", "three")
        ]
        with CaptureQueriesContext(connection) as ctx:
            results = search(api, "recall test memory", min_score=0.0)
        updates = [
            q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")
        ]
        assert len(updates) == 1, updates
        assert {m["id"] for m in results} == set(ids)
        rows = Memory.objects.filter(pk__in=ids)
        assert all(m.access_count == 1 and m.last_accessed is not None for m in rows)

    def test_modes(self, api):
        write(api, "The quarterly report is due on the fifth.")
        assert search(api, "quarterly report", mode="keyword")[0]["score"] == 1.0
        assert search(api, "quarterly report", mode="vector", min_score=0.0)
        r = api.post(
            "/memories/personal/search", {"agent_id": "assistant", "query": "x", "mode": "fuzzy"}
        )
        assert error_code(r) == "VALIDATION_ERROR"

    def test_filters(self, api):
        write(api, "deploy notes for service alpha", metadata={"project": "alpha"}, category="ops")
        write(api, "deploy notes for service beta", metadata={"project": "beta"}, category="dev")
        res = search(api, "deploy notes", filters={"metadata": {"project": "beta"}}, min_score=0.0)
        assert [m["metadata"]["project"] for m in res] == ["beta"]
        res = search(api, "deploy notes", filters={"category": "ops"}, min_score=0.0)
        assert [m["category"] for m in res] == ["ops"]
        r = api.post(
            "/memories/personal/search",
            {"agent_id": "assistant", "query": "x", "filters": {"colour": "red"}},
        )
        assert error_code(r) == "VALIDATION_ERROR"

    def test_include_team(self, api):
        write(api, "my personal note on caching")
        api.post("/memories/team", {"content": "team rule on caching: use Redis"})
        scopes = {m["scope"] for m in search(api, "caching", include_team=True, min_score=0.0)}
        assert scopes == {"personal", "team"}
        assert {m["scope"] for m in search(api, "caching", min_score=0.0)} == {"personal"}

    @pytest.mark.parametrize(
        "body,field",
        [
            ({"query": "x"}, "agent_id"),
            ({"agent_id": "a", "query": "x", "limit": 0}, "limit"),
            ({"agent_id": "a", "query": "x", "limit": 51}, "limit"),
            ({"agent_id": "a", "query": "x", "min_score": 2}, "min_score"),
            ({"agent_id": "a", "query": 3}, "query"),
            ({"agent_id": "a", "query": "x", "max_total_chars": -1}, "max_total_chars"),
        ],
    )
    def test_it_validates(self, api, body, field):
        r = api.post("/memories/personal/search", body)
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
        assert field in r.json()["details"]

    @pytest.mark.local_index  # the milvus backend reads its change log and neighbours too
    def test_query_count_is_pinned(self, api, django_assert_max_num_queries):
        for i in range(20):
            write(api, f"pinned query count memory {i} about topic {i % 3}", enable_dedup=False)
        search(api, "warm the index")
        # key lookup, the team's pipeline config (the recall timeout; a team that never saved
        # one is read each time, so its first save is seen at once), index change-log sync,
        # candidate rows, access UPDATE
        with django_assert_max_num_queries(5):
            search(api, "memory about topic", min_score=0.0, limit=10)
        # A saved config is cached per process: one query fewer.
        ok_data(api.post("/lifecycle/auto-config", {"enabled": False}))
        search(api, "warm the cache")
        with django_assert_max_num_queries(4):
            search(api, "memory about topic", min_score=0.0, limit=10)


class TestRecent:
    def test_newest_first_with_limit(self, api):
        for i in range(3):
            write(api, f"recent number {i} with distinct words {'abc'[i]}", enable_dedup=False)
        r = api.get("/memories/personal/recent/assistant?limit=2")
        assert [m["content"][:15] for m in ok_data(r)] == ["recent number 2", "recent number 1"]

    @pytest.mark.parametrize("limit", ["0", "101", "x", "-1"])
    def test_limit_is_validated(self, api, limit):
        r = api.get(f"/memories/personal/recent/assistant?limit={limit}")
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")

    def test_recent_query_count_is_pinned(self, api, django_assert_num_queries):
        for i in range(5):
            write(api, f"query pin {i} {'vwxyz'[i]}", enable_dedup=False)
        api.get("/memories/personal/recent/assistant")
        with django_assert_num_queries(3):  # key lookup, select, access UPDATE
            r = api.get("/memories/personal/recent/assistant?limit=5")
        assert len(ok_data(r)) == 5

    def test_team_recent(self, api):
        api.post("/memories/team", {"content": "team one"})
        api.post("/memories/team", {"content": "team two is different"})
        assert [m["content"] for m in ok_data(api.get("/memories/team/recent?limit=1"))] == [
            "team two is different"
        ]


class TestUpdateDelete:
    def test_update_re_embeds_and_records_a_revision(self, api, issued):
        mid = ok_data(write(api, "The build server is called jenkins-01"))["id"]
        r = api.put(
            f"/memories/personal/{mid}",
            {"content": "The build runs on GitHub Actions now", "importance": 0.9},
        )
        data = ok_data(r)
        assert (data["content"], data["importance"]) == (
            "The build runs on GitHub Actions now",
            0.9,
        )
        assert search(api, "GitHub Actions build")[0]["id"] == mid
        assert search(api, "jenkins-01", mode="keyword", min_score=0.5) == []
        rev = MemoryRevision.objects.get(memory_id=mid)
        assert rev.before == {"content": "The build server is called jenkins-01", "importance": 0.5}
        assert rev.after == {"content": "The build runs on GitHub Actions now", "importance": 0.9}
        assert rev.api_key_id == issued.api_key.pk and rev.actor == f"key {issued.key_id}"

    def test_pinning_through_the_api_is_recorded_too(self, api):
        mid = ok_data(write(api, "Never delete the audit log"))["id"]
        api.put(f"/memories/personal/{mid}", {"pinned": True})
        rev = MemoryRevision.objects.get(memory_id=mid)
        assert (rev.before, rev.after) == ({"pinned": False}, {"pinned": True})

    def test_an_update_that_changes_nothing_records_nothing(self, api):
        mid = ok_data(write(api, "same same"))["id"]
        api.put(f"/memories/personal/{mid}", {"importance": 0.5})
        assert not MemoryRevision.objects.exists()

    @pytest.mark.parametrize("body", [{}, {"importance": 3}, {"content": ""}, {"metadata": "x"}])
    def test_update_validates(self, api, body):
        mid = ok_data(write(api, "valid"))["id"]
        r = api.put(f"/memories/personal/{mid}", body)
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")

    def test_unknown_ids_are_404(self, api):
        for path in (
            "/memories/personal/999999",
            "/memories/team/999999",
            "/memories/personal/99999999999999999999999",
        ):
            assert error_code(api.put(path, {"importance": 0.1})) == "NOT_FOUND"
            assert error_code(api.delete(path)) == "NOT_FOUND"

    def test_a_team_memory_is_not_reachable_through_the_personal_path(self, api):
        mid = ok_data(api.post("/memories/team", {"content": "team only"}))["id"]
        assert error_code(api.delete(f"/memories/personal/{mid}")) == "NOT_FOUND"
        assert api.delete(f"/memories/team/{mid}").status_code == 200

    def test_a_deleted_memory_is_never_returned(self, api):
        mid = ok_data(write(api, "ephemeral secret plan for the launch"))["id"]
        assert search(api, "secret launch plan")[0]["id"] == mid
        assert api.delete(f"/memories/personal/{mid}").json() == {"ok": True, "data": None}
        assert search(api, "secret launch plan", min_score=0.0) == []
        assert ok_data(api.get("/memories/personal/recent/assistant")) == []
        assert error_code(api.delete(f"/memories/personal/{mid}")) == "NOT_FOUND"


class TestCrossTeam:
    def test_another_teams_memories_are_invisible_and_untouchable(self, api, other_api):
        a_id = ok_data(write(api, "这是 Team A 的私密记忆", agent="agent_1"))["id"]
        b_id = ok_data(write(other_api, "这是 Team B 的私密记忆", agent="agent_1"))["id"]
        other_api.post("/memories/team", {"content": "Team B 的团队私密规则"})
        assert [m["content"] for m in search(api, "私密记忆", agent="agent_1", min_score=0.0)] == [
            "这是 Team A 的私密记忆"
        ]
        assert ok_data(api.post("/memories/team/search", {"query": "私密", "min_score": 0.0})) == []
        assert ok_data(api.get("/memories/team/recent")) == []
        for method in ("put", "delete"):
            r = getattr(api, method)(
                f"/memories/personal/{b_id}", *([{"content": "hijack"}] if method == "put" else [])
            )
            assert (r.status_code, error_code(r)) == (404, "NOT_FOUND")
        assert Memory.objects.get(pk=b_id).content == "这是 Team B 的私密记忆"
        stats = ok_data(api.get("/stats"))
        assert (stats["personal_memories"], stats["team_memories"]) == (1, 0)
        assert a_id != b_id

    def test_dedup_never_matches_another_team(self, api, other_api):
        write(other_api, PREF)
        assert write(api, PREF).status_code == 201


@pytest.mark.parametrize(
    "old,new",
    [
        ("张伟在北京的华为工作，负责 5G 基站", "李娜在上海的腾讯工作，负责 5G 基站"),
        (
            "Alice Chen works at Siemens in Munich as a data engineer",
            "Bob Martin works at Philips in Eindhoven as a data engineer",
        ),
    ],
)
def test_the_same_frame_with_other_names_is_another_fact(api, old, new):
    """Several slots (name, place, company) swapped: similar, but not the same memory."""
    write(api, old)
    assert write(api, new).status_code == 201
    assert Memory.objects.count() == 2
