"""Teams, agents and stats endpoints, with cross-team isolation on each."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.models import Agent, ApiKey, Team
from tenants.services import (
    api_key_issue,
    register_agent_purge_hook,
    register_team_purge_hook,
)

from .helpers import SignedClient, error_code, ok_data

pytestmark = pytest.mark.django_db


class TestTeams:
    def test_post_updates_the_keys_own_team(self, api):
        r = api.post(
            "/teams", {"team_id": "team_a", "name": "Alpha", "description": "d", "config": {"x": 1}}
        )
        assert r.status_code == 200
        data = ok_data(r)
        assert {k: data[k] for k in ("id", "name", "description", "config")} == {
            "id": "team_a",
            "name": "Alpha",
            "description": "d",
            "config": {"x": 1},
        }
        assert set(data) == {"id", "name", "description", "config", "created_at", "updated_at"}

    def test_post_keeps_description_and_config_when_omitted(self, api, team):
        api.post(
            "/teams", {"team_id": "team_a", "name": "A", "description": "keep", "config": {"k": 1}}
        )
        data = ok_data(api.post("/teams", {"team_id": "team_a", "name": "A2"}))
        assert (data["description"], data["config"]) == ("keep", {"k": 1})

    @pytest.mark.parametrize("team_id", ["team_b", "no_such_team"])
    def test_post_for_another_team_is_forbidden_cross_team(self, api, other_team, team_id):
        r = api.post("/teams", {"team_id": team_id, "name": "Hijack"})
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN_CROSS_TEAM")
        assert Team.objects.get(id="team_b").name == "Team B"
        assert not Team.objects.filter(id="no_such_team").exists()

    @pytest.mark.parametrize(
        "body,fields",
        [
            ({}, {"team_id", "name"}),
            ({"team_id": "x" * 65, "name": "n"}, {"team_id"}),
            ({"team_id": "a b", "name": "n"}, {"team_id"}),
            ({"team_id": "team_a", "name": ""}, {"name"}),
            ({"team_id": "team_a", "name": "n", "config": "text"}, {"config"}),
            ({"team_id": "team_a", "name": ["n"]}, {"name"}),
            ({"team_id": 7, "name": "n"}, {"team_id"}),
        ],
    )
    def test_post_validates(self, api, body, fields):
        r = api.post("/teams", body)
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
        assert set(r.json()["details"]) == fields

    def test_get_own_team(self, api):
        assert ok_data(api.get("/teams/team_a"))["id"] == "team_a"

    @pytest.mark.parametrize("team_id", ["team_b", "other_team", "x" * 200])
    def test_get_other_team_is_forbidden_whether_or_not_it_exists(self, api, other_team, team_id):
        r = api.get(f"/teams/{team_id}")
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN_CROSS_TEAM")
        # Same message for an existing and a missing team: no existence oracle.
        assert r.json()["error"] == "this key cannot access another team"

    def test_delete_other_team_is_forbidden(self, api, other_team):
        r = api.delete("/teams/team_b")
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN_CROSS_TEAM")
        assert Team.objects.filter(id="team_b").exists()

    def test_delete_removes_team_agents_keys_and_runs_purge_hooks(
        self, api, agent, django_capture_on_commit_callbacks
    ):
        purged: list[str] = []
        register_team_purge_hook(purged.append)
        with django_capture_on_commit_callbacks(execute=True):
            r = api.delete("/teams/team_a")
        assert r.json() == {"ok": True, "data": None}
        assert not Team.objects.filter(id="team_a").exists()
        assert not Agent.objects.filter(team_id="team_a").exists()
        assert not ApiKey.objects.filter(team_id="team_a").exists()
        assert purged == ["team_a"]
        # The key died with its team.
        assert error_code(api.get("/stats")) == "INVALID_API_KEY"


class TestAgents:
    def test_create_then_update(self, api):
        r = api.post("/agents", {"agent_id": "researcher", "name": "研究员", "role": "research"})
        assert r.status_code == 201
        data = ok_data(r)
        assert {k: data[k] for k in ("id", "team_id", "name", "role", "config")} == {
            "id": "researcher",
            "team_id": "team_a",
            "name": "研究员",
            "role": "research",
            "config": {},
        }
        r = api.post("/agents", {"agent_id": "researcher", "name": "R2"})
        assert r.status_code == 200
        assert ok_data(r)["role"] == "research"
        assert Agent.objects.filter(team_id="team_a").count() == 1

    def test_the_same_agent_id_in_two_teams_is_two_agents(self, api, other_api):
        api.post("/agents", {"agent_id": "agent_1", "name": "A1"})
        other_api.post("/agents", {"agent_id": "agent_1", "name": "B1"})
        assert ok_data(api.get("/agents/team_a/agent_1"))["name"] == "A1"
        assert ok_data(other_api.get("/agents/team_b/agent_1"))["name"] == "B1"

    def test_agent_ids_differing_in_case_are_two_agents_on_every_database(self, api, team):
        """MariaDB's default collation folds case; SQLite, Redis and Python do not. An agent id
        is compared exactly everywhere, or "alice" would read "Alice"'s memories on one
        backend and not on the other."""
        assert api.post("/agents", {"agent_id": "Alice", "name": "upper"}).status_code == 201
        assert api.post("/agents", {"agent_id": "alice", "name": "lower"}).status_code == 201
        assert ok_data(api.get("/agents/team_a/Alice"))["name"] == "upper"
        assert ok_data(api.get("/agents/team_a/alice"))["name"] == "lower"
        mine = "alice keeps the deploy keys in the vault, next to the spare badge"
        own = ok_data(api.post("/memories/personal", {"agent_id": "alice", "content": mine}))
        query = {"agent_id": "alice", "query": "Alice keeps the deploy keys in the vault"}
        api.post("/memories/personal/search", query)  # "alice"'s index is loaded here
        r = api.post(
            "/memories/personal",
            {"agent_id": "Alice", "content": "Alice keeps the deploy keys in the vault"},
        )
        assert r.status_code == 201
        memory_id = ok_data(r)["id"]
        assert [m["id"] for m in ok_data(api.get("/memories/personal/recent/alice"))] == [own["id"]]
        # "alice"'s index, loaded before, learns of changes from the log of its own scope only.
        found = ok_data(api.post("/memories/personal/search", query))
        assert [m["id"] for m in found] == [own["id"]]
        assert [m["id"] for m in ok_data(api.get("/memories/personal/recent/Alice"))] == [memory_id]
        listed = ok_data(api.get("/memories?scope=personal&agent_id=alice"))
        assert [m["id"] for m in listed["items"]] == [own["id"]]
        # A key of "alice" reads as "alice": "Alice"'s memory is another agent's.
        lower = Agent.objects.get(team=team, agent_id="alice")
        k = api_key_issue(team=team, agent=lower, label="alice")
        alice_api = SignedClient(Client(), k.key_id, k.secret)
        found = ok_data(alice_api.post("/memories/personal/search", query))
        assert [m["id"] for m in found] == [own["id"]]
        assert [m["id"] for m in ok_data(alice_api.get("/memories"))["items"]] == [own["id"]]
        r = alice_api.get(f"/memories/{memory_id}")
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN")
        # Nor is "Alice"'s memory a duplicate for "alice": the same words are stored for her.
        same = {"agent_id": "alice", "content": "Alice keeps the deploy keys in the vault"}
        r = alice_api.post("/memories/personal", same)
        assert r.status_code == 201, r.content
        assert ok_data(r)["id"] != memory_id
        # Deleting one agent leaves the other and its memories.
        assert api.delete("/agents/team_a/alice").status_code == 200
        assert ok_data(api.get(f"/memories/{memory_id}"))["agent_id"] == "Alice"
        assert ok_data(api.get("/agents/team_a/Alice"))["name"] == "upper"

    @pytest.mark.parametrize(
        "body,fields",
        [
            ({"name": "x"}, {"agent_id"}),
            ({"agent_id": "a/b", "name": "x"}, {"agent_id"}),
            ({"agent_id": "ok", "name": "x", "role": 3}, {"role"}),
            ({"agent_id": "ok"}, {"name"}),
        ],
    )
    def test_create_validates(self, api, body, fields):
        r = api.post("/agents", body)
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
        assert set(r.json()["details"]) == fields

    def test_list_and_get(self, api, agent):
        api.post("/agents", {"agent_id": "coder", "name": "Coder"})
        assert [a["id"] for a in ok_data(api.get("/agents/team_a"))] == ["coder", "researcher"]
        assert ok_data(api.get("/agents/team_a/researcher"))["name"] == "研究员"

    def test_get_unknown_agent_is_404(self, api):
        r = api.get("/agents/team_a/ghost")
        assert (r.status_code, error_code(r)) == (404, "NOT_FOUND")

    @pytest.mark.parametrize(
        "path",
        [
            "/agents/team_b",
            "/agents/team_b/agent_b",
            "/agents/other_team/some_agent",
            "/agents/nope",
        ],
    )
    def test_other_teams_agents_are_forbidden_cross_team(self, api, other_team, path):
        Agent.objects.create(team=other_team, agent_id="agent_b", name="B")
        r = api.get(path)
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN_CROSS_TEAM")

    def test_delete_other_teams_agent_is_forbidden(self, api, other_team):
        Agent.objects.create(team=other_team, agent_id="agent_b", name="B")
        r = api.delete("/agents/team_b/agent_b")
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN_CROSS_TEAM")
        assert Agent.objects.filter(team=other_team, agent_id="agent_b").exists()

    def test_delete_agent_runs_purge_hooks(self, api, agent, django_capture_on_commit_callbacks):
        purged: list[tuple[str, str]] = []
        register_agent_purge_hook(lambda t, a: purged.append((t, a)))
        with django_capture_on_commit_callbacks(execute=True):
            assert api.delete("/agents/team_a/researcher").json() == {"ok": True, "data": None}
        assert purged == [("team_a", "researcher")]
        assert error_code(api.delete("/agents/team_a/researcher")) == "NOT_FOUND"

    def test_a_write_after_deletion_registers_the_agent_again(self, api):
        """The per-process cache of known agents forgets a deleted agent at once."""
        assert (
            api.post("/memories/working", {"agent_id": "again", "content": "x"}).status_code == 201
        )
        assert (
            api.post("/memories/working", {"agent_id": "again", "content": "y"}).status_code == 201
        )
        assert Agent.objects.filter(agent_id="again").exists()
        assert api.delete("/agents/team_a/again").status_code == 200
        assert not Agent.objects.filter(agent_id="again").exists()
        assert (
            api.post("/memories/working", {"agent_id": "again", "content": "z"}).status_code == 201
        )
        assert Agent.objects.filter(agent_id="again").exists()


class TestAgentScopedKeys:
    def test_it_may_read_the_team_and_agents(self, agent_api):
        assert agent_api.get("/teams/team_a").status_code == 200
        assert agent_api.get("/agents/team_a").status_code == 200

    def test_it_may_update_only_its_own_agent(self, agent_api):
        assert (
            agent_api.post("/agents", {"agent_id": "researcher", "name": "me"}).status_code == 200
        )
        r = agent_api.post("/agents", {"agent_id": "someone_else", "name": "x"})
        assert (r.status_code, error_code(r)) == (403, "FORBIDDEN")
        assert not Agent.objects.filter(agent_id="someone_else").exists()

    def test_it_cannot_change_or_delete_the_team(self, agent_api):
        assert (
            error_code(agent_api.post("/teams", {"team_id": "team_a", "name": "x"})) == "FORBIDDEN"
        )
        assert error_code(agent_api.delete("/teams/team_a")) == "FORBIDDEN"
        assert Team.objects.filter(id="team_a").exists()

    def test_it_cannot_delete_another_agent(self, agent_api, team):
        Agent.objects.create(team=team, agent_id="coder", name="c")
        assert error_code(agent_api.delete("/agents/team_a/coder")) == "FORBIDDEN"

    def test_cross_team_still_wins(self, agent_api, other_team):
        assert error_code(agent_api.get("/teams/team_b")) == "FORBIDDEN_CROSS_TEAM"


class TestStats:
    def test_stats_are_counted_for_the_keys_team_only(self, api, other_api, agent):
        other_api.post("/agents", {"agent_id": "b1", "name": "b1"})
        other_api.post("/agents", {"agent_id": "b2", "name": "b2"})
        data = ok_data(api.get("/stats"))
        assert data["agents"] == 1
        assert {"personal_memories", "team_memories", "agents", "redis_ok", "embedding_ok"} <= set(
            data
        )
        assert ok_data(other_api.get("/stats"))["agents"] == 2

    def test_stats_report_real_health(self, api, settings):
        data = ok_data(api.get("/stats"))
        assert data["embedding_ok"] is True
        if settings.REDIS_URL:
            assert (data["redis_ok"], data["working_store"]) == (True, "redis")
        else:
            # Embedded mode: no Redis to report on, and working memory is in the database.
            assert (data["redis_ok"], data["working_store"]) == (None, "database")


class TestHealthReady:
    def test_ready_checks_every_dependency(self):
        r = Client().get("/health/ready")
        assert r.status_code == 200, r.content
        assert set(ok_data(r)["checks"]) == {"database", "redis", "broker", "embedding"}

    def test_ready_names_what_failed(self, settings):
        settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
        r = Client().get("/health/ready")
        assert r.status_code == 503
        payload = r.json()
        assert payload["ok"] is False
        assert payload["code"] == "SERVICE_UNAVAILABLE"
        assert "broker" in payload["error"]
        assert set(payload["details"]) == {"broker"}
