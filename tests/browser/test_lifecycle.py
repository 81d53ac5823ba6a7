"""A team lead, in a real browser: saves the pipeline config, presses a run-now button, finds the
job in the log, and follows the persona it built down to the archived working memory."""

from __future__ import annotations

import pytest
from django.test import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from lifecycle.models import JobRun, PipelineConfig
from tenants.services import api_key_issue
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.helpers import SignedClient, ok_data
from tests.test_lifecycle_api import CODER_NOTES, RESEARCH_NOTES

pytestmark = pytest.mark.django_db(transaction=True)


def _seed_memories(team_id: str) -> None:
    """What an agent leaves behind: compressed and extracted working memory, plus notes."""
    team = TeamFactory(id=team_id, name="Research bots")
    issued = api_key_issue(team=team, label="agent")
    api = SignedClient(Client(), issued.key_id, issued.secret)
    for items, op, body in (
        (CODER_NOTES, "/lifecycle/compress", {"target_count": 1}),
        (RESEARCH_NOTES, "/lifecycle/extract-facts", {}),
    ):
        for item in items:
            api.post("/memories/working", {"agent_id": "researcher", "content": item})
        ok_data(api.post(op, {"agent_id": "researcher", **body}))
    for content in (
        "2025-06 策略复盘：最大回撤 12%，主要损失来自 6/3 闪崩",
        "回测数据源：Binance USDT 永续合约，1h K线，2024-01 至今",
    ):
        api.post("/memories/personal", {"agent_id": "researcher", "content": content})
    ok_data(api.post("/lifecycle/aggregate-scenes", {"agent_id": "researcher"}))


def test_lead_configures_runs_and_drills_a_persona_down_to_its_sources(
    browser, live_server, login, shot, click_through
):
    _seed_memories("team_lc")
    lead = UserFactory(username="lc_lead")
    MembershipFactory(user=lead, team_id="team_lc", role="lead")
    login("lc_lead")

    # 1. The lifecycle page: automation is off until the config is saved once.
    browser.get(f"{live_server.url}/review/team_lc/lifecycle/")
    assert "Automation is off" in browser.find_element(By.ID, "automation-state").text
    shot("1-lifecycle-page")

    # 2. Save the configuration.
    field = browser.find_element(By.ID, "id_compress_every_n")
    field.clear()
    field.send_keys("8")
    click_through(browser.find_element(By.ID, "save-config"))
    assert "automation is now on" in browser.find_element(By.CLASS_NAME, "messages").text
    assert "Automation is on" in browser.find_element(By.ID, "automation-state").text
    assert PipelineConfig.objects.get(team_id="team_lc").compress_every_n == 8
    shot("2-config-saved")

    # 3. Run now: generate the researcher's persona.
    form = browser.find_element(By.ID, "run-generate-persona")
    Select(form.find_element(By.TAG_NAME, "select")).select_by_value("researcher")
    click_through(form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    assert "/review/team_lc/lifecycle/jobs/" in browser.current_url
    job = JobRun.objects.get(team_id="team_lc", kind="generate-persona")
    assert (job.trigger, job.status) == ("admin", "succeeded")
    log = browser.find_element(By.ID, "job-log").text
    assert f"#{job.pk}" in log and "generate-persona" in log and "admin" in log
    shot("3-job-log")

    # 4. The job's page, then its persona.
    click_through(browser.find_element(By.LINK_TEXT, f"#{job.pk}"))
    assert browser.find_element(By.ID, "job-status").text == "succeeded"
    shot("4-job-detail")
    click_through(browser.find_element(By.PARTIAL_LINK_TEXT, "persona of researcher"))
    assert browser.find_element(By.ID, "persona-content").is_displayed()
    shot("5-persona")

    # 5. Scenario -> memories -> archived working-memory sources.
    scenario_urls = [
        a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "a.scenario-link")
    ]
    assert scenario_urls
    for scenario_url in scenario_urls:
        browser.get(scenario_url)
        links = browser.find_elements(By.CSS_SELECTOR, "a.sources-link")
        if links:
            break
    else:
        pytest.fail("no derived memory in the persona's scenarios")
    shot("6-scenario-memories")
    click_through(links[0])
    rows = browser.find_elements(By.CSS_SELECTOR, "#sources tr.source-row")
    assert rows
    text = browser.find_element(By.ID, "sources").text
    assert any(item in text for item in CODER_NOTES + RESEARCH_NOTES)
    shot("7-archived-sources")
