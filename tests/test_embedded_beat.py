"""The embedded mode's beat (lifecycle.embedded_beat): a thread of the server process runs
beat's periodic tasks when they are due, through the same task code a worker runs; one thread
per data directory, the one holding its lock."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.schedules import crontab
from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY

from graph.models import EntityIdentity
from graph.services import entity_delete
from lifecycle import embedded_beat
from lifecycle.embedded_beat import EmbeddedBeat, database_lock_name, start_embedded_beat
from memoryplatform.celery import app

from .factories import EntityIdentityFactory
from .livestack import (
    ROOT,
    free_port,
    live_stack,
    manage,
    manage_json,
    mysql_connection,
    start_server,
    wait_until_up,
)

pytestmark = pytest.mark.django_db(transaction=True)  # the thread has its own connection


def _lonely_identity(team) -> EntityIdentity:
    """An identity bob's deletion left with alice's entity alone: what graph.prune_identities
    removes."""
    identity = EntityIdentityFactory(team=team, name="Binance")
    entity_delete(entity=identity.members.get(agent_id="bob"))
    return identity


def _far_minute() -> crontab:
    # Half an hour away: not reached while the test runs.
    return crontab(minute=(timezone.now().minute + 30) % 60)


@pytest.fixture(autouse=True)
def _own_data_dir(settings, tmp_path):
    """The lock file of each test's threads is its own (DATA_DIR/embedded-beat.lock)."""
    settings.DATA_DIR = tmp_path


def _wait(condition, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_thread_runs_the_due_tasks_and_not_the_others(team):
    identity = _lonely_identity(team)
    started = start_embedded_beat(
        {
            "prune-identities": {"task": "graph.prune_identities", "schedule": 0.2},
            "retier-memories": {"task": "memories.retier_memories", "schedule": _far_minute()},
        }
    )
    assert started is not None and started.thread.is_alive()
    try:
        deadline = time.monotonic() + 20
        while EntityIdentity.objects.filter(pk=identity.pk).exists():
            assert time.monotonic() < deadline, "the embedded beat did not prune the identity"
            time.sleep(0.1)
        while started.beat.runs["prune-identities"] < 3:  # and again, every period
            assert time.monotonic() < deadline, started.beat.runs
            time.sleep(0.1)
        assert started.beat.runs["retier-memories"] == 0
    finally:
        started.stop.set()
        started.thread.join(timeout=30)
    assert not started.thread.is_alive()


def test_an_entry_is_not_run_at_the_start_and_a_failure_stops_no_other(team):
    """As beat with a new schedule file: an entry's first run is a period after the start. A
    task that fails is logged; the entries after it still run."""
    identity = _lonely_identity(team)
    beat = EmbeddedBeat(
        {
            "broken": {"task": "memories.no_such_task", "schedule": 0.05},
            "prune-identities": {"task": "graph.prune_identities", "schedule": 0.05},
        }
    )
    assert beat.run_due() <= 0.05 and beat.runs == {"broken": 0, "prune-identities": 0}
    assert EntityIdentity.objects.filter(pk=identity.pk).exists()
    time.sleep(0.1)
    before = {key: _sample(*key) for key in _SAMPLES}
    start = time.time()
    beat.run_due()
    assert beat.runs == {"broken": 0, "prune-identities": 1}
    assert beat.failures == {"broken": 1, "prune-identities": 0}  # logged, with its traceback
    assert not EntityIdentity.objects.filter(pk=identity.pk).exists()
    # and counted for an operator's scraper (GET /metrics)
    runs = {key: _sample(*key) - before[key] for key in _SAMPLES[:4]}
    assert runs == {
        ("prune-identities", "ok"): 1,
        ("prune-identities", "error"): 0,
        ("broken", "ok"): 0,
        ("broken", "error"): 1,
    }
    assert _sample("prune-identities", None) >= start
    assert _sample("broken", None) == before[("broken", None)]  # never succeeded


_SAMPLES: list[tuple[str, str | None]] = [
    ("prune-identities", "ok"),
    ("prune-identities", "error"),
    ("broken", "ok"),
    ("broken", "error"),
    ("prune-identities", None),
    ("broken", None),
]


def _sample(entry: str, outcome: str | None) -> float:
    """The entry's run count by outcome, or (outcome None) its last success's Unix time."""
    if outcome is None:
        name, labels = "memoryplatform_periodic_task_last_success_timestamp_seconds", {}
    else:
        name, labels = "memoryplatform_periodic_tasks_total", {"outcome": outcome}
    return REGISTRY.get_sample_value(name, {"entry": entry, **labels}) or 0.0


def test_the_whole_schedule_is_known_to_it():
    """Every entry of beat's schedule names a registered task and a schedule it reads; the next
    one is due within a minute (the idle compresses and the reclaim run every 60 s)."""
    beat = EmbeddedBeat(app.conf.beat_schedule)
    assert set(beat.runs) == set(app.conf.beat_schedule)
    assert all(entry["task"] in app.tasks for entry in app.conf.beat_schedule.values())
    assert 0 < beat.run_due() <= 60


def test_not_started_with_a_broker_or_when_turned_off(settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    assert start_embedded_beat() is None  # beat sends the tasks there
    settings.CELERY_BROKER_URL = ""
    settings.EMBEDDED_BEAT = False
    assert start_embedded_beat() is None


def test_one_thread_per_data_directory_runs_the_schedule(team, monkeypatch):
    """Two threads on one data directory: the one holding the lock runs the tasks, the other
    none; once the holder stops, the other takes the lock and runs them."""
    monkeypatch.setattr(embedded_beat, "LOCK_POLL_SECONDS", 0.1)
    schedule = {"prune-identities": {"task": "graph.prune_identities", "schedule": 0.2}}
    first = start_embedded_beat(schedule)
    assert first is not None
    second = None
    try:
        _wait(first.holding.is_set, "the first thread did not take the lock")
        second = start_embedded_beat(schedule)
        assert second is not None and second.thread.is_alive()
        _wait(lambda: first.beat.runs["prune-identities"] >= 3, "the holder runs nothing")
        time.sleep(0.5)  # five polls of the second thread: it still waits
        assert not second.holding.is_set()
        assert second.beat.runs == {"prune-identities": 0}
        assert second.beat.failures == {"prune-identities": 0}

        first.stop.set()
        first.thread.join(timeout=30)
        assert not first.thread.is_alive() and not first.holding.is_set()
        _wait(second.holding.is_set, "the second thread did not take the lock over")
        _wait(lambda: second.beat.runs["prune-identities"] >= 2, "the new holder runs nothing")
    finally:
        for started in (first, second):
            if started is not None:
                started.stop.set()
                started.thread.join(timeout=30)


def _embedded_env(tmp_path) -> dict[str, str]:
    """A process of the embedded mode on its own SQLite file and DATA_DIR."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        "DATA_DIR": str(tmp_path),
        "WARM_UP_AT_START": "0",
        "EMBEDDED_BEAT": "1",
    }
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)
    return env


_HOLDER = re.compile(rb"embedded beat: process (\d+) runs the schedule")


def _parent(pid: int) -> int:
    """The parent process id of a living process (Linux's /proc)."""
    stat = (Path("/proc") / str(pid) / "stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_one_gunicorn_worker_runs_the_schedule_and_another_takes_it_over(tmp_path):
    """Real gunicorn, two workers on one data directory: both start the thread, one runs the
    schedule. Killed (SIGKILL: nothing of it runs after), its lock goes with it, and a worker
    takes the schedule over within the lock's poll."""
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        proc, url = start_server(_embedded_env(tmp_path), workers=2, out=out)
        try:
            wait_until_up([url], healthy=False)
            _wait(
                lambda: (
                    log.read_bytes().count(b"embedded beat started") == 2
                    and len(_HOLDER.findall(log.read_bytes())) == 1
                ),
                "two workers, one holder",
                seconds=60,
            )
            time.sleep(3 * embedded_beat.LOCK_POLL_SECONDS)  # the other still waits
            holders = _HOLDER.findall(log.read_bytes())
            assert len(holders) == 1, log.read_text()
            os.kill(int(holders[0]), signal.SIGKILL)
            _wait(
                lambda: len(_HOLDER.findall(log.read_bytes())) == 2,
                "no worker took the schedule over",
                seconds=60,
            )
            time.sleep(3 * embedded_beat.LOCK_POLL_SECONDS)  # and only one did
            holders = _HOLDER.findall(log.read_bytes())
            assert len(holders) == 2 and holders[1] != holders[0], log.read_text()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_mcp_stdio_runs_the_schedule_once_no_other_process_holds_it(tmp_path):
    """A local agent may run `mcp_stdio` and no server: it starts the thread too. While another
    process holds the data directory's lock (here this test, as a server would) it runs nothing;
    once that lock is let go, it takes the schedule."""
    env = _embedded_env(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    token = manage_json(env, "create_mcp_token", "--team", "local")["token"]
    held = (tmp_path / "embedded-beat.lock").open("ab")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    log = tmp_path / "stdio.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "mcp_stdio"],
            cwd=ROOT,
            env={**env, "MEMORY_MCP_TOKEN": token},
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            _wait(lambda: b"embedded beat started" in log.read_bytes(), "no thread", seconds=60)
            time.sleep(3 * embedded_beat.LOCK_POLL_SECONDS)
            assert not _HOLDER.findall(log.read_bytes()), log.read_text()
            held.close()  # lets go of the lock
            _wait(
                lambda: [int(pid) for pid in _HOLDER.findall(log.read_bytes())] == [proc.pid],
                "mcp_stdio did not take the schedule",
                seconds=30,
            )
        finally:
            held.close()
            assert proc.stdin is not None
            proc.stdin.close()  # its client is gone: it ends
            proc.wait(timeout=30)


def test_the_development_server_runs_the_schedule_in_the_process_that_serves(tmp_path):
    """`make dev` is Django's runserver with its autoreloader: the process that serves (the
    reloader's child) starts the thread and holds the data directory's lock; the parent, which
    only watches the files, starts none."""
    env = _embedded_env(tmp_path)
    manage(env, "migrate", "-v0")
    port = free_port()
    log = tmp_path / "runserver.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the reloader's child goes with the group
        )
        try:
            wait_until_up([f"http://127.0.0.1:{port}"], healthy=False)
            _wait(lambda: _HOLDER.findall(log.read_bytes()), "no thread ran it", seconds=60)
            holder = int(_HOLDER.findall(log.read_bytes())[0])
            assert holder != proc.pid and _parent(holder) == proc.pid
            assert log.read_bytes().count(b"embedded beat started") == 1, log.read_text()
            lock = (tmp_path / "embedded-beat.lock").open("ab")
            with lock, pytest.raises(BlockingIOError):  # held for real, by that process
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


_MARIADB = pytest.mark.skipif(
    connection.vendor != "mysql", reason="the database's named lock: MariaDB"
)


def _lock_owner() -> int | None:
    """The id of the MariaDB connection holding the embedded beat's lock, None if none does."""
    conn = mysql_connection()
    try:
        cur = conn.cursor()
        cur.execute("SELECT IS_USED_LOCK(%s)", [database_lock_name()])
        return cur.fetchone()[0]
    finally:
        conn.close()


@_MARIADB
def test_on_mariadb_one_thread_of_all_data_directories_runs_the_schedule(
    team, settings, tmp_path, monkeypatch, caplog
):
    """Machines sharing a MariaDB without a broker each have their own data directory: the lock
    is the database's, so one thread of them all runs the schedule. A holder whose connection
    ends (here killed, as a server restart ends it) stops running it and says so, and a thread
    takes the lock again."""
    monkeypatch.setattr(embedded_beat, "LOCK_POLL_SECONDS", 0.1)
    schedule = {"prune-identities": {"task": "graph.prune_identities", "schedule": 0.2}}
    started = []
    try:
        for folder in ("one", "two"):
            settings.DATA_DIR = tmp_path / folder
            settings.DATA_DIR.mkdir()
            beat = start_embedded_beat(schedule)
            assert beat is not None
            started.append(beat)
            _wait(started[0].holding.is_set, "the first thread did not take the lock")
        first, second = started
        _wait(lambda: first.beat.runs["prune-identities"] >= 3, "the holder runs nothing")
        time.sleep(0.5)  # five polls of the second thread: it still waits
        assert not second.holding.is_set() and second.beat.runs == {"prune-identities": 0}

        owner = _lock_owner()
        assert owner is not None
        conn = mysql_connection()
        conn.cursor().execute(f"KILL {int(owner)}")
        conn.close()
        _wait(lambda: "lost the database's lock" in caplog.text, "the holder did not see it")
        _wait(lambda: _lock_owner() not in (None, owner), "no thread took the lock again")
        _wait(lambda: first.holding.is_set() != second.holding.is_set(), "not one holder")
        runs = sum(b.beat.runs["prune-identities"] for b in started)
        _wait(
            lambda: sum(b.beat.runs["prune-identities"] for b in started) >= runs + 2,
            "the new holder runs nothing",
        )
        assert first.holding.is_set() != second.holding.is_set()
    finally:
        for beat in started:
            beat.stop.set()
            beat.thread.join(timeout=30)
    assert _lock_owner() is None  # let go with the threads' connections


@_MARIADB
def test_on_mariadb_servers_with_their_own_data_directories_run_the_schedule_once(tmp_path):
    """Two gunicorn servers on one MariaDB database, each with its own data directory (two
    machines): one worker runs the schedule; killed (SIGKILL), its connection ends with it and
    another worker takes the schedule over."""
    with live_stack(tmp_path, servers=0, extra_env={"EMBEDDED_BEAT": "1"}) as stack:
        logs, procs = [], []
        try:
            for folder in ("one", "two"):
                (tmp_path / folder).mkdir()
                log = tmp_path / f"{folder}.log"
                with log.open("wb") as out:
                    env = {**stack.env, "DATA_DIR": str(tmp_path / folder)}
                    proc, url = start_server(env, out=out)
                logs.append(log)
                procs.append(proc)
                wait_until_up([url])

            def holders() -> list[int]:
                return [int(pid) for log in logs for pid in _HOLDER.findall(log.read_bytes())]

            _wait(lambda: len(holders()) == 1, "no server runs the schedule", seconds=60)
            time.sleep(3 * embedded_beat.LOCK_POLL_SECONDS)  # the other still waits
            assert len(holders()) == 1, [log.read_text() for log in logs]
            assert all(b"embedded beat started" in log.read_bytes() for log in logs)
            (killed,) = holders()
            os.kill(killed, signal.SIGKILL)
            _wait(lambda: len(holders()) == 2, "no other worker took it", seconds=60)
            time.sleep(3 * embedded_beat.LOCK_POLL_SECONDS)  # and only one did
            (taker,) = [pid for pid in holders() if pid != killed]
            # a worker of either server (the killed one's master starts a new worker)
            assert _parent(taker) in {proc.pid for proc in procs}
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(timeout=30)
