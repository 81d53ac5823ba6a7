"""Job records, the per-agent key that lets a burst queue one job, the claim, beat, commands."""

from __future__ import annotations

import json
import threading
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from lifecycle import presenters
from lifecycle.models import JobRun, JobStatus
from lifecycle.results import CompressResult, JobSkipped
from lifecycle.services import jobs, pipeline
from memories.models import Memory
from memories.working import get_working_store
from tenants.services import agent_ensure

from .helpers import long_cold, ok_data

pytestmark = pytest.mark.django_db


def test_a_second_active_job_for_the_same_key_is_refused(team):
    first = jobs.job_create(
        team=team, kind="compress", trigger="auto", agent_id="a", active_key="compress:team_a:a"
    )
    assert first is not None
    assert (
        jobs.job_create(
            team=team, kind="compress", trigger="auto", agent_id="a", active_key="compress:team_a:a"
        )
        is None
    )
    assert jobs.job_create(
        team=team, kind="compress", trigger="auto", agent_id="b", active_key="compress:team_a:b"
    )


def test_a_write_while_a_compress_is_queued_queues_nothing_more(api, team):
    api.post(
        "/lifecycle/auto-config",
        {"compress_every_n": 2, "warmup_max_memories": 0, "enabled": False},
    )
    store = get_working_store()
    for i in range(3):
        store.add(team_id=team.id, agent_id="a", content=f"item {i}", ttl_seconds=3600)
    pipeline.config_update(team=team, enabled=True)
    queued = jobs.job_create(
        team=team, kind="compress", trigger="auto", agent_id="a", active_key="compress:team_a:a"
    )
    assert pipeline.on_working_memory_written(team=team, agent_id="a") is None
    assert JobRun.objects.count() == 1 and queued is not None


def test_only_one_claim_wins(team):
    job = jobs.job_create(
        team=team, kind="cleanup", trigger="beat", params={"max_age_days": 1, "min_importance": 0.1}
    )
    assert jobs.job_claim(job_id=job.pk) is not None
    assert jobs.job_claim(job_id=job.pk) is None  # a second worker gets nothing
    assert pipeline.run_queued(job_id=job.pk) is None


def test_run_queued_records_the_outcome_and_frees_the_key(team):
    agent_ensure(team=team, agent_id="a")  # as the working-memory write through the API does
    get_working_store().add(
        team_id=team.id, agent_id="a", content="需要记住的事：周五发版", ttl_seconds=3600
    )
    job = jobs.job_create(
        team=team,
        kind="compress",
        trigger="auto",
        agent_id="a",
        params={"target_count": 1},
        active_key="compress:team_a:a",
    )
    result = pipeline.run_queued(job_id=job.pk)
    assert isinstance(result, CompressResult) and result.compressed == 1
    job.refresh_from_db()
    assert (job.status, job.active_key, job.counts["compressed"], job.engine) == (
        "succeeded",
        None,
        1,
        "offline",
    )
    assert job.started_at and job.finished_at and job.duration_seconds is not None


def test_a_late_auto_job_with_nothing_left_is_skipped(team):
    job = jobs.job_create(
        team=team,
        kind="compress",
        trigger="auto",
        agent_id="a",
        params={"target_count": 1},
        active_key="compress:team_a:a",
    )
    assert pipeline.run_queued(job_id=job.pk) == JobSkipped()
    job.refresh_from_db()
    assert job.status == "succeeded" and job.counts == {"skipped": 1}


def test_beat_queues_cleanup_for_enabled_teams_only(
    team, other_team, django_capture_on_commit_callbacks
):
    pipeline.config_update(team=team, cleanup_idle_days=30)
    pipeline.config_update(team=other_team, enabled=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert pipeline.schedule_cleanups() == 1
    job = JobRun.objects.get()
    assert (job.team_id, job.kind, job.trigger, job.status) == (
        "team_a",
        "cleanup",
        "beat",
        "succeeded",
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_triggers_queue_exactly_one_job(team):
    if connection.vendor == "sqlite":
        pytest.skip(
            "SQLite's in-memory test database serialises writers by failing them; MariaDB run covers it"
        )
    results: list[object] = []
    barrier = threading.Barrier(6)

    def trigger() -> None:
        barrier.wait()
        try:
            results.append(
                jobs.job_create(
                    team=team,
                    kind="compress",
                    trigger="auto",
                    agent_id="a",
                    active_key="compress:team_a:a",
                )
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=trigger) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in results) == 1
    assert JobRun.objects.filter(kind="compress").count() == 1


class TestCommands:
    def test_run_lifecycle(self, api, team):
        api.post("/lifecycle/auto-config", {"enabled": False})
        api.post("/memories/working", {"agent_id": "a", "content": "命令行触发的压缩测试"})
        out = StringIO()
        call_command(
            "run_lifecycle", "--team", "team_a", "--agent", "a", "--op", "compress", stdout=out
        )
        assert json.loads(out.getvalue())["compressed"] == 1
        assert JobRun.objects.get().trigger == "command"
        with pytest.raises(CommandError):
            call_command("run_lifecycle", "--team", "team_a", "--op", "compress")
        with pytest.raises(CommandError):
            call_command("run_lifecycle", "--team", "nope", "--op", "cleanup")
        out = StringIO()
        call_command("run_lifecycle", "--team", "team_a", "--op", "auto-run", stdout=out)
        assert "results" in json.loads(out.getvalue())

    def test_run_lifecycle_cleanup_takes_dry_run_and_thresholds(self, api):
        from datetime import timedelta

        from django.utils import timezone

        mid = ok_data(
            api.post(
                "/memories/personal",
                {"agent_id": "a", "content": "old trivia", "importance": 0.3},
            )
        )["id"]
        Memory.objects.filter(pk=mid).update(last_accessed=timezone.now() - timedelta(days=40))
        long_cold(mid)  # the ladder's last step (docs/lifecycle.md, "Tiers")
        args = ["run_lifecycle", "--team", "team_a", "--op", "cleanup"]
        out = StringIO()
        # The team's defaults (idle 90 days, importance < 0.2) would not take it; these do.
        call_command(
            *args, "--dry-run", "--max-age-days", "30", "--min-importance", "0.5", stdout=out
        )
        dry = json.loads(out.getvalue())
        assert dry["would_clean"] == 1 and [c["id"] for c in dry["candidates"]] == [mid]
        assert Memory.objects.filter(pk=mid).exists()
        out = StringIO()
        call_command(*args, "--max-age-days", "30", "--min-importance", "0.5", stdout=out)
        assert json.loads(out.getvalue())["cleaned"] == 1
        assert not Memory.objects.filter(pk=mid).exists()
        with pytest.raises(CommandError):
            call_command("run_lifecycle", "--team", "team_a", "--op", "auto-run", "--dry-run")
        with pytest.raises(CommandError):
            call_command(*args, "--min-importance", "2")

    def test_cleanup_memories_is_a_dry_run_unless_apply(self, api):
        from datetime import timedelta

        from django.utils import timezone

        mid = ok_data(
            api.post(
                "/memories/personal",
                {"agent_id": "a", "content": "stale trivia", "importance": 0.1},
            )
        )["id"]
        Memory.objects.filter(pk=mid).update(last_accessed=timezone.now() - timedelta(days=200))
        args = ["--team", "team_a", "--max-age-days", "90", "--min-importance", "0.2"]
        out = StringIO()
        call_command("cleanup_memories", *args, stdout=out)
        assert "dry run: 0 memories would go to the trash and 1 would go cold" in out.getvalue()
        out = StringIO()
        call_command("cleanup_memories", *args, "--apply", stdout=out)
        assert "1 went cold" in out.getvalue()
        assert Memory.objects.get(pk=mid).tier == "cold"
        long_cold(mid)  # the grace period passed
        out = StringIO()
        call_command(
            "cleanup_memories",
            "--team",
            "team_a",
            "--max-age-days",
            "90",
            "--min-importance",
            "0.2",
            stdout=out,
        )
        assert (
            "dry run: 1 memories would go to the trash" in out.getvalue()
            and "stale trivia" in out.getvalue()
        )
        assert Memory.objects.filter(pk=mid).exists()
        out = StringIO()
        call_command(
            "cleanup_memories",
            "--team",
            "team_a",
            "--max-age-days",
            "90",
            "--min-importance",
            "0.2",
            "--apply",
            stdout=out,
        )
        assert "moved 1 memories to the trash" in out.getvalue()
        assert not Memory.objects.filter(pk=mid).exists()


@pytest.mark.django_db(transaction=True)
def test_a_background_claim_refused_by_a_busy_sqlite_is_tried_again(settings):
    """Embedded mode: another connection writing when the job thread claims makes SQLite refuse
    the claim ("locked"); the job must not stay queued for ever."""
    from django.db import transaction

    from lifecycle.services import dispatch
    from tests.factories import TeamFactory

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's lock refusal; MariaDB waits for the lock instead")
    team = TeamFactory(id="team_busy", name="Busy")
    job = JobRun.objects.create(
        team=team, kind="cleanup", trigger="admin", params={"dry_run": True}
    )
    with transaction.atomic():
        JobRun.objects.filter(pk=job.pk).update(params={"dry_run": True})  # holds the write lock
        worker = threading.Thread(target=dispatch._run_in_thread, args=[job.pk])
        worker.start()
        time.sleep(0.3)  # the thread's first claim meets the held lock
    worker.join(timeout=30)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error


def test_the_config_body_shows_every_config_field_in_order(team):
    # The presenter lists the fields explicitly (the API's order); a new config field must be
    # added there too.
    body = presenters.config_body(pipeline.config_get(team=team))
    assert list(body) == ["team_id", *pipeline.CONFIG_FIELDS, "configured"]
