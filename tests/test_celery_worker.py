"""The automatic pipeline end to end on a real deployment shape: gunicorn + a Celery worker on a
Redis broker + Redis working memory + the fake OpenAI-compatible LLM."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from memoryplatform.client import MemoryClient

from .fake_openai import FakeOpenAI
from .livestack import llm_env, worker_stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def test_working_memory_writes_trigger_one_compress_on_a_real_worker(tmp_path, redis_required):
    with FakeOpenAI() as fake:
        summary = "重构 compress 方法：返回结构化 dict，同步 routes.py 与文档，E2E curl 验证"
        fake.chat_replies.extend(
            [
                json.dumps(
                    {
                        "summaries": [
                            {"content": summary, "importance": 0.8, "source_indexes": [0, 1, 2, 3]}
                        ]
                    },
                    ensure_ascii=False,
                )
            ]
            * 3
        )
        env = llm_env(fake.base_url)
        with worker_stack(tmp_path, servers=1, extra_env=env) as ws:
            stack = ws.stack
            client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
            client.set_pipeline_config(
                compress_every_n=4, compress_target_count=1, warmup_max_memories=0
            )
            ids = []
            started = time.monotonic()
            for item in [
                "正在重构 memory_system.py 中的 compress 方法",
                "目标：返回结构化 dict",
                "需要同步更新：routes.py, docs/index.html",
                "测试方法：E2E curl 验证响应格式",
            ]:
                ids.append(client.write_working("coder", item)["id"])
            write_seconds = time.monotonic() - started
            deadline = time.monotonic() + 90
            while client.get_working("coder") and time.monotonic() < deadline:
                time.sleep(0.5)
            assert client.get_working("coder") == [], "the worker did not compress in time"
            memories = client.get_recent("coder")
            assert [m["content"] for m in memories] == [summary]
            meta = memories[0]["metadata"]
            assert meta["source"] == "compression" and sorted(meta["source_items"]) == sorted(ids)
            chat_calls = [r for r in fake.requests if r["path"].endswith("/chat/completions")]
            assert len(chat_calls) == 1  # four writes, one compress
            assert write_seconds < 10  # the writes never waited for the LLM


def test_research_log_on_a_worker_backed_deployment_with_the_fake_llm(tmp_path, redis_required):
    """The research-log lifecycle with the original client against gunicorn + a Celery worker + Redis, the LLM
    being the fake OpenAI-compatible server; every derived memory traced through the API."""
    from .reference_client import MemoryClient as ReferenceClient

    with FakeOpenAI() as fake:
        fake.chat_replies.extend(
            [
                json.dumps(
                    {
                        "facts": [
                            {
                                "content": "量化策略的回测周期从 3 个月改为 6 个月",
                                "importance": 0.8,
                                "category": "decision",
                                "source_indexes": [0],
                            },
                            {
                                "content": "用户偏好简洁直接的回复风格",
                                "importance": 0.9,
                                "category": "preference",
                                "source_indexes": [2],
                            },
                            {
                                "content": "Redis 命中率 92% 后 API 响应时间降到 45ms",
                                "importance": 0.7,
                                "category": "metric",
                                "source_indexes": [3],
                            },
                            {"content": "", "importance": 2},
                        ]
                    },
                    ensure_ascii=False,
                ),
                json.dumps(
                    {
                        "scenarios": [
                            {"name": "策略回测", "summary": "回测周期与数据源", "memory_ids": []},
                        ]
                    },
                    ensure_ascii=False,
                ),
                json.dumps(
                    {
                        "preferences": ["简洁直接的回复"],
                        "habits": [],
                        "expertise": ["量化策略"],
                        "communication_style": "简洁直接",
                        "summary": "关注量化策略的研究员",
                    },
                    ensure_ascii=False,
                ),
            ]
        )
        env = llm_env(fake.base_url)
        with worker_stack(tmp_path, servers=1, extra_env=env, worker=False) as ws:
            stack = ws.stack
            client = ReferenceClient(stack.api_key, stack.secret, base_url=stack.urls[0])
            for item in [
                "今天决定把量化策略的回测周期从 3 个月改为 6 个月，因为短期数据噪声太大",
                "发现 DeepSeek V4 在代码生成任务上比 MiMo 快约 40%，但中文理解稍弱",
                "用户偏好简洁直接的回复风格，不喜欢冗长的解释",
                "Redis 缓存命中率从 75% 提升到 92% 后，API 响应时间从 120ms 降到 45ms",
                "下周一需要和团队讨论 Q3 的风控模型升级方案",
            ]:
                assert (
                    client.post(
                        "/memories/working", {"agent_id": "researcher", "content": item}
                    ).status_code
                    == 201
                )
            facts = client.extract_facts("researcher").json()["data"]["facts"]
            assert [f["category"] for f in facts] == [
                "decision",
                "preference",
                "metric",
            ]  # the invalid one skipped
            client.post(
                "/memories/personal",
                {
                    "agent_id": "researcher",
                    "content": "回测数据源：Binance USDT 永续合约",
                    "importance": 0.7,
                },
            )
            scenarios = client.aggregate_scenarios("researcher").json()["data"]["scenarios"]
            assert scenarios == [] or all(
                s["memory_ids"] for s in scenarios
            )  # ids not among the inputs are dropped
            persona = client.generate_persona("researcher").json()["data"]["persona"]
            assert persona["communication_style"] == "简洁直接"
            assert client.get_persona("researcher").json()["data"]["id"] == persona["id"]
            for fact in facts:
                traced = client.get(f"/lifecycle/sources/{fact['id']}").json()["data"]
                assert traced["source"] == "extraction" and len(traced["source_items"]) == 1
            stats = client.get_stats().json()["data"]
            assert stats["redis_ok"] and stats["personas"] == 1


def test_an_export_runs_on_the_worker_and_downloads_from_the_web_node(tmp_path, redis_required):
    """POST /export on a gunicorn node queues the job; a Celery worker (maintenance queue) writes
    the bundle into the database; any node serves the download; an import of it skips all."""
    import gzip

    with worker_stack(tmp_path, servers=2) as ws:
        stack = ws.stack
        writer = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
        reader = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[1])
        writer.write_memory("coder", "The build uses Python 3.11", importance=0.7)
        writer.write_team_memory("Deploys happen on Tuesdays")
        job_id = writer.export()["job_id"]
        deadline = time.monotonic() + 90
        while (job := reader.get_job(job_id))["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the worker did not export in time"
            time.sleep(0.3)
        assert job["status"] == "succeeded", job
        data = reader.download_export(job_id)
        header = json.loads(gzip.decompress(data).splitlines()[0])
        assert header["counts"]["memory"] == 2 == job["result"]["counts"]["memory"]
        answer = writer.import_bundle(data)
        assert answer["skipped"]["memory"] == 2 and answer["imported"]["memory"] == 0


def _summary_reply(text: str) -> str:
    return json.dumps(
        {"summaries": [{"content": text, "importance": 0.7, "source_indexes": [0]}]},
        ensure_ascii=False,
    )


def _wait_empty(client: MemoryClient, agent: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while client.get_working(agent) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert client.get_working(agent) == [], f"{agent}'s working memory was not compressed in time"


def test_warm_up_doubling_idle_compress_and_excluded_agents_on_a_real_worker(
    tmp_path, redis_required
):
    """The pipeline triggers (docs/lifecycle.md) through gunicorn, a Celery worker and Redis: a
    new agent compresses after 1 then 2 items; the beat task, sent to the worker, compresses an
    idle agent below its threshold; an excluded agent is never compressed automatically."""
    from celery import Celery

    with FakeOpenAI() as fake:
        fake.chat_replies.extend(_summary_reply(f"要点 {i}") for i in range(6))
        env = llm_env(fake.base_url)

        def chat_calls() -> int:
            return sum(1 for r in fake.requests if r["path"].endswith("/chat/completions"))

        with worker_stack(tmp_path, servers=1, extra_env=env) as ws:
            stack = ws.stack
            client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
            config = client.set_pipeline_config(
                compress_every_n=8,
                compress_target_count=1,
                warmup_max_memories=100,
                idle_extract_seconds=2,
                persona_every_n=0,
                excluded_agents=["bench-judge-*"],
            )
            assert config["warmup_doubling"] and config["excluded_agents"] == ["bench-judge-*"]
            client.write_working("bench-judge-1", "裁判的打分说明，不应被压缩")
            client.write_working("coder", "第一条：重构 compress 方法")
            _wait_empty(client, "coder")  # step 1
            assert chat_calls() == 1
            client.write_working("coder", "第二条：返回结构化 dict")
            time.sleep(2)
            assert len(client.get_working("coder")) == 1  # step 2 now
            client.write_working("coder", "第三条：同步 routes.py")
            _wait_empty(client, "coder")
            assert chat_calls() == 2

            client.write_working("coder", "第四条：E2E curl 验证")  # step 4: waits
            time.sleep(2.5)  # idle for longer than idle_extract_seconds
            beat = Celery(broker=ws.broker, set_as_current=False)
            beat.send_task("lifecycle.schedule_idle_compresses", queue="maintenance")
            _wait_empty(client, "coder")
            assert chat_calls() == 3
            triggers = sorted(
                client.get_job(m["metadata"]["job_id"])["trigger"]
                for m in client.get_recent("coder")
            )
            assert triggers == ["auto", "auto", "beat"]
            # The excluded agent kept its item through the writes and the idle scan.
            assert len(client.get_working("bench-judge-1")) == 1


def test_the_tiering_task_on_a_real_worker_and_promotion_across_nodes(tmp_path, redis_required):
    """memories.retier_memories, sent as beat sends it, runs on a Celery worker and moves a
    memory to cold; both web nodes drop it from everyday search (the index change log), find it
    with include_cold; a read by id on one node brings it back to hot for the other."""
    from celery import Celery

    # The worker's rule sends every memory of ordinary importance cold at once, standing in
    # for months of idleness.
    with worker_stack(
        tmp_path, servers=2, TIER_COLD_RETENTION="1.01", TIER_HOT_RETENTION="2"
    ) as ws:
        stack = ws.stack
        a = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
        b = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[1])
        old = a.write_memory("coder", "The first build server ran Jenkins 1.4", importance=0.3)
        keep = a.write_memory("coder", "Production deploys need two approvals", importance=0.9)

        def found(client: MemoryClient, **extra: Any) -> set[int]:
            return {h["id"] for h in client.search("coder", "build server Jenkins", **extra)}

        assert old["id"] in found(a) and old["id"] in found(b)  # both indexes loaded
        Celery(broker=ws.broker, set_as_current=False).send_task(
            "memories.retier_memories", queue="maintenance"
        )
        deadline = time.monotonic() + 60
        while a.get_recent("coder", limit=10) and any(
            m["id"] == old["id"] for m in a.get_recent("coder", limit=10)
        ):
            assert time.monotonic() < deadline, "the worker did not move the memory"
            time.sleep(0.3)
        assert old["id"] not in found(a) and old["id"] not in found(b)
        assert old["id"] in found(b, include_cold=True)
        assert keep["id"] in {m["id"] for m in b.get_recent("coder")}  # important: hot
        assert a.get_memory(old["id"])["tier"] == "hot"  # a read by id promotes
        assert old["id"] in found(b)  # the other node's index follows


def test_warm_up_doubling_per_run_on_a_real_worker(tmp_path, redis_required):
    """Writes that name their session (`run_id`) warm up per session through gunicorn, a Celery
    worker and Redis working memory: a new run of the same agent compresses after 1 item again,
    and each compress job records the run that triggered it."""
    with FakeOpenAI() as fake:
        fake.chat_replies.extend(_summary_reply(f"会话要点 {i}") for i in range(4))
        env = llm_env(fake.base_url)

        def chat_calls() -> int:
            return sum(1 for r in fake.requests if r["path"].endswith("/chat/completions"))

        with worker_stack(tmp_path, servers=1, extra_env=env) as ws:
            stack = ws.stack
            client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
            client.set_pipeline_config(
                compress_every_n=8,
                compress_target_count=1,
                warmup_max_memories=100,
                idle_extract_seconds=0,
                persona_every_n=0,
            )
            item = client.write_working("coder", "第一条：重构 compress 方法", run_id="s-1")
            assert item["run_id"] == "s-1"
            _wait_empty(client, "coder")  # s-1, step 1
            client.write_working("coder", "第二条：返回结构化 dict", run_id="s-1")
            time.sleep(2)
            assert len(client.get_working("coder")) == 1  # s-1 is at step 2 now
            # A new session of the same agent: step 1 again, and it takes both items.
            client.write_working("coder", "新会话：先读 routes.py", run_id="s-2")
            _wait_empty(client, "coder")
            assert chat_calls() == 2
            runs = sorted(
                client.get_job(m["metadata"]["job_id"])["run_id"]
                for m in client.get_recent("coder")
            )
            assert runs == ["s-1", "s-2"]


# Waits (in a process on the stack's database) until no job is queued or running, then prints
# the jobs and what they wrote.
_SETTLED = """
import json, time
from lifecycle.models import JobRun, WorkingArchive
from memories.models import Memory
deadline = time.monotonic() + 90
while JobRun.objects.filter(status__in=["queued", "running"]).exists():
    assert time.monotonic() < deadline, "the worker did not finish its jobs in time"
    time.sleep(0.3)
print(json.dumps({
    "jobs": list(JobRun.objects.order_by("pk").values("kind", "trigger", "status", "agent_id")),
    "facts": list(
        Memory.objects.filter(agent_id="coder", metadata__source="consolidation").values(
            "id", "metadata"
        )
    ),
    "consolidated": list(
        Memory.objects.filter(
            agent_id="coder", tier="cold", metadata__has_key="consolidated_into"
        ).values_list("id", flat=True)
    ),
    "archived_runs": sorted(WorkingArchive.objects.values_list("run_id", flat=True)),
}))
"""


# Two identities linking alice's and bob's entities (the link command, as after an upgrade),
# then bob's Binance deleted.
_ONE_SCOPE_LEFT = """
import json
from django.core.management import call_command
from graph.models import Entity, EntityIdentity
from graph.services import entity_create_or_merge, entity_delete
from tenants.models import Team
team = Team.objects.get(pk="xproc")
for name in ("Binance", "Kraken"):
    for agent in ("alice", "bob"):
        entity_create_or_merge(team=team, name=name, entity_type="organization", agent_id=agent)
call_command("link_team_entities", team=["xproc"])
identities = EntityIdentity.objects.filter(team=team).count()
entity_delete(entity=Entity.objects.get(team=team, agent_id="bob", name="Binance"))
left = Entity.objects.filter(team=team, name="Binance").exclude(identity=None).count()
print(json.dumps({"identities": identities, "left": left}))
"""

_IDENTITIES = """
import json
from graph.models import Entity, EntityIdentity
print(json.dumps({
    "names": sorted(EntityIdentity.objects.values_list("name", flat=True)),
    "unlinked": sorted(
        Entity.objects.filter(name="Binance", identity=None).values_list("agent_id", flat=True)
    ),
}))
"""


def test_follow_up_triggers_and_archive_retention_on_a_real_worker(tmp_path, redis_required):
    """The triggers that follow a fact extraction, through gunicorn, a Celery worker and Redis
    (offline engine): an async ingest on the worker stops at `max_memories_per_run`, then the
    worker runs the follow-ups it queued — `consolidate_min_fragments`, scenes (at most once per
    `scenario_min_interval_seconds`, time moved by backdating the job) and `persona_every_n` —
    none for an excluded agent; and beat's archive retention, sent to the worker, deletes the
    rows archived before ARCHIVE_RETENTION_DAYS; its hourly identity pruning removes the team
    identity a member's deletion left with a single scope."""
    from celery import Celery

    from .livestack import stack_python
    from .test_lifecycle_api import RESEARCH_NOTES

    env = {"ARCHIVE_RETENTION_DAYS": "30"}
    with worker_stack(tmp_path, servers=1, extra_env=env) as ws:
        stack = ws.stack
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
        client.set_pipeline_config(
            compress_every_n=0,
            scenario_min_interval_seconds=900,
            persona_every_n=3,
            consolidate_min_fragments=3,
            max_memories_per_run=2,
            excluded_agents=["bench-judge-*"],
        )
        fragments = [
            client.write_memory("coder", text, enable_dedup=False)["id"]
            for text in [
                "The user wants short answers without long explanations.",
                "The user asked again for shorter answers, no long explanations.",
                "The user prefers short answers and dislikes long explanations.",
            ]
        ]

        def ingest(agent: str, run_id: str, notes: list[str]) -> dict:
            messages = [{"role": "user", "content": n} for n in notes]
            job_id = client.ingest(agent, messages, run_id=run_id, async_=True)["job_id"]
            job = client.wait_for_job(job_id, timeout=90)
            assert (job["status"], job["trigger"]) == ("succeeded", "api"), job
            return job["result"]

        first = ingest("coder", "s1", [RESEARCH_NOTES[0], RESEARCH_NOTES[2], RESEARCH_NOTES[3]])
        assert len(first["facts"]) == 2 and first["facts_over_run_limit"] >= 1
        ingest("bench-judge-1", "j1", [RESEARCH_NOTES[1]])
        state = stack_python(stack, _SETTLED)
        auto = [(j["kind"], j["agent_id"]) for j in state["jobs"] if j["trigger"] == "auto"]
        assert {kind for kind, _ in auto} == {
            "consolidate",
            "aggregate-scenes",
            "generate-persona",
        }
        assert {agent for _, agent in auto} == {"coder"}  # the excluded agent got none
        assert all(j["status"] == "succeeded" for j in state["jobs"]), state["jobs"]
        (fact,) = state["facts"]
        assert sorted(fact["metadata"]["consolidated_from"]) == sorted(fragments)
        assert sorted(state["consolidated"]) == sorted(fragments)
        # (Unrelated facts make no scene for the offline engine: the job is what counts.)
        assert client.get_persona("coder")["summary"]

        def scene_jobs(state: dict) -> int:
            return sum(1 for j in state["jobs"] if j["kind"] == "aggregate-scenes")

        ingest("coder", "s2", [RESEARCH_NOTES[4]])
        assert scene_jobs(stack_python(stack, _SETTLED)) == 1  # within the interval
        stack_python(
            stack,
            "from datetime import timedelta\n"
            "from django.utils import timezone\n"
            "from lifecycle.models import JobRun\n"
            "print(JobRun.objects.filter(kind='aggregate-scenes').update("
            "created_at=timezone.now() - timedelta(seconds=901)))",
        )
        ingest("coder", "s3", [RESEARCH_NOTES[1]])
        assert scene_jobs(stack_python(stack, _SETTLED)) == 2

        # Archive retention: run s1's messages archived 31 days ago, the rest today.
        stack_python(
            stack,
            "from datetime import timedelta\n"
            "from django.utils import timezone\n"
            "from lifecycle.models import WorkingArchive\n"
            "print(WorkingArchive.objects.filter(run_id='s1').update("
            "archived_at=timezone.now() - timedelta(days=31)))",
        )
        Celery(broker=ws.broker, set_as_current=False).send_task(
            "lifecycle.prune_archive", queue="maintenance"
        )
        deadline = time.monotonic() + 60
        while "s1" in (runs := stack_python(stack, _SETTLED)["archived_runs"]):
            assert time.monotonic() < deadline, "the worker did not prune the archive"
            time.sleep(0.5)
        assert runs == ["j1", "s2", "s3"]

        # Identity pruning: bob's Binance deleted leaves alice's alone on the team's identity,
        # which beat's hourly graph.prune_identities removes on the worker.
        assert stack_python(stack, _ONE_SCOPE_LEFT) == {"identities": 2, "left": 1}
        Celery(broker=ws.broker, set_as_current=False).send_task(
            "graph.prune_identities", queue="maintenance"
        )
        deadline = time.monotonic() + 60
        while (left := stack_python(stack, _IDENTITIES))["names"] != ["Kraken"]:
            assert time.monotonic() < deadline, "the worker did not prune the identity"
            time.sleep(0.5)
        assert left["unlinked"] == ["alice"]
