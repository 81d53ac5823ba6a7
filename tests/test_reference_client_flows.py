"""The reference client flows that must keep working unchanged: the original API's integration
examples, run with its own MemoryClient (tests/reference_client.py, kept verbatim) against a live
server."""

from __future__ import annotations

import pytest
from django.conf import settings

from tenants.services import api_key_issue, team_upsert

from .reference_client import MemoryClient

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(live_server, team_id: str) -> MemoryClient:
    team, _ = team_upsert(team_id=team_id, name=team_id)
    key = api_key_issue(team=team)
    return MemoryClient(key.key_id, key.secret, base_url=live_server.url)


def test_openclaw_flow(live_server):
    client = client_for(live_server, "openclaw_team")
    assert client.post("/teams", {"team_id": "openclaw_team", "name": "OpenClaw 团队"}).json()["ok"]
    client.post("/agents", {"agent_id": "assistant", "name": "AI 助手", "role": "assistant"})
    client.post(
        "/memories/personal",
        {
            "agent_id": "assistant",
            "content": "用户偏好简洁直接的回复，不喜欢冗长的解释",
            "importance": 0.9,
        },
    )
    client.post(
        "/memories/personal",
        {
            "agent_id": "assistant",
            "content": "用户的技术栈：Java 后端 + WSL2 + 腾讯云新加坡",
            "importance": 0.7,
        },
    )
    client.post(
        "/memories/team",
        {
            "content": "Java 接口规范：ResultBean 统一返回格式，@ControllerAdvice 全局异常处理",
            "importance": 0.8,
        },
    )
    client.post(
        "/memories/team",
        {
            "content": "部署规范：代码变更后必须三同步——代码逻辑、内部文档、公网文档",
            "importance": 0.95,
        },
    )
    r = client.post(
        "/memories/personal/search",
        {"agent_id": "assistant", "query": "用户的沟通风格偏好", "limit": 3, "min_score": 0.3},
    )
    results = r.json()["data"]
    assert results[0]["content"] == "用户偏好简洁直接的回复，不喜欢冗长的解释"
    r = client.post(
        "/memories/team/search", {"query": "接口返回格式规范", "limit": 3, "min_score": 0.3}
    )
    assert r.json()["data"][0]["content"].startswith("Java 接口规范")


def test_hermes_flow(live_server):
    client = client_for(live_server, "hermes")
    client.post("/teams", {"team_id": "hermes", "name": "Hermes 策略研究部"})
    for agent_id, name, role in [
        ("cloud_strategist", "云策", "决策调度"),
        ("backtest_engineer", "弈回", "回测工程师"),
        ("review_analyst", "弈析", "复盘分析"),
    ]:
        client.post("/agents", {"agent_id": agent_id, "name": name, "role": role})
    client.post(
        "/memories/personal",
        {
            "agent_id": "cloud_strategist",
            "content": "趋势策略在震荡行情中表现不佳，需要增加行情识别层",
            "importance": 0.9,
        },
    )
    client.post(
        "/memories/personal",
        {
            "agent_id": "backtest_engineer",
            "content": "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今",
            "importance": 0.7,
        },
    )
    client.post(
        "/memories/personal",
        {
            "agent_id": "review_analyst",
            "content": "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩",
            "importance": 0.85,
        },
    )
    client.post(
        "/memories/team",
        {"content": "风控规则：单策略最大仓位 30%，总杠杆不超过 3x", "importance": 0.95},
    )
    stats = client.get("/stats").json()["data"]
    assert (stats["personal_memories"], stats["team_memories"], stats["agents"]) == (3, 1, 3)
    # null in embedded mode (no Redis configured), True with Redis.
    assert stats["redis_ok"] is (True if settings.REDIS_URL else None)
    assert stats["embedding_ok"] is True
    recent = client.get("/memories/personal/recent/cloud_strategist", params={"limit": 5}).json()[
        "data"
    ]
    assert recent[0]["importance"] == 0.9 and recent[0]["content"].startswith("趋势策略")


def test_claude_code_flow(live_server):
    client = client_for(live_server, "claude_code")
    client.post("/teams", {"team_id": "claude_code", "name": "Claude Code 团队"})
    client.post("/agents", {"agent_id": "coder", "name": "编码助手", "role": "developer"})
    items = [
        "正在重构 memory_system.py 中的 compress 方法",
        "目标：将返回值从 {summary: string} 改为结构化 dict",
        "需要同步更新：routes.py, docs/index.html, README_INTERNAL.html",
        "测试方法：E2E curl 验证响应格式",
    ]
    for item in items:
        client.post("/memories/working", {"agent_id": "coder", "content": item})
    assert len(client.get("/memories/working/coder").json()["data"]) == 4
    result = client.post("/lifecycle/compress", {"agent_id": "coder", "target_count": 1}).json()[
        "data"
    ]
    assert (result["compressed"], result["remaining"]) == (4, 0)
    assert result["summary"]
    r = client.post(
        "/memories/personal/search",
        {"agent_id": "coder", "query": "compress 方法重构", "limit": 3, "min_score": 0.3},
    )
    top = r.json()["data"][0]
    assert top["metadata"]["source"] == "compression" and "compress" in top["content"]


def test_cross_team_isolation_flow(live_server):
    team_a = client_for(live_server, "team_a")
    team_b = client_for(live_server, "team_b")
    team_a.post("/teams", {"team_id": "team_a", "name": "Team Alpha"})
    team_a.post("/agents", {"agent_id": "agent_1", "name": "Agent 1"})
    team_a.post(
        "/memories/personal",
        {"agent_id": "agent_1", "content": "这是 Team A 的私密记忆", "importance": 0.9},
    )
    team_b.post("/teams", {"team_id": "team_b", "name": "Team Beta"})
    team_b.post("/agents", {"agent_id": "agent_1", "name": "Agent B1"})
    team_b.post(
        "/memories/personal",
        {"agent_id": "agent_1", "content": "这是 Team B 的私密记忆", "importance": 0.8},
    )
    r = team_a.post(
        "/memories/personal/search", {"agent_id": "agent_1", "query": "私密记忆", "limit": 10}
    )
    assert [m["content"] for m in r.json()["data"]] == ["这是 Team A 的私密记忆"]
    r = team_a.post("/memories/team/search", {"query": "私密", "limit": 10})
    assert len(r.json()["data"]) == 0
    stats = team_a.get("/stats").json()["data"]
    assert (stats["personal_memories"], stats["team_memories"]) == (1, 0)


def test_lifecycle_offline_flow(live_server):
    client = client_for(live_server, "research_lab")
    client.post("/teams", {"team_id": "research_lab", "name": "研究实验室"})
    client.post("/agents", {"agent_id": "researcher", "name": "研究员", "role": "研究分析"})
    wm_items = [
        "今天决定把量化策略的回测周期从 3 个月改为 6 个月，因为短期数据噪声太大",
        "发现 DeepSeek V4 在代码生成任务上比 MiMo 快约 40%，但中文理解稍弱",
        "用户偏好简洁直接的回复风格，不喜欢冗长的解释",
        "Redis 缓存命中率从 75% 提升到 92% 后，API 响应时间从 120ms 降到 45ms",
        "下周一需要和团队讨论 Q3 的风控模型升级方案",
    ]
    for item in wm_items:
        client.post("/memories/working", {"agent_id": "researcher", "content": item})
    facts = client.extract_facts("researcher", max_memories=20, delete_after=False).json()["data"][
        "facts"
    ]
    assert len(facts) >= 5 and all(
        {"id", "content", "importance", "category"} <= set(f) for f in facts
    )
    client.post(
        "/memories/personal",
        {
            "agent_id": "researcher",
            "content": "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩",
            "importance": 0.85,
        },
    )
    client.post(
        "/memories/personal",
        {
            "agent_id": "researcher",
            "content": "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今",
            "importance": 0.7,
        },
    )
    client.post(
        "/memories/team",
        {"content": "风控规则：单策略最大仓位 30%，总杠杆不超过 3x", "importance": 0.95},
    )
    scenarios = client.aggregate_scenarios("researcher", max_memories=50).json()["data"][
        "scenarios"
    ]
    assert len(scenarios) >= 2 and all(s["name"] and s["memory_ids"] for s in scenarios)
    assert len(client.get_scenarios("researcher").json()["data"]) == len(scenarios)
    persona = client.generate_persona("researcher", max_items=30).json()["data"]["persona"]
    assert persona["preferences"] and persona["summary"]
    assert client.get_persona("researcher").json()["data"]["id"] == persona["id"]
    r = client.set_pipeline_config(
        compress_every_n=10,
        compress_target_count=5,
        cleanup_idle_days=60,
        cleanup_min_importance=0.2,
        enabled=True,
        warmup_max_memories=5,
        warmup_compress_every_n=2,
    )
    assert r.json()["data"]["cleanup_idle_days"] == 60
    config = client.get_pipeline_config().json()["data"]
    assert (config["compress_every_n"], config["warmup_compress_every_n"]) == (10, 2)
    r = client.post(
        "/memories/personal/search",
        {"agent_id": "researcher", "query": "策略回测", "limit": 5, "min_score": 0.3},
    )
    results = r.json()["data"]
    assert results and any(m.get("metadata", {}).get("source") == "extraction" for m in results)
