"""A team lead finds a memory by meaning, corrects it on its detail page and sees the revision."""

from __future__ import annotations

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from memories.services import memory_create
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_for_text(browser, text: str) -> None:  # type: ignore[no-untyped-def]
    """Waits for the page after a POST. Its clicks go through `click_through`, which waits for
    the old page to go first: Chromium reports a node of the page being replaced either as stale
    or as "does not belong to the document", which no wait on the new page could tell apart from
    a real error."""
    WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda b: text in b.find_element(By.TAG_NAME, "body").text
    )


def test_lead_searches_by_meaning_corrects_inline_and_sees_the_revision(
    browser, live_server, login, shot, click_through
):
    team = TeamFactory(id="team_review_a", name="Research bots")
    other = TeamFactory(id="team_review_b", name="Trading bots")
    MembershipFactory(user=UserFactory(username="lead_review"), team=team, role="lead")
    tea, _ = memory_create(
        team=team,
        scope="personal",
        agent_id="researcher",
        content="The user prefers green tea in the morning.",
        importance=0.6,
    )
    memory_create(
        team=team, scope="team", agent_id="", content="Deploys happen on Tuesdays after review."
    )
    memory_create(
        team=other, scope="personal", agent_id="spy", content="The user drinks espresso at dawn."
    )

    login("lead_review")
    browser.get(f"{live_server.url}/review/{team.id}/memories/")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.memories tbody tr[data-id]")
    assert len(rows) == 2
    shot("1-list")

    box = browser.find_element(By.NAME, "q")
    box.send_keys("what does the user drink at breakfast")
    box.submit()
    WebDriverWait(browser, 10).until(lambda b: "q=" in b.current_url)
    first = browser.find_element(By.CSS_SELECTOR, "table.memories tbody tr[data-id]")
    assert first.get_attribute("data-id") == str(tea.pk)
    assert float(first.find_element(By.CSS_SELECTOR, "td.score").text) > 0.3
    assert "espresso" not in browser.find_element(By.TAG_NAME, "body").text
    shot("2-search-by-meaning")

    first.find_element(By.CSS_SELECTOR, "td.content a").click()
    WebDriverWait(browser, 10).until(lambda b: f"/memories/{tea.pk}/" in b.current_url)
    content = browser.find_element(By.NAME, "content")
    content.clear()
    content.send_keys("The user prefers jasmine tea in the afternoon.")
    importance = browser.find_element(By.NAME, "importance")
    importance.clear()
    importance.send_keys("0.9")
    browser.find_element(By.NAME, "pinned").click()
    shot("3-correction-typed")
    click_through(browser.find_element(By.CSS_SELECTOR, "#correction button[type=submit]"))
    _wait_for_text(browser, "Saved")
    assert (
        browser.find_element(By.ID, "memory-content").text
        == "The user prefers jasmine tea in the afternoon."
    )
    revision = browser.find_element(By.CSS_SELECTOR, "ol.revisions li.revision")
    assert "by user lead_review" in revision.text
    assert "jasmine" in revision.find_element(By.CSS_SELECTOR, "ins").text
    assert "green" in revision.find_element(By.CSS_SELECTOR, "del").text
    browser.execute_script("arguments[0].scrollIntoView()", revision)
    shot("4-revision-shown")

    # The corrected memory is found by its new meaning.
    browser.get(f"{live_server.url}/review/{team.id}/memories/?q=jasmine+tea+in+the+afternoon")
    first = browser.find_element(By.CSS_SELECTOR, "table.memories tbody tr[data-id]")
    assert first.get_attribute("data-id") == str(tea.pk)
    assert "pinned" in first.text
    shot("5-found-after-correction")


def test_lead_promotes_a_memory_and_grants_another_agent(
    browser, live_server, login, shot, click_through
):
    from memories.models import Memory, MemoryShare
    from tenants.services import agent_ensure

    team = TeamFactory(id="team_review_c", name="Research bots")
    MembershipFactory(user=UserFactory(username="lead_share"), team=team, role="lead")
    agent_ensure(team=team, agent_id="coder")
    agent_ensure(team=team, agent_id="writer")
    memory, _ = memory_create(
        team=team,
        scope="personal",
        agent_id="researcher",
        content="The staging database is reset every Sunday night.",
    )

    login("lead_share")
    browser.get(f"{live_server.url}/review/{team.id}/memories/{memory.pk}/")
    share = browser.find_element(By.ID, "share")
    share.find_element(By.CSS_SELECTOR, "input[value=coder]").click()
    share.find_element(By.CSS_SELECTOR, "select[name=permission] option[value=write]").click()
    share.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "grants"))
    grants = browser.find_element(By.ID, "grants").text
    assert "coder" in grants and "write" in grants
    assert MemoryShare.objects.get(memory=memory).permission == "write"
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "sharing"))
    shot("1-granted")

    click_through(
        browser.find_element(By.XPATH, "//button[normalize-space()='Promote to team memory']")
    )
    _wait_for_text(browser, "Promoted:")
    promoted = Memory.objects.get(promoted_from=memory)
    assert f"/memories/{promoted.pk}/" in browser.current_url
    assert f"#{memory.pk}" in browser.find_element(By.ID, "sharing").text
    shot("2-promoted")
