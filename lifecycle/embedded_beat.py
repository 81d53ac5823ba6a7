"""Celery beat's schedule, run by a thread of a long-lived process in the embedded mode.

Without a broker there is no beat process, so the periodic tasks (cleanup, idle compresses, the
trash's retention, tiers, the prunes; `memoryplatform.celery`) never ran unless an operator put
a command for each in cron. In the embedded mode each gunicorn worker (gunicorn.conf.py
`post_worker_init`), `manage.py mcp_stdio` (a local agent may run no server at all) and the
`runserver` of `make dev` (memoryplatform/management) start this thread: it runs each entry of
the same schedule when it is due, eagerly, one at a time, through the same task code beat sends
to a worker. `EMBEDDED_BEAT=0` turns it off; with a broker it never starts (beat does the job
there, and two would send every task twice).

One thread runs the schedule: the one holding the lock, while the others look at it every
LOCK_POLL_SECONDS. On SQLite (one machine) the lock is an exclusive flock on
`DATA_DIR/embedded-beat.lock`; the kernel lets go of it when its process ends, however it ends
(killed, recycled by max_requests, its MCP client gone). On MariaDB/MySQL, which several
machines may share without a broker, it is the server's named lock (GET_LOCK) for the database,
held by a connection of its own; the server lets go of it when that connection ends, so a
killed process, or a machine gone, is seen at once. Either way another process takes over
within the poll. Without it each of N workers ran every task (idempotent, so only time was lost,
but N cleanups of the same team at once).

Celery's own schedule objects (`schedule`, `crontab`) say when an entry is due, so an entry
means what it means to beat. As beat with an empty schedule file, an entry's first run is one
period after the start (the next matching minute for a crontab), not at the start itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

# The project's app (memoryplatform.celery), Celery's current app in every Django process (the
# project package makes it so); this app may not import the project package (the layers).
from celery import current_app as app
from celery.schedules import BaseSchedule, maybe_schedule
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from core.metrics import record_periodic_run

logger = logging.getLogger(__name__)

# The longest wait between two looks at the schedule: a clock moved forward is seen this late
# at most.
MAX_WAIT_SECONDS = 60.0

# How often a worker whose thread does not hold the lock looks again: how late a dead holder's
# schedule is taken over at most. One non-blocking flock per look.
LOCK_POLL_SECONDS = 2.0


class EmbeddedBeat:
    """The entries of a beat schedule (`{name: {"task": ..., "schedule": ...}}`) with the time
    each last ran; `run_due` runs the due ones."""

    def __init__(self, schedule: Mapping[str, Mapping[str, Any]]) -> None:
        # Every app's tasks module, as a worker imports them at its start (autodiscovery is lazy:
        # a web process has only imported those its views use). Not the loader's
        # import_default_modules, which would also run Django's setup and system checks again.
        app.autodiscover_tasks(force=True)
        self._entries: dict[str, tuple[str, BaseSchedule]] = {
            name: (entry["task"], maybe_schedule(entry["schedule"], app=app))
            for name, entry in schedule.items()
        }
        self._last: dict[str, datetime] = {
            name: sched.now() for name, (_, sched) in self._entries.items()
        }
        self.runs: dict[str, int] = dict.fromkeys(self._entries, 0)
        self.failures: dict[str, int] = dict.fromkeys(self._entries, 0)

    def restart(self) -> None:
        """Every entry's period counted from now, as beat's on a new schedule file: a worker that
        takes the schedule over runs nothing at once (its holder may have just run it)."""
        for name, (_, sched) in self._entries.items():
            self._last[name] = sched.now()

    def run_due(self) -> float:
        """Runs every due entry (a failure is logged, the others still run); returns the seconds
        until the next one is due."""
        wait = MAX_WAIT_SECONDS
        for name, (task, sched) in self._entries.items():
            due, next_in = sched.is_due(self._last[name])
            if due:
                self._last[name] = sched.now()
                self._run(name, task)
            wait = min(wait, next_in)
        return max(wait, 0.05)

    def _run(self, name: str, task: str) -> None:
        try:
            app.tasks[task].apply(throw=True)
            self.runs[name] += 1
            record_periodic_run(name, ok=True)
        except Exception:
            self.failures[name] += 1
            record_periodic_run(name, ok=False)
            logger.exception("embedded beat: %s (%s) failed", name, task)
        finally:
            # This thread's connection: not held between runs (SQLite's write lock, MySQL's
            # wait_timeout).
            connections.close_all()


class _Lock(Protocol):
    def try_take(self) -> bool:
        """Whether this call took the lock (no wait)."""

    def held(self) -> bool:
        """Still held: a database lock goes with its connection (a restart, a KILL)."""

    def close(self) -> None:
        """Lets go of it, and of what waiting for it kept open."""


class _FileLock:
    """An exclusive flock on the lock file. flock locks an open file description: a second
    open in the same process is refused too."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._handle: IO[bytes] | None = None

    def try_take(self) -> bool:
        try:
            handle: IO[bytes] = self._path.open("ab")
        except OSError:
            # A data directory it cannot write: the schedule runs without the lock (as many
            # times as there are workers, each task being idempotent) rather than not at all.
            logger.warning(
                "embedded beat: cannot open %s; runs without the lock", self._path, exc_info=True
            )
            handle = io.BytesIO()
        else:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False
        self._handle = handle
        return True

    def held(self) -> bool:
        return True  # the kernel takes it from no living process

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class _DatabaseLock:
    """The server's named lock, on a connection of the thread's own, kept while the thread waits
    for the lock (one GET_LOCK per poll, not a connection per poll)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._conn: BaseDatabaseWrapper | None = None

    def _query(self, sql: str) -> Any:
        if self._conn is None:
            self._conn = connections.create_connection(DEFAULT_DB_ALIAS)
        with self._conn.cursor() as cur:
            cur.execute(sql, [self._name])
            row = cur.fetchone()
        return row[0] if row else None

    def try_take(self) -> bool:
        """False too when the database does not answer: tried again at the next poll, on a new
        connection (every periodic task needs the database anyway)."""
        try:
            return bool(self._query("SELECT GET_LOCK(%s, 0)") == 1)
        except DatabaseError:
            logger.debug("embedded beat: no answer from the database for its lock", exc_info=True)
            self.close()
            return False

    def held(self) -> bool:
        try:
            return bool(self._query("SELECT IS_USED_LOCK(%s) = CONNECTION_ID()"))
        except DatabaseError:
            return False

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(DatabaseError):
                self._conn.close()  # the server lets go of the lock with the connection
            self._conn = None


def database_lock_name() -> str:
    """The named lock of the default database: named locks are the whole server's, and two
    installations may share one server. At most 64 characters (MySQL's limit)."""
    name = f"embedded-beat:{connections[DEFAULT_DB_ALIAS].settings_dict['NAME']}"
    if len(name) > 64:
        name = "embedded-beat:" + hashlib.sha256(name.encode()).hexdigest()[:40]
    return name


@dataclass(frozen=True)
class Started:
    """A running embedded beat: `stop.set()` ends its thread after the task it is running (and
    lets go of the lock); `holding` is set while it holds the lock and runs the schedule."""

    beat: EmbeddedBeat
    thread: threading.Thread
    stop: threading.Event
    holding: threading.Event


def start_embedded_beat(schedule: Mapping[str, Mapping[str, Any]] | None = None) -> Started | None:
    """Starts the thread (a daemon: it ends with its process) on beat's schedule, unless a
    broker is configured or EMBEDDED_BEAT is off. It runs the schedule once it holds the data
    directory's lock."""
    if settings.CELERY_BROKER_URL or not settings.EMBEDDED_BEAT:
        return None
    beat = EmbeddedBeat(app.conf.beat_schedule if schedule is None else schedule)
    lock: _Lock
    if connections[DEFAULT_DB_ALIAS].vendor == "mysql":
        name = database_lock_name()
        where = f"the database's lock {name}"
        lock = _DatabaseLock(name)
    else:
        lock_path = Path(settings.DATA_DIR) / "embedded-beat.lock"
        where = str(lock_path)
        lock = _FileLock(lock_path)
    stop = threading.Event()
    holding = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                if not lock.try_take():
                    stop.wait(LOCK_POLL_SECONDS)
                    continue
                beat.restart()
                holding.set()
                logger.info("embedded beat: process %d runs the schedule (%s)", os.getpid(), where)
                # Held is asked before each round: a lock lost with its connection (the server
                # restarted, the connection killed) stops this thread's runs, and it waits for
                # the lock again like the others.
                while lock.held() and not stop.wait(beat.run_due()):
                    pass
                holding.clear()
                lock.close()  # lets go of the lock
                if not stop.is_set():
                    logger.warning("embedded beat: process %d lost %s", os.getpid(), where)
        finally:
            holding.clear()
            lock.close()

    thread = threading.Thread(target=loop, name="embedded-beat", daemon=True)
    thread.start()
    logger.info("embedded beat started: %d periodic tasks", len(beat.runs))
    return Started(beat, thread, stop, holding)
