"""Concurrent compresses of one agent consume each working item once.

A compress takes the agent's claim (a unique column on its job row, under the job's lease)
before it reads the items, and checks it again in the transaction that commits the summaries and
the archive rows; the items leave working memory only after that commit. The live test fires
four simultaneous `POST /lifecycle/compress` at two gunicorn processes while the (fake,
non-deterministic) LLM takes its time.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core.errors import DomainError
from lifecycle.models import JobRun, WorkingArchive
from lifecycle.results import CompressResult
from lifecycle.services import jobs, pipeline
from memories.models import Memory
from memories.working import get_working_store
from memoryplatform.client import MemoryClient
from tenants.services import agent_ensure

from ..fake_openai import FakeOpenAI
from ..livestack import live_stack
from ._live import in_stack, wait_until

ITEMS = 20


def _fill(team, n: int = ITEMS, agent: str = "a") -> list[str]:
    # The agent registered, as the API's working-memory write does: a job writes only for an
    # agent that exists.
    agent_ensure(team=team, agent_id=agent)
    store = get_working_store()
    return [
        store.add(
            team_id=team.id, agent_id=agent, content=f"第 {i} 条工作记忆", ttl_seconds=3600
        ).id
        for i in range(n)
    ]


def _compress(team, agent: str = "a") -> CompressResult:
    return pipeline.run(
        team=team, kind="compress", trigger="api", agent_id=agent, params={"target_count": 2}
    )


@pytest.mark.django_db
class TestClaim:
    def test_a_compress_while_another_job_consumes_the_agent_takes_nothing(self, team):
        _fill(team)
        holder = jobs.job_start(team=team, kind="compress", trigger="api", agent_id="a", params={})
        assert jobs.claim_acquire(lease=jobs.lease_of(holder), key="working:team_a:a") is None
        busy = _compress(team)
        assert (busy.compressed, busy.busy_job_id, busy.remaining) == (0, holder.pk, ITEMS)
        assert not WorkingArchive.objects.exists() and not Memory.objects.exists()
        jobs.claim_release(lease=jobs.lease_of(holder), key="working:team_a:a")
        assert _compress(team).compressed == ITEMS
        assert WorkingArchive.objects.count() == ITEMS

    def test_a_claim_whose_job_died_is_taken_over(self, team, django_capture_on_commit_callbacks):
        _fill(team)
        dead = jobs.job_start(team=team, kind="compress", trigger="api", agent_id="a", params={})
        jobs.claim_acquire(lease=jobs.lease_of(dead), key="working:team_a:a")
        JobRun.objects.filter(pk=dead.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        with django_capture_on_commit_callbacks(execute=True):
            result = _compress(team)
        assert result.compressed == ITEMS and result.busy_job_id is None
        dead.refresh_from_db()
        assert (dead.status, dead.claim_key) == ("abandoned", None)

    def test_a_deleting_fact_extraction_takes_the_same_claim(self, team):
        _fill(team, 3)
        holder = jobs.job_start(team=team, kind="compress", trigger="api", agent_id="a", params={})
        jobs.claim_acquire(lease=jobs.lease_of(holder), key="working:team_a:a")
        result = pipeline.run(
            team=team,
            kind="extract-facts",
            trigger="api",
            agent_id="a",
            params={"max_memories": 20, "delete_after": True},
        )
        assert (len(result.facts), result.busy_job_id) == (0, holder.pk)
        assert get_working_store().count(team_id=team.id, agent_id="a") == 3

    def test_items_a_crashed_compress_committed_are_removed_not_summarised_again(self, team):
        ids = _fill(team, 5)
        # A compress committed its summary and archive rows for the first two items, then its
        # process died before it removed them from working memory.
        crashed = JobRun.objects.create(
            team=team, agent_id="a", kind="compress", trigger="auto", status="abandoned"
        )
        store = get_working_store()
        for item in store.list(team_id=team.id, agent_id="a")[:2]:
            WorkingArchive.objects.create(
                team=team,
                agent_id="a",
                item_id=item.id,
                content=item.content,
                item_created_at=item.created_at,
                job=crashed,
            )
        result = _compress(team)
        assert (result.compressed, result.remaining) == (3, 0)
        sources = {i for m in Memory.objects.filter(team=team) for i in m.metadata["source_items"]}
        assert sources <= set(ids[2:])
        archived = WorkingArchive.objects.values_list("item_id", flat=True)
        assert sorted(archived) == sorted(ids)  # each item archived once


@pytest.mark.django_db(transaction=True)
def test_a_compress_that_lost_its_lease_during_the_llm_call_commits_nothing(team, settings):
    if connection.vendor == "sqlite":
        pytest.skip("threads on SQLite's in-memory test database; the MariaDB run covers it")
    ids = _fill(team, 4)
    with FakeOpenAI() as fake:
        settings.LLM_BASE_URL = fake.base_url
        settings.LLM_MODEL = "fake-chat"
        settings.LLM_API_KEY = "sk-test"
        settings.LLM_MAX_RETRIES = 0
        fake.delay = 1.5
        fake.chat_replies.append(
            json.dumps({"summaries": [{"content": "摘要", "importance": 0.5}]})
        )
        outcome: dict[str, object] = {}

        def slow_compress() -> None:
            try:
                _compress(team)
            except DomainError as exc:
                outcome["error"] = exc.code
            finally:
                connection.close()

        thread = threading.Thread(target=slow_compress)
        thread.start()
        wait_until(lambda: fake.requests, seconds=30, what="the LLM call")
        # Meanwhile its lease expires (a stalled process) and a redelivery takes the job over.
        job = JobRun.objects.get()
        JobRun.objects.filter(pk=job.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        assert jobs.job_claim(job_id=job.pk) is not None
        thread.join(timeout=30)
    assert outcome == {"error": "CONFLICT"}
    assert not Memory.objects.exists() and not WorkingArchive.objects.exists()
    assert [i.id for i in get_working_store().list(team_id=team.id, agent_id="a")] == ids


# --- the live race --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_four_simultaneous_compresses_on_two_servers_consume_each_item_once(tmp_path):
    """On the run's database kind (SQLite file or MariaDB) and working store (Redis if REDIS_URL
    is set, else the database)."""
    with FakeOpenAI() as fake:
        fake.delay = 1.5  # the LLM takes a while: the requests overlap
        # A non-deterministic LLM: every call would summarise differently.
        fake.chat_replies.extend(
            json.dumps(
                {"summaries": [{"content": f"第 {n} 版摘要：二十条工作记忆", "importance": 0.6}]},
                ensure_ascii=False,
            )
            for n in range(4)
        )
        env = {"LLM_BASE_URL": fake.base_url, "LLM_MODEL": "fake-chat", "LLM_API_KEY": "sk-test"}
        with live_stack(tmp_path, servers=2, extra_env=env) as stack:
            clients = [
                MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[i % 2], timeout=120)
                for i in range(4)
            ]
            ids = [
                clients[0].write_working("coder", f"第 {i} 条工作记忆")["id"] for i in range(ITEMS)
            ]
            results: list[dict] = []
            barrier = threading.Barrier(4)

            def fire(client: MemoryClient) -> None:
                barrier.wait()
                results.append(client.compress("coder", target_count=2))

            threads = [threading.Thread(target=fire, args=(c,)) for c in clients]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=180)
            assert len(results) == 4
            assert sorted(r["compressed"] for r in results) == [0, 0, 0, ITEMS], results
            assert clients[0].get_working("coder") == []
            archive = in_stack(
                stack,
                """
                from lifecycle.models import WorkingArchive
                out = list(WorkingArchive.objects.values_list("item_id", flat=True))
                """,
            )
            assert sorted(archive) == sorted(ids)  # 20 rows, each item once
            memories = clients[0].get_recent("coder", limit=50)
            assert len(memories) == 1 and len({m["metadata"]["job_id"] for m in memories}) == 1
            assert sum(1 for r in fake.requests if r["path"].endswith("/chat/completions")) == 1
