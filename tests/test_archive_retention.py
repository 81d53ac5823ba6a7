"""ARCHIVE_RETENTION_DAYS: beat deletes archive rows (L0) archived longer ago than that; 0 (the
default) keeps the archive forever."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from lifecycle import tasks
from lifecycle.models import ArchiveReason, WorkingArchive
from lifecycle.services import archive
from memoryplatform.celery import app

from .factories import TeamFactory, WorkingArchiveFactory

pytestmark = pytest.mark.django_db


def _archived(team, *, days_ago: float, **kwargs) -> WorkingArchive:
    row = WorkingArchiveFactory(team=team, **kwargs)
    # archived_at is auto_now_add: backdated afterwards, as a row that old would be.
    WorkingArchive.objects.filter(pk=row.pk).update(
        archived_at=timezone.now() - timedelta(days=days_ago)
    )
    return row


@pytest.fixture
def aged(team, other_team):
    return {
        "old": _archived(team, days_ago=31, reason=ArchiveReason.INGESTED, role="user"),
        "old_evicted": _archived(team, days_ago=400, reason=ArchiveReason.EVICTED),
        "other_team_old": _archived(other_team, days_ago=45),
        "recent": _archived(team, days_ago=29),
        # Said long ago but archived today: kept by archiving time, not by the item's own.
        "ingested_today": _archived(
            team,
            days_ago=0,
            reason=ArchiveReason.INGESTED,
            item_created_at=timezone.now() - timedelta(days=3650),
        ),
    }


def _left() -> set[int]:
    return set(WorkingArchive.objects.values_list("pk", flat=True))


def test_the_default_keeps_the_archive_forever(settings, aged):
    assert settings.ARCHIVE_RETENTION_DAYS == 0
    assert tasks.prune_archive_task() == 0
    assert _left() == {r.pk for r in aged.values()}


def test_rows_past_the_retention_are_deleted_in_every_team(settings, aged):
    settings.ARCHIVE_RETENTION_DAYS = 30
    assert tasks.prune_archive_task() == 3
    assert _left() == {aged["recent"].pk, aged["ingested_today"].pk}
    assert tasks.prune_archive_task() == 0  # idempotent


def test_a_frozen_now_decides_the_cutoff(settings, aged):
    settings.ARCHIVE_RETENTION_DAYS = 30
    # Twenty days from now, everything archived more than ten days ago is past 30 days.
    later = timezone.now() + timedelta(days=20)
    assert archive.archive_prune(now=later) == 4
    assert _left() == {aged["ingested_today"].pk}


def test_a_backlog_is_deleted_batch_by_batch(settings, monkeypatch):
    settings.ARCHIVE_RETENTION_DAYS = 1
    monkeypatch.setattr(archive, "PRUNE_BATCH", 3)
    team = TeamFactory(id="team_backlog")
    for _ in range(8):
        _archived(team, days_ago=2)
    keep = _archived(team, days_ago=0.5)
    assert archive.archive_prune() == 8
    assert _left() == {keep.pk}


def test_beat_runs_it_hourly():
    entry = app.conf.beat_schedule["prune-archive"]
    assert entry["task"] == "lifecycle.prune_archive"
    assert tasks.prune_archive_task.name == "lifecycle.prune_archive"
