"""The automatic pipeline end to end on a real deployment shape: gunicorn + a Celery worker on a
Redis broker + Redis working memory + the fake OpenAI-compatible LLM."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from django.conf import settings

from memoryplatform.client import MemoryClient

from .fake_openai import FakeOpenAI
from .livestack import ROOT, live_stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def _redis_db(url: str, db: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{db}"


def test_working_memory_writes_trigger_one_compress_on_a_real_worker(tmp_path, redis_required):
    broker = _redis_db(settings.REDIS_URL, 14)
    subprocess.run(["redis-cli", "-u", broker, "flushdb"], check=False, capture_output=True)
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
        env = {
            "CELERY_BROKER_URL": broker,
            "REDIS_URL": settings.REDIS_URL,
            "LLM_BASE_URL": fake.base_url,
            "LLM_MODEL": "fake-chat",
            "LLM_API_KEY": "sk-test",
        }
        with live_stack(tmp_path, servers=1, extra_env=env) as stack:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "memoryplatform",
                    "worker",
                    "-Q",
                    "celery,llm,maintenance",
                    "--pool=solo",
                    "--concurrency=1",
                    "--loglevel=warning",
                    "--without-heartbeat",
                    "--without-gossip",
                    "--without-mingle",
                ],
                cwd=ROOT,
                env=stack.env,
            )
            try:
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
                assert meta["source"] == "compression" and sorted(meta["source_items"]) == sorted(
                    ids
                )
                chat_calls = [r for r in fake.requests if r["path"].endswith("/chat/completions")]
                assert len(chat_calls) == 1  # four writes, one compress
                assert write_seconds < 10  # the writes never waited for the LLM
            finally:
                worker.terminate()
                worker.wait(timeout=20)
