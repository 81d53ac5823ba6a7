"""Celery beat's schedule, run by a thread of the server process in the embedded mode.

Without a broker there is no beat process, so the periodic tasks (cleanup, idle compresses, the
trash's retention, tiers, the prunes; `memoryplatform.celery`) never ran unless an operator put
a command for each in cron. A gunicorn worker of the embedded mode (`make run`) now starts this
thread (gunicorn.conf.py `post_worker_init`): it runs each entry of the same schedule when it is
due, eagerly, one at a time, through the same task code beat sends to a worker. Every task is
idempotent, so a second process running it (several gunicorn workers, or cron as before) costs
time, not correctness. `EMBEDDED_BEAT=0` turns it off; with a broker it never starts (beat does
the job there, and two would send every task twice).

Celery's own schedule objects (`schedule`, `crontab`) say when an entry is due, so an entry
means what it means to beat. As beat with an empty schedule file, an entry's first run is one
period after the start (the next matching minute for a crontab), not at the start itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery.schedules import BaseSchedule, maybe_schedule
from django.conf import settings
from django.db import connections

from memoryplatform.celery import app

logger = logging.getLogger(__name__)

# The longest wait between two looks at the schedule: a clock moved forward is seen this late
# at most.
MAX_WAIT_SECONDS = 60.0


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
        except Exception:
            self.failures[name] += 1
            logger.exception("embedded beat: %s (%s) failed", name, task)
        finally:
            # This thread's connection: not held between runs (SQLite's write lock, MySQL's
            # wait_timeout).
            connections.close_all()


@dataclass(frozen=True)
class Started:
    """A running embedded beat: `stop.set()` ends its thread after the task it is running."""

    beat: EmbeddedBeat
    thread: threading.Thread
    stop: threading.Event


def start_embedded_beat(schedule: Mapping[str, Mapping[str, Any]] | None = None) -> Started | None:
    """Starts the thread (a daemon: it ends with its process) on beat's schedule, unless a
    broker is configured or EMBEDDED_BEAT is off."""
    if settings.CELERY_BROKER_URL or not settings.EMBEDDED_BEAT:
        return None
    beat = EmbeddedBeat(app.conf.beat_schedule if schedule is None else schedule)
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(beat.run_due()):
            pass

    thread = threading.Thread(target=loop, name="embedded-beat", daemon=True)
    thread.start()
    logger.info("embedded beat started: %d periodic tasks", len(beat.runs))
    return Started(beat, thread, stop)
