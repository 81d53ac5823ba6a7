"""Job leases: a job whose worker died is abandoned and retried once, never stalls its agent.

Unit-level tests move a lease into the past with an UPDATE (the time a dead worker would leave
behind) instead of waiting for it; the live tests kill a real Celery worker with SIGKILL while
it waits in an LLM call, then recover through beat's task, the next write, and a redelivery.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.errors import DomainError
from lifecycle.models import JobRun, WorkingArchive
from lifecycle.presenters import job_counts
from lifecycle.results import CleanupResult
from lifecycle.services import jobs, pipeline
from lifecycle.tasks import reclaim_jobs_task
from llm import Usage
from memories.models import Memory
from memories.working import get_working_store
from memoryplatform.client import MemoryClient
from tenants.services import agent_ensure

from ..factories import AgentFactory
from ..fake_openai import FakeOpenAI
from ..helpers import ok_data
from ..livestack import live_stack, start_worker
from ._live import in_stack, kill_hard, stop, wait_until
from ._live import jobs as stack_jobs

KEY = "compress:team_a:a"


def _expire(job: JobRun) -> None:
    """What a dead worker leaves behind: the lease ran out and nobody renewed it."""
    JobRun.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def _items(team, n: int, agent: str = "a") -> list[str]:
    # The agent registered, as the API's working-memory write does: a job writes only for an
    # agent that exists.
    agent_ensure(team=team, agent_id=agent)
    store = get_working_store()
    return [
        store.add(
            team_id=team.id,
            agent_id=agent,
            content=f"第 {i} 条：周五发版前要补测试",
            ttl_seconds=3600,
        ).id
        for i in range(n)
    ]


def _auto_compress(team) -> JobRun:
    job = jobs.job_create(
        team=team,
        kind="compress",
        trigger="auto",
        agent_id="a",
        params={"target_count": 1},
        active_key=KEY,
    )
    assert job is not None
    return job


@pytest.mark.django_db
class TestLease:
    def test_a_queued_job_has_a_pick_up_deadline_and_a_claim_gives_it_a_running_lease(
        self, team, settings
    ):
        settings.LIFECYCLE_JOB_QUEUED_TIMEOUT_SECONDS = 3600
        settings.LIFECYCLE_JOB_LEASE_SECONDS = 660
        before = timezone.now()
        job = _auto_compress(team)
        assert before + timedelta(seconds=3590) < job.lease_expires_at
        claimed = jobs.job_claim(job_id=job.pk)
        assert claimed is not None and claimed.status == "running" and claimed.lease_token
        assert (
            before + timedelta(seconds=650)
            < claimed.lease_expires_at
            < before + timedelta(seconds=700)
        )

    def test_a_running_job_with_a_live_lease_is_neither_claimed_again_nor_reclaimed(self, team):
        job = _auto_compress(team)
        assert jobs.job_claim(job_id=job.pk) is not None
        assert jobs.job_claim(job_id=job.pk) is None  # a redelivery while its worker lives
        assert jobs.jobs_reclaim_expired() == []
        assert jobs.job_reclaim(job_id=job.pk) is None
        job.refresh_from_db()
        assert (job.status, job.active_key) == ("running", KEY)

    def test_a_redelivery_takes_over_an_expired_running_job_and_fences_the_old_holder(self, team):
        _items(team, 2)
        job = _auto_compress(team)
        first = jobs.job_claim(job_id=job.pk)
        assert first is not None
        _expire(job)
        second = jobs.job_claim(job_id=job.pk)
        assert second is not None and second.lease_token != first.lease_token
        assert second.active_key == KEY  # the same job, still holding its agent's key
        # The old holder (alive after all, but slow) can no longer claim, commit or record.
        with pytest.raises(DomainError) as lost:
            jobs.claim_acquire(lease=jobs.lease_of(first), key="working:team_a:a")
        assert lost.value.code == "CONFLICT"
        jobs.job_finish(job=first, counts={"compressed": 99}, usage=Usage(), engine="x")
        job.refresh_from_db()
        assert job.status == "running" and job.counts == {}
        # The new holder runs it to the end.
        result = pipeline.run_queued(job_id=job.pk)
        assert result is None  # already claimed: run_queued claims for itself
        out = pipeline.job_run(job=second)
        assert out.compressed == 2
        job.refresh_from_db()
        assert (job.status, job.active_key, job.claim_key) == ("succeeded", None, None)

    def test_beat_abandons_an_expired_job_releases_its_key_and_retries_it_once(
        self, team, django_capture_on_commit_callbacks
    ):
        pipeline.config_update(team=team, compress_every_n=2, warmup_max_memories=0)
        ids = _items(team, 3)
        job = _auto_compress(team)
        assert jobs.job_claim(job_id=job.pk) is not None  # then its worker is killed
        _expire(job)
        with django_capture_on_commit_callbacks(execute=True):
            assert reclaim_jobs_task() == 1  # the beat task, called as beat calls it
        job.refresh_from_db()
        assert (job.status, job.active_key, job.claim_key) == ("abandoned", None, None)
        assert "lease" in job.error and job.finished_at is not None
        retry = JobRun.objects.get(retry_of=job)
        # Run inline (LIFECYCLE_INLINE): the retry compressed every item, once.
        assert (retry.kind, retry.trigger, retry.status) == ("compress", "auto", "succeeded")
        assert retry.counts["compressed"] == 3 and retry.active_key is None
        assert get_working_store().count(team_id=team.id, agent_id="a") == 0
        assert Memory.objects.filter(team=team, agent_id="a", metadata__job_id=retry.pk).exists()
        archived = WorkingArchive.objects.filter(team=team, job=retry).values_list(
            "item_id", flat=True
        )
        assert sorted(archived) == sorted(ids)
        with django_capture_on_commit_callbacks(execute=True):
            assert reclaim_jobs_task() == 0  # idempotent

    def test_an_abandoned_retry_is_not_retried_again(
        self, team, django_capture_on_commit_callbacks
    ):
        job = _auto_compress(team)
        jobs.job_claim(job_id=job.pk)
        _expire(job)
        with django_capture_on_commit_callbacks(execute=False):
            (first,) = jobs.jobs_reclaim_expired()
        assert first.retry is not None and first.retry.active_key == KEY
        jobs.job_claim(job_id=first.retry.pk)  # its worker dies too
        _expire(first.retry)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            (second,) = jobs.jobs_reclaim_expired()
        assert second.abandoned.pk == first.retry.pk and second.retry is None and not callbacks
        assert JobRun.objects.filter(status="abandoned").count() == 2
        assert not JobRun.objects.filter(active_key=KEY).exists()  # the agent is not stalled

    def test_an_abandoned_ingest_hands_its_messages_to_its_retry_and_keeps_their_count(
        self, team, django_capture_on_commit_callbacks
    ):
        messages = [{"role": "user", "content": "My leverage limit is 3x.", "at": None, "name": ""}]
        # An ingest's agent exists before its job is queued (the API registers it): the retry
        # writes only for an agent that is still there.
        AgentFactory(team=team, agent_id="a")
        job = jobs.job_create(
            team=team,
            kind="ingest",
            trigger="api",
            agent_id="a",
            params={"messages": messages, "run_id": "s1"},
        )
        assert job is not None
        _expire(job)
        with django_capture_on_commit_callbacks(execute=True):
            (reclaimed,) = jobs.jobs_reclaim_expired()
        # The retry is given the messages and ingests them; neither row keeps them afterwards
        # (they are in the archive, under its retention).
        retry = JobRun.objects.get(retry_of=reclaimed.abandoned)
        assert retry.status == "succeeded" and retry.counts["archived"] == 1
        assert WorkingArchive.objects.filter(team=team, job=retry).count() == 1
        for row in JobRun.objects.filter(kind="ingest"):
            assert row.params == {"messages": 1, "run_id": "s1"}

    def test_a_queued_job_nobody_picked_up_is_abandoned_and_queued_again(
        self, team, django_capture_on_commit_callbacks
    ):
        # E.g. the broker was down when it was sent: the job row exists, its message does not.
        job = _auto_compress(team)
        _expire(job)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            (reclaimed,) = jobs.jobs_reclaim_expired()
        assert reclaimed.abandoned.status == "abandoned"
        assert "no worker picked it up" in reclaimed.abandoned.error
        assert reclaimed.retry is not None and reclaimed.retry.status == "queued"
        assert len(callbacks) == 1  # handed to its worker once committed

    def test_the_next_write_takes_over_a_key_held_by_an_expired_job(
        self, api, team, django_capture_on_commit_callbacks
    ):
        api.post(
            "/lifecycle/auto-config",
            {"compress_every_n": 3, "warmup_max_memories": 0, "compress_target_count": 1},
        )
        for i in range(2):
            ok_data(api.post("/memories/working", {"agent_id": "a", "content": f"第 {i} 条"}))
        stale = _auto_compress(team)  # queued by an earlier write, then its worker was killed
        jobs.job_claim(job_id=stale.pk)
        _expire(stale)
        with django_capture_on_commit_callbacks(execute=True):
            ok_data(api.post("/memories/working", {"agent_id": "a", "content": "第 2 条"}))
        stale.refresh_from_db()
        assert (stale.status, stale.active_key) == ("abandoned", None)
        taken = JobRun.objects.get(retry_of=stale)
        assert (taken.trigger, taken.status, taken.counts["compressed"]) == ("auto", "succeeded", 3)
        assert get_working_store().count(team_id=team.id, agent_id="a") == 0

    def test_a_write_while_a_live_job_holds_the_key_queues_nothing(self, api, team):
        api.post("/lifecycle/auto-config", {"compress_every_n": 1, "warmup_max_memories": 0})
        live = _auto_compress(team)
        jobs.job_claim(job_id=live.pk)
        ok_data(api.post("/memories/working", {"agent_id": "a", "content": "x"}))
        assert JobRun.objects.count() == 1

    def test_the_reclaimer_runs_on_beat(self):
        from memoryplatform.celery import app

        schedule = {v["task"]: v for v in app.conf.beat_schedule.values()}
        assert schedule["lifecycle.reclaim_jobs"]["schedule"] <= 60
        assert "lifecycle.reclaim_jobs" in app.tasks


def _race(*work) -> list[object]:
    """Runs the callables at the same moment, one thread each; their results."""
    results: list[object] = []
    barrier = threading.Barrier(len(work))

    def run(fn) -> None:
        barrier.wait()
        try:
            results.append(fn())
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(fn,)) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
class TestConcurrency:
    @pytest.fixture(autouse=True)
    def _real_database(self):
        if connection.vendor == "sqlite":
            pytest.skip(
                "SQLite's in-memory test database serialises writers by failing them; MariaDB "
                "run covers it"
            )

    def test_two_reclaimers_abandon_once_and_retry_once(self, team):
        job = _auto_compress(team)
        jobs.job_claim(job_id=job.pk)
        _expire(job)
        reclaim = lambda: jobs.job_reclaim(job_id=job.pk)  # noqa: E731
        won = [r for r in _race(*[reclaim] * 6) if r is not None]
        assert len(won) == 1
        assert JobRun.objects.filter(retry_of=job).count() == 1

    def test_a_reclaimer_and_a_redelivery_do_not_both_get_the_job(self, team):
        for _ in range(5):
            job = _auto_compress(team)
            jobs.job_claim(job_id=job.pk)
            _expire(job)
            results = _race(
                lambda: jobs.job_reclaim(job_id=job.pk),
                lambda: jobs.job_claim(job_id=job.pk),
            )
            assert sum(r is not None for r in results) == 1
            # Next round: free the agent's key whoever won.
            JobRun.objects.filter(active_key=KEY).update(active_key=None, status="succeeded")

    def test_the_heartbeat_keeps_a_long_job_alive(self, team, settings):
        settings.LIFECYCLE_JOB_LEASE_SECONDS = 0.4
        job = jobs.job_start(team=team, kind="cleanup", trigger="api", agent_id="", params={})
        first_deadline = job.lease_expires_at
        seen: dict[str, object] = {}

        def long_operation():
            # Longer than two leases: without renewals the job would be reclaimable.
            def renewed_past_first_deadline() -> bool:
                now = timezone.now()
                row = JobRun.objects.get(pk=job.pk)
                return now > first_deadline + timedelta(seconds=0.5) and row.lease_expires_at > now

            wait_until(renewed_past_first_deadline, seconds=10, what="lease renewals")
            seen["reclaimed"] = jobs.jobs_reclaim_expired()
            return CleanupResult(0, 0, []), Usage(), "rules"

        jobs.job_execute(job=job, operation=long_operation, counts=job_counts)
        assert seen["reclaimed"] == []
        job.refresh_from_db()
        assert job.status == "succeeded" and job.lease_expires_at is None


# --- a real worker, killed ------------------------------------------------------------------------

SUMMARY = "周五发版：补齐 compress 的测试，同步文档"
REPLY = json.dumps(
    {"summaries": [{"content": SUMMARY, "importance": 0.8, "source_indexes": [0, 1, 2, 3]}]},
    ensure_ascii=False,
)
LEASE = 2  # seconds: the live tests' lease, so a dead worker's job expires quickly


def _live_env(fake: FakeOpenAI) -> dict[str, str]:
    return {
        # The test run's own Redis database (flushed before each test) carries the broker too.
        "CELERY_BROKER_URL": settings.REDIS_URL,
        "REDIS_URL": settings.REDIS_URL,
        "LLM_BASE_URL": fake.base_url,
        "LLM_MODEL": "fake-chat",
        "LLM_API_KEY": "sk-test",
        "LLM_MAX_RETRIES": "0",
        "LIFECYCLE_JOB_LEASE_SECONDS": str(LEASE),
    }


def _chat_calls(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.requests if r["path"].endswith("/chat/completions"))


def _start_blocked_compress(stack, fake: FakeOpenAI) -> tuple[MemoryClient, list[str], object]:
    """Three writes queue one compress; a worker takes it and blocks in the (slow) LLM call."""
    client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
    client.set_pipeline_config(compress_every_n=3, compress_target_count=1, warmup_max_memories=0)
    worker = start_worker(stack)
    fake.delay = 60  # the LLM "thinks" until the worker is killed
    ids = [client.write_working("coder", f"第 {i} 条：周五发版前补测试")["id"] for i in range(3)]
    wait_until(lambda: _chat_calls(fake) == 1, seconds=90, what="the worker's LLM call")
    return client, ids, worker


WAIT_FOR_EXPIRY = """
import time
from django.utils import timezone
from lifecycle.models import JobRun
deadline = time.monotonic() + 30
while JobRun.objects.filter(status="running", lease_expires_at__gte=timezone.now()).exists():
    assert time.monotonic() < deadline, "the lease did not expire"
    time.sleep(0.1)
out = True
"""


def _assert_compressed_once(client: MemoryClient, ids: list[str]) -> None:
    wait_until(lambda: client.get_working("coder") == [], seconds=90, what="the compress")
    memories = client.get_recent("coder")
    assert [m["content"] for m in memories] == [SUMMARY]
    assert sorted(memories[0]["metadata"]["source_items"]) == sorted(ids)


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
class TestKilledWorker:
    def test_beat_abandons_the_killed_workers_job_and_its_retry_compresses(
        self, tmp_path, redis_required
    ):
        with FakeOpenAI() as fake:
            fake.chat_replies.extend([REPLY] * 3)
            with live_stack(tmp_path, servers=1, extra_env=_live_env(fake)) as stack:
                client, ids, worker = _start_blocked_compress(stack, fake)
                try:
                    # Alive and busy for more than two leases: the heartbeat keeps the job.
                    alive = in_stack(
                        stack,
                        f"""
                        import time
                        from datetime import timedelta
                        from django.utils import timezone
                        from lifecycle.models import JobRun
                        from lifecycle.tasks import reclaim_jobs_task
                        job = JobRun.objects.get(status="running")
                        while timezone.now() < job.started_at + timedelta(seconds={2 * LEASE + 0.5}):
                            time.sleep(0.1)
                        out = {{"reclaimed": reclaim_jobs_task(),
                               "running": JobRun.objects.filter(status="running").count()}}
                        """,
                    )
                    assert alive == {"reclaimed": 0, "running": 1}
                    kill_hard(worker)
                    (job,) = stack_jobs(stack)
                    assert (job["status"], job["active_key"]) == ("running", "compress:xproc:coder")
                    # Beat's task, once the dead worker's lease ran out.
                    in_stack(stack, WAIT_FOR_EXPIRY)
                    assert (
                        in_stack(
                            stack,
                            "from lifecycle.tasks import reclaim_jobs_task\nout = reclaim_jobs_task()",
                        )
                        == 1
                    )
                    old, retry = stack_jobs(stack)
                    assert (old["status"], old["active_key"], old["claim_key"]) == (
                        "abandoned",
                        None,
                        None,
                    )
                    assert retry["retry_of_id"] == old["id"]
                    assert retry["active_key"] == "compress:xproc:coder"
                    # A new worker runs the retry; the items are compressed once.
                    fake.delay = 0
                    worker = start_worker(stack)
                    _assert_compressed_once(client, ids)
                    old, retry = stack_jobs(stack)
                    assert (retry["status"], retry["counts"]["compressed"]) == ("succeeded", 3)
                    assert old["status"] == "abandoned" and _chat_calls(fake) == 2
                finally:
                    stop(worker)

    def test_the_next_write_takes_over_the_killed_workers_job(self, tmp_path, redis_required):
        with FakeOpenAI() as fake:
            fake.chat_replies.extend([REPLY] * 3)
            with live_stack(tmp_path, servers=1, extra_env=_live_env(fake)) as stack:
                client, ids, worker = _start_blocked_compress(stack, fake)
                try:
                    kill_hard(worker)
                    in_stack(stack, WAIT_FOR_EXPIRY)
                    fake.delay = 0
                    worker = start_worker(stack)  # not redelivered: visibility timeout is 1 h
                    ids.append(client.write_working("coder", "第 3 条：还要更新 changelog")["id"])
                    _assert_compressed_once(client, ids)
                    old, new = stack_jobs(stack)
                    assert (old["status"], old["active_key"]) == ("abandoned", None)
                    assert new["retry_of_id"] == old["id"]
                    assert (new["status"], new["counts"]["compressed"]) == ("succeeded", 4)
                finally:
                    stop(worker)

    def test_a_redelivered_job_is_taken_over_once_its_lease_expired(self, tmp_path, redis_required):
        with FakeOpenAI() as fake:
            fake.chat_replies.extend([REPLY] * 3)
            with live_stack(tmp_path, servers=1, extra_env=_live_env(fake)) as stack:
                client, ids, worker = _start_blocked_compress(stack, fake)
                try:
                    kill_hard(worker)
                    in_stack(stack, WAIT_FOR_EXPIRY)
                    fake.delay = 0
                    # A second worker that hands unacknowledged messages out again after 1 s:
                    # it receives the dead worker's message, and its claim takes the job over.
                    worker = start_worker(stack, CELERY_BROKER_VISIBILITY_TIMEOUT="1")
                    _assert_compressed_once(client, ids)
                    (job,) = stack_jobs(stack)  # the same job: no abandonment, no retry
                    assert (job["status"], job["counts"]["compressed"]) == ("succeeded", 3)
                    assert job["active_key"] is None
                finally:
                    stop(worker)
