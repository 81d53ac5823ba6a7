"""The embedded mode's beat (memoryplatform.embedded_beat): a thread of the server process runs
beat's periodic tasks when they are due, through the same task code a worker runs."""

from __future__ import annotations

import time

import pytest
from celery.schedules import crontab
from django.utils import timezone

from graph.models import EntityIdentity
from graph.services import entity_delete
from memoryplatform.celery import app
from memoryplatform.embedded_beat import EmbeddedBeat, start_embedded_beat

from .factories import EntityIdentityFactory

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
    beat.run_due()
    assert beat.runs == {"broken": 0, "prune-identities": 1}
    assert beat.failures == {"broken": 1, "prune-identities": 0}  # logged, with its traceback
    assert not EntityIdentity.objects.filter(pk=identity.pk).exists()


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
