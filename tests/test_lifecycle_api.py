"""Lifecycle endpoints (docs/lifecycle.md) end to end with the offline engine and the fake LLM."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from lifecycle.models import JobRun, Persona, Scenario, WorkingArchive
from memories.models import Memory, MemoryRevision

from .helpers import error_code, long_cold, ok_data

pytestmark = pytest.mark.django_db

CODER_NOTES = [
    "正在重构 memory_system.py 中的 compress 方法",
    "目标：将返回值从 {summary: string} 改为结构化 dict",
    "需要同步更新：routes.py, docs/index.html, README_INTERNAL.html",
    "测试方法：E2E curl 验证响应格式",
]
RESEARCH_NOTES = [
    "今天决定把量化策略的回测周期从 3 个月改为 6 个月，因为短期数据噪声太大",
    "发现 DeepSeek V4 在代码生成任务上比 MiMo 快约 40%，但中文理解稍弱",
    "用户偏好简洁直接的回复风格，不喜欢冗长的解释",
    "Redis 缓存命中率从 75% 提升到 92% 后，API 响应时间从 120ms 降到 45ms",
    "下周一需要和团队讨论 Q3 的风控模型升级方案",
]


@pytest.fixture
def manual(api):
    """Pipeline off, so only explicit calls compress."""
    api.post("/lifecycle/auto-config", {"enabled": False})
    return api


def working(api, agent, items):
    ids = []
    for item in items:
        r = api.post("/memories/working", {"agent_id": agent, "content": item})
        assert r.status_code == 201
        ids.append(ok_data(r)["id"])
    return ids


class TestCompress:
    def test_compress_offline(self, manual):
        item_ids = working(manual, "coder", CODER_NOTES)
        data = ok_data(manual.post("/lifecycle/compress", {"agent_id": "coder", "target_count": 1}))
        assert (
            data["compressed"],
            data["remaining"],
            data["total_before"],
            data["target_count"],
        ) == (4, 0, 4, 1)
        assert data["summary"] and "compress" in data["summary"]
        assert len(data["memory_ids"]) == 1
        memory = Memory.objects.get(pk=data["memory_ids"][0])
        assert memory.metadata["source"] == "compression"
        assert sorted(memory.metadata["source_items"]) == sorted(item_ids)
        assert ok_data(manual.get("/memories/working/coder")) == []
        assert set(WorkingArchive.objects.values_list("item_id", flat=True)) == set(item_ids)
        job = JobRun.objects.get(kind="compress")
        assert (job.status, job.trigger, job.agent_id, job.counts["compressed"]) == (
            "succeeded",
            "api",
            "coder",
            4,
        )
        found = ok_data(
            manual.post(
                "/memories/personal/search", {"agent_id": "coder", "query": "compress 方法重构"}
            )
        )
        assert found and found[0]["metadata"]["source"] == "compression"

    def test_compress_offline_keeps_what_is_written_in_other_scripts(self, manual):
        notes = [
            "Пользователь живёт в Казани и работает инженером",
            "사용자는 부산에서 엔지니어로 일합니다",
            "ผู้ใช้ทำงานเป็นวิศวกรที่เชียงใหม่",
        ]
        working(manual, "polyglot", notes)
        data = ok_data(
            manual.post("/lifecycle/compress", {"agent_id": "polyglot", "target_count": 1})
        )
        assert data["compressed"] == 3 and len(data["memory_ids"]) == 1
        content = Memory.objects.get(pk=data["memory_ids"][0]).content
        assert all(note in content for note in notes)
        found = ok_data(
            manual.post(
                "/memories/personal/search", {"agent_id": "polyglot", "query": "живёт в Казани"}
            )
        )
        assert [m["id"] for m in found] == data["memory_ids"]

    def test_nothing_to_compress(self, manual):
        data = ok_data(manual.post("/lifecycle/compress", {"agent_id": "idle"}))
        assert data == {
            "compressed": 0,
            "remaining": 0,
            "total_before": 0,
            "target_count": 5,
            "summary": None,
            "memory_ids": [],
        }

    def test_target_count_bounds_the_summaries(self, manual):
        working(
            manual,
            "a",
            [f"第 {i} 条：主题 {t} 的进展记录" for i, t in enumerate("甲乙丙丁戊己庚辛")],
        )
        data = ok_data(manual.post("/lifecycle/compress", {"agent_id": "a", "target_count": 3}))
        assert 1 <= len(data["memory_ids"]) <= 3 and data["compressed"] == 8

    def test_llm_timeout_is_503_and_loses_nothing(self, manual, fake_llm, settings):
        settings.LLM_TIMEOUT_SECONDS = 1  # the fake answers after 5 s in "timeout" mode
        fake_llm.chat_mode = "timeout"
        working(manual, "coder", CODER_NOTES)
        r = manual.post("/lifecycle/compress", {"agent_id": "coder", "target_count": 1})
        assert (r.status_code, error_code(r)) == (503, "LLM_UNAVAILABLE")
        assert len(ok_data(manual.get("/memories/working/coder"))) == 4
        assert not Memory.objects.exists() and not WorkingArchive.objects.exists()
        job = JobRun.objects.get(kind="compress")
        assert job.status == "failed" and "LLM_UNAVAILABLE" in job.error

    def test_llm_500_is_503(self, manual, fake_llm):
        fake_llm.chat_mode = "500"
        working(manual, "coder", CODER_NOTES[:1])
        assert (
            error_code(manual.post("/lifecycle/compress", {"agent_id": "coder"}))
            == "LLM_UNAVAILABLE"
        )
        assert len(ok_data(manual.get("/memories/working/coder"))) == 1

    def test_llm_compress_records_tokens_and_skips_malformed_items(self, manual, fake_llm):
        fake_llm.chat_replies.append(
            json.dumps(
                {
                    "summaries": [
                        {
                            "content": "重构 compress 方法：返回结构化 dict，同步更新 routes.py 与文档，E2E curl 验证",
                            "importance": 0.8,
                            "source_indexes": [0, 1, 2, 3],
                        },
                        {"content": "", "importance": 5},
                        {"importance": 0.3, "source_indexes": [1]},
                    ]
                },
                ensure_ascii=False,
            )
        )
        working(manual, "coder", CODER_NOTES)
        data = ok_data(manual.post("/lifecycle/compress", {"agent_id": "coder", "target_count": 2}))
        assert len(data["memory_ids"]) == 1 and data["compressed"] == 4
        job = JobRun.objects.get(kind="compress")
        assert job.total_tokens == 120 and job.engine.startswith("llm:")


class TestFacts:
    def test_offline_facts(self, manual):
        item_ids = working(manual, "researcher", RESEARCH_NOTES)
        data = ok_data(
            manual.post("/lifecycle/extract-facts", {"agent_id": "researcher", "max_memories": 20})
        )
        assert data["count"] == len(data["facts"]) >= 5
        categories = {f["category"] for f in data["facts"]}
        assert {"preference", "metric", "plan", "decision"} <= categories, data["facts"]
        for fact in data["facts"]:
            m = Memory.objects.get(pk=fact["id"])
            assert m.metadata["source"] == "extraction" and set(m.metadata["source_items"]) <= set(
                item_ids
            )
        # delete_after defaults to false: working memory untouched
        assert len(ok_data(manual.get("/memories/working/researcher"))) == 5

    def test_a_second_extraction_skips_duplicates(self, manual):
        working(manual, "r", RESEARCH_NOTES)
        first = ok_data(manual.post("/lifecycle/extract-facts", {"agent_id": "r"}))
        second = ok_data(
            manual.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True})
        )
        assert second["count"] == 0 and second["duplicates"] == first["count"]
        assert Memory.objects.count() == first["count"]
        assert ok_data(manual.get("/memories/working/r")) == []

    def test_an_updated_fact_supersedes_the_old_one_keeping_history(self, manual, fake_llm):
        old = ok_data(
            manual.post("/memories/personal", {"agent_id": "r", "content": "用户每天喝 2 杯咖啡"})
        )
        fake_llm.chat_replies.append(
            json.dumps(
                {
                    "facts": [
                        {
                            "content": "用户每天喝 3 杯咖啡",
                            "importance": 0.6,
                            "category": "habit",
                            "source_indexes": [0],
                        }
                    ]
                },
                ensure_ascii=False,
            )
        )
        working(manual, "r", ["今天用户说他现在每天喝 3 杯咖啡了"])
        data = ok_data(manual.post("/lifecycle/extract-facts", {"agent_id": "r"}))
        assert data["superseded"] == 1 and data["facts"][0]["content"] == "用户每天喝 3 杯咖啡"
        old_row = Memory.objects.get(pk=old["id"])
        assert old_row.superseded_by_id == data["facts"][0]["id"]  # kept, marked
        assert MemoryRevision.objects.filter(memory=old_row, action="supersede").exists()
        found = ok_data(
            manual.post(
                "/memories/personal/search",
                {"agent_id": "r", "query": "每天喝几杯咖啡", "min_score": 0.0},
            )
        )
        assert [m["content"] for m in found] == ["用户每天喝 3 杯咖啡"]

    def test_malformed_llm_output_stores_nothing_and_keeps_working_memory(
        self, manual, fake_llm, caplog
    ):
        fake_llm.chat_replies.append("I cannot comply ```not json``` sorry")
        working(manual, "r", RESEARCH_NOTES[:2])
        data = ok_data(manual.post("/lifecycle/extract-facts", {"agent_id": "r"}))
        assert data["count"] == 0 and not Memory.objects.exists()
        assert len(ok_data(manual.get("/memories/working/r"))) == 2


class TestScenariosAndPersona:
    @pytest.fixture
    def seeded(self, manual):
        working(manual, "researcher", RESEARCH_NOTES)
        manual.post("/lifecycle/extract-facts", {"agent_id": "researcher"})
        manual.post(
            "/memories/personal",
            {
                "agent_id": "researcher",
                "content": "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩",
                "importance": 0.85,
            },
        )
        manual.post(
            "/memories/personal",
            {
                "agent_id": "researcher",
                "content": "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今",
                "importance": 0.7,
            },
        )
        manual.post(
            "/memories/team",
            {"content": "风控规则：单策略最大仓位 30%，总杠杆不超过 3x", "importance": 0.95},
        )
        return manual

    def test_scenarios_persona_and_traceability(self, seeded):
        data = ok_data(
            seeded.post(
                "/lifecycle/aggregate-scenes", {"agent_id": "researcher", "max_memories": 50}
            )
        )
        assert data["count"] == len(data["scenarios"]) >= 1
        all_ids = set(Memory.objects.values_list("pk", flat=True))
        for s in data["scenarios"]:
            assert s["name"] and s["summary"] and set(s["memory_ids"]) <= all_ids
        listed = ok_data(seeded.get("/lifecycle/scenarios/researcher"))
        assert {s["id"] for s in listed} == {s["id"] for s in data["scenarios"]}
        persona = ok_data(seeded.post("/lifecycle/generate-persona", {"agent_id": "researcher"}))[
            "persona"
        ]
        assert set(persona) >= {
            "id",
            "preferences",
            "habits",
            "expertise",
            "communication_style",
            "summary",
        }
        assert (
            any("简洁" in p for p in persona["preferences"])
            or "简洁" in persona["communication_style"]
        )
        assert set(persona["memory_ids"]) <= all_ids
        latest = ok_data(seeded.get("/lifecycle/persona/researcher"))
        assert latest["id"] == persona["id"] and latest["agent_id"] == "researcher"
        # Persona -> memories -> working-memory sources (L0) through the API and the archive.
        for mid in persona["memory_ids"]:
            meta = Memory.objects.get(pk=mid).metadata
            for item_id in meta.get("source_items", []):
                assert WorkingArchive.objects.filter(item_id=item_id).exists()

    def test_delete_scenario_and_persona(self, seeded):
        sc = ok_data(seeded.post("/lifecycle/aggregate-scenes", {"agent_id": "researcher"}))[
            "scenarios"
        ][0]
        assert ok_data(seeded.delete(f"/lifecycle/scenarios/{sc['id']}")) == {"deleted": sc["id"]}
        assert error_code(seeded.delete(f"/lifecycle/scenarios/{sc['id']}")) == "NOT_FOUND"
        p = ok_data(seeded.post("/lifecycle/generate-persona", {"agent_id": "researcher"}))[
            "persona"
        ]
        assert ok_data(seeded.delete(f"/lifecycle/persona/{p['id']}")) == {"deleted": p["id"]}
        assert error_code(seeded.get("/lifecycle/persona/researcher")) == "NOT_FOUND"

    def test_other_teams_cannot_see_or_delete(self, seeded, other_api):
        sc = ok_data(seeded.post("/lifecycle/aggregate-scenes", {"agent_id": "researcher"}))[
            "scenarios"
        ][0]
        p = ok_data(seeded.post("/lifecycle/generate-persona", {"agent_id": "researcher"}))[
            "persona"
        ]
        assert ok_data(other_api.get("/lifecycle/scenarios/researcher")) == []
        assert error_code(other_api.delete(f"/lifecycle/scenarios/{sc['id']}")) == "NOT_FOUND"
        assert error_code(other_api.get("/lifecycle/persona/researcher")) == "NOT_FOUND"
        assert error_code(other_api.delete(f"/lifecycle/persona/{p['id']}")) == "NOT_FOUND"
        assert (
            Scenario.objects.filter(pk=sc["id"]).exists()
            and Persona.objects.filter(pk=p["id"]).exists()
        )
        other_api.post(
            "/memories/working", {"agent_id": "researcher", "content": "B 团队的工作记忆"}
        )
        data = ok_data(other_api.post("/lifecycle/compress", {"agent_id": "researcher"}))
        assert data["compressed"] == 1
        assert not Memory.objects.filter(team_id="team_a", content__contains="B 团队").exists()


class TestCleanup:
    @pytest.fixture
    def aged(self, manual):
        def make(content, importance, idle_days, pinned=False, agent="a"):
            mid = ok_data(
                manual.post(
                    "/memories/personal",
                    {
                        "agent_id": agent,
                        "content": content,
                        "importance": importance,
                        "pinned": pinned,
                    },
                )
            )["id"]
            when = timezone.now() - timedelta(days=idle_days)
            Memory.objects.filter(pk=mid).update(last_accessed=when, created_at=when)
            return mid

        return {
            "old_low": make("old unimportant note about lunch", 0.1, 100),
            "new_low": make("fresh unimportant note about coffee", 0.1, 1),
            "old_high": make("old important rule about backups", 0.9, 100),
            "pinned": make("old unimportant but pinned note", 0.1, 100, pinned=True),
            "other_agent": make("old unimportant note of agent b", 0.1, 100, agent="b"),
        }

    def test_dry_run_lists_candidates_and_changes_nothing(self, manual, aged):
        data = ok_data(
            manual.post(
                "/lifecycle/cleanup", {"max_age_days": 90, "min_importance": 0.2, "dry_run": True}
            )
        )
        assert data["dry_run"] is True and data["cleaned"] == 0
        assert {c["id"] for c in data["candidates"]} == {aged["old_low"], aged["other_agent"]}
        assert all("importance" in c["reason"] for c in data["candidates"])
        assert Memory.objects.count() == 5

    def test_it_removes_only_unimportant_and_idle_never_pinned(self, manual, aged):
        # Every memory cold for longer than the grace period: the ladder's last step.
        long_cold(*aged.values())
        data = ok_data(
            manual.post("/lifecycle/cleanup", {"max_age_days": 90, "min_importance": 0.2})
        )
        assert (data["cleaned"], data["remaining"]) == (2, 3)
        left = set(Memory.objects.values_list("pk", flat=True))
        assert left == {aged["new_low"], aged["old_high"], aged["pinned"]}
        assert JobRun.objects.get(kind="cleanup").counts == {"cleaned": 2, "remaining": 3}

    def test_agent_scoped_cleanup(self, manual, aged):
        long_cold(aged["old_low"], aged["other_agent"])
        data = ok_data(
            manual.post(
                "/lifecycle/cleanup", {"max_age_days": 90, "min_importance": 0.2, "agent_id": "b"}
            )
        )
        assert data["cleaned"] == 1 and not Memory.objects.filter(pk=aged["other_agent"]).exists()
        assert Memory.objects.filter(pk=aged["old_low"]).exists()

    def test_the_ladder_goes_cold_then_trash_after_the_grace_period(self, manual, aged, settings):
        candidates = {aged["old_low"], aged["other_agent"]}
        body = {"max_age_days": 90, "min_importance": 0.2}
        preview = ok_data(manual.post("/lifecycle/cleanup", {**body, "dry_run": True}))
        assert (preview["would_clean"], preview["would_cool"]) == (0, 2)
        assert {c["action"] for c in preview["candidates"]} == {"cold"}
        # First run: the candidates go cold, nothing is trashed, nothing else moves.
        first = ok_data(manual.post("/lifecycle/cleanup", body))
        assert first["cleaned"] == 0 and first["trashed"] == []
        assert set(first["cooled"]) == candidates
        tiers = dict(Memory.objects.values_list("pk", "tier"))
        assert {pk for pk, tier in tiers.items() if tier == "cold"} == candidates
        # Cold, out of everyday search; still there with include_cold.
        hits = ok_data(
            manual.post("/memories/personal/search", {"agent_id": "a", "query": "lunch note"})
        )
        assert aged["old_low"] not in {h["id"] for h in hits}
        # Within the grace period a second run waits.
        second = ok_data(manual.post("/lifecycle/cleanup", body))
        assert second["cleaned"] == 0 and second["cooled"] == []
        assert {
            c["action"]
            for c in ok_data(manual.post("/lifecycle/cleanup", {**body, "dry_run": True}))[
                "candidates"
            ]
        } == {"wait"}
        # Past it, the cold candidates go to the trash (restorable).
        settings.CLEANUP_COLD_GRACE_DAYS = 0
        third = ok_data(manual.post("/lifecycle/cleanup", body))
        assert set(third["trashed"]) == candidates and third["cleaned"] == 2
        assert not Memory.objects.filter(pk__in=candidates).exists()

    def test_a_cold_memory_asked_for_leaves_the_ladder(self, manual, aged):
        ok_data(manual.post("/lifecycle/cleanup", {"max_age_days": 90, "min_importance": 0.2}))
        assert Memory.objects.get(pk=aged["old_low"]).tier == "cold"
        hits = ok_data(
            manual.post(
                "/memories/personal/search",
                {
                    "agent_id": "a",
                    "query": "old unimportant note about lunch",
                    "include_cold": True,
                },
            )
        )
        assert hits[0]["id"] == aged["old_low"] and hits[0]["tier"] == "cold"
        memory = Memory.objects.get(pk=aged["old_low"])
        assert memory.tier == "hot" and memory.access_count == 1
        long_cold(aged["other_agent"])
        data = ok_data(
            manual.post("/lifecycle/cleanup", {"max_age_days": 90, "min_importance": 0.2})
        )
        # Recalled just now: no longer idle, so no longer a candidate.
        assert data["trashed"] == [aged["other_agent"]] and data["cooled"] == []

    def test_cleanup_never_touches_another_team(self, manual, aged, other_api):
        assert (
            ok_data(
                other_api.post("/lifecycle/cleanup", {"max_age_days": 0, "min_importance": 1.0})
            )["cleaned"]
            == 0
        )
        assert Memory.objects.count() == 5

    @pytest.mark.parametrize(
        "body", [{"max_age_days": -1}, {"min_importance": 2}, {"dry_run": "yes"}]
    )
    def test_validation(self, manual, body):
        assert error_code(manual.post("/lifecycle/cleanup", body)) == "VALIDATION_ERROR"


class TestAutoConfig:
    def test_defaults_and_partial_update(self, api):
        assert ok_data(api.get("/lifecycle/auto-config")) == {
            "team_id": "team_a",
            "compress_every_n": 10,
            "compress_target_count": 5,
            "cleanup_idle_days": 30,
            "cleanup_min_importance": 0.2,
            "enabled": True,
            "warmup_max_memories": 5,
            "warmup_compress_every_n": 1,
            "extract_graph": False,
            "warmup_doubling": True,
            "idle_extract_seconds": 600,
            "scenario_min_interval_seconds": 900,
            "persona_every_n": 50,
            "excluded_agents": [],
            "max_memories_per_run": 0,
            "consolidate_min_fragments": 0,
            "recall_timeout_ms": 5000,
            "configured": False,
        }
        data = ok_data(
            api.post(
                "/lifecycle/auto-config", {"compress_every_n": 3, "warmup_compress_every_n": 2}
            )
        )
        assert (
            data["compress_every_n"],
            data["warmup_compress_every_n"],
            data["compress_target_count"],
        ) == (3, 2, 5)
        assert data["configured"] is True
        # Setting the fixed warm-up step alone chooses it over doubling.
        assert data["warmup_doubling"] is False
        assert ok_data(api.get("/lifecycle/auto-config"))["compress_every_n"] == 3

    @pytest.mark.parametrize(
        "body",
        [
            {"compress_every_n": -1},
            {"enabled": "true"},
            {"cleanup_min_importance": 1.5},
            {"compress_target_count": 0},
        ],
    )
    def test_validation(self, api, body):
        assert error_code(api.post("/lifecycle/auto-config", body)) == "VALIDATION_ERROR"

    def test_each_team_has_its_own(self, api, other_api):
        api.post("/lifecycle/auto-config", {"compress_every_n": 7})
        assert ok_data(other_api.get("/lifecycle/auto-config"))["compress_every_n"] == 10

    def test_agent_keys_cannot_change_it(self, agent_api):
        assert (
            error_code(agent_api.post("/lifecycle/auto-config", {"enabled": False})) == "FORBIDDEN"
        )
        assert error_code(agent_api.post("/lifecycle/auto-run", {})) == "FORBIDDEN"


@pytest.mark.django_db(transaction=True)  # jobs are enqueued on commit: let requests really commit
class TestPipeline:
    def test_an_unconfigured_team_is_never_compressed_automatically(self, api):
        for i in range(3):
            api.post(
                "/memories/working", {"agent_id": "a", "content": f"untouched item {i} {'xyz'[i]}"}
            )
        assert len(ok_data(api.get("/memories/working/a"))) == 3
        assert not JobRun.objects.exists()

    def test_warm_up_compresses_every_write_for_a_new_agent(self, api):
        api.post("/lifecycle/auto-config", {})  # opt in with the defaults (warm-up: every write)
        r = api.post(
            "/memories/working",
            {"agent_id": "newbie", "content": "第一次见面：用户叫小王，做量化研究"},
        )
        assert r.status_code == 201
        assert ok_data(api.get("/memories/working/newbie")) == []  # compressed at once (warm-up 1)
        m = Memory.objects.get(agent_id="newbie")
        assert m.metadata["source"] == "compression"
        assert JobRun.objects.get(kind="compress").trigger == "auto"

    def test_after_warm_up_it_waits_for_compress_every_n(self, api):
        api.post("/lifecycle/auto-config", {"compress_every_n": 3, "warmup_max_memories": 1})
        api.post(
            "/memories/personal", {"agent_id": "vet", "content": "an existing long-term memory"}
        )
        for i in range(2):
            api.post(
                "/memories/working",
                {"agent_id": "vet", "content": f"context item {i} about topic {'xy'[i]}"},
            )
        assert len(ok_data(api.get("/memories/working/vet"))) == 2
        api.post(
            "/memories/working", {"agent_id": "vet", "content": "context item 3 about topic z"}
        )
        assert ok_data(api.get("/memories/working/vet")) == []
        assert JobRun.objects.filter(kind="compress", trigger="auto").count() == 1

    def test_disabled_pipeline_never_compresses(self, api):
        api.post("/lifecycle/auto-config", {"enabled": False})
        for i in range(3):
            api.post("/memories/working", {"agent_id": "a", "content": f"item {i} {'pqr'[i]}"})
        assert len(ok_data(api.get("/memories/working/a"))) == 3
        assert not JobRun.objects.exists()

    def test_auto_run(self, api):
        api.post("/lifecycle/auto-config", {"enabled": False})
        working(api, "a", ["item one alpha", "item two beta"])
        api.post(
            "/lifecycle/auto-config",
            {"enabled": True, "compress_every_n": 2, "warmup_max_memories": 0},
        )
        results = ok_data(api.post("/lifecycle/auto-run", {}))["results"]
        assert [r["action"] for r in results] == ["compress", "cleanup"]
        assert results[0]["agent_id"] == "a" and results[0]["compressed"] == 2
        assert {j.trigger for j in JobRun.objects.all()} == {"api"}


def test_the_graph_step_after_fact_extraction_is_opt_in(api):
    from graph.models import Entity

    working(api, "r", ["Alice works at Acme Corp in Berlin and uses Python every day."])
    api.post("/lifecycle/auto-config", {"enabled": False})
    ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r"}))
    assert not JobRun.objects.filter(kind="extract-graph").exists()
    api.post(
        "/memories/working", {"agent_id": "r2", "content": "Bob works at Initech and uses Go."}
    )
    api.post(
        "/lifecycle/auto-config", {"enabled": True, "extract_graph": True, "compress_every_n": 0}
    )
    data = ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r2"}))
    assert data["count"] >= 1
    job = JobRun.objects.get(kind="extract-graph")
    assert (job.trigger, job.status, job.agent_id) == ("auto", "succeeded", "r2")
    assert Entity.objects.filter(team_id="team_a").exists()


def test_an_agent_switches_the_graph_step_on_or_off_for_itself(api):
    api.post(
        "/lifecycle/auto-config", {"enabled": True, "extract_graph": False, "compress_every_n": 0}
    )
    api.post("/agents", {"agent_id": "mapper", "name": "m", "config": {"extract_graph": True}})
    api.post("/agents", {"agent_id": "quiet", "name": "q", "config": {"extract_graph": False}})
    api.post("/agents", {"agent_id": "plain", "name": "p", "config": {"extract_graph": "yes"}})
    for agent in ("mapper", "quiet", "plain"):
        working(api, agent, ["Alice works at Acme Corp in Berlin and uses Python every day."])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": agent}))
    # The team's switch is off: only the agent that turned it on for itself gets the step (a
    # value that is not true/false is no switch).
    assert list(JobRun.objects.filter(kind="extract-graph").values_list("agent_id", flat=True)) == [
        "mapper"
    ]
    api.post("/lifecycle/auto-config", {"extract_graph": True})
    for agent in ("quiet", "plain"):
        working(api, agent, ["Bob works at Initech in Paris and uses Go."])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": agent}))
    # The team's switch is on: everyone but the agent that turned it off.
    assert sorted(
        JobRun.objects.filter(kind="extract-graph").values_list("agent_id", flat=True)
    ) == [
        "mapper",
        "plain",
    ]


def test_a_derived_memory_is_traced_to_its_sources_through_the_api(manual, other_api, agent_api):
    item_ids = working(manual, "researcher", CODER_NOTES)
    data = ok_data(
        manual.post("/lifecycle/compress", {"agent_id": "researcher", "target_count": 1})
    )
    mid = data["memory_ids"][0]
    traced = ok_data(manual.get(f"/lifecycle/sources/{mid}"))
    assert traced["source"] == "compression" and traced["memory_id"] == mid
    assert [i["id"] for i in traced["source_items"]] == item_ids
    assert [i["content"] for i in traced["source_items"]] == CODER_NOTES
    assert error_code(other_api.get(f"/lifecycle/sources/{mid}")) == "NOT_FOUND"
    plain = ok_data(
        manual.post("/memories/personal", {"agent_id": "coder", "content": "written by hand"})
    )
    assert ok_data(manual.get(f"/lifecycle/sources/{plain['id']}"))["source_items"] == []
    # an agent-scoped key of another agent may not read it
    assert error_code(agent_api.get(f"/lifecycle/sources/{plain['id']}")) == "FORBIDDEN"
