"""A team lead imports a Zep export through the console's file form, sees what came in, then
starts an export and finds its download link."""

from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from lifecycle.models import JobRun
from memories.models import Memory
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.test_import_zep import EXPORT

pytestmark = pytest.mark.django_db(transaction=True)


def test_lead_imports_a_zep_export_and_exports_the_team(
    browser, live_server, login, shot, click_through, tmp_path
):
    team = TeamFactory(id="team_move", name="Movers")
    lead = UserFactory(username="move_lead")
    MembershipFactory(user=lead, team=team, role="lead")
    path = tmp_path / "alice.json"
    path.write_text(json.dumps(EXPORT))

    login("move_lead")
    browser.get(f"{live_server.url}/review/{team.id}/transfer/")
    Select(browser.find_element(By.ID, "id_source")).select_by_value("zep")
    browser.find_element(By.ID, "id_file").send_keys(str(path))
    shot("1-form")
    form = browser.find_element(By.ID, "import-form")
    click_through(form.find_element(By.CSS_SELECTOR, "button[type=submit]"))

    result = browser.find_element(By.ID, "import-result").text
    assert "Imported alice.json" in result
    assert "memory 4 0" in result and "relation 2 0" in result
    assert Memory.objects.filter(team=team, agent_id="alice").count() == 4
    shot("2-imported")

    form = browser.find_element(By.ID, "export-form")
    click_through(form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    job = JobRun.objects.get(team=team, kind="export")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job.pk}"]')
    assert "succeeded" in row.text and "(the whole team)" in row.text
    link = row.find_element(By.LINK_TEXT, "Download")
    assert link.get_attribute("href").endswith(f"/review/{team.id}/transfer/export/{job.pk}/")
    shot("3-exported")
