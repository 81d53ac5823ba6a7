"""A team lead opens the graph view (nodes drawn, a node's panel) and the dashboard (SVG charts
with data) in headless Chromium, with a screenshot at each step."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from graph import services as graph_services
from lifecycle.models import JobRun
from memories.models import Memory
from tests.factories import MembershipFactory, MemoryFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _memory(team, content: str, agent: str, source: str) -> Memory:
    return MemoryFactory(team=team, agent_id=agent, content=content, metadata={"source": source})


def _seed() -> None:
    team = TeamFactory(id="team_graph_ui", name="Graph bots")
    other = TeamFactory(id="team_graph_other", name="Other bots")
    MembershipFactory(user=UserFactory(username="lead_graph_ui"), team=team, role="lead")
    m = _memory(team, "Alice leads the Apollo project, written in Python", "alice", "chat")
    _memory(team, "Bob reviews Apollo releases", "bob", "email")
    alice, _ = graph_services.entity_create_or_merge(
        team=team, name="Alice", entity_type="person", agent_id="alice", source_memory=m
    )
    apollo, _ = graph_services.entity_create_or_merge(
        team=team, name="Apollo", entity_type="project", source_memory=m
    )
    python, _ = graph_services.entity_create_or_merge(team=team, name="Python", entity_type="skill")
    graph_services.relation_create(source=alice, target=apollo, relation_type="works_on")
    graph_services.relation_create(source=apollo, target=python, relation_type="uses")
    graph_services.entity_create_or_merge(team=other, name="Hidden Zeus", entity_type="project")
    JobRun.objects.create(team=team, kind="compress", trigger="api", status="succeeded")
    JobRun.objects.create(team=team, kind="extract-facts", trigger="api", status="failed")


def test_lead_explores_the_graph_and_reads_the_dashboard(browser, live_server, login, shot):
    _seed()
    login("lead_graph_ui")
    wait = WebDriverWait(browser, 20)

    browser.get(f"{live_server.url}/review/team_graph_ui/graph/")
    wait.until(lambda d: d.execute_script("return !!(window.cy && window.cy.nodes().length)"))
    assert browser.execute_script("return window.cy.nodes().length") == 3
    assert browser.execute_script("return window.cy.edges().length") == 2
    names = set(browser.execute_script("return window.cy.nodes().map(n => n.data('label'))"))
    assert names == {"Alice", "Apollo", "Python"}
    # The nodes are really drawn: laid out inside the visible canvas.
    box = browser.execute_script(
        "var b = window.cy.nodes().renderedBoundingBox(); return [b.w, b.h, window.cy.width()]"
    )
    assert box[0] > 0 and box[1] > 0 and box[0] <= box[2] + 60
    assert "3 entities, 2 relations" in browser.find_element(By.ID, "graph-status").text
    shot("graph-rendered")

    # Click Apollo where it is drawn on the canvas.
    pos = browser.execute_script(
        "var n = window.cy.nodes().filter(n => n.data('label') === 'Apollo')[0];"
        "var p = n.renderedPosition(); return [p.x, p.y];"
    )
    canvas = browser.find_element(By.ID, "graph-canvas")
    from selenium.webdriver.common.action_chains import ActionChains

    size = canvas.size
    ActionChains(browser).move_to_element_with_offset(
        canvas, int(pos[0] - size["width"] / 2), int(pos[1] - size["height"] / 2)
    ).click().perform()
    wait.until(ec.visibility_of_element_located((By.ID, "graph-relations")))
    panel = browser.find_element(By.ID, "graph-panel").text
    assert "Apollo" in panel and "project" in panel
    assert "works_on" in panel and "uses" in panel and "Python" in panel
    assert "Alice leads the Apollo project" in panel
    link = browser.find_element(By.CSS_SELECTOR, "#graph-sources a")
    assert "/review/team_graph_ui/memories/" in link.get_attribute("href")
    shot("graph-node-panel")

    # A relation in the panel selects the other end.
    browser.find_element(By.CSS_SELECTOR, "#graph-relations button[data-entity]").click()
    wait.until(lambda d: "Relations" in d.find_element(By.ID, "graph-panel").text)
    assert browser.execute_script("return window.cy.$(':selected').length") >= 1
    shot("graph-relation-followed")

    # As agent bob sees it: alice's entity is gone.
    browser.get(f"{live_server.url}/review/team_graph_ui/graph/?agent=bob")
    wait.until(lambda d: d.execute_script("return !!(window.cy && window.cy.nodes().length)"))
    assert browser.execute_script("return window.cy.nodes().length") == 2
    shot("graph-as-agent")

    browser.get(f"{live_server.url}/review/team_graph_ui/dashboard/")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 6
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline.series")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")
    assert browser.find_element(By.ID, "total-memories").text == "2"
    assert browser.find_element(By.ID, "total-failed").text == "1"
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Other bots" not in body and "Zeus" not in body
    shot("dashboard-charts")
    browser.find_element(By.CSS_SELECTOR, "details summary").click()
    assert browser.find_element(By.CSS_SELECTOR, "details table").is_displayed()
    shot("dashboard-numbers")


def test_the_team_view_boxes_one_thing_remembered_by_two_agents(browser, live_server, login, shot):
    from graph.identity import link_team

    team = TeamFactory(id="team_graph_shared", name="Shared bots")
    MembershipFactory(user=UserFactory(username="lead_graph_shared"), team=team, role="lead")
    for agent in ("alice", "bob"):
        graph_services.entity_create_or_merge(
            team=team, name="Binance", entity_type="organization", agent_id=agent
        )
    graph_services.entity_create_or_merge(
        team=team, name="用户", entity_type="person", agent_id="alice"
    )
    link_team(team=team)
    login("lead_graph_shared")
    wait = WebDriverWait(browser, 20)

    browser.get(f"{live_server.url}/review/team_graph_shared/graph/")
    wait.until(lambda d: d.execute_script("return !!(window.cy && window.cy.nodes().length)"))
    boxes = browser.execute_script(
        "return window.cy.nodes('[kind = \"identity\"]').map(n => [n.data('label'),"
        " n.children().length])"
    )
    assert boxes == [["Binance · 2 entities", 2]]
    assert "1 shared across agents" in browser.find_element(By.ID, "graph-status").text
    browser.execute_script("window.cy.nodes('[kind = \"identity\"]').children()[0].emit('tap')")
    wait.until(ec.visibility_of_element_located((By.ID, "graph-same-as")))
    assert "team-wide" not in browser.find_element(By.ID, "graph-same-as").text
    assert "agent " in browser.find_element(By.ID, "graph-same-as").text
    shot("graph-identity-box")

    # As one agent sees it: no box, no list.
    browser.get(f"{live_server.url}/review/team_graph_shared/graph/?agent=alice")
    wait.until(lambda d: d.execute_script("return !!(window.cy && window.cy.nodes().length)"))
    assert browser.execute_script("return window.cy.nodes('[kind = \"identity\"]').length") == 0
    assert browser.execute_script("return window.cy.nodes().length") == 2
