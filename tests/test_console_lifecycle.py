"""Console lifecycle pages: pipeline config (the API's validation), run now (a recorded job with
trigger admin, through the pipeline's dispatch), the job log, and the persona drill-down to the
archived working-memory sources; other teams 404, viewers 403 on every POST."""

from __future__ import annotations

import time

import pytest

from lifecycle.models import JobRun, Persona, PipelineConfig, Scenario, WorkingArchive
from memories.models import Memory
from tenants.models import Team

from .console_helpers import member_client
from .factories import TeamFactory
from .helpers import error_code, ok_data
from .test_lifecycle_api import CODER_NOTES, RESEARCH_NOTES, working

pytestmark = pytest.mark.django_db

CONFIG = {
    "compress_every_n": "4",
    "compress_target_count": "2",
    "cleanup_idle_days": "60",
    "cleanup_min_importance": "0.3",
    "enabled": "on",
    "warmup_max_memories": "5",
    "warmup_compress_every_n": "1",
}


def url(team: Team | str, rest: str = "") -> str:
    team_id = team if isinstance(team, str) else team.id
    return f"/review/{team_id}/lifecycle/{rest}"


class TestPipelineConfig:
    def test_an_unsaved_config_says_automation_is_off_and_saving_turns_it_on(self, team, lead):
        page = lead.get(url(team)).content.decode()
        assert "Automation is <strong>off</strong>" in page
        assert "saving this form turns automation on" in page
        response = lead.post(url(team), CONFIG, follow=True)
        assert response.status_code == 200
        assert "automation is now on" in response.content.decode()
        config = PipelineConfig.objects.get(team=team)
        assert (
            config.compress_every_n,
            config.compress_target_count,
            config.cleanup_idle_days,
            config.cleanup_min_importance,
            config.enabled,
            config.extract_graph,
        ) == (4, 2, 60, 0.3, True, False)
        assert "Automation is <strong>on</strong>" in lead.get(url(team)).content.decode()

    def test_an_unchecked_box_saves_false(self, team, lead):
        data = {**CONFIG}
        del data["enabled"]
        assert lead.post(url(team), data).status_code == 302
        assert PipelineConfig.objects.get(team=team).enabled is False

    @pytest.mark.parametrize(
        ("field", "value", "api_value"),
        [
            ("compress_every_n", "-1", -1),
            ("cleanup_min_importance", "1.5", 1.5),
            ("compress_target_count", "0", 0),
        ],
    )
    def test_an_invalid_value_is_refused_by_the_form_and_by_the_api_alike(
        self, team, lead, api, field, value, api_value
    ):
        response = lead.post(url(team), {**CONFIG, field: value})
        assert response.status_code == 400
        form = response.context["config_form"]
        assert field in form.errors
        # The same serializer refuses it through the API, with the same message.
        api_response = api.post("/lifecycle/auto-config", {field: api_value})
        assert error_code(api_response) == "VALIDATION_ERROR"
        assert form.errors[field][0] in str(api_response.json())
        assert not PipelineConfig.objects.filter(team=team).exists()
        assert "errorlist" in response.content.decode()

    def test_a_value_that_is_not_a_number_is_a_form_error_not_a_500(self, team, lead):
        response = lead.post(url(team), {**CONFIG, "compress_every_n": "ten"})
        assert response.status_code == 400
        assert "compress_every_n" in response.context["config_form"].errors

    def test_a_viewer_sees_the_config_read_only_and_cannot_save(self, team, viewer):
        page = viewer.get(url(team)).content.decode()
        assert "Only a lead of the team can change the configuration." in page
        assert 'id="save-config"' not in page and 'id="run-now"' not in page
        assert viewer.post(url(team), CONFIG).status_code == 403
        assert not PipelineConfig.objects.filter(team=team).exists()


class TestRunNow:
    def test_run_now_queues_a_job_with_trigger_admin_and_runs_it(
        self, team, lead, api, django_capture_on_commit_callbacks
    ):
        item_ids = working(api, "coder", CODER_NOTES)
        with django_capture_on_commit_callbacks(execute=True):
            response = lead.post(
                url(team, "run/compress/"),
                {"compress-agent_id": "coder", "compress-target_count": "1"},
            )
        assert response.status_code == 302
        assert response["Location"] == url(team, "jobs/")
        job = JobRun.objects.get(team=team, kind="compress")
        assert (job.trigger, job.status, job.agent_id, job.params) == (
            "admin",
            "succeeded",
            "coder",
            {"target_count": 1},
        )
        assert job.counts["compressed"] == 4 and job.engine
        assert set(WorkingArchive.objects.filter(job=job).values_list("item_id", flat=True)) == set(
            item_ids
        )
        log = lead.get(response["Location"]).content.decode()
        assert f"Job #{job.pk} (compress working memory for coder) started" in log
        detail = lead.get(url(team, f"jobs/{job.pk}/")).content.decode()
        assert "compressed=4" in detail and "4 working-memory items archived" in detail
        written = Memory.objects.get(team=team, metadata__job_id=job.pk)
        assert "Memories written (1)" in detail
        assert url(team, f"memories/{written.pk}/sources/") in detail

    @pytest.mark.parametrize(
        ("kind", "data", "counts"),
        [
            ("extract-facts", {"agent_id": "coder"}, {"count"}),
            ("aggregate-scenes", {"agent_id": "coder"}, {"count"}),
            ("generate-persona", {"agent_id": "coder"}, set()),
            ("cleanup", {"dry_run": "true"}, {"would_clean", "dry_run"}),
            ("cleanup", {"dry_run": "false", "max_age_days": "0"}, {"cleaned"}),
            ("extract-graph", {"agent_id": "coder"}, set()),
            ("consolidate", {"agent_id": "coder"}, {"count", "examined"}),
            ("propose-procedures", {"agent_id": "coder"}, {"count", "examined"}),
            ("auto-run", {}, {"actions"}),
        ],
    )
    def test_every_operation_runs_as_an_admin_job(
        self, team, lead, api, django_capture_on_commit_callbacks, kind, data, counts
    ):
        api.post("/lifecycle/auto-config", {"enabled": True, "compress_every_n": 2})
        working(api, "coder", RESEARCH_NOTES[:3])
        api.post(
            "/memories/personal", {"agent_id": "coder", "content": "用户偏好简洁直接的回复风格"}
        )
        with django_capture_on_commit_callbacks(execute=True):
            response = lead.post(
                url(team, f"run/{kind}/"), {f"{kind}-{k}": v for k, v in data.items()}
            )
        assert response.status_code == 302, response.content.decode()[:2000]
        job = JobRun.objects.filter(team=team, kind=kind).latest("id")
        assert (job.trigger, job.status) == ("admin", "succeeded"), job.error
        assert counts <= set(job.counts)
        if kind == "cleanup" and data["dry_run"] == "true":
            assert job.counts["dry_run"] is True and Memory.objects.filter(team=team).exists()
        if kind == "auto-run":
            # The whole pipeline: each action it ran is its own admin job.
            assert JobRun.objects.filter(team=team, kind="compress", trigger="admin").exists()

    @pytest.mark.parametrize(
        ("data", "field"),
        [
            ({"compress-agent_id": "coder", "compress-target_count": "0"}, "target_count"),
            ({"compress-agent_id": "coder", "compress-target_count": "51"}, "target_count"),
            ({"compress-agent_id": "nobody"}, "agent_id"),
            ({}, "agent_id"),
        ],
    )
    def test_invalid_parameters_are_refused_like_the_api_and_nothing_runs(
        self, team, lead, api, data, field
    ):
        working(api, "coder", CODER_NOTES[:1])
        response = lead.post(url(team, "run/compress/"), data)
        assert response.status_code == 400
        failed = next(f for f in response.context["run_forms"] if f.operation.kind == "compress")
        assert field in failed.errors
        assert not JobRun.objects.filter(team=team).exists()

    def test_an_unknown_operation_is_404_and_get_is_not_allowed(self, team, lead):
        assert lead.post(url(team, "run/delete-everything/"), {}).status_code == 404
        assert lead.get(url(team, "run/compress/")).status_code == 405


class TestJobLog:
    @pytest.fixture
    def jobs(self, team, other_team):
        made = [
            JobRun.objects.create(
                team=team, kind="compress", trigger="auto", agent_id="a1", status="succeeded"
            ),
            JobRun.objects.create(
                team=team,
                kind="compress",
                trigger="admin",
                agent_id="a2",
                status="failed",
                error="LLM_UNAVAILABLE: the LLM did not answer",
            ),
            JobRun.objects.create(team=team, kind="cleanup", trigger="beat", status="succeeded"),
            JobRun.objects.create(
                team=team, kind="generate-persona", trigger="api", agent_id="a1", status="queued"
            ),
        ]
        JobRun.objects.create(team=other_team, kind="compress", trigger="api", status="failed")
        return made

    def listed(self, client, team, query=""):
        response = client.get(url(team, "jobs/") + query)
        assert response.status_code == 200
        return [j.pk for j in response.context["page"].object_list]

    def test_filters(self, team, viewer, jobs):
        c1, c2, cl, gp = (j.pk for j in jobs)
        assert self.listed(viewer, team) == [gp, cl, c2, c1]  # newest first, own team only
        assert self.listed(viewer, team, "?status=succeeded") == [cl, c1]
        assert self.listed(viewer, team, "?kind=compress") == [c2, c1]
        assert self.listed(viewer, team, "?trigger=beat") == [cl]
        assert self.listed(viewer, team, "?agent_id=a1") == [gp, c1]
        assert self.listed(viewer, team, "?failed=on") == [c2]
        assert self.listed(viewer, team, "?kind=compress&agent_id=a1") == [c1]
        # A value the filter does not know is ignored, never a 500.
        assert self.listed(viewer, team, "?status=bogus") == [gp, cl, c2, c1]

    def test_paging(self, team, viewer):
        for _ in range(55):
            JobRun.objects.create(team=team, kind="cleanup", trigger="beat", status="succeeded")
        first = viewer.get(url(team, "jobs/?trigger=beat"))
        assert len(first.context["page"].object_list) == 50
        assert "trigger=beat&amp;page=2" in first.content.decode()
        assert len(self.listed(viewer, team, "?trigger=beat&page=2")) == 5

    def test_the_log_reloads_itself_only_while_a_job_is_queued_or_running(self, team, viewer, jobs):
        page = viewer.get(url(team, "jobs/")).content.decode()
        assert '<meta http-equiv="refresh" content="3">' in page  # the persona job is queued
        assert (
            'http-equiv="refresh"' in viewer.get(url(team, f"jobs/{jobs[3].pk}/")).content.decode()
        )
        done = viewer.get(url(team, "jobs/?status=succeeded")).content.decode()
        assert 'http-equiv="refresh"' not in done
        assert (
            'http-equiv="refresh"'
            not in viewer.get(url(team, f"jobs/{jobs[0].pk}/")).content.decode()
        )

    def test_the_detail_page_shows_the_full_error(self, team, viewer, jobs):
        page = viewer.get(url(team, f"jobs/{jobs[1].pk}/")).content.decode()
        assert "LLM_UNAVAILABLE: the LLM did not answer" in page

    def test_another_teams_job_is_404(self, team, lead, other_team, jobs):
        theirs = JobRun.objects.get(team=other_team)
        assert lead.get(url(team, f"jobs/{theirs.pk}/")).status_code == 404
        assert theirs.pk not in self.listed(lead, team)


@pytest.fixture
def drilled(team, api):
    """A persona built by the real lifecycle, down to archived working memory."""
    api.post("/lifecycle/auto-config", {"enabled": False})
    item_ids = working(api, "researcher", CODER_NOTES)
    compressed = ok_data(
        api.post("/lifecycle/compress", {"agent_id": "researcher", "target_count": 1})
    )
    working(api, "researcher", RESEARCH_NOTES)
    ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "researcher"}))
    for content, importance in (
        ("2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩", 0.85),
        ("回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今", 0.7),
    ):
        api.post(
            "/memories/personal",
            {"agent_id": "researcher", "content": content, "importance": importance},
        )
    ok_data(api.post("/lifecycle/aggregate-scenes", {"agent_id": "researcher"}))
    persona = ok_data(api.post("/lifecycle/generate-persona", {"agent_id": "researcher"}))[
        "persona"
    ]
    return {
        "persona": Persona.objects.get(pk=persona["id"]),
        "compressed_id": compressed["memory_ids"][0],
        "item_ids": item_ids,
    }


class TestPersonaDrillDown:
    def test_persona_to_scenarios_to_memories_to_archived_sources(self, team, viewer, drilled):
        persona = drilled["persona"]
        listing = viewer.get(url(team, "personas/")).content.decode()
        assert url(team, f"personas/{persona.pk}/") in listing

        page = viewer.get(url(team, f"personas/{persona.pk}/"))
        assert page.status_code == 200
        body = page.content.decode()
        assert persona.summary[:20] in body
        assert persona.scenarios_snapshot, "the offline engine builds scenarios"

        derived_seen: set[int] = set()
        for snap in persona.scenarios_snapshot:
            scenario_url = url(team, f"scenarios/{snap['id']}/") + f"?persona={persona.pk}"
            assert scenario_url in body
            scenario_page = viewer.get(scenario_url)
            assert scenario_page.status_code == 200
            scenario_body = scenario_page.content.decode()
            assert snap["name"] in scenario_body
            for mid, memory in scenario_page.context["memories"]:
                assert memory is not None and memory.team_id == team.id
                assert f"/review/{team.id}/memories/{mid}/" in scenario_body
                if memory.metadata.get("source_items"):
                    sources_url = (
                        url(team, f"memories/{mid}/sources/")
                        + f"?persona={persona.pk}&amp;scenario={snap['id']}"
                    )
                    assert sources_url in scenario_body
                    trail = viewer.get(sources_url.replace("&amp;", "&")).content.decode()
                    assert url(team, f"personas/{persona.pk}/") in trail  # the way back
                    assert scenario_url.replace("&", "&amp;") in trail
                    derived_seen.add(mid)
        assert derived_seen, "some scenario memory was derived by the lifecycle"

        # Down to the archived working memory (the same selector as GET /lifecycle/sources).
        sources = viewer.get(url(team, f"memories/{drilled['compressed_id']}/sources/"))
        assert [a.item_id for a in sources.context["sources"]] == drilled["item_ids"]
        text = sources.content.decode()
        for item in CODER_NOTES:
            assert item in text
        for mid in derived_seen:
            listed = viewer.get(url(team, f"memories/{mid}/sources/")).context["sources"]
            assert listed and {a.content for a in listed} <= set(CODER_NOTES) | set(RESEARCH_NOTES)

    def test_a_snapshot_scenario_still_opens_after_it_was_regenerated(self, team, viewer, drilled):
        persona = drilled["persona"]
        snap = persona.scenarios_snapshot[0]
        Scenario.objects.filter(pk=snap["id"]).delete()
        page = viewer.get(url(team, f"scenarios/{snap['id']}/?persona={persona.pk}"))
        assert page.status_code == 200 and "no longer stored" in page.content.decode()
        assert viewer.get(url(team, f"scenarios/{snap['id']}/")).status_code == 404

    def test_a_memory_written_by_hand_has_no_sources(self, team, viewer, api):
        plain = ok_data(api.post("/memories/personal", {"agent_id": "coder", "content": "by hand"}))
        page = viewer.get(url(team, f"memories/{plain['id']}/sources/"))
        assert page.status_code == 200 and page.context["sources"] == []
        assert "not derived from working memory" in page.content.decode()


@pytest.fixture
def theirs(other_team, other_api):
    """One of everything in team B, made by the real lifecycle."""
    other_api.post("/lifecycle/auto-config", {"enabled": False})
    working(other_api, "spy", CODER_NOTES)
    mid = ok_data(other_api.post("/lifecycle/compress", {"agent_id": "spy", "target_count": 1}))[
        "memory_ids"
    ][0]
    ok_data(other_api.post("/lifecycle/aggregate-scenes", {"agent_id": "spy"}))
    ok_data(other_api.post("/lifecycle/generate-persona", {"agent_id": "spy"}))
    return {
        "job": JobRun.objects.filter(team=other_team).first(),
        "persona": Persona.objects.get(team=other_team),
        "scenario": Scenario.objects.filter(team=other_team).first(),
        "memory": mid,
        "archive": WorkingArchive.objects.filter(team=other_team).first(),
    }


def test_one_agents_personas_are_paged_with_the_filter_kept(team, viewer):
    from console.lifecycle.views import PERSONAS_PER_PAGE

    from .factories import PersonaFactory

    for i in range(PERSONAS_PER_PAGE + 1):
        PersonaFactory(team=team, agent_id="researcher", summary=f"Researcher persona {i:02}.")
    PersonaFactory(team=team, agent_id="trader", summary="Trader persona.")
    first = viewer.get(url(team, "personas/?agent=researcher")).content.decode()
    assert "page 1 of 2" in first and "Trader persona." not in first
    assert 'href="?agent=researcher&amp;page=2">older ›' in first
    second = viewer.get(url(team, "personas/?agent=researcher&page=2")).content.decode()
    assert 'href="?agent=researcher&amp;page=1">‹ newer' in second
    assert second.count("Researcher persona") == 1
    # All agents: one page more, no filter in the links.
    every = viewer.get(url(team, "personas/")).content.decode()
    assert 'href="?page=2">older ›' in every


def test_every_id_of_another_team_answers_404_and_is_never_listed(team, lead, theirs):
    assert theirs["scenario"] is not None and theirs["archive"] is not None
    for path in (
        f"jobs/{theirs['job'].pk}/",
        f"personas/{theirs['persona'].pk}/",
        f"scenarios/{theirs['scenario'].pk}/",
        f"scenarios/{theirs['scenario'].pk}/?persona={theirs['persona'].pk}",
        f"memories/{theirs['memory']}/sources/",
    ):
        assert lead.get(url(team, path)).status_code == 404, path
    # Their persona named on one of our pages is ignored, never shown.
    ours = Memory.objects.create(team=team, scope="team", content="ours", content_hash="x")
    page = lead.get(url(team, f"memories/{ours.pk}/sources/?persona={theirs['persona'].pk}"))
    assert page.status_code == 200 and theirs["persona"].pk not in page.content.decode()
    for listing in ("", "jobs/", "personas/"):
        body = lead.get(url(team, listing)).content.decode()
        assert "spy" not in body and theirs["persona"].pk not in body
        assert theirs["archive"].content not in body


def test_another_teams_pages_and_posts_answer_404(team, other_team, lead, theirs):
    for path in (
        "",
        "jobs/",
        f"jobs/{theirs['job'].pk}/",
        "personas/",
        f"personas/{theirs['persona'].pk}/",
        f"scenarios/{theirs['scenario'].pk}/",
        f"memories/{theirs['memory']}/sources/",
    ):
        assert lead.get(url(other_team, path)).status_code == 404, path
    assert lead.post(url(other_team), CONFIG).status_code == 404
    assert (
        lead.post(url(other_team, "run/cleanup/"), {"cleanup-dry_run": "true"}).status_code == 404
    )
    assert not JobRun.objects.filter(team=other_team, trigger="admin").exists()


def test_a_viewer_gets_403_on_every_post(team, viewer):
    assert viewer.post(url(team), CONFIG).status_code == 403
    for kind in (
        "compress",
        "extract-facts",
        "aggregate-scenes",
        "generate-persona",
        "cleanup",
        "extract-graph",
        "auto-run",
    ):
        assert viewer.post(url(team, f"run/{kind}/"), {}).status_code == 403, kind
    assert not JobRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_in_embedded_mode_run_now_returns_at_once_and_the_job_runs_in_a_background_thread(
    settings,
):
    settings.LIFECYCLE_INLINE = False
    settings.CELERY_TASK_ALWAYS_EAGER = True  # embedded: no broker
    team = TeamFactory(id="team_bg", name="Background")
    lead = member_client(team, "lead_bg", "lead")
    response = lead.post(url(team, "run/cleanup/"), {"cleanup-dry_run": "true"})
    assert response.status_code == 302
    job = JobRun.objects.get(team=team)
    assert job.trigger == "admin"
    deadline = time.monotonic() + 30
    while job.status in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.1)
        job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert job.counts["dry_run"] is True


def test_list_pages_do_not_query_per_row(team, viewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries(path: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert viewer.get(url(team, path)).status_code == 200
        return len(ctx.captured_queries)

    def add(n: int) -> None:
        for i in range(n):
            JobRun.objects.create(team=team, kind="cleanup", trigger="beat", agent_id=f"a{i}")
            Persona.objects.create(team=team, agent_id=f"a{i}", summary="s", memory_ids=[1, 2])

    add(2)
    few = {p: queries(p) for p in ("", "jobs/", "personas/")}
    add(20)
    assert {p: queries(p) for p in ("", "jobs/", "personas/")} == few


# --- agents' rules (procedural memory) -----------------------------------------------------------


def test_a_lead_accepts_or_rejects_proposed_rules_and_a_viewer_only_sees_them(
    team, lead, viewer, other_team
):
    from memories.models import Procedure
    from memories.services import procedure_create

    proposed = procedure_create(
        team=team,
        agent_id="researcher",
        rule="Answer briefly.",
        source="lifecycle",
        status="proposed",
        evidence=[],
    )
    other = procedure_create(team=team, agent_id="trader", rule="回答使用中文。", source="agent")
    theirs = procedure_create(
        team=other_team, agent_id="researcher", rule="Team B's rule.", source="agent"
    )
    page = viewer.get(url(team, "procedures/"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Answer briefly." in html and "回答使用中文。" in html
    assert "Team B's rule." not in html
    assert "decision" not in html  # a viewer gets no buttons
    # Proposals first.
    assert html.index("Answer briefly.") < html.index("回答使用中文。")
    decide = url(team, f"procedures/{proposed.pk}/decide/")
    assert viewer.post(decide, {"decision": "accept"}).status_code == 403
    listed = lead.get(url(team, "procedures/?status=proposed")).content.decode()
    assert listed.count("procedure-proposed") == 1 and "回答使用中文。" not in listed
    assert lead.post(decide, {"decision": "accept"}).status_code == 302
    proposed.refresh_from_db()
    assert proposed.status == "active"
    reject = url(team, f"procedures/{other.pk}/decide/")
    lead.post(reject, {"decision": "reject"})
    other.refresh_from_db()
    assert other.status == "rejected"
    lead.post(reject, {"decision": "frobnicate"})
    other.refresh_from_db()
    assert other.status == "rejected"
    # Another team's rule through this team's URL: not found, untouched.
    foreign = url(team, f"procedures/{theirs.pk}/decide/")
    assert lead.post(foreign, {"decision": "reject"}).status_code == 404
    assert Procedure.objects.get(pk=theirs.pk).status == "active"


def test_rules_are_listed_by_page_and_agent_proposals_first(team, lead, other_team):
    from console.lifecycle.views import RULES_PER_PAGE
    from memories.models import Procedure

    Procedure.objects.bulk_create(
        Procedure(team=team, agent_id="alpha", rule=f"Alpha rule {i:03}.", source="agent")
        for i in range(RULES_PER_PAGE)
    )
    waiting = Procedure.objects.create(
        team=team, agent_id="zed", rule="Zed proposal.", status="proposed", source="lifecycle"
    )
    Procedure.objects.create(team=other_team, agent_id="zed", rule="Team B rule.", source="agent")
    first = lead.get(url(team, "procedures/")).content.decode()
    # A proposal waits for a decision: first, whatever its agent.
    assert first.index("Zed proposal.") < first.index("Alpha rule 000.")
    assert "Alpha rule 048." in first and "Alpha rule 049." not in first
    assert "page 1 of 2" in first and "Team B rule." not in first
    second = lead.get(url(team, "procedures/?page=2")).content.decode()
    assert "Alpha rule 049." in second and "Alpha rule 000." not in second
    # One agent's rules; a decision taken there comes back to the same page and filter.
    here = url(team, "procedures/?agent=zed&status=proposed")
    only = lead.get(here).content.decode()
    assert "Zed proposal." in only and "Alpha rule" not in only and "Team B rule." not in only
    assert f'name="next" value="{here.replace("&", "&amp;")}"' in only
    decide = url(team, f"procedures/{waiting.pk}/decide/")
    back = lead.post(decide, {"decision": "reject", "next": here})
    assert (back.status_code, back["Location"]) == (302, here)
    # Anywhere else (another page of the console, another site) is the rules page.
    for elsewhere in (url(team, "jobs/"), "https://example.com/", "//example.com/"):
        back = lead.post(decide, {"decision": "accept", "next": elsewhere})
        assert back["Location"] == url(team, "procedures/")
    edit = url(team, f"procedures/{waiting.pk}/edit/")
    assert lead.post(edit, {"rule": "Zed rule.", "next": here})["Location"] == here


def test_a_rules_history_shows_who_changed_it_and_a_removed_rules_last_text(
    team, lead, viewer, api, other_team
):
    from memories.models import Procedure, ProcedureRevision
    from memories.services import procedure_create

    rule = ok_data(api.post("/procedures/researcher", {"rule": "Answr briefly."}))
    history = url(team, f"procedures/{rule['id']}/history/")
    lead.post(url(team, f"procedures/{rule['id']}/edit/"), {"rule": "Answer briefly."})
    page = viewer.get(history).content.decode()
    assert "user lead_a" in page and "<del>Answr briefly.</del> → Answer briefly." in page
    assert "Now <strong>active</strong>: Answer briefly." in page
    assert f'href="{history}"' in viewer.get(url(team, "procedures/")).content.decode()
    # Removed: listed under the rules with its last text, and its history stays.
    api.delete(f"/procedures/researcher/{rule['id']}")
    listing = viewer.get(url(team, "procedures/")).content.decode()
    removed = listing[listing.index("Removed lately") :]
    assert "Answer briefly." in removed and f'href="{history}"' in removed
    gone = viewer.get(history).content.decode()
    assert "Removed: its last text is below." in gone and "removed" in gone
    # Another team's rule (or a number no rule ever had) answers 404 here.
    theirs = procedure_create(team=other_team, agent_id="x", rule="B.", source="agent")
    assert viewer.get(url(team, f"procedures/{theirs.pk}/history/")).status_code == 404
    assert ProcedureRevision.objects.filter(procedure_id=theirs.pk).exists()
    assert viewer.get(url(team, "procedures/99999999/history/")).status_code == 404
    # A rule without recorded changes (older than the history, or imported without it) has an
    # empty one.
    imported = Procedure.objects.create(team=team, agent_id="x", rule="Imported.", source="team")
    page = viewer.get(url(team, f"procedures/{imported.pk}/history/")).content.decode()
    assert "No change recorded" in page and "Now <strong>active</strong>: Imported." in page


def test_a_lead_restores_a_removed_rule_and_a_viewer_cannot(team, lead, viewer, api, other_team):
    from memories.models import Procedure, ProcedureRevision
    from memories.services import Actor, procedure_create, procedure_delete

    rule = ok_data(api.post("/procedures/researcher", {"rule": "Answer briefly."}))
    rid = rule["id"]
    api.delete(f"/procedures/researcher/{rid}")
    restore = url(team, f"procedures/{rid}/restore/")
    history = url(team, f"procedures/{rid}/history/")
    here = url(team, "procedures/?agent=researcher")
    # The button is a lead's: a viewer sees none and is refused.
    assert restore not in viewer.get(url(team, "procedures/")).content.decode()
    assert restore not in viewer.get(history).content.decode()
    assert viewer.post(restore, {"next": here}).status_code == 403
    assert (
        restore in lead.get(here).content.decode() and restore in lead.get(history).content.decode()
    )
    back = lead.post(restore, {"next": here})
    assert (back.status_code, back["Location"]) == (302, here)
    restored = Procedure.objects.get(pk=rid)
    assert (restored.rule, restored.status, restored.source) == (
        "Answer briefly.",
        "active",
        "console",
    )
    assert ProcedureRevision.objects.filter(procedure_id=rid).order_by("-id")[0].by == "user lead_a"
    # Back, it leaves the "Removed lately" list, and its history offers no second restore.
    listing = lead.get(here).content.decode()
    assert "Removed lately" not in listing and restore not in lead.get(history).content.decode()
    # Again from its history page: refused, said so, and the lead stays on that page.
    again = lead.post(restore, {"next": history}, follow=True)
    assert again.redirect_chain[-1][0] == history
    assert f"Rule #{rid} not restored: rule {rid} is not removed" in again.content.decode()
    # Its text taken by a new rule meanwhile: refused, naming that rule.
    api.delete(f"/procedures/researcher/{rid}")
    now = ok_data(api.post("/procedures/researcher", {"rule": "answer briefly."}))
    taken = lead.post(restore, {"next": here}, follow=True).content.decode()
    assert f"researcher already has that rule (#{now['id']})" in taken
    assert not Procedure.objects.filter(pk=rid).exists()
    # Another team's removed rule, or a number no rule ever had: 404, nothing restored.
    theirs = procedure_create(team=other_team, agent_id="x", rule="B.", source="agent")
    procedure_delete(procedure=theirs, actor=Actor())
    assert lead.post(url(team, f"procedures/{theirs.pk}/restore/")).status_code == 404
    assert lead.post(url(team, "procedures/99999999/restore/")).status_code == 404
    assert not Procedure.objects.filter(pk=theirs.pk).exists()


def test_a_lead_corrects_a_rules_wording_and_a_viewer_cannot(team, lead, viewer, other_team):
    from memories.models import Procedure
    from memories.services import procedure_create

    rule = procedure_create(
        team=team, agent_id="researcher", rule="Answr briefly.", source="lifecycle", evidence=[3]
    )
    theirs = procedure_create(team=other_team, agent_id="researcher", rule="B's.", source="agent")
    edit = url(team, f"procedures/{rule.pk}/edit/")
    assert 'name="rule"' in lead.get(url(team, "procedures/")).content.decode()
    assert 'name="rule"' not in viewer.get(url(team, "procedures/")).content.decode()
    assert viewer.post(edit, {"rule": "Viewer's."}).status_code == 403
    answer = lead.post(edit, {"rule": "  Answer briefly.  "}, follow=True)
    assert f"Rule #{rule.pk} of researcher corrected." in answer.content.decode()
    rule.refresh_from_db()
    # The wording changes; what the rule is and where it came from stay.
    assert (rule.rule, rule.status, rule.source, rule.evidence) == (
        "Answer briefly.",
        "active",
        "lifecycle",
        [3],
    )
    for bad in ("   ", "x" * 2001):
        refused = lead.post(edit, {"rule": bad}, follow=True).content.decode()
        assert f"Rule #{rule.pk} unchanged" in refused
    rule.refresh_from_db()
    assert rule.rule == "Answer briefly."
    # The text of another rule of the agent's: refused, naming it (the agent would follow two).
    cite = procedure_create(team=team, agent_id="researcher", rule="Cite it.", source="agent")
    refused = lead.post(edit, {"rule": "cite  IT."}, follow=True).content.decode()
    assert f"Rule #{rule.pk} unchanged: researcher already has that rule (#{cite.pk})." in refused
    rule.refresh_from_db()
    assert rule.rule == "Answer briefly."
    # Another team's rule through this team's URL: not found, untouched.
    assert lead.post(url(team, f"procedures/{theirs.pk}/edit/"), {"rule": "x"}).status_code == 404
    assert Procedure.objects.get(pk=theirs.pk).rule == "B's."


def test_profiles_are_listed_per_agent_with_their_history_and_never_another_teams(
    team, viewer, other_team
):
    from memories.services import Actor, profile_set
    from tenants.services import agent_ensure

    for agent_id in ("researcher", "trader"):
        agent_ensure(team=team, agent_id=agent_id)
    profile_set(team=team, agent_id="researcher", fields={"location": "Berlin"}, actor=Actor())
    profile_set(team=team, agent_id="researcher", fields={"location": "Munich"}, actor=Actor())
    profile_set(team=team, agent_id="trader", fields={"timezone": "UTC+8"}, actor=Actor())
    profile_set(
        team=other_team, agent_id="researcher", fields={"employer": "Initech"}, actor=Actor()
    )
    page = viewer.get(url(team, "profiles/")).content.decode()
    assert "Munich" in page and "UTC+8" in page and "Initech" not in page
    assert "Latest changes" not in page
    one = viewer.get(url(team, "profiles/?agent=researcher")).content.decode()
    assert "UTC+8" not in one and "Latest changes of researcher" in one
    assert "Berlin" in one  # the revision's before
    # An agent id that is not the team's shows every agent, not an error and not another team.
    assert "Initech" not in viewer.get(url(team, "profiles/?agent=nobody")).content.decode()
