"""The recall timeout (docs/search.md, "Recall timeout"): an agent's search answers with what it
has after the team's `recall_timeout_ms` instead of waiting for a scope's index to load.

The slow load is real: a scope of a few thousand memories (real rows, one real embedding copied)
in a fresh registry; nothing of the index or the database is faked. A background load reads
through its own connection, so these tests commit (transaction=True)."""

from __future__ import annotations

import time

import pytest

from lifecycle.services import pipeline
from memories.models import Memory, MemoryScope
from memories.retrieval import index, search
from memories.retrieval.embeddings import get_embedder
from tenants.models import Agent

from .factories import McpTokenFactory
from .helpers import error_code, ok_data
from .test_memories_api import write

pytestmark = pytest.mark.django_db(transaction=True)

BIG = 6000  # memories: a load of a few hundred milliseconds, far above the timeouts below
FACT = "The nightly backup of the billing database runs at 02:00 UTC"


def _big_scope(api, team, agent: str = "assistant", n: int = BIG) -> int:
    """`n` personal memories of `agent`: FACT and a filler written through the API (embedded,
    tokenised), the rest real rows with the filler's embedding and tokens. Returns FACT's id."""
    first = ok_data(write(api, FACT, agent=agent))["id"]
    filler = ok_data(write(api, "Filler note about unrelated weekly chores", agent=agent))["id"]
    row = Memory.objects.get(pk=filler)
    Memory.objects.bulk_create(
        [
            Memory(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id=agent,
                content=f"Filler note {i} about unrelated weekly chores",
                embedding=row.embedding,
                embedding_model=row.embedding_model,
                content_hash=f"filler-{i}",
                search_tokens=row.search_tokens,
            )
            for i in range(n - 2)
        ],
        batch_size=1000,
    )
    index.registry.clear()  # a fresh process: the next search must load the scope
    return first


def _wait_loaded(team, agent: str = "assistant", seconds: float = 60.0) -> float:
    """Waits for the scope's background load; returns when it was seen loaded (monotonic)."""
    key = index.scope_key(team.id, MemoryScope.PERSONAL, agent)
    deadline = time.monotonic() + seconds
    while key not in index.registry.loaded():
        assert time.monotonic() < deadline, "the background load never finished"
        time.sleep(0.005)
    return time.monotonic()


def _wait_load_thread_done(team, agent: str = "assistant", seconds: float = 60.0) -> None:
    """Waits until no background load of the scope is running (its metrics are recorded)."""
    key = index.scope_key(team.id, MemoryScope.PERSONAL, agent)
    deadline = time.monotonic() + seconds
    while key in index.registry.loading():
        assert time.monotonic() < deadline, "the background load thread never finished"
        time.sleep(0.005)


def _search(api, **body):
    body = {"agent_id": "assistant", "query": "when does the billing backup run", **body}
    return api.post("/memories/personal/search", body)


def _timed_load(team, agent: str = "assistant") -> float:
    """How long a full load of the scope takes here (inline, fresh registry)."""
    index.registry.clear()
    started = time.monotonic()
    index.registry.get(
        team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=agent, embedder=get_embedder()
    )
    index.registry.clear()
    return time.monotonic() - started


class TestConfig:
    def test_round_trip_and_default(self, api):
        assert ok_data(api.get("/lifecycle/auto-config"))["recall_timeout_ms"] == 5000
        data = ok_data(api.post("/lifecycle/auto-config", {"recall_timeout_ms": 250}))
        assert data["recall_timeout_ms"] == 250
        assert ok_data(api.get("/lifecycle/auto-config"))["recall_timeout_ms"] == 250
        assert ok_data(api.post("/lifecycle/auto-config", {"recall_timeout_ms": 0}))[
            "recall_timeout_ms"
        ] == (0)

    @pytest.mark.parametrize("value", [-1, 60001, "100", 1.5, None, True])
    def test_validation(self, api, value):
        r = api.post("/lifecycle/auto-config", {"recall_timeout_ms": value})
        assert r.status_code == 400
        assert error_code(r) == "VALIDATION_ERROR"
        assert ok_data(api.get("/lifecycle/auto-config"))["recall_timeout_ms"] == 5000

    def test_the_bounds_are_accepted(self, api):
        for value in (0, 60000):
            r = api.post("/lifecycle/auto-config", {"recall_timeout_ms": value})
            assert ok_data(r)["recall_timeout_ms"] == value

    def test_each_team_has_its_own(self, api, other_api, team, other_team):
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 1})
        assert ok_data(other_api.get("/lifecycle/auto-config"))["recall_timeout_ms"] == 5000
        assert search.recall_timeout_ms(team) == 1
        assert search.recall_timeout_ms(other_team) == 5000

    def test_agent_keys_cannot_change_it(self, agent_api):
        r = agent_api.post("/lifecycle/auto-config", {"recall_timeout_ms": 1})
        assert error_code(r) == "FORBIDDEN"


@pytest.mark.local_index  # a scope's index loading inside the web process
class TestSlowScope:
    def test_a_loading_scope_answers_partial_within_the_timeout(self, api, team):
        _big_scope(api, team)
        load = _timed_load(team)
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 20})
        started = time.monotonic()
        r = _search(api)
        elapsed = time.monotonic() - started
        assert r.status_code == 200
        body = r.json()
        assert body["ok"] is True and body["partial"] is True
        assert body["data"] == []  # the only scope asked for was not ready
        # Within the timeout plus request overhead, and well before the load itself ends.
        assert elapsed < 0.02 + 0.5, elapsed
        assert elapsed < load, (elapsed, load)

    def test_the_load_carries_on_and_serves_the_next_search(self, api, team):
        first = _big_scope(api, team)
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 1})
        assert _search(api).json()["partial"] is True
        _wait_loaded(team)
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 5000})
        body = _search(api).json()
        assert "partial" not in body
        assert body["data"][0]["id"] == first

    def test_concurrent_searches_share_one_load(self, team, api):
        _big_scope(api, team)
        query = search.SearchQuery(
            team=team, scope=MemoryScope.PERSONAL, agent_id="assistant", text="backup", timeout_ms=1
        )
        loads_before = _load_count()
        for _ in range(5):
            assert search.memory_search(query).partial is True
        _wait_loaded(team)
        # The index is published before its load thread records the load (index._start_load):
        # count once the thread is done, not as soon as the index is visible.
        _wait_load_thread_done(team)
        assert _load_count() - loads_before == 1

    def test_zero_means_no_limit(self, api, team):
        first = _big_scope(api, team)
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 0})
        body = _search(api).json()
        assert "partial" not in body
        assert body["data"][0]["id"] == first
        # The service: timeout_ms 0 (the default) loads inline, whatever it takes.
        index.registry.clear()
        hits = search.memory_search(
            search.SearchQuery(
                team=team, scope=MemoryScope.PERSONAL, agent_id="assistant", text="billing backup"
            )
        )
        assert hits.partial is False and hits[0].memory.pk == first

    def test_the_team_scope_is_skipped_once_time_is_up(self, api, team):
        # The personal scope is warm; the team scope is big and cold.
        own = ok_data(write(api, "The billing backup is verified every Monday"))["id"]
        team_row = ok_data(api.post("/memories/team", {"agent_id": "assistant", "content": FACT}))[
            "id"
        ]
        row = Memory.objects.get(pk=team_row)
        Memory.objects.bulk_create(
            [
                Memory(
                    team=team,
                    scope=MemoryScope.TEAM,
                    content=f"Team filler {i}",
                    embedding=row.embedding,
                    embedding_model=row.embedding_model,
                    content_hash=f"team-filler-{i}",
                    search_tokens=row.search_tokens,
                )
                for i in range(BIG)
            ],
            batch_size=1000,
        )
        index.registry.clear()
        _search(api, include_team=False)  # warms the personal scope only
        # The service, which only reads: SQLite's shared-cache test database fails a write (the
        # API's recall bookkeeping) while another connection is still reading the table.
        hits = search.memory_search(
            search.SearchQuery(
                team=team,
                scope=MemoryScope.PERSONAL,
                agent_id="assistant",
                text="billing backup",
                min_score=0,
                include_team=True,
                timeout_ms=30,
            )
        )
        assert hits.partial is True
        ids = [h.memory.pk for h in hits]
        assert own in ids and team_row not in ids


class TestWarmScope:
    def test_not_partial_and_the_same_results_as_without_a_timeout(self, api, team):
        for text in (FACT, "Deploys are frozen on Fridays", "用户偏好简洁回复"):
            write(api, text)
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 0})
        unlimited = _search(api, min_score=0).json()
        assert "partial" not in unlimited
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 5000})
        bounded = _search(api, min_score=0).json()
        assert "partial" not in bounded
        assert [m["id"] for m in bounded["data"]] == [m["id"] for m in unlimited["data"]]
        assert [m["score"] for m in bounded["data"]] == [m["score"] for m in unlimited["data"]]

    def test_team_search_and_episodes_carry_the_flag_too(self, api, team):
        _big_scope(api, team, agent="assistant")
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 1})
        r = api.post(
            "/episodes/search", {"agent_id": "assistant", "task": "restore the billing backup"}
        )
        assert r.status_code == 200 and r.json()["partial"] is True
        r = api.post("/memories/team/search", {"query": "billing"})
        assert r.status_code == 200  # a small scope: partial or not, never an error


class TestIsolation:
    def test_another_teams_timeout_does_not_touch_this_team(self, api, other_api, team):
        first = _big_scope(api, team)
        other_api.post("/lifecycle/auto-config", {"recall_timeout_ms": 1})
        body = _search(api).json()
        assert "partial" not in body and body["data"][0]["id"] == first

    @pytest.mark.local_index
    def test_a_partial_answer_never_shows_another_teams_memories(
        self, api, other_api, team, other_team
    ):
        _big_scope(api, team)
        ok_data(write(other_api, FACT))
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 1})
        assert _search(api, min_score=0).json()["data"] == []
        _wait_loaded(team)
        api.post("/lifecycle/auto-config", {"recall_timeout_ms": 5000})
        found = _search(api, min_score=0, limit=50).json()["data"]
        assert found and {m["team_id"] for m in found} == {team.id}


@pytest.mark.local_index
def test_the_mcp_tool_says_partial(api, team):
    from agentmcp import tools
    from tenants.authentication import McpPrincipal

    _big_scope(api, team)
    pipeline.config_update(team=team, recall_timeout_ms=1)
    token = McpTokenFactory(team=team, agent=Agent.objects.get(team=team, agent_id="assistant"))
    principal = McpPrincipal(team=team, mcp_token=token, agent_id="assistant")
    out = tools.memory_search(principal, query="billing backup")
    assert out == {"memories": [], "partial": True}
    _wait_loaded(team)
    pipeline.config_update(team=team, recall_timeout_ms=5000)
    out = tools.memory_search(principal, query="billing backup")
    assert "partial" not in out and out["memories"]


def _load_count() -> float:
    from core.metrics import INDEX_LOADS

    return sum(
        sample.value
        for metric in INDEX_LOADS.collect()
        for sample in metric.samples
        if sample.name.endswith("_count")
    )
