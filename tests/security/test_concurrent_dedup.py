"""Concurrent identical writes must not create duplicates (dedup is decided under a scope lock).

Real gunicorn processes on one database (SQLite file, or MariaDB when the run uses it), each with
its own in-process index; eight client threads write the same 25 contents at the same moment.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import environ
import pytest

from memoryplatform.client import MemoryClient
from tests.livestack import Stack, live_stack

CLIENTS = 8
FACTS = 25


def _contents(variant: int = 0) -> list[str]:
    """25 facts that are not duplicates of each other (their numbers differ). Variant 1 is the
    same fact re-punctuated: another content hash, so only the index finds it a duplicate."""
    sep, end = (":", ".") if variant == 0 else (" -", "!")
    return [
        f"Ticket {1000 + i}{sep} the nightly backup of shard {i} finished without errors{end}"
        for i in range(FACTS)
    ]


def count_rows(
    stack: Stack, where: str, params: tuple[Any, ...], table: str = "memories_memory"
) -> int:
    """Rows of the stack's own database (not the test database), read directly."""
    cfg = environ.Env.db_url_config(stack.env["DATABASE_URL"])
    sql = f"SELECT COUNT(*) FROM {table} WHERE {where}"
    if cfg["ENGINE"] == "django.db.backends.sqlite3":
        conn = sqlite3.connect(cfg["NAME"])
        try:
            return int(conn.execute(sql, params).fetchone()[0])
        finally:
            conn.close()
    import MySQLdb

    mconn = MySQLdb.connect(
        host=cfg["HOST"] or "127.0.0.1",
        port=int(cfg["PORT"] or 3306),
        user=cfg["USER"],
        passwd=cfg["PASSWORD"] or "",
        db=cfg["NAME"],
    )
    try:
        cur = mconn.cursor()
        cur.execute(sql.replace("?", "%s"), params)
        return int(cur.fetchone()[0])
    finally:
        mconn.close()


def run_concurrently(stack: Stack, write: Callable[[MemoryClient, int, int], Any]) -> list[Any]:
    """CLIENTS threads, spread over the stack's servers, each calling write(client, thread, i)
    for every fact i, all starting together. Returns every answer (errors re-raised)."""
    barrier = threading.Barrier(CLIENTS)
    answers: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client_thread(t: int) -> None:
        client = MemoryClient(
            stack.api_key, stack.secret, base_url=stack.urls[t % len(stack.urls)], timeout=120
        )
        try:
            barrier.wait(timeout=60)
            for i in range(FACTS):
                answer = write(client, t, i)
                with lock:
                    answers.append(answer)
        except BaseException as exc:  # reported by the test, not lost in the thread
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=client_thread, args=(t,)) for t in range(CLIENTS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not errors, errors
    assert len(answers) == CLIENTS * FACTS
    return answers


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with live_stack(tmp_path_factory.mktemp("dedup"), servers=2) as s:
        # Both processes load the indexes before the race, so each must catch up with the
        # other's commits from the change log, not get them from a fresh load.
        for url in s.urls:
            client = MemoryClient(s.api_key, s.secret, base_url=url)
            for agent in ("exact", "near"):
                client.search(agent, "warm up")
            client.search_team("warm up")
        yield s


def test_identical_personal_writes_from_eight_clients_leave_one_row_each(stack):
    contents = _contents()
    answers = run_concurrently(
        stack, lambda c, t, i: c.write_memory("exact", contents[i], importance=0.5)
    )
    assert count_rows(stack, "agent_id = ?", ("exact",)) == FACTS
    # Every client got the surviving row back: one id per content.
    ids = {(a["content"], a["id"]) for a in answers}
    assert len(ids) == FACTS
    assert sum(1 for a in answers if a.get("dedup_skipped")) == CLIENTS * FACTS - FACTS


def test_near_duplicates_written_at_once_through_two_processes_leave_one_row_each(stack):
    probe = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
    # Precondition, one at a time: the re-punctuated variant is a duplicate for this model.
    first = probe.write_memory("probe", _contents(0)[0])
    again = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[1]).write_memory(
        "probe", _contents(1)[0]
    )
    assert again.get("dedup_skipped") is True and again["id"] == first["id"]

    variants = [_contents(0), _contents(1)]
    run_concurrently(stack, lambda c, t, i: c.write_memory("near", variants[t % 2][i]))
    assert count_rows(stack, "agent_id = ?", ("near",)) == FACTS


def test_team_memories_from_different_authors_are_one_scope(stack):
    contents = _contents()
    run_concurrently(
        stack,
        lambda c, t, i: c.write_team_memory(contents[i], agent_id=f"author{t}"),
    )
    assert count_rows(stack, "scope = ?", ("team",)) == FACTS


# --- the lock row itself (in-process) --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_lock_row_removed_behind_the_process_cache_is_recreated_in_the_transaction(team):
    from memories.locks import scope_lock
    from memories.models import Memory, ScopeLock
    from memories.services import memory_create

    memory_create(team=team, scope="personal", agent_id="lk", content="first fact about shard 1")
    assert ScopeLock.objects.filter(scope_key="team_a|personal|lk").count() == 1
    # As after the team was deleted and re-created: the process still believes the row exists.
    ScopeLock.objects.all().delete()
    memory_create(team=team, scope="personal", agent_id="lk", content="second fact about shard 2")
    assert ScopeLock.objects.filter(scope_key="team_a|personal|lk").count() == 1
    assert Memory.objects.filter(agent_id="lk").count() == 2
    with pytest.raises(RuntimeError, match=r"inside transaction\.atomic"):
        scope_lock(team_id=team.id, scope="personal", agent_id="lk")


def test_the_same_batch_from_eight_clients_leaves_one_row_each(stack):
    """Batches (half of them atomic) race like single writes: each item is checked and written
    under the scope's lock, so two processes writing the same batch store each fact once."""
    items = [{"agent_id": "batch", "content": c} for c in _contents()]

    def write(client: MemoryClient, t: int, i: int) -> Any:
        if i:
            return None  # one batch per client, sent with the first fact
        return client.write_memories(items, atomic=bool(t % 2))

    answers = [a for a in run_concurrently(stack, write) if a is not None]
    assert count_rows(stack, "agent_id = ?", ("batch",)) == FACTS
    statuses = [r["status"] for a in answers for r in a["results"]]
    assert statuses.count(201) == FACTS and statuses.count(200) == CLIENTS * FACTS - FACTS


def test_the_same_ingest_retried_from_eight_clients_with_one_key_is_written_once(stack):
    """Eight clients send each conversation with the same Idempotency-Key at the same moment
    (a client retrying through two processes): each is archived once, its fact stored once,
    and every client gets the same answer."""
    contents = _contents()

    def ingest(client: MemoryClient, t: int, i: int) -> Any:
        body = {"agent_id": "ingest", "messages": [{"role": "user", "content": contents[i]}]}
        _method, url, raw, headers = client._prepare("POST", "/memories/ingest", body, None)
        headers["Idempotency-Key"] = f"conversation-{i}"
        response = client.session.post(url, data=raw, headers=headers, timeout=120)
        assert response.status_code == 200, response.text
        return i, response.json()["data"]

    answers = run_concurrently(stack, ingest)
    assert count_rows(stack, "agent_id = ?", ("ingest",)) == FACTS
    assert count_rows(stack, "agent_id = ?", ("ingest",), table="lifecycle_workingarchive") == FACTS
    by_conversation: dict[int, list[Any]] = {}
    for i, data in answers:
        by_conversation.setdefault(i, []).append(data)
    for i, datas in by_conversation.items():
        assert all(d == datas[0] for d in datas), i
        # One new memory each (ADD, or UPDATE of a ticket whose number differs): none is NOOP,
        # which is what a second write of the same conversation would have answered.
        assert [f["decision"] for f in datas[0]["facts"]] in (["ADD"], ["UPDATE"])
