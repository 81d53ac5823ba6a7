"""The automatic pipeline's triggers (docs/lifecycle.md): warm-up by doubling, the idle
compress, scenes and persona after new memories, excluded agents — each with its config field
(GET shows it, POST validates it). Time is moved by backdating rows or by looking from the
future (`now=`), never by sleeping."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from lifecycle.models import JobRun, JobStatus, PipelineConfig, WorkingArchive
from lifecycle.services import pipeline
from memories.models import Memory
from memories.working import get_working_store

from .helpers import error_code, ok_data
from .test_lifecycle_api import RESEARCH_NOTES, working

# Jobs are enqueued on commit (inline in tests): let requests really commit.
pytestmark = pytest.mark.django_db(transaction=True)


def _write(api, agent: str, n: int, start: int = 0, run: str = "") -> None:
    notes = [f"note {i}: topic {chr(97 + i % 26)} detail {i * 7}" for i in range(start, start + n)]
    if not run:
        working(api, agent, notes)
        return
    for note in notes:
        r = api.post("/memories/working", {"agent_id": agent, "content": note, "run_id": run})
        assert r.status_code == 201


def _left(api, agent: str) -> int:
    return len(ok_data(api.get(f"/memories/working/{agent}")))


def _compresses(agent: str, run: str | None = None) -> int:
    jobs = JobRun.objects.filter(
        kind="compress", agent_id=agent, status=JobStatus.SUCCEEDED, counts__compressed__gt=0
    )
    if run is not None:
        jobs = jobs.filter(params__run_id=run)
    return jobs.count()


class TestConfigFields:
    def test_post_validates_and_get_shows_them(self, api):
        body = {
            "warmup_doubling": False,
            "idle_extract_seconds": 120,
            "scenario_min_interval_seconds": 60,
            "persona_every_n": 0,
            "excluded_agents": ["bench-judge-*", "tmp-?"],
            "max_memories_per_run": 20,
        }
        data = ok_data(api.post("/lifecycle/auto-config", body))
        assert {k: data[k] for k in body} == body
        got = ok_data(api.get("/lifecycle/auto-config"))
        assert {k: got[k] for k in body} == body

    @pytest.mark.parametrize(
        "body",
        [
            {"warmup_doubling": "yes"},
            {"idle_extract_seconds": -1},
            {"idle_extract_seconds": "600"},
            {"scenario_min_interval_seconds": -5},
            {"persona_every_n": -1},
            {"excluded_agents": "bench-judge-*"},
            {"excluded_agents": [""]},
        ],
    )
    def test_validation(self, api, body):
        assert error_code(api.post("/lifecycle/auto-config", body)) == "VALIDATION_ERROR"
        assert not PipelineConfig.objects.exists()

    def test_the_console_form_takes_globs_as_one_line(self, team, lead):
        from .test_console_lifecycle import CONFIG, url

        form = {**CONFIG, "warmup_doubling": "on", "excluded_agents": "bench-judge-*, tmp-?"}
        assert lead.post(url(team), form).status_code == 302
        config = PipelineConfig.objects.get(team=team)
        assert config.excluded_agents == ["bench-judge-*", "tmp-?"] and config.warmup_doubling
        page = lead.get(url(team)).content.decode()
        assert 'value="bench-judge-*, tmp-?"' in page and "Excluded agents" in page


class TestWarmupDoubling:
    def test_a_new_agent_compresses_after_1_2_4_then_every_n(self, api):
        api.post(
            "/lifecycle/auto-config",
            {"compress_every_n": 6, "compress_target_count": 1, "warmup_max_memories": 100},
        )
        _write(api, "a", 1)
        assert _left(api, "a") == 0 and _compresses("a") == 1
        _write(api, "a", 1, start=1)
        assert _left(api, "a") == 1  # the step is 2 now
        _write(api, "a", 1, start=2)
        assert _left(api, "a") == 0 and _compresses("a") == 2
        _write(api, "a", 3, start=3)
        assert _left(api, "a") == 3  # the step is 4
        _write(api, "a", 1, start=6)
        assert _left(api, "a") == 0 and _compresses("a") == 3
        _write(api, "a", 5, start=7)
        assert _left(api, "a") == 5  # 8 would pass compress_every_n: 6 it is, for good
        _write(api, "a", 1, start=12)
        assert _left(api, "a") == 0 and _compresses("a") == 4
        # Another agent is a new session: it starts at 1 again.
        _write(api, "b", 1)
        assert _left(api, "b") == 0 and _compresses("b") == 1

    def test_warm_up_still_ends_with_warmup_max_memories(self, api):
        api.post("/lifecycle/auto-config", {"compress_every_n": 3, "warmup_max_memories": 1})
        api.post("/memories/personal", {"agent_id": "vet", "content": "an existing memory"})
        _write(api, "vet", 2)
        assert _left(api, "vet") == 2  # not warming up: compress_every_n
        _write(api, "vet", 1, start=2)
        assert _left(api, "vet") == 0

    def test_the_fixed_step_applies_when_doubling_is_off(self, api):
        data = ok_data(
            api.post(
                "/lifecycle/auto-config",
                {"compress_every_n": 10, "warmup_compress_every_n": 2, "warmup_max_memories": 100},
            )
        )
        assert data["warmup_doubling"] is False  # the older field, set alone, wins
        _write(api, "a", 1)
        assert _left(api, "a") == 1
        _write(api, "a", 1, start=1)
        assert _left(api, "a") == 0
        _write(api, "a", 1, start=2)
        assert _left(api, "a") == 1  # still every 2 (doubling would wait for 2 more)
        _write(api, "a", 1, start=3)
        assert _left(api, "a") == 0

    def test_a_compress_that_consumed_nothing_does_not_advance_the_step(self, team, api):
        api.post("/lifecycle/auto-config", {"compress_every_n": 8, "warmup_max_memories": 100})
        api.post("/lifecycle/compress", {"agent_id": "a"})  # nothing to compress
        config = pipeline.config_get(team=team)
        assert pipeline.compress_threshold(config=config, team=team, agent_id="a") == 1

    def test_an_idle_compress_while_warming_up_advances_the_step(self, team, api):
        api.post(
            "/lifecycle/auto-config",
            {
                "compress_every_n": 8,
                "compress_target_count": 1,
                "warmup_max_memories": 100,
                "idle_extract_seconds": 600,
            },
        )
        _write(api, "a", 1)
        assert _left(api, "a") == 0 and _compresses("a") == 1
        _write(api, "a", 1, start=1)
        assert _left(api, "a") == 1  # the step is 2: waits
        # Ten minutes later the beat scan compresses it: a compress like any other for the step.
        later = timezone.now() + timedelta(seconds=601)
        assert pipeline.schedule_idle_compresses(now=later) == 1
        assert _left(api, "a") == 0 and _compresses("a") == 2
        config = pipeline.config_get(team=team)
        assert pipeline.compress_threshold(config=config, team=team, agent_id="a") == 4
        _write(api, "a", 3, start=2)
        assert _left(api, "a") == 3
        _write(api, "a", 1, start=5)
        assert _left(api, "a") == 0 and _compresses("a") == 3


class TestWarmupPerRun:
    """A write that names its session (`run_id`) warms up per session: every new run of an
    agent compresses after 1, 2, 4, … items again; writes without one keep the per-agent step."""

    CONFIG = {"compress_every_n": 6, "compress_target_count": 1, "warmup_max_memories": 100}

    def test_every_new_run_of_an_agent_warms_up_again(self, api):
        api.post("/lifecycle/auto-config", self.CONFIG)
        _write(api, "a", 1, run="s-1")
        assert _left(api, "a") == 0 and _compresses("a", "s-1") == 1
        _write(api, "a", 2, start=1, run="s-1")
        assert _left(api, "a") == 0 and _compresses("a", "s-1") == 2  # step 2
        _write(api, "a", 3, start=3, run="s-1")
        assert _left(api, "a") == 3  # step 4 in s-1
        _write(api, "a", 1, start=6, run="s-1")
        assert _left(api, "a") == 0 and _compresses("a", "s-1") == 3
        # A new session of the same agent starts at 1 again, then 2.
        _write(api, "a", 1, start=7, run="s-2")
        assert _left(api, "a") == 0 and _compresses("a", "s-2") == 1
        _write(api, "a", 1, start=8, run="s-2")
        assert _left(api, "a") == 1
        _write(api, "a", 1, start=9, run="s-2")
        assert _left(api, "a") == 0 and _compresses("a", "s-2") == 2
        # Each compress recorded the run it was triggered in, and so did what it wrote.
        jobs = JobRun.objects.filter(kind="compress", agent_id="a").order_by("pk")
        assert [j.params.get("run_id") for j in jobs] == ["s-1"] * 3 + ["s-2"] * 2
        assert {m.run_id for m in Memory.objects.filter(agent_id="a")} == {"s-1", "s-2"}
        runs = set(WorkingArchive.objects.filter(agent_id="a").values_list("run_id", flat=True))
        assert runs == {"s-1", "s-2"}

    def test_items_without_a_run_keep_the_per_agent_step(self, api):
        api.post("/lifecycle/auto-config", self.CONFIG)
        _write(api, "a", 1, run="s-1")
        _write(api, "a", 2, start=1, run="s-1")
        assert _compresses("a") == 2
        # Without a run the session is the agent: its two compresses make the step 4.
        _write(api, "a", 3, start=3)
        assert _left(api, "a") == 3
        _write(api, "a", 1, start=6)
        assert _left(api, "a") == 0 and _compresses("a") == 3
        assert JobRun.objects.filter(kind="compress").order_by("-pk")[0].params == {
            "target_count": 1
        }

    def test_a_run_warms_up_while_it_has_few_memories_of_its_own(self, team, api):
        api.post(
            "/lifecycle/auto-config",
            {"compress_every_n": 3, "compress_target_count": 1, "warmup_max_memories": 1},
        )
        api.post("/memories/personal", {"agent_id": "vet", "content": "an existing memory"})
        config = pipeline.config_get(team=team)
        # The agent is past warm-up; a new run of it is not.
        assert pipeline.compress_threshold(config=config, team=team, agent_id="vet") == 3
        assert (
            pipeline.compress_threshold(config=config, team=team, agent_id="vet", run_id="s-9") == 1
        )
        _write(api, "vet", 1, run="s-9")
        assert _left(api, "vet") == 0
        # Its compress wrote the run's first memory: the run has warmed up.
        assert Memory.objects.filter(agent_id="vet", run_id="s-9").count() == 1
        _write(api, "vet", 2, start=1, run="s-9")
        assert _left(api, "vet") == 2
        _write(api, "vet", 1, start=3, run="s-9")
        assert _left(api, "vet") == 0

    def test_mixed_runs_are_compressed_together_without_a_run_on_the_memory(self, api):
        api.post("/lifecycle/auto-config", {**self.CONFIG, "compress_every_n": 2})
        _write(api, "a", 1, run="s-1")  # step 1: compressed alone
        _write(api, "a", 1, start=1, run="s-1")  # step 2: waits
        _write(api, "a", 1, start=2, run="s-2")  # s-2's step 1: takes both items
        assert _left(api, "a") == 0
        newest = Memory.objects.filter(agent_id="a").order_by("-pk")[0]
        assert newest.run_id == ""  # its items came from two runs
        job = JobRun.objects.filter(kind="compress").order_by("-pk")[0]
        assert job.params["run_id"] == "s-2" and job.counts["compressed"] == 2

    def test_an_idle_compress_records_the_run_of_the_newest_item(self, api):
        api.post(
            "/lifecycle/auto-config",
            {"compress_every_n": 10, "warmup_max_memories": 0, "idle_extract_seconds": 600},
        )
        _write(api, "a", 1, run="s-1")
        _write(api, "a", 1, start=1, run="s-2")
        later = timezone.now() + timedelta(seconds=601)
        assert pipeline.schedule_idle_compresses(now=later) == 1
        job = JobRun.objects.get(kind="compress")
        assert (job.trigger, job.params["run_id"], job.counts["compressed"]) == ("beat", "s-2", 2)

    def test_auto_run_uses_the_run_of_the_newest_item(self, team, api):
        api.post("/lifecycle/auto-config", {**self.CONFIG, "enabled": False})
        _write(api, "a", 3, run="s-1")  # disabled: nothing compressed on the writes
        _write(api, "a", 1, start=3, run="s-2")
        api.post("/lifecycle/auto-config", {**self.CONFIG, "enabled": True})
        actions = pipeline.auto_run(team=team)
        assert [a.action for a in actions if a.action == "compress"] == ["compress"]
        job = JobRun.objects.get(kind="compress")
        assert job.params["run_id"] == "s-2" and job.counts["compressed"] == 4


class TestIdleCompress:
    def _config(self, api, **extra):
        api.post(
            "/lifecycle/auto-config",
            {"compress_every_n": 10, "warmup_max_memories": 0, "idle_extract_seconds": 600} | extra,
        )

    def test_an_idle_agent_is_compressed_once(self, api):
        self._config(api)
        _write(api, "a", 3)
        assert pipeline.schedule_idle_compresses() == 0  # written just now
        later = timezone.now() + timedelta(seconds=599)
        assert pipeline.schedule_idle_compresses(now=later) == 0
        assert _left(api, "a") == 3
        later = timezone.now() + timedelta(seconds=601)
        assert pipeline.schedule_idle_compresses(now=later) == 1
        job = JobRun.objects.get(kind="compress")
        assert (job.trigger, job.agent_id, job.status) == ("beat", "a", JobStatus.SUCCEEDED)
        assert job.counts["compressed"] == 3 and _left(api, "a") == 0
        # Idempotent: nothing left to find.
        assert pipeline.schedule_idle_compresses(now=later) == 0
        assert JobRun.objects.filter(kind="compress").count() == 1

    def test_a_recent_write_keeps_the_agent_active(self, api):
        self._config(api)
        _write(api, "a", 2)
        store = get_working_store()
        # The newest item decides, not the oldest.
        newest = max(i.created_at for i in store.list(team_id="team_a", agent_id="a"))
        assert pipeline.schedule_idle_compresses(now=newest + timedelta(seconds=599)) == 0
        assert pipeline.schedule_idle_compresses(now=newest + timedelta(seconds=601)) == 1

    def test_one_active_job_per_agent(self, team, api):
        from lifecycle.services import jobs

        self._config(api)
        _write(api, "a", 2)
        held = jobs.job_create(
            team=team,
            kind="compress",
            trigger="auto",
            agent_id="a",
            active_key="compress:team_a:a",
        )
        assert held is not None
        later = timezone.now() + timedelta(seconds=601)
        assert pipeline.schedule_idle_compresses(now=later) == 0
        assert JobRun.objects.filter(kind="compress").count() == 1

    def test_off_disabled_unsaved_excluded_and_bounded(self, team, api):
        _write(api, "a", 1)
        later = timezone.now() + timedelta(days=1)
        assert pipeline.schedule_idle_compresses(now=later) == 0  # not configured
        self._config(api, idle_extract_seconds=0)
        assert pipeline.schedule_idle_compresses(now=later) == 0
        self._config(api, enabled=False)
        assert pipeline.schedule_idle_compresses(now=later) == 0
        self._config(api, enabled=True, excluded_agents=["a*"])
        _write(api, "b1", 1)
        _write(api, "b2", 1)
        assert pipeline.schedule_idle_compresses(now=later, limit=1) == 1
        assert pipeline.schedule_idle_compresses(now=later, limit=1) == 1
        assert pipeline.schedule_idle_compresses(now=later) == 0
        assert _left(api, "a") == 1  # excluded: left alone
        assert sorted(JobRun.objects.values_list("agent_id", flat=True)) == ["b1", "b2"]

    def test_the_beat_task(self, api):
        from lifecycle.tasks import schedule_idle_compresses_task
        from memoryplatform.celery import app

        assert app.conf.beat_schedule["lifecycle-idle-compresses"]["task"] == (
            "lifecycle.schedule_idle_compresses"
        )
        self._config(api, idle_extract_seconds=1)
        _write(api, "a", 1)
        JobRun.objects.all().delete()
        # One second of idleness by the store's own clock (its items cannot be backdated on Redis).
        store = get_working_store()
        created = store.list(team_id="team_a", agent_id="a")[0].created_at
        while timezone.now() <= created + timedelta(seconds=1):
            time.sleep(0.05)
        assert schedule_idle_compresses_task() == 1
        assert _left(api, "a") == 0


class TestScenesAndPersona:
    def _config(self, api, **extra):
        api.post(
            "/lifecycle/auto-config",
            {"compress_every_n": 0, "scenario_min_interval_seconds": 900, "persona_every_n": 3}
            | extra,
        )

    def _kinds(self) -> list[str]:
        return list(
            JobRun.objects.filter(trigger="auto").order_by("pk").values_list("kind", flat=True)
        )

    def test_scenes_after_extraction_at_most_once_per_interval(self, api):
        self._config(api, persona_every_n=0)
        working(api, "r", RESEARCH_NOTES[:2])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True}))
        assert self._kinds() == ["aggregate-scenes"]
        scenes = JobRun.objects.get(kind="aggregate-scenes")
        assert scenes.status == JobStatus.SUCCEEDED and scenes.agent_id == "r"
        assert ok_data(api.get("/lifecycle/scenarios/r"))
        working(api, "r", RESEARCH_NOTES[2:4])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True}))
        assert self._kinds() == ["aggregate-scenes"]  # within the interval
        JobRun.objects.filter(pk=scenes.pk).update(
            created_at=timezone.now() - timedelta(seconds=901)
        )
        working(api, "r", RESEARCH_NOTES[4:])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True}))
        assert self._kinds() == ["aggregate-scenes", "aggregate-scenes"]

    def test_a_failed_manual_aggregation_starts_the_interval_too(self, team, api):
        from .factories import JobRunFactory

        self._config(api, persona_every_n=0)
        failed = JobRunFactory(
            team=team, agent_id="r", kind="aggregate-scenes", trigger="api", status="failed"
        )
        working(api, "r", RESEARCH_NOTES[:2])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True}))
        assert self._kinds() == []  # the failing LLM is not asked again so soon
        # 899 seconds later: still within the interval.
        JobRun.objects.filter(pk=failed.pk).update(
            created_at=timezone.now() - timedelta(seconds=899)
        )
        working(api, "r", RESEARCH_NOTES[2:4])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True}))
        assert self._kinds() == []
        JobRun.objects.filter(pk=failed.pk).update(
            created_at=timezone.now() - timedelta(seconds=901)
        )
        working(api, "r", RESEARCH_NOTES[4:])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r", "delete_after": True}))
        assert self._kinds() == ["aggregate-scenes"]

    def test_a_compress_alone_does_not_aggregate_scenes(self, api):
        self._config(api, compress_every_n=1, persona_every_n=0)
        _write(api, "a", 1)
        assert self._kinds() == ["compress"]

    def test_persona_after_every_n_new_memories(self, api):
        self._config(api, scenario_min_interval_seconds=0)
        for i in range(2):
            api.post("/memories/personal", {"agent_id": "p", "content": f"likes topic {i} a lot"})
        working(api, "p", [RESEARCH_NOTES[2]])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "p", "delete_after": True}))
        assert self._kinds() == ["generate-persona"]  # 3 memories, no persona yet
        assert ok_data(api.get("/lifecycle/persona/p"))
        persona_at = timezone.now()
        api.post("/memories/personal", {"agent_id": "p", "content": "one newer memory only"})
        working(api, "p", [RESEARCH_NOTES[0]])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "p", "delete_after": True}))
        newer = Memory.objects.filter(agent_id="p", created_at__gt=persona_at).count()
        assert newer == 2 and self._kinds() == ["generate-persona"]
        working(api, "p", [RESEARCH_NOTES[3]])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "p", "delete_after": True}))
        assert self._kinds() == ["generate-persona", "generate-persona"]

    def test_new_memories_count_from_the_latest_personas_time(self, team, api):
        from lifecycle.models import Persona

        from .factories import PersonaFactory

        self._config(api, scenario_min_interval_seconds=0)
        for i in range(2):
            api.post("/memories/personal", {"agent_id": "p", "content": f"likes topic {i} a lot"})
        now = timezone.now()
        older = PersonaFactory(team=team, agent_id="p")
        latest = PersonaFactory(team=team, agent_id="p")
        Persona.objects.filter(pk=older.pk).update(created_at=now - timedelta(hours=2))
        working(api, "p", [RESEARCH_NOTES[2]])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "p", "delete_after": True}))
        assert self._kinds() == []  # one memory newer than the latest persona
        # The latest persona an hour old: the four memories written since count now. (Counted
        # from the older persona, the first extraction would already have queued one.)
        Persona.objects.filter(pk=latest.pk).update(created_at=now - timedelta(hours=1))
        working(api, "p", [RESEARCH_NOTES[3]])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "p", "delete_after": True}))
        assert self._kinds() == ["generate-persona"]

    def test_nothing_without_a_saved_enabled_config(self, api):
        working(api, "r", RESEARCH_NOTES[:2])
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r"}))
        self._config(api, enabled=False, persona_every_n=1)
        ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "r"}))
        assert self._kinds() == []

    def test_ingest_counts_as_extraction(self, api):
        self._config(api, persona_every_n=0)
        body = {
            "agent_id": "i",
            "run_id": "s1",
            "messages": [{"role": "user", "content": RESEARCH_NOTES[2]}],
        }
        ok_data(api.post("/memories/ingest", body))
        assert self._kinds() == ["aggregate-scenes"]


class TestExcludedAgents:
    def test_no_automatic_job_but_manual_operations_run(self, api):
        api.post(
            "/lifecycle/auto-config",
            {
                "compress_every_n": 1,
                "persona_every_n": 1,
                "idle_extract_seconds": 1,
                "excluded_agents": ["bench-judge-*"],
            },
        )
        _write(api, "bench-judge-7", 2)
        _write(api, "coder", 1)
        assert _left(api, "bench-judge-7") == 2 and _left(api, "coder") == 0
        later = timezone.now() + timedelta(hours=1)
        assert pipeline.schedule_idle_compresses(now=later) == 0
        results = ok_data(api.post("/lifecycle/auto-run", {}))["results"]
        assert [r.get("agent_id") for r in results if r["action"] == "compress"] == []
        assert (
            ok_data(api.post("/lifecycle/compress", {"agent_id": "bench-judge-7"}))["compressed"]
            == 2
        )
        # The manual compress wrote a memory; the excluded agent still gets no persona job.
        assert not JobRun.objects.filter(agent_id="bench-judge-7", trigger="auto").exists()
        assert JobRun.objects.filter(agent_id="coder", kind="generate-persona").exists()


class TestMaxMemoriesPerRun:
    def _ingest(self, api, run_id: str, notes: list[str]) -> dict:
        body = {
            "agent_id": "i",
            "run_id": run_id,
            "messages": [{"role": "user", "content": n} for n in notes],
        }
        return ok_data(api.post("/memories/ingest", body))

    def test_a_run_stops_getting_memories_at_the_limit_and_keeps_every_message(self, api):
        from lifecycle.models import WorkingArchive

        api.post(
            "/lifecycle/auto-config",
            {"max_memories_per_run": 2, "scenario_min_interval_seconds": 0, "persona_every_n": 0},
        )
        notes = [RESEARCH_NOTES[0], RESEARCH_NOTES[2], RESEARCH_NOTES[3]]
        first = self._ingest(api, "s1", notes)
        assert len(first["facts"]) == 2 and first["facts_over_run_limit"] >= 1
        assert Memory.objects.filter(agent_id="i", run_id="s1").count() == 2
        again = self._ingest(api, "s1", [RESEARCH_NOTES[4]])
        assert again["facts"] == [] and again["facts_over_run_limit"] >= 1
        assert Memory.objects.filter(agent_id="i", run_id="s1").count() == 2
        # Another run has its own budget; every message of both is archived (L0).
        other = self._ingest(api, "s2", [RESEARCH_NOTES[4]])
        assert len(other["facts"]) == 1 and "facts_over_run_limit" not in other
        assert WorkingArchive.objects.filter(agent_id="i", run_id="s1").count() == 4
        assert WorkingArchive.objects.filter(agent_id="i", run_id="s2").count() == 1

    def test_unlimited_by_default_and_without_a_run_id(self, api):
        assert ok_data(api.get("/lifecycle/auto-config"))["max_memories_per_run"] == 0
        notes = [RESEARCH_NOTES[0], RESEARCH_NOTES[2], RESEARCH_NOTES[3]]
        assert "facts_over_run_limit" not in self._ingest(api, "s1", notes)
        api.post("/lifecycle/auto-config", {"max_memories_per_run": 1})
        assert len(self._ingest(api, "", [RESEARCH_NOTES[4]])["facts"]) == 1
        assert (
            error_code(api.post("/lifecycle/auto-config", {"max_memories_per_run": -1}))
            == "VALIDATION_ERROR"
        )


@pytest.mark.django_db
def test_a_config_saved_by_another_process_is_seen_at_once(team):
    """A process that read the team's config before it was saved (a search reads it, for the
    recall timeout) must not keep the unsaved default: the first save is what turns automation
    on, and the writes right after it must trigger (seen on the production smoke test)."""
    assert not pipeline.config_is_saved(pipeline.config_get_cached(team=team))
    # Another process saves it: a row appears, this process's cache is not told.
    PipelineConfig.objects.create(team=team, compress_every_n=4)
    config = pipeline.config_get_cached(team=team)
    assert pipeline.config_is_saved(config) and config.compress_every_n == 4
