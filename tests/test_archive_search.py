"""The archive (L0) through the API: POST /lifecycle/archive/search (filters, text query in any
script, newest first, cursor paging, agent keys, another team) and GET /lifecycle/archive/<item>
(the item and the memories derived from it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lifecycle.models import ArchiveReason, WorkingArchive

from .factories import JobRunFactory, MemoryFactory, WorkingArchiveFactory
from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def _search(api, **body):
    return api.post("/lifecycle/archive/search", body)


@pytest.fixture
def archive(team):
    """Five items of team_a: three ingested messages of two runs, one consumed, one evicted."""
    rows = {
        "hello": WorkingArchiveFactory(
            team=team,
            content="Hello, I TRADE crypto on Binance.",
            item_created_at=T0,
            reason=ArchiveReason.INGESTED,
            role="user",
            name="alice",
            run_id="run-1",
        ),
        "reply": WorkingArchiveFactory(
            team=team,
            content="Noted, Binance it is.",
            item_created_at=T0 + timedelta(minutes=1),
            reason=ArchiveReason.INGESTED,
            role="assistant",
            run_id="run-1",
        ),
        "zh": WorkingArchiveFactory(
            team=team,
            content="我的杠杆上限是三倍",
            item_created_at=T0 + timedelta(days=1),
            reason=ArchiveReason.INGESTED,
            role="user",
            run_id="run-2",
        ),
        "consumed": WorkingArchiveFactory(
            team=team, content="回测结果：夏普比率 1.8", item_created_at=T0 + timedelta(days=2)
        ),
        "evicted": WorkingArchiveFactory(
            team=team,
            agent_id="writer",
            content="draft notes",
            item_created_at=T0 + timedelta(days=3),
            reason=ArchiveReason.EVICTED,
        ),
    }
    return rows


def _ids(data) -> list[str]:
    return [i["id"] for i in data["items"]]


def test_everything_newest_first_with_every_field(api, archive):
    data = ok_data(_search(api))
    assert _ids(data) == [
        archive[k].item_id for k in ("evicted", "consumed", "zh", "reply", "hello")
    ]
    assert data["next_cursor"] is None
    hello = data["items"][-1]
    assert list(hello) == [
        "id",
        "agent_id",
        "role",
        "name",
        "run_id",
        "content",
        "created_at",
        "archived_at",
        "reason",
        "job_id",
    ]
    assert hello["role"] == "user" and hello["name"] == "alice" and hello["run_id"] == "run-1"
    assert hello["created_at"] == "2026-11-01T09:00:00Z"
    assert hello["reason"] == "ingested" and hello["job_id"] is None


def test_filters_combine(api, archive):
    assert _ids(ok_data(_search(api, run_id="run-1"))) == [
        archive["reply"].item_id,
        archive["hello"].item_id,
    ]
    assert _ids(ok_data(_search(api, run_id="run-1", role="user"))) == [archive["hello"].item_id]
    assert _ids(ok_data(_search(api, reason="evicted"))) == [archive["evicted"].item_id]
    assert _ids(ok_data(_search(api, agent_id="writer"))) == [archive["evicted"].item_id]
    window = ok_data(_search(api, since="2026-11-01T09:01:00Z", until="2026-11-02T09:00:00+00:00"))
    assert _ids(window) == [archive["zh"].item_id, archive["reply"].item_id]


def test_a_run_id_is_compared_exactly_on_every_database(api, team, archive):
    # MariaDB's default collation would take "RUN-1" for "run-1".
    upper = WorkingArchiveFactory(
        team=team, content="another session", item_created_at=T0, run_id="RUN-1"
    )
    assert _ids(ok_data(_search(api, run_id="RUN-1"))) == [upper.item_id]
    assert upper.item_id not in _ids(ok_data(_search(api, run_id="run-1")))


def test_query_is_a_case_insensitive_substring_in_english_and_chinese(api, archive):
    assert _ids(ok_data(_search(api, query="binance"))) == [
        archive["reply"].item_id,
        archive["hello"].item_id,
    ]
    assert _ids(ok_data(_search(api, query="trade CRYPTO"))) == [archive["hello"].item_id]
    assert _ids(ok_data(_search(api, query="杠杆"))) == [archive["zh"].item_id]
    assert _ids(ok_data(_search(api, query="夏普"))) == [archive["consumed"].item_id]
    # LIKE's wildcards are plain characters in a query.
    assert ok_data(_search(api, query="%"))["items"] == []
    assert ok_data(_search(api, query="_"))["items"] == []


def test_cursor_pages_through_everything_once(api, archive):
    # Two rows with the same time: the row id breaks the tie, so none is skipped or repeated.
    WorkingArchiveFactory(team=archive["hello"].team, item_created_at=T0, content="same time")
    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        data = ok_data(_search(api, page_size=2, cursor=cursor))
        seen += _ids(data)
        pages += 1
        if data["next_cursor"] is None:
            break
        cursor = data["next_cursor"]
    assert pages == 3
    assert len(seen) == 6 and len(set(seen)) == 6
    assert seen == _ids(ok_data(_search(api, page_size=200)))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"role": "robot"}, "role"),
        ({"reason": "lost"}, "reason"),
        ({"since": "yesterday"}, "since"),
        ({"until": 5}, "until"),
        ({"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, "until"),
        ({"query": 5}, "query"),
        ({"agent_id": "bad id!"}, "agent_id"),
        ({"run_id": "bad id!"}, "run_id"),
        ({"page_size": 0}, "page_size"),
        ({"page_size": 201}, "page_size"),
        ({"cursor": "made-up"}, "cursor"),
    ],
)
def test_bad_input_is_400_naming_the_field(api, body, field):
    response = _search(api, **body)
    assert response.status_code == 400
    assert error_code(response) == "VALIDATION_ERROR"
    assert field in response.json()["details"]


def test_an_agent_key_sees_its_own_agent_only(agent_api, archive):
    data = ok_data(_search(agent_api))
    assert archive["evicted"].item_id not in _ids(data)
    assert len(data["items"]) == 4
    assert _search(agent_api, agent_id="writer").status_code == 403
    assert agent_api.get(f"/lifecycle/archive/{archive['evicted'].item_id}").status_code == 403
    assert ok_data(agent_api.get(f"/lifecycle/archive/{archive['zh'].item_id}"))["content"] == (
        "我的杠杆上限是三倍"
    )


def test_another_teams_archive_is_as_missing_as_a_made_up_id(api, other_api, archive):
    assert ok_data(_search(other_api))["items"] == []
    assert ok_data(_search(other_api, query="binance"))["items"] == []
    item_id = archive["hello"].item_id
    theirs = other_api.get(f"/lifecycle/archive/{item_id}")
    missing = api.get("/lifecycle/archive/0123456789abcdef0123456789abcdef")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()


def test_an_item_lists_the_memories_derived_from_it(api, team):
    job = JobRunFactory(team=team, agent_id="researcher", kind="compress", trigger="api")
    item = WorkingArchiveFactory(team=team, job=job, content="I prefer short answers.")
    other = WorkingArchiveFactory(team=team, job=job, content="unrelated")
    derived = MemoryFactory(
        team=team,
        agent_id="researcher",
        content="prefers short answers",
        metadata={"source": "compression", "source_items": [item.item_id], "job_id": job.pk},
    )
    MemoryFactory(
        team=team,
        agent_id="researcher",
        content="something else",
        metadata={"source": "compression", "source_items": [other.item_id], "job_id": job.pk},
    )
    data = ok_data(api.get(f"/lifecycle/archive/{item.item_id}"))
    assert data["id"] == item.item_id and data["job_id"] == job.pk
    assert data["derived_memory_ids"] == [derived.pk]
    assert [m["content"] for m in data["derived_memories"]] == ["prefers short answers"]
    # An item nothing was derived from (the cap evicted it).
    lone = WorkingArchiveFactory(team=team, reason=ArchiveReason.EVICTED)
    assert ok_data(api.get(f"/lifecycle/archive/{lone.item_id}"))["derived_memories"] == []


def test_ingest_then_search_then_back_to_the_facts(api):
    sent = ok_data(
        api.post(
            "/memories/ingest",
            {
                "agent_id": "researcher",
                "run_id": "s-9",
                "messages": [
                    {"role": "user", "content": "我住在新加坡，在 Binance 上交易加密货币。"},
                    {"role": "assistant", "content": "好的，记住了。"},
                    {"role": "user", "content": "My leverage limit is 3x on every account."},
                ],
            },
        )
    )
    assert sent["archived"] == 3 and sent["facts"]
    hits = ok_data(_search(api, run_id="s-9", role="user", query="LEVERAGE"))["items"]
    assert [h["content"] for h in hits] == ["My leverage limit is 3x on every account."]
    detail = ok_data(api.get(f"/lifecycle/archive/{hits[0]['id']}"))
    assert detail["derived_memories"]
    assert all(m["run_id"] == "s-9" for m in detail["derived_memories"])
    assert any("3x" in m["content"] for m in detail["derived_memories"])
    # And back: each derived memory's sources include the item.
    for memory_id in detail["derived_memory_ids"]:
        sources = ok_data(api.get(f"/lifecycle/sources/{memory_id}"))["source_items"]
        assert hits[0]["id"] in [s["id"] for s in sources]
    zh = ok_data(_search(api, query="新加坡"))["items"]
    assert len(zh) == 1 and zh[0]["role"] == "user"
    assert WorkingArchive.objects.filter(team_id="team_a").count() == 3
