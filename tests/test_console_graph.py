"""Console graph view: the page, the graph JSON (team and agent visibility, search centring, caps),
the node detail (relations both ways, source memories) and team scoping."""

from __future__ import annotations

import uuid

import pytest

from graph import services as graph_services

from .console_helpers import member_client
from .factories import EntityFactory, MemoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def graph(team, other_team):
    """team_a: Alice (alice's) -works_on-> Apollo (team-wide) -uses-> Python (team-wide);
    Bob (bob's) -knows-> Alice. team_b: a secret entity."""
    m1 = MemoryFactory(
        team=team,
        agent_id="alice",
        content="Alice works on the Apollo project with Python every day",
    )
    m2 = MemoryFactory(team=team, agent_id="alice", content="Alice said Apollo ships in March")
    alice = EntityFactory(
        team=team,
        name="Alice",
        entity_type="person",
        agent_id="alice",
        source_memory=m1,
        description="an engineer",
    )
    apollo = EntityFactory(team=team, name="Apollo", entity_type="project", source_memory=m1)
    graph_services.entity_mention(entity=apollo, memory=m2)
    python = EntityFactory(team=team, name="Python", entity_type="skill")
    bob = EntityFactory(team=team, name="Bob", entity_type="person", agent_id="bob")
    graph_services.relation_create(source=alice, target=apollo, relation_type="works_on")
    graph_services.relation_create(source=apollo, target=python, relation_type="uses")
    graph_services.relation_create(source=bob, target=alice, relation_type="knows")
    secret = EntityFactory(team=other_team, name="Secret Project Zeus", entity_type="project")
    return {
        "alice": alice,
        "apollo": apollo,
        "python": python,
        "bob": bob,
        "secret": secret,
        "m1": m1,
        "m2": m2,
    }


def _names(body) -> set[str]:
    return {e["name"] for e in body["entities"]}


def test_graph_page_renders_with_local_assets_and_agent_selector(team, graph, lead):
    r = lead.get("/review/team_a/graph/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "/static/console/vendor/cytoscape.min.js" in html
    assert "/static/console/graph/graph.js" in html
    assert "http://" not in html.split("<body")[1] and "https://" not in html.split("<body")[1]
    assert 'id="graph-config"' in html and "/review/team_a/graph/data/" in html
    assert '<option value="alice"' in html and '<option value="bob"' in html


def test_graph_json_has_the_teams_nodes_and_edges_and_none_of_another_team(team, graph, lead):
    body = lead.get("/review/team_a/graph/data/").json()
    assert _names(body) == {"Alice", "Apollo", "Python", "Bob"}
    assert {r["relation_type"] for r in body["relations"]} == {"works_on", "uses", "knows"}
    assert body["truncated"] is False and body["caps"] == {"max_nodes": 500, "max_edges": 2000}
    assert "Zeus" not in str(body)
    # A console look is not a recall: access counts are untouched.
    graph["apollo"].refresh_from_db()
    assert graph["apollo"].access_count == 0


def test_agent_filter_shows_what_that_agent_may_see(team, graph, lead):
    body = lead.get("/review/team_a/graph/data/", {"agent": "alice"}).json()
    # alice's own + team-wide; bob's entity and the edge touching it are absent.
    assert _names(body) == {"Alice", "Apollo", "Python"}
    assert {r["relation_type"] for r in body["relations"]} == {"works_on", "uses"}
    assert body["agent"] == "alice"
    body = lead.get("/review/team_a/graph/data/", {"agent": "bob"}).json()
    assert _names(body) == {"Bob", "Apollo", "Python"}
    assert body["relations"] == [r for r in body["relations"] if r["relation_type"] == "uses"]


def test_search_centres_on_the_best_match_with_the_api_traversal(team, graph, lead):
    body = lead.get("/review/team_a/graph/data/", {"q": "Python", "depth": "1"}).json()
    assert body["matches"][0]["name"] == "Python"
    assert body["centre"] == str(graph["python"].pk)
    assert _names(body) == {"Python", "Apollo"}  # one hop
    body = lead.get("/review/team_a/graph/data/", {"q": "Python", "depth": "2"}).json()
    assert _names(body) == {"Python", "Apollo", "Alice"}
    body = lead.get(
        "/review/team_a/graph/data/", {"entity": str(graph["bob"].pk), "depth": "1"}
    ).json()
    assert body["centre"] == str(graph["bob"].pk) and _names(body) == {"Bob", "Alice"}


def test_search_without_match_draws_nothing(team, graph, lead):
    body = lead.get("/review/team_a/graph/data/", {"q": "zzzz qqqq xxxx"}).json()
    assert body["entities"] == [] or body["matches"]  # semantic search may still find one
    assert "Zeus" not in str(body)


def test_another_teams_entity_is_404_everywhere(team, graph, lead):
    zeus = str(graph["secret"].pk)
    assert lead.get("/review/team_a/graph/data/", {"entity": zeus}).status_code == 404
    assert lead.get(f"/review/team_a/graph/entity/{zeus}/").status_code == 404
    assert lead.get(f"/review/team_a/graph/entity/{uuid.uuid4()}/").status_code == 404
    assert lead.get("/review/team_a/graph/entity/not-a-uuid/").status_code == 404
    # Another team's pages are 404 too, whatever the entity.
    assert lead.get("/review/team_b/graph/").status_code == 404
    assert lead.get("/review/team_b/graph/data/").status_code == 404
    assert lead.get(f"/review/team_b/graph/entity/{zeus}/").status_code == 404
    body = lead.get("/review/team_a/graph/data/", {"q": "Secret Project Zeus"}).json()
    assert "Zeus" not in str(body)


def test_node_detail_has_relations_both_ways_and_source_memories(team, graph, lead):
    alice = graph["alice"]
    d = lead.get(f"/review/team_a/graph/entity/{alice.pk}/").json()
    assert d["entity"]["name"] == "Alice" and d["entity"]["entity_type"] == "person"
    assert d["entity"]["description"] == "an engineer"
    assert [(r["relation_type"], r["other"]["name"]) for r in d["outgoing_relations"]] == [
        ("works_on", "Apollo")
    ]
    assert [(r["relation_type"], r["other"]["name"]) for r in d["incoming_relations"]] == [
        ("knows", "Bob")
    ]
    assert [m["id"] for m in d["source_memories"]] == [graph["m1"].pk]
    assert d["source_memories"][0]["content"].startswith("Alice works on")
    # Every memory that mentions it, newest first.
    d = lead.get(f"/review/team_a/graph/entity/{graph['apollo'].pk}/").json()
    assert {m["id"] for m in d["source_memories"]} == {graph["m1"].pk, graph["m2"].pk}
    assert d["source_memories_total"] == 2


def test_node_detail_as_an_agent_hides_other_agents(team, graph, lead):
    d = lead.get(f"/review/team_a/graph/entity/{graph['alice'].pk}/", {"agent": "alice"}).json()
    assert d["incoming_relations"] == []  # bob's "knows" is bob's
    r = lead.get(f"/review/team_a/graph/entity/{graph['bob'].pk}/", {"agent": "alice"})
    assert r.status_code == 403


def test_caps_cut_the_graph_and_say_so(team, graph, lead):
    body = lead.get("/review/team_a/graph/data/", {"max_nodes": "2"}).json()
    assert len(body["entities"]) == 2 and body["truncated"] is True
    assert body["caps"]["max_nodes"] == 2
    body = lead.get("/review/team_a/graph/data/", {"max_edges": "1"}).json()
    assert len(body["relations"]) == 1 and body["truncated"] is True


def test_bad_input_is_a_400_or_form_errors_never_a_500(team, graph, lead):
    r = lead.get("/review/team_a/graph/data/", {"max_nodes": "0", "depth": "9"})
    assert r.status_code == 400
    assert set(r.json()["details"]) == {"max_nodes", "depth"}
    r = lead.get("/review/team_a/graph/", {"agent": "bad agent!", "entity": "nope"})
    assert r.status_code == 200 and 'role="alert"' in r.content.decode()
    assert lead.get("/review/team_a/graph/data/", {"q": "x" * 1001}).status_code == 400


def test_viewer_sees_the_graph_and_anonymous_is_sent_to_login(team, graph, client):
    viewer = member_client(team, "viewer_graph", "viewer")
    assert viewer.get("/review/team_a/graph/").status_code == 200
    assert viewer.get("/review/team_a/graph/data/").status_code == 200
    assert viewer.get(f"/review/team_a/graph/entity/{graph['alice'].pk}/").status_code == 200
    r = client.get("/review/team_a/graph/data/")
    assert r.status_code == 302 and "/admin/login/" in r.url
