"""A team lead logs in through the real login form and lands on their team's console."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_lead_logs_in_and_sees_only_their_team(browser, live_server, login, shot):
    mine = TeamFactory(id="team_browser_a", name="Research bots")
    TeamFactory(id="team_browser_b", name="Trading bots")
    lead = UserFactory(username="lead_a")
    MembershipFactory(user=lead, team=mine, role="lead")

    login("lead_a")
    assert "/review/team_browser_a/" in browser.current_url
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Research bots" in body
    assert "Trading bots" not in body
    shot("after-login")

    browser.get(f"{live_server.url}/review/team_browser_b/")
    assert "Trading bots" not in browser.find_element(By.TAG_NAME, "body").text
    shot("other-team-404")
