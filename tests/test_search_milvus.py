"""The milvus search backend (SEARCH_BACKEND=milvus; docs/search.md, "Search backends") on a real
milvus-lite engine in tmp_path: candidates from the engine, exact scores from the rows (the same
as the local backend's), the tenancy guard, the outbox and read-your-writes, the engine down
(503 or the local fallback; writes never fail), and `manage.py reindex`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import transaction

from memories.models import IndexChange, Memory, MemoryScope, SearchCursor
from memories.retrieval import search as search_service
from memories.retrieval.index import scope_key
from memories.services import memory_create, memory_delete

from .conftest import milvus_available, release_milvus
from .helpers import error_code, ok_data
from .livestack import free_port

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not milvus_available(), reason="the milvus extra is not installed: pip install '.[milvus]'"
    ),
]

# Nothing listens on port 1 here: a real unreachable engine, no mock.
DOWN = "http://127.0.0.1:1"

NOTES = [
    "The staging database is backed up every night at two",
    "Deploys to production need approval from the release manager",
    "The office coffee machine is descaled on Mondays",
    "Alice prefers Python type hints in every new module",
    "用户喜欢喝绿茶，不喝咖啡",
    "项目的截止日期是下周五",
    "Bob is allergic to peanuts",
    "The VPN certificate expires at the end of March",
]

QUERIES = [
    "when is the database backed up",
    "who approves production deploys",
    "coffee",
    "what does the user drink",
    "截止日期",
    "allergies",
]


@pytest.fixture
def milvus(settings, tmp_path):
    """The milvus backend on a milvus-lite data path of this test (whatever SEARCH_BACKEND the
    run was started with)."""
    from memories.retrieval import milvus as backend

    path = str(tmp_path / "engine.db")
    settings.SEARCH_BACKEND = "milvus"
    settings.SEARCH_MILVUS_URI = path
    settings.INDEX_CHANGE_SETTLE_SECONDS = 0.0
    backend.reset_engines()
    yield backend
    release_milvus(path)


def _write(team, content: str, agent_id: str = "a1", scope: str = MemoryScope.PERSONAL) -> Memory:
    memory, _ = memory_create(
        team=team, scope=scope, agent_id=agent_id, content=content, enable_dedup=False
    )
    return memory


def _search(team, text: str, agent_id: str = "a1", **kw) -> list[tuple[int, float]]:
    hits = search_service.memory_search(
        search_service.SearchQuery(
            team=team, scope=MemoryScope.PERSONAL, agent_id=agent_id, text=text, **kw
        )
    )
    return [(h.memory.pk, round(float(h.score or 0.0), 4)) for h in hits]


def _engine_ids(backend, team_id: str, key: str) -> set[int]:
    eng = backend.engine()
    client = eng.client()
    rows = client.query(eng.collection, filter=backend._team_filter(team_id, key), limit=1000)
    return {int(r["id"]) for r in rows}


def test_an_engine_query_without_its_team_is_refused_before_the_engine(milvus, settings):
    settings.SEARCH_MILVUS_URI = DOWN  # a query that got through would fail with EngineDown
    milvus.reset_engines()
    eng = milvus.engine()
    with pytest.raises(milvus.TenancyError):
        eng.dense_top("", "|personal|a1", [0.0] * eng.dim, 5)  # type: ignore[arg-type]
    with pytest.raises(milvus.TenancyError):
        eng.sparse_top("t1", "t2|team|", {1: 1.0}, 5)  # another team's scope
    with pytest.raises(milvus.TenancyError):
        eng.count("", "|team|")
    with pytest.raises(milvus.TenancyError):
        eng.delete("", [1, 2])
    with pytest.raises(milvus.TenancyError):
        eng.upsert([{"id": 1, "team_id": "", "scope_key": "|team|"}])
    assert milvus._team_filter("t1", "t1|team|") == 'team_id == "t1" and scope_key == "t1|team|"'
    # Quotes in an id cannot end the string early.
    assert '\\"' in milvus._team_filter('t"1')


def test_writes_are_shipped_and_the_cursor_moves(milvus, team):
    memories = [_write(team, text) for text in NOTES]
    key = scope_key(team.id, MemoryScope.PERSONAL, "a1")
    # Each write committed and shipped inline (embedded job mode).
    assert _engine_ids(milvus, team.id, key) == {m.pk for m in memories}
    last = IndexChange.objects.order_by("-id").values_list("id", flat=True).first()
    assert SearchCursor.objects.get(name="milvus").last_change_id == last
    assert milvus._unshipped(key) == set()


def test_the_same_results_and_scores_as_the_local_backend(milvus, team, settings):
    for text in NOTES:
        _write(team, text)
    _write(team, "The staging database lives in Frankfurt", agent_id="a2")
    for query in QUERIES:
        for mode in ("hybrid", "vector", "keyword"):
            settings.SEARCH_BACKEND = "milvus"
            got = _search(team, query, mode=mode, min_score=0.0)
            settings.SEARCH_BACKEND = "local"
            want = _search(team, query, mode=mode, min_score=0.0)
            assert [mid for mid, _ in got] == [mid for mid, _ in want], (query, mode)
            for (_, a), (_, b) in zip(got, want, strict=True):
                assert a == pytest.approx(b, abs=0.01), (query, mode)


def test_the_engine_only_answers_for_the_team_and_scope_asked(milvus, team, other_team):
    mine = _write(team, "The deploy key is rotated monthly")
    _write(other_team, "The deploy key is rotated monthly")  # same words, another team
    _write(team, "The deploy key is rotated monthly, says a2", agent_id="a2")
    assert [mid for mid, _ in _search(team, "deploy key rotation")] == [mine.pk]


def test_the_embedded_mode_ships_inline_whatever_the_celery_app_says(milvus, team, monkeypatch):
    """The embedded job mode is the settings' (CELERY_TASK_ALWAYS_EAGER), as for lifecycle jobs:
    an app left non-eager (by another test, or a broker URL in its conf) must not send the
    shipping to a broker nobody consumes."""
    from memoryplatform.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", False)
    memory = _write(team, NOTES[0])
    key = scope_key(team.id, MemoryScope.PERSONAL, "a1")
    assert _engine_ids(milvus, team.id, key) == {memory.pk}


def test_read_your_writes_while_the_engine_lags(milvus, team, settings, tmp_path):
    kept = _write(team, "The staging database is backed up every night at two")
    gone = _write(team, "The backup of the staging database is kept for a week")
    # Changes waiting in the outbox: shipping cannot reach the engine while this runs.
    settings.SEARCH_MILVUS_URI = DOWN
    milvus.reset_engines()
    fresh = _write(team, "Database backups are encrypted with the ops key")
    gone_id = gone.pk
    memory_delete(memory=gone)
    settings.SEARCH_MILVUS_URI = str(tmp_path / "engine.db")
    milvus.reset_engines()
    key = scope_key(team.id, MemoryScope.PERSONAL, "a1")
    assert milvus._unshipped(key) >= {fresh.pk, gone_id}
    assert fresh.pk not in _engine_ids(milvus, team.id, key)
    assert gone_id in _engine_ids(milvus, team.id, key)  # stale in the engine...
    found = [mid for mid, _ in _search(team, "database backup", min_score=0.0)]
    assert fresh.pk in found and kept.pk in found
    assert gone_id not in found  # ...never in a result
    # The next shipping pass catches up.
    assert milvus.ship_changes() >= 2
    assert _engine_ids(milvus, team.id, key) == {kept.pk, fresh.pk}
    assert milvus._unshipped(key) == set()


def test_a_write_inside_an_open_transaction_is_found_by_its_own_search(milvus, team):
    with transaction.atomic():
        memory = _write(team, "The VPN certificate expires at the end of March")
        # Not committed, so not shipped: found through the change log.
        assert memory.pk in [mid for mid, _ in _search(team, "VPN certificate expiry")]


def test_engine_down_search_is_503_and_writes_still_succeed(milvus, api, settings, tmp_path):
    settings.SEARCH_MILVUS_URI = DOWN
    milvus.reset_engines()
    w = api.post(
        "/memories/personal",
        {"agent_id": "a1", "content": "The staging database is backed up nightly"},
    )
    assert w.status_code == 201, w.content
    r = api.post("/memories/personal/search", {"agent_id": "a1", "query": "database backup"})
    assert r.status_code == 503
    assert error_code(r) == "SEARCH_UNAVAILABLE"
    # The change waits in the outbox; once the engine is back it is shipped and found.
    settings.SEARCH_MILVUS_URI = str(tmp_path / "engine.db")
    milvus.reset_engines()
    milvus.ship_changes()
    r = api.post("/memories/personal/search", {"agent_id": "a1", "query": "database backup"})
    assert r.status_code == 200
    assert len(ok_data(r)) == 1


def test_engine_down_falls_back_to_the_local_index_when_asked(milvus, api, settings):
    settings.SEARCH_MILVUS_URI = DOWN
    settings.SEARCH_FALLBACK_LOCAL = True
    milvus.reset_engines()
    api.post("/memories/personal", {"agent_id": "a1", "content": "Bob is allergic to peanuts"})
    r = api.post("/memories/personal/search", {"agent_id": "a1", "query": "peanut allergy"})
    assert r.status_code == 200
    assert [m["content"] for m in ok_data(r)] == ["Bob is allergic to peanuts"]


def test_near_duplicates_are_found_through_the_engine(milvus, api):
    first = api.post("/memories/personal", {"agent_id": "a1", "content": "I love green tea"})
    again = api.post("/memories/personal", {"agent_id": "a1", "content": "I really love green tea"})
    assert ok_data(again)["id"] == ok_data(first)["id"]


def test_reindex_rebuilds_the_engine_from_the_database(milvus, team, other_team, capsys):
    mine = [_write(team, text) for text in NOTES[:3]]
    theirs = _write(other_team, NOTES[3])
    key = scope_key(team.id, MemoryScope.PERSONAL, "a1")
    milvus.engine().drop_collection()  # the engine lost everything
    assert _engine_ids(milvus, team.id, key) == set()
    call_command("reindex", "--backend", "milvus", "--team", team.id)
    assert _engine_ids(milvus, team.id, key) == {m.pk for m in mine}
    other_key = scope_key(other_team.id, MemoryScope.PERSONAL, "a1")
    assert _engine_ids(milvus, other_team.id, other_key) == set()
    call_command("reindex", "--backend", "milvus")
    assert _engine_ids(milvus, other_team.id, other_key) == {theirs.pk}
    assert "sent 4 memories" in capsys.readouterr().out


def test_reindex_says_so_when_the_engine_is_down(milvus, team, settings):
    from django.core.management.base import CommandError

    settings.SEARCH_MILVUS_URI = DOWN
    milvus.reset_engines()
    with pytest.raises(CommandError, match="unreachable"):
        call_command("reindex", "--backend", "milvus")


def test_deleting_a_team_removes_its_rows_from_the_engine(milvus, team, other_team):
    from tenants.services import team_delete

    _write(team, NOTES[0])
    kept = _write(other_team, NOTES[0])
    team_delete(team=team)
    eng = milvus.engine()
    rows = eng.client().query(eng.collection, filter="id >= 0", output_fields=["team_id"])
    assert {r["team_id"] for r in rows} == {other_team.id}
    assert {int(r["id"]) for r in rows} == {kept.pk}


def test_pruning_the_log_keeps_what_the_engine_has_not_received(milvus, team, settings):
    from datetime import timedelta

    from django.utils import timezone

    from memories.services import index_changes_prune

    shipped = _write(team, NOTES[0])
    settings.SEARCH_MILVUS_URI = DOWN  # the next write cannot be shipped
    milvus.reset_engines()
    waiting = _write(team, NOTES[1])
    IndexChange.objects.update(created_at=timezone.now() - timedelta(days=2))
    assert index_changes_prune(older_than_seconds=3600) == 1
    assert list(IndexChange.objects.values_list("memory_id", flat=True)) == [waiting.pk]
    assert shipped.pk != waiting.pk


def test_a_wrong_backend_setting_stops_the_server(settings):
    from django.core import checks

    settings.SEARCH_BACKEND = "milvsu"
    assert [e.id for e in checks.run_checks() if e.id.startswith("memories.E00")] == [
        "memories.E004"
    ]
    settings.SEARCH_BACKEND = "milvus"
    settings.SEARCH_MILVUS_URI = ""
    assert [e.id for e in checks.run_checks() if e.id.startswith("memories.E00")] == [
        "memories.E005"
    ]


class _Server:
    """milvus-lite's gRPC server (`milvus-lite server`) as a process of its own: what several
    web nodes and workers share (docs/search.md)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from pymilvus import MilvusClient

        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from milvus_lite.cmdline import main; main()",
                "server",
                "--data-dir",
                str(self.data_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                MilvusClient(uri=self.uri, timeout=2).list_collections()
                return
            except Exception:
                assert self.proc.poll() is None, "milvus-lite server exited"
                time.sleep(0.2)
        raise AssertionError("milvus-lite server did not answer")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def milvus_server(settings, tmp_path):
    from memories.retrieval import milvus as backend

    server = _Server(tmp_path / "engine-server")
    server.start()
    settings.SEARCH_BACKEND = "milvus"
    settings.SEARCH_MILVUS_URI = server.uri
    settings.INDEX_CHANGE_SETTLE_SECONDS = 0.0
    backend.reset_engines()
    yield server
    for eng in list(backend._engines.values()):
        if eng._client is not None:
            eng._client.close()
    backend.reset_engines()
    server.stop()


def test_a_milvus_lite_server_process_serves_and_survives_its_restart(milvus_server, api, team):
    """Server mode: writes ship to a separate engine process and searches read it; after the
    engine restarts (its collection comes back released), the same web process answers again
    without a restart of its own, and a write made while the engine was down is shipped."""
    from memories.retrieval import milvus

    first = api.post(
        "/memories/personal", {"agent_id": "a1", "content": "Bob is allergic to peanuts"}
    )
    assert first.status_code == 201, first.content
    r = api.post("/memories/personal/search", {"agent_id": "a1", "query": "peanut allergy"})
    assert r.status_code == 200, r.content
    assert [m["id"] for m in ok_data(r)] == [ok_data(first)["id"]]

    milvus_server.stop()
    down = api.post(
        "/memories/personal", {"agent_id": "a1", "content": "The VPN certificate expires in March"}
    )
    assert down.status_code == 201, down.content  # the change log keeps it
    milvus_server.start()
    assert milvus.ship_changes() >= 1
    r = api.post("/memories/personal/search", {"agent_id": "a1", "query": "VPN certificate"})
    assert r.status_code == 200, r.content
    assert ok_data(r)[0]["id"] == ok_data(down)["id"]
    key = scope_key(team.id, MemoryScope.PERSONAL, "a1")
    assert _engine_ids(milvus, team.id, key) == {ok_data(first)["id"], ok_data(down)["id"]}
