"""Knowledge-graph endpoints (docs/graph.md): entities, relations, traversal, isolation, query counts."""

from __future__ import annotations

import uuid
from itertools import pairwise

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from graph.models import Entity, Relation
from graph.resolution import normalise_name

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db


def create(api, name, entity_type="concept", **extra):
    r = api.post("/graph/entities", {"name": name, "entity_type": entity_type, **extra})
    assert r.status_code in (200, 201), r.content
    return ok_data(r)


def relate(api, source, target, relation_type="related_to", **extra):
    r = api.post(
        "/graph/relations",
        {
            "source_entity_id": source["id"],
            "target_entity_id": target["id"],
            "relation_type": relation_type,
            **extra,
        },
    )
    assert r.status_code in (200, 201), r.content
    return ok_data(r)


def bulk_entities(team, names, agent_id=""):
    """Rows without vectors, for graphs too big to embed name by name in a test."""
    rows = [
        Entity(
            team=team,
            agent_id=agent_id,
            name=n,
            entity_type="concept",
            normalized_name=normalise_name(n),
        )
        for n in names
    ]
    Entity.objects.bulk_create(rows)
    return rows


def bulk_relations(team, pairs, relation_type="related_to"):
    Relation.objects.bulk_create(
        [Relation(team=team, source=a, target=b, relation_type=relation_type) for a, b in pairs]
    )


class TestEntityCreateAndMerge:
    def test_it_creates_an_entity_with_all_fields(self, api):
        r = api.post(
            "/graph/entities",
            {
                "name": "Python",
                "entity_type": "preference",
                "description": "Prefers concise Python snippets using async/await syntax.",
                "properties": {"level": "expert"},
            },
        )
        assert r.status_code == 201
        e = ok_data(r)
        assert set(e) == {
            "id",
            "team_id",
            "agent_id",
            "name",
            "entity_type",
            "description",
            "properties",
            "source_memory_id",
            "access_count",
            "last_accessed_at",
            "created_at",
            "updated_at",
        }
        assert uuid.UUID(e["id"])
        assert (e["team_id"], e["agent_id"], e["name"], e["entity_type"]) == (
            "team_a",
            None,
            "Python",
            "preference",
        )
        assert e["properties"] == {"level": "expert"}
        assert (e["access_count"], e["last_accessed_at"], e["source_memory_id"]) == (0, None, None)
        row = Entity.objects.get(pk=e["id"])
        assert row.embedding and row.embedding_model
        assert row.normalized_name == "python"

    def test_description_is_null_when_absent(self, api):
        assert create(api, "Redis")["description"] is None

    def test_same_name_and_type_merges_into_the_existing_entity(self, api):
        first = create(
            api,
            "Python",
            "skill",
            description="Writes Python daily.",
            properties={"level": "expert", "since": 2015},
        )
        before = bytes(Entity.objects.get(pk=first["id"]).embedding)
        r = api.post(
            "/graph/entities",
            {
                "name": "Python",
                "entity_type": "skill",
                "description": "Uses asyncio a lot.",
                "properties": {"level": "guru", "editor": "vim"},
            },
        )
        assert r.status_code == 200
        merged = ok_data(r)
        assert merged["id"] == first["id"]
        assert merged["description"] == "Writes Python daily.\nUses asyncio a lot."
        assert merged["properties"] == {"level": "guru", "since": 2015, "editor": "vim"}
        assert bytes(Entity.objects.get(pk=first["id"]).embedding) != before  # refreshed
        assert Entity.objects.count() == 1

    def test_a_merge_with_the_same_description_does_not_repeat_it(self, api):
        first = create(api, "Go", "skill", description="Backend services.")
        again = create(api, "Go", "skill", description="Backend services.")
        assert again["id"] == first["id"]
        assert again["description"] == "Backend services."

    def test_names_merge_case_insensitively(self, api):
        first = create(api, "Python", "skill")
        r = api.post("/graph/entities", {"name": "python", "entity_type": "skill"})
        assert r.status_code == 200
        assert ok_data(r)["id"] == first["id"]
        assert ok_data(r)["name"] == "Python"

    def test_names_the_database_collates_together_never_fail(self, api):
        """MariaDB's collation calls "café" and "cafe" equal, Python does not: merge, no 500."""
        first = create(api, "café", "location")
        r = api.post("/graph/entities", {"name": "cafe", "entity_type": "location"})
        assert r.status_code in (200, 201)
        if r.status_code == 200:
            assert ok_data(r)["id"] == first["id"]

    def test_another_type_or_scope_is_another_entity(self, api):
        skill = create(api, "Python", "skill")
        preference = create(api, "Python", "preference")
        mine = create(api, "Python", "skill", agent_id="coder")
        assert len({skill["id"], preference["id"], mine["id"]}) == 3
        assert mine["agent_id"] == "coder"

    def test_chinese_names_round_trip(self, api):
        e = create(api, "量化策略", "project", description="回测周期 6 个月")
        assert ok_data(api.get(f"/graph/entities/{e['id']}"))["entity"]["name"] == "量化策略"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"entity_type": "skill"}, "name"),
            ({"name": "", "entity_type": "skill"}, "name"),
            ({"name": "   ", "entity_type": "skill"}, "name"),
            ({"name": 42, "entity_type": "skill"}, "name"),
            ({"name": "x" * 256, "entity_type": "skill"}, "name"),
            ({"name": "X"}, "entity_type"),
            ({"name": "X", "entity_type": "animal"}, "entity_type"),
            ({"name": "X", "entity_type": "skill", "properties": [1]}, "properties"),
            ({"name": "X", "entity_type": "skill", "description": 5}, "description"),
            ({"name": "X", "entity_type": "skill", "agent_id": "bad id!"}, "agent_id"),
        ],
    )
    def test_it_rejects_bad_input(self, api, body, field):
        r = api.post("/graph/entities", body)
        assert r.status_code == 400
        assert error_code(r) == "VALIDATION_ERROR"
        assert field in r.json()["details"]

    def test_a_255_character_name_is_fine(self, api):
        assert create(api, "名" * 255)["name"] == "名" * 255


class TestEntityList:
    def test_paging_envelope_and_newest_first(self, api):
        ids = [create(api, f"thing {i}")["id"] for i in range(5)]
        data = ok_data(api.get("/graph/entities?page=1&page_size=2"))
        assert (data["total"], data["page"], data["page_size"]) == (5, 1, 2)
        assert [e["id"] for e in data["items"]] == ids[::-1][:2]
        data = ok_data(api.get("/graph/entities?page=3&page_size=2"))
        assert [e["id"] for e in data["items"]] == [ids[0]]
        assert ok_data(api.get("/graph/entities?page=9"))["items"] == []

    @pytest.mark.parametrize(
        "query",
        ["page=0", "page=-1", "page=x", "page_size=0", "page_size=101", "entity_type=animal"],
    )
    def test_bad_paging_or_filters_are_400(self, api, query):
        r = api.get(f"/graph/entities?{query}")
        assert r.status_code == 400
        assert error_code(r) == "VALIDATION_ERROR"

    def test_filters_by_type_and_agent(self, api):
        create(api, "Alice", "person")
        create(api, "Acme", "organization")
        create(api, "Vim", "skill", agent_id="coder")
        people = ok_data(api.get("/graph/entities?entity_type=person"))
        assert [e["name"] for e in people["items"]] == ["Alice"]
        coder = ok_data(api.get("/graph/entities?agent_id=coder"))
        assert [e["name"] for e in coder["items"]] == ["Vim"]
        assert ok_data(api.get("/graph/entities?page_size=100"))["total"] == 3

    def test_q_finds_by_name_and_meaning_best_first(self, api):
        create(api, "Python", "skill", description="programming language")
        create(api, "Kubernetes", "skill", description="容器编排平台，部署微服务")
        create(api, "咖啡", "preference", description="每天早上喝一杯美式")
        data = ok_data(api.get("/graph/entities?q=python"))
        assert data["items"][0]["name"] == "Python"
        assert data["items"][0]["score"] >= 0.9
        data = ok_data(api.get("/graph/entities?q=容器编排"))
        assert data["items"][0]["name"] == "Kubernetes"
        assert all(0 <= e["score"] <= 1 for e in data["items"])
        assert data["total"] == len(data["items"])

    def test_q_with_nothing_related_is_empty(self, api):
        create(api, "Python", "skill")
        data = ok_data(api.get("/graph/entities?q=zzqx"))
        assert data["total"] == len(data["items"])

    def test_q_sees_every_change_at_once(self, api):
        """The per-process vector cache is checked against the database before each search."""
        e = create(api, "Alpha", "project")
        assert ok_data(api.get("/graph/entities?q=Alpha"))["items"][0]["id"] == e["id"]
        api.put(f"/graph/entities/{e['id']}", {"name": "Zebrafish"})
        top = ok_data(api.get("/graph/entities?q=Zebrafish"))["items"][0]
        assert (top["id"], top["name"]) == (e["id"], "Zebrafish")
        api.delete(f"/graph/entities/{e['id']}")
        found = ok_data(api.get("/graph/entities?q=Zebrafish"))["items"]
        assert e["id"] not in {x["id"] for x in found}
        again = create(api, "Zebrafish", "project")
        assert ok_data(api.get("/graph/entities?q=Zebrafish"))["items"][0]["id"] == again["id"]

    def test_q_respects_filters_and_agent_keys(self, api, agent_api):
        create(api, "Python", "skill", agent_id="coder")
        mine = create(api, "Python", "skill", agent_id="researcher")
        shared = create(api, "Python", "preference")
        data = ok_data(api.get("/graph/entities?q=python&entity_type=preference"))
        assert [x["id"] for x in data["items"]] == [shared["id"]]
        data = ok_data(agent_api.get("/graph/entities?q=python"))
        assert {x["id"] for x in data["items"]} == {mine["id"], shared["id"]}

    def test_q_too_long_is_400(self, api):
        assert api.get("/graph/entities?q=" + "a" * 1001).status_code == 400


class TestEntityDetailUpdateDelete:
    def test_detail_has_outgoing_and_incoming_relations_and_counts_access(self, api):
        a, b, c = create(api, "A"), create(api, "B"), create(api, "C")
        ab = relate(api, a, b, "uses")
        ca = relate(api, c, a, "knows")
        data = ok_data(api.get(f"/graph/entities/{a['id']}"))
        assert data["entity"]["id"] == a["id"]
        assert [r["id"] for r in data["outgoing_relations"]] == [ab["id"]]
        assert [r["id"] for r in data["incoming_relations"]] == [ca["id"]]
        assert data["entity"]["access_count"] == 1
        assert data["entity"]["last_accessed_at"] is not None
        assert ok_data(api.get(f"/graph/entities/{a['id']}"))["entity"]["access_count"] == 2

    @pytest.mark.parametrize("bad", ["not-a-uuid", "123", str(uuid.uuid4())])
    def test_unknown_or_malformed_ids_are_404(self, api, bad):
        for method in ("get", "delete"):
            r = getattr(api, method)(f"/graph/entities/{bad}")
            assert r.status_code == 404
            assert error_code(r) == "NOT_FOUND"
        r = api.put(f"/graph/entities/{bad}", {"name": "x"})
        assert r.status_code == 404

    def test_put_null_and_omitted_fields_are_unchanged(self, api):
        e = create(api, "Python", "skill", description="old", properties={"a": 1, "b": 2})
        data = ok_data(api.put(f"/graph/entities/{e['id']}", {"name": None, "description": None}))
        assert (data["name"], data["description"], data["properties"]) == (
            "Python",
            "old",
            {"a": 1, "b": 2},
        )

    def test_put_replaces_description_merges_properties_and_reembeds(self, api):
        e = create(api, "Python", "skill", description="old", properties={"a": 1, "b": 2})
        before = bytes(Entity.objects.get(pk=e["id"]).embedding)
        data = ok_data(
            api.put(
                f"/graph/entities/{e['id']}",
                {"name": "Python 3.13", "description": "new", "properties": {"b": 3, "c": 4}},
            )
        )
        assert (data["name"], data["description"]) == ("Python 3.13", "new")
        assert data["properties"] == {"a": 1, "b": 3, "c": 4}
        row = Entity.objects.get(pk=e["id"])
        assert bytes(row.embedding) != before
        assert row.normalized_name == "python"

    def test_renaming_onto_another_entity_is_a_conflict(self, api):
        create(api, "Go", "skill")
        rust = create(api, "Rust", "skill")
        r = api.put(f"/graph/entities/{rust['id']}", {"name": "go"})
        assert r.status_code == 409
        assert error_code(r) == "CONFLICT"

    def test_put_validates(self, api):
        e = create(api, "X")
        for body in ({"name": ""}, {"name": 5}, {"properties": "x"}, {"name": "y" * 256}):
            r = api.put(f"/graph/entities/{e['id']}", body)
            assert r.status_code == 400, body

    def test_delete_removes_the_entity_and_its_relations(self, api):
        a, b, c = create(api, "A"), create(api, "B"), create(api, "C")
        relate(api, a, b)
        relate(api, c, a)
        keep = relate(api, b, c)
        data = ok_data(api.delete(f"/graph/entities/{a['id']}"))
        assert data == {"deleted": a["id"], "relations_deleted": 2}
        assert api.get(f"/graph/entities/{a['id']}").status_code == 404
        assert list(Relation.objects.values_list("id", flat=True)) == [uuid.UUID(keep["id"])]


class TestRelations:
    def test_create_is_idempotent_and_returns_the_existing_relation_unchanged(self, api):
        a, b = create(api, "Alice", "person"), create(api, "Acme", "organization")
        r = api.post(
            "/graph/relations",
            {
                "source_entity_id": a["id"],
                "target_entity_id": b["id"],
                "relation_type": "works_at",
                "description": "since 2020",
                "properties": {"role": "engineer"},
            },
        )
        assert r.status_code == 201
        rel = ok_data(r)
        assert (rel["source_entity_id"], rel["target_entity_id"], rel["relation_type"]) == (
            a["id"],
            b["id"],
            "works_at",
        )
        assert rel["team_id"] == "team_a"
        again = api.post(
            "/graph/relations",
            {
                "source_entity_id": a["id"],
                "target_entity_id": b["id"],
                "relation_type": "works_at",
                "description": "changed",
                "properties": {"role": "manager"},
            },
        )
        assert again.status_code == 200
        assert ok_data(again) == rel
        other_type = relate(api, a, b, "knows")
        assert other_type["id"] != rel["id"]

    @pytest.mark.parametrize(
        ("patch", "field"),
        [
            ({"relation_type": "hates"}, "relation_type"),
            ({"relation_type": None}, "relation_type"),
            ({"source_entity_id": "nope"}, "source_entity_id"),
            ({"source_entity_id": 12}, "source_entity_id"),
            ({"target_entity_id": None}, "target_entity_id"),
            ({"properties": "x"}, "properties"),
        ],
    )
    def test_it_rejects_bad_input(self, api, patch, field):
        a, b = create(api, "A"), create(api, "B")
        body = {"source_entity_id": a["id"], "target_entity_id": b["id"], "relation_type": "uses"}
        r = api.post("/graph/relations", {**body, **patch})
        assert r.status_code == 400
        assert field in r.json()["details"]

    def test_a_relation_to_itself_is_rejected(self, api):
        a = create(api, "A")
        r = api.post(
            "/graph/relations",
            {"source_entity_id": a["id"], "target_entity_id": a["id"], "relation_type": "knows"},
        )
        assert r.status_code == 400

    def test_unknown_ends_are_404(self, api):
        a = create(api, "A")
        r = api.post(
            "/graph/relations",
            {
                "source_entity_id": a["id"],
                "target_entity_id": str(uuid.uuid4()),
                "relation_type": "knows",
            },
        )
        assert r.status_code == 404

    def test_list_by_entity_at_either_end_by_type_and_paged(self, api):
        a, b, c = create(api, "A"), create(api, "B"), create(api, "C")
        ab = relate(api, a, b, "uses")
        ca = relate(api, c, a, "knows")
        bc = relate(api, b, c, "uses")
        data = ok_data(api.get(f"/graph/relations?entity_id={a['id']}"))
        assert {r["id"] for r in data["items"]} == {ab["id"], ca["id"]}
        assert data["total"] == 2
        data = ok_data(api.get("/graph/relations?relation_type=uses"))
        assert {r["id"] for r in data["items"]} == {ab["id"], bc["id"]}
        data = ok_data(api.get("/graph/relations?page=2&page_size=2"))
        assert (data["total"], len(data["items"]), data["page"]) == (3, 1, 2)
        for query in ("relation_type=hates", "page=0", "page_size=500", "entity_id=xyz"):
            assert api.get(f"/graph/relations?{query}").status_code == 400, query
        assert api.get(f"/graph/relations?entity_id={uuid.uuid4()}").status_code == 404

    def test_delete(self, api):
        a, b = create(api, "A"), create(api, "B")
        rel = relate(api, a, b)
        assert ok_data(api.delete(f"/graph/relations/{rel['id']}")) == {"deleted": rel["id"]}
        assert api.delete(f"/graph/relations/{rel['id']}").status_code == 404
        assert api.delete("/graph/relations/garbage").status_code == 404
        assert Entity.objects.count() == 2


class TestCrossTeamIsolation:
    @pytest.fixture
    def theirs(self, other_api):
        a = create(other_api, "Their secret", "project")
        b = create(other_api, "Their partner", "organization")
        rel = relate(other_api, a, b, "related_to")
        return a, b, rel

    def test_another_teams_entity_is_404_everywhere(self, api, theirs):
        a, _b, rel = theirs
        assert api.get(f"/graph/entities/{a['id']}").status_code == 404
        assert api.put(f"/graph/entities/{a['id']}", {"name": "mine"}).status_code == 404
        assert api.delete(f"/graph/entities/{a['id']}").status_code == 404
        assert api.delete(f"/graph/relations/{rel['id']}").status_code == 404
        assert api.get(f"/graph/relations?entity_id={a['id']}").status_code == 404
        assert api.get(f"/graph?entity_ids={a['id']}").status_code == 404
        assert Entity.objects.get(pk=a["id"]).name == "Their secret"
        assert Relation.objects.filter(pk=rel["id"]).exists()

    def test_lists_and_the_whole_graph_show_only_the_own_team(self, api, theirs):
        mine = create(api, "Mine")
        assert [e["id"] for e in ok_data(api.get("/graph/entities"))["items"]] == [mine["id"]]
        found = ok_data(api.get("/graph/entities?q=Their%20secret"))["items"]
        assert {e["id"] for e in found} <= {mine["id"]}
        assert ok_data(api.get("/graph/relations"))["total"] == 0
        graph = ok_data(api.get("/graph"))
        assert [e["id"] for e in graph["entities"]] == [mine["id"]]
        assert graph["relations"] == []

    def test_a_relation_can_never_join_two_teams(self, api, theirs):
        a, _b, _rel = theirs
        mine = create(api, "Mine")
        for source, target in ((mine["id"], a["id"]), (a["id"], mine["id"])):
            r = api.post(
                "/graph/relations",
                {"source_entity_id": source, "target_entity_id": target, "relation_type": "knows"},
            )
            assert r.status_code == 404
            assert error_code(r) == "NOT_FOUND"
        assert Relation.objects.filter(team_id="team_a").count() == 0

    def test_same_name_in_two_teams_never_merges(self, api, other_api, theirs):
        a, _b, _rel = theirs
        mine = create(api, "Their secret", "project", description="ours")
        assert mine["id"] != a["id"]
        assert Entity.objects.get(pk=a["id"]).description == ""


class TestAgentScopedKeys:
    """Agent-scoped keys on the graph: own agent's and team-wide entities only; others are 403."""

    def test_own_and_team_wide_entities_only(self, api, agent_api):
        team_wide = create(api, "Shared")
        other = create(api, "Other's", agent_id="coder")
        own = create(agent_api, "Mine", agent_id="researcher")
        made_team_wide = create(agent_api, "Also shared")
        assert made_team_wide["agent_id"] is None
        listed = {e["id"] for e in ok_data(agent_api.get("/graph/entities"))["items"]}
        assert listed == {team_wide["id"], own["id"], made_team_wide["id"]}
        for path in (f"/graph/entities/{other['id']}", f"/graph?entity_ids={other['id']}"):
            r = agent_api.get(path)
            assert r.status_code == 403, path
            assert error_code(r) == "FORBIDDEN"
        assert agent_api.delete(f"/graph/entities/{other['id']}").status_code == 403
        assert agent_api.put(f"/graph/entities/{other['id']}", {"name": "x"}).status_code == 403
        r = agent_api.post(
            "/graph/entities", {"name": "X", "entity_type": "fact", "agent_id": "coder"}
        )
        assert r.status_code == 403
        assert agent_api.get("/graph/entities?agent_id=coder").status_code == 403
        assert ok_data(agent_api.get(f"/graph/entities/{own['id']}"))["entity"]["id"] == own["id"]

    def test_relations_and_traversal_never_reach_another_agents_entities(self, api, agent_api):
        own = create(agent_api, "Mine", agent_id="researcher")
        shared = create(api, "Shared")
        other = create(api, "Other's", agent_id="coder")
        relate(api, own, shared)
        hidden = relate(api, shared, other)
        r = agent_api.post(
            "/graph/relations",
            {
                "source_entity_id": own["id"],
                "target_entity_id": other["id"],
                "relation_type": "knows",
            },
        )
        assert r.status_code == 403
        assert agent_api.delete(f"/graph/relations/{hidden['id']}").status_code == 403
        assert ok_data(agent_api.get("/graph/relations"))["total"] == 1
        graph = ok_data(agent_api.get(f"/graph?entity_ids={own['id']}&max_depth=3"))
        assert {e["id"] for e in graph["entities"]} == {own["id"], shared["id"]}
        whole = ok_data(agent_api.get("/graph"))
        assert {e["id"] for e in whole["entities"]} == {own["id"], shared["id"]}
        assert len(whole["relations"]) == 1
        detail = ok_data(agent_api.get(f"/graph/entities/{shared['id']}"))
        assert detail["outgoing_relations"] == []


class TestGraph:
    @pytest.fixture
    def chain(self, api):
        """a -> b -> c -> d -> e, plus x unconnected."""
        nodes = [create(api, n) for n in "abcde"]
        for s, t in pairwise(nodes):
            relate(api, s, t)
        create(api, "x")
        return nodes

    def ids(self, graph):
        return {e["name"] for e in graph["entities"]}

    def test_no_seeds_is_the_whole_graph(self, api, chain):
        graph = ok_data(api.get("/graph"))
        assert self.ids(graph) == set("abcdex")
        assert len(graph["relations"]) == 4
        assert graph["truncated"] is False

    def test_agent_id_limits_the_whole_graph_to_that_agent(self, api):
        a = create(api, "a", agent_id="coder")
        b = create(api, "b", agent_id="coder")
        c = create(api, "c")
        relate(api, a, b)
        relate(api, b, c)
        graph = ok_data(api.get("/graph?agent_id=coder"))
        assert self.ids(graph) == {"a", "b"}
        assert len(graph["relations"]) == 1

    @pytest.mark.parametrize(
        ("depth", "expected"), [(None, "bcd"), (1, "bcd"), (2, "abcde"), (3, "abcde")]
    )
    def test_depth_from_the_middle(self, api, chain, depth, expected):
        query = f"entity_ids={chain[2]['id']}" + (f"&max_depth={depth}" if depth else "")
        graph = ok_data(api.get(f"/graph?{query}"))
        assert self.ids(graph) == set(expected)
        assert graph["truncated"] is False

    @pytest.mark.parametrize(("depth", "expected"), [(1, "ab"), (2, "abc"), (3, "abcd")])
    def test_depth_from_an_end_follows_edges_in_both_directions(self, api, chain, depth, expected):
        graph = ok_data(api.get(f"/graph?entity_ids={chain[0]['id']}&max_depth={depth}"))
        assert self.ids(graph) == set(expected)
        assert len(graph["relations"]) == depth
        graph = ok_data(api.get(f"/graph?entity_ids={chain[4]['id']}&max_depth={depth}"))
        assert len(graph["entities"]) == depth + 1

    @pytest.mark.parametrize("depth", ["0", "4", "-1", "two", "1.5"])
    def test_depth_out_of_range_is_400(self, api, chain, depth):
        r = api.get(f"/graph?entity_ids={chain[0]['id']}&max_depth={depth}")
        assert r.status_code == 400
        assert error_code(r) == "VALIDATION_ERROR"
        assert "max_depth" in r.json()["details"]

    def test_several_seeds_repeated_or_comma_separated(self, api, chain):
        a, e = chain[0]["id"], chain[4]["id"]
        for query in (f"entity_ids={a}&entity_ids={e}", f"entity_ids={a},{e}"):
            assert self.ids(ok_data(api.get(f"/graph?{query}"))) == set("abde")

    def test_bad_seeds(self, api, chain):
        assert api.get("/graph?entity_ids=nope").status_code == 400
        assert api.get(f"/graph?entity_ids={uuid.uuid4()}").status_code == 404
        many = "&".join(f"entity_ids={uuid.uuid4()}" for _ in range(101))
        assert api.get(f"/graph?{many}").status_code == 400

    def test_edges_between_neighbours_are_included(self, api):
        hub, b, c = create(api, "hub"), create(api, "b"), create(api, "c")
        relate(api, hub, b)
        relate(api, hub, c)
        relate(api, b, c)
        graph = ok_data(api.get(f"/graph?entity_ids={hub['id']}"))
        assert len(graph["relations"]) == 3

    def test_node_cap_truncates(self, api, team):
        hub = bulk_entities(team, ["hub"])[0]
        leaves = bulk_entities(team, [f"leaf {i}" for i in range(30)])
        bulk_relations(team, [(hub, leaf) for leaf in leaves])
        graph = ok_data(api.get(f"/graph?entity_ids={hub.pk}&max_nodes=10"))
        assert len(graph["entities"]) == 10
        assert graph["entities"][0]["id"] == str(hub.pk)
        assert len(graph["relations"]) == 9
        assert graph["truncated"] is True
        whole = ok_data(api.get("/graph?max_nodes=5"))
        assert (len(whole["entities"]), whole["truncated"]) == (5, True)
        exact = ok_data(api.get(f"/graph?entity_ids={hub.pk}&max_nodes=31"))
        assert (len(exact["entities"]), exact["truncated"]) == (31, False)

    def test_edge_cap_truncates(self, api, team):
        hub = bulk_entities(team, ["hub"])[0]
        leaves = bulk_entities(team, [f"leaf {i}" for i in range(12)])
        bulk_relations(team, [(hub, leaf) for leaf in leaves])
        graph = ok_data(api.get(f"/graph?entity_ids={hub.pk}&max_edges=5"))
        assert (len(graph["relations"]), graph["truncated"]) == (5, True)
        whole = ok_data(api.get("/graph?max_edges=5"))
        assert (len(whole["relations"]), whole["truncated"]) == (5, True)

    @pytest.mark.parametrize(
        "query", ["max_nodes=0", "max_nodes=5001", "max_edges=0", "agent_id=a b"]
    )
    def test_bad_caps_are_400(self, api, query):
        assert api.get(f"/graph?{query}").status_code == 400

    def test_traversal_counts_access_in_one_update(self, api, chain):
        with CaptureQueriesContext(connection) as ctx:
            ok_data(api.get(f"/graph?entity_ids={chain[2]['id']}"))
        updates = [
            q
            for q in ctx.captured_queries
            if q["sql"].startswith("UPDATE") and "graph_entity" in q["sql"]
        ]
        assert len(updates) == 1
        counts = dict(Entity.objects.values_list("name", "access_count"))
        assert counts == {"a": 0, "b": 1, "c": 1, "d": 1, "e": 0, "x": 0}


def _graph_queries(api, query):
    with CaptureQueriesContext(connection) as ctx:
        r = api.get(f"/graph?{query}")
    assert r.status_code == 200, r.content
    return [q["sql"] for q in ctx.captured_queries if "graph_" in q["sql"]]


class TestQueryCounts:
    """Batched BFS: the queries of GET /graph depend on the depth, never on the node count."""

    def build(self, team, fanout):
        """A tree: root -> fanout children -> fanout grandchildren each -> one leaf each."""
        root = bulk_entities(team, [f"root{fanout}"])[0]
        kids = bulk_entities(team, [f"k{fanout}-{i}" for i in range(fanout)])
        grand = bulk_entities(team, [f"g{fanout}-{i}" for i in range(fanout * fanout)])
        leaves = bulk_entities(team, [f"l{fanout}-{i}" for i in range(fanout * fanout)])
        pairs = [(root, k) for k in kids]
        pairs += [(kids[i // fanout], g) for i, g in enumerate(grand)]
        pairs += list(zip(grand, leaves, strict=True))
        bulk_relations(team, pairs)
        return root

    @pytest.mark.parametrize(("depth", "expected"), [(1, 6), (2, 8), (3, 10)])
    def test_subgraph_queries_are_pinned_per_depth(self, api, team, depth, expected):
        small = self.build(team, 2)
        big = self.build(team, 12)  # 1 + 12 + 144 + 144 nodes
        q_small = _graph_queries(api, f"entity_ids={small.pk}&max_depth={depth}")
        q_big = _graph_queries(api, f"entity_ids={big.pk}&max_depth={depth}")
        # seeds + (relation scan, entities) per level + the last level's relations + the
        # chosen relations by primary key + one access UPDATE = 2 * depth + 4
        assert len(q_small) == len(q_big) == expected

    def test_whole_graph_queries_do_not_grow_with_the_graph(self, api, team):
        self.build(team, 2)
        small = _graph_queries(api, "")
        self.build(team, 10)
        big = _graph_queries(api, "")
        assert len(small) == len(big) == 3  # entities, relations, access UPDATE
        capped = _graph_queries(api, "max_nodes=5")
        # entities, their outgoing relations, the chosen relations by id, access UPDATE
        assert len(capped) == 4
