"""Sample memories for a new user's first look at `make run` (the review console has something
to show: agents' personal and team memories, some idle ones the purge preview and cleanup take at
their defaults, a persona built by the offline lifecycle down to its archived working-memory
sources, a small graph, agents' rules with a proposal waiting for a lead, and working memory of
another agent left for the user to run `extract-facts` / `compress` on).

Idempotent: does nothing when the team already has memories. Everything goes through the same
services as the API, so what the console shows is what an agent would have produced.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from core.progress import Progress
from lifecycle.services import pipeline
from memories.models import Memory, MemoryScope
from memories.services import Actor, memory_create, procedure_add
from memories.working import get_working_store
from tenants.models import Team
from tenants.services import agent_ensure

# (agent, content, importance, category); the examples of the original API's docs first.
PERSONAL = [
    ("researcher", "用户偏好简洁直接的回复，不喜欢冗长的解释", 0.9, "preference"),
    ("researcher", "用户常用技术栈：Java 17、Spring Boot 3、MariaDB 10.11、Redis", 0.7, "fact"),
    (
        "researcher",
        "The user prefers green tea in the morning and avoids coffee after 2 pm.",
        0.6,
        "preference",
    ),
    ("researcher", "Alice leads the data platform team and works from Berlin.", 0.6, "fact"),
    ("quant", "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今", 0.8, "fact"),
    ("quant", "风控规则：单策略最大仓位 30%，总杠杆不超过 3x", 0.95, "rule"),
    ("quant", "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩", 0.7, "review"),
    (
        "coder",
        "The staging database is refreshed every Sunday night from production backups.",
        0.6,
        "fact",
    ),
    ("coder", "Bob is an experienced Rust developer and reviews all unsafe blocks.", 0.5, "fact"),
    # The same feedback three times: what the lifecycle proposes a rule from.
    ("researcher", "The user wants short answers without long explanations.", 0.7, "preference"),
    (
        "researcher",
        "The user asked again for shorter answers, no long explanations.",
        0.7,
        "preference",
    ),
    (
        "researcher",
        "The user prefers short answers and dislikes long explanations.",
        0.7,
        "preference",
    ),
]
# Rules the agents follow (procedural memory), as an agent adds them with POST /procedures.
RULES = [
    ("coder", "Run the full test suite before every commit."),
    ("quant", "Never raise total leverage above 3x; ask before any position above 30%."),
]
TEAM = [
    (
        "coder",
        "Java 接口规范：ResultBean 统一返回格式，@ControllerAdvice 全局异常处理",
        0.8,
        "rule",
    ),
    ("coder", "Deploys to production happen on Tuesdays after the code review.", 0.95, "process"),
]
# Idle and unimportant: what the console's purge preview finds at its defaults (not accessed for
# 90 days, importance < 0.3), and cleanup at its defaults (90 days, importance < 0.2) the two
# below 0.2.
IDLE = [
    ("researcher", "Old lunch order for the offsite: two sandwiches and a salad.", 0.1, 200),
    ("coder", "Parking spot B12 was free last spring.", 0.2, 150),
    ("quant", "临时记录：周五下午茶订了奶茶", 0.15, 120),
]
WORKING = {
    "researcher": [
        "今天决定把量化策略的回测周期从 3 个月改为 6 个月，因为短期数据噪声太大",
        "发现 DeepSeek V4 在代码生成任务上比 MiMo 快约 40%，但中文理解稍弱",
        "用户偏好简洁直接的回复风格，不喜欢冗长的解释",
        "Redis 缓存命中率从 75% 提升到 92% 后，API 响应时间从 120ms 降到 45ms",
        "下周一需要和团队讨论 Q3 的风控模型升级方案",
        "Alice asked for a weekly summary of the backtest results every Friday.",
    ],
}

# Left in working memory, not processed: `POST /lifecycle/extract-facts {"agent_id": "quant"}`
# (or compress) has something to turn into facts on day one.
PENDING = {
    "quant": [
        "今天把 ETH 永续的止损从 5% 收紧到 3%，因为波动率上升",
        "The Friday risk review moved to Thursday 4 pm starting next week.",
        "新策略 v2 在 2024 全年回测夏普 1.8，最大回撤 9%",
    ],
}


class Command(BaseCommand):
    help = "Load sample memories, a persona and a graph into a team that has no memories yet."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="demo")

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']!r} (run bootstrap_demo first)")
        if Memory.objects.filter(team=team).exists():
            self.stdout.write(f"team {team.id} already has memories: sample data not loaded")
            return
        # Sample memories, then the lifecycle runs (the slow part: embeddings, topics, graph).
        steps = len(PERSONAL) + len(TEAM) + len(IDLE) + 4 * len(WORKING) + 3
        progress = Progress(steps, label="demo data", stream=self.stderr)
        for scope, rows in ((MemoryScope.PERSONAL, PERSONAL), (MemoryScope.TEAM, TEAM)):
            for agent, content, importance, category in rows:
                progress.advance()
                memory_create(
                    team=team,
                    scope=scope,
                    agent_id=agent,
                    content=content,
                    importance=importance,
                    category=category,
                    metadata={"source": "demo"},
                )
        now = timezone.now()
        for agent, content, importance, days in IDLE:
            progress.advance()
            memory, _ = memory_create(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id=agent,
                content=content,
                importance=importance,
                metadata={"source": "demo"},
            )
            # Backdated so that the purge preview has something to show on day one.
            Memory.objects.filter(pk=memory.pk).update(
                created_at=now - timedelta(days=days), last_accessed=None
            )
        store = get_working_store()
        for agent, items in WORKING.items():
            agent_ensure(team=team, agent_id=agent)
            for content in items:
                store.add(team_id=team.id, agent_id=agent, content=content, ttl_seconds=72 * 3600)
            # The offline lifecycle, as an operator's "run now" would: facts with their archived
            # sources, scenarios, a persona, then entities and relations from the memories.
            for kind, params in (
                ("extract-facts", {"max_memories": 20, "delete_after": True}),
                ("aggregate-scenes", {}),
                ("generate-persona", {}),
                ("extract-graph", {}),
            ):
                pipeline.run(team=team, kind=kind, trigger="command", agent_id=agent, params=params)
                progress.advance()
        for agent in ("quant", "coder"):
            progress.advance()
            pipeline.run(
                team=team, kind="extract-graph", trigger="command", agent_id=agent, params={}
            )
        for agent, rule in RULES:
            procedure_add(
                team=team,
                agent_id=agent,
                rule=rule,
                source="agent",
                actor=Actor(label="command load_demo_data"),
            )
        # A proposal for a lead to accept or reject in the console ("Agents' rules").
        pipeline.run(
            team=team,
            kind="propose-procedures",
            trigger="command",
            agent_id="researcher",
            params={},
        )
        progress.advance()
        for agent, items in PENDING.items():
            for content in items:
                store.add(team_id=team.id, agent_id=agent, content=content, ttl_seconds=72 * 3600)
        progress.close()
        self.stdout.write(
            self.style.SUCCESS(
                f"sample data loaded into team {team.id}: "
                f"{Memory.objects.filter(team=team).count()} memories, a persona for researcher"
            )
        )
