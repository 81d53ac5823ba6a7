"""A team lead previews a purge, confirms it, finds the memories in the trash and restores one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from selenium.webdriver.common.by import By

from memories.models import Memory, PurgeRun, TrashedMemory
from memories.services import memory_create
from tests.factories import AgentFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def aged(team, content, *, agent, importance, idle, pinned=False):  # type: ignore[no-untyped-def]
    memory, _ = memory_create(
        team=team,
        scope="personal",
        agent_id=agent,
        content=content,
        importance=importance,
        enable_dedup=False,
        pinned=pinned,
    )
    Memory.objects.filter(pk=memory.pk).update(
        created_at=timezone.now() - timedelta(days=idle + 5),
        last_accessed=timezone.now() - timedelta(days=idle),
    )
    return memory


def test_lead_previews_confirms_and_restores_a_purge(
    browser, live_server, login, shot, click_through
):
    team = TeamFactory(id="team_purge", name="Research bots")
    lead = UserFactory(username="purge_lead")
    MembershipFactory(user=lead, team=team, role="lead")
    for agent_id in ("scout", "writer"):
        AgentFactory(team=team, agent_id=agent_id)
    stale = aged(team, "Old lunch order: two sandwiches", agent="scout", importance=0.1, idle=60)
    aged(team, "Parking spot B12 was free last spring", agent="writer", importance=0.2, idle=45)
    aged(
        team,
        "Customer prefers email over phone",
        agent="scout",
        importance=0.1,
        idle=90,
        pinned=True,
    )
    aged(team, "Deploy checklist: run migrations first", agent="writer", importance=0.9, idle=90)

    login("purge_lead")
    browser.get(f"{live_server.url}/review/{team.id}/purge/")
    idle = browser.find_element(By.ID, "id_idle_days")
    idle.clear()
    idle.send_keys("30")
    threshold = browser.find_element(By.ID, "id_importance_below")
    threshold.clear()
    threshold.send_keys("0.3")
    shot("1-criteria")
    click_through(browser.find_element(By.ID, "preview-button"))

    preview = browser.find_element(By.ID, "purge-preview").text
    assert "2 memories would be moved to the trash" in preview
    assert "idle 60 d, importance 0.10 < 0.30" in preview
    assert "Old lunch order" in preview and "Parking spot B12" in preview
    assert "Customer prefers email" in browser.find_element(By.ID, "preview-protected").text
    assert "Deploy checklist" not in preview
    assert Memory.objects.filter(team=team).count() == 4  # the preview changed nothing
    shot("2-preview")

    click_through(browser.find_element(By.ID, "confirm-button"))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Moved 2 memories to the trash" in body
    assert "Old lunch order" in browser.find_element(By.ID, "trash-items").text
    assert Memory.objects.filter(team=team).count() == 2
    assert PurgeRun.objects.get(team=team).count == 2
    shot("3-trash")

    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-memory-id="{stale.pk}"]')
    click_through(row.find_element(By.CSS_SELECTOR, "button.restore-button"))
    assert "Restored 1 memory" in browser.find_element(By.TAG_NAME, "body").text
    assert Memory.objects.filter(pk=stale.pk, content="Old lunch order: two sandwiches").exists()
    assert TrashedMemory.objects.filter(team=team).count() == 1
    shot("4-restored")

    browser.get(f"{live_server.url}/review/{team.id}/purge/")
    history = browser.find_element(By.ID, "purge-history").text
    assert "user purge_lead" in history and "purged" in history
    shot("5-history")
