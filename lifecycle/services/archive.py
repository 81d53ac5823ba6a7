"""The working-memory archive (L0) as the cap's safety net: items the per-agent cap pushes out of
working memory are archived here instead of vanishing, and can be put back. And its retention:
rows past ARCHIVE_RETENTION_DAYS are deleted (`archive_prune`, run by beat).

The store (memories.working) hands the items over through `memories.working.events.working_memory_evicting`
*before* it removes them, and removes them only if this returned: memories never imports the
lifecycle (imports flow tenants <- memories <- graph <- lifecycle), the lifecycle registers the
receiver (lifecycle.apps).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from lifecycle.models import ArchiveReason, JobKind, JobStatus, WorkingArchive
from memories.working import WorkingItem, get_working_store
from tenants.models import Agent, Team

from . import jobs

logger = logging.getLogger(__name__)

# Rows deleted per statement by the retention: a short transaction each, whatever the backlog.
PRUNE_BATCH = 2000

# The TTL of a restored item (the API's default for a new working-memory item).
RESTORE_TTL_SECONDS = 3 * 24 * 3600


def archive_items(
    *,
    team_id: str,
    agent_id: str,
    items: list[WorkingItem],
    job_id: int | None,
    reason: ArchiveReason,
) -> None:
    """Copies working items into the archive, as left by `job_id` for `reason`."""
    WorkingArchive.objects.bulk_create(
        [
            WorkingArchive(
                team_id=team_id,
                agent_id=agent_id,
                item_id=i.id,
                content=i.content,
                item_created_at=i.created_at,
                run_id=i.run_id,
                job_id=job_id,
                reason=reason,
            )
            for i in items
        ]
    )


def archive_evicted(*, team_id: str, agent_id: str, items: list[WorkingItem]) -> int:
    """Archives working items pushed out by the cap, recorded as one `cap-archive` job (the job
    log counts them); returns how many were new. An item already archived as evicted (two racing
    writes handed over the same one) is not archived twice. Raises on failure: the store then
    keeps the items."""
    with transaction.atomic():
        known = set(
            WorkingArchive.objects.filter(
                team_id=team_id,
                agent_id=agent_id,
                reason=ArchiveReason.EVICTED,
                item_id__in=[i.id for i in items],
            ).values_list("item_id", flat=True)
        )
        new = [i for i in items if i.id not in known]
        if not new:
            return 0
        job = jobs.job_create(
            team=Team.objects.get(pk=team_id),
            kind=JobKind.CAP_ARCHIVE,
            trigger="auto",
            agent_id=agent_id,
            status=JobStatus.SUCCEEDED,
            counts={"evicted": len(new)},
            engine="cap",
        )
        assert job is not None  # no active_key, so never refused as a duplicate
        archive_items(
            team_id=team_id,
            agent_id=agent_id,
            items=new,
            job_id=job.pk,
            reason=ArchiveReason.EVICTED,
        )
    logger.info(
        "working memory cap reached for %s/%s: %s oldest item(s) moved to the archive (job %s)",
        team_id,
        agent_id,
        len(new),
        job.pk,
    )
    return len(new)


def evicted_list(
    *, team: Team, agent_id: str = "", include_restored: bool = False
) -> QuerySet[WorkingArchive]:
    """The team's evicted items (optionally one agent's), oldest first."""
    qs = WorkingArchive.objects.filter(team=team, reason=ArchiveReason.EVICTED)
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    if not include_restored:
        qs = qs.filter(restored_at__isnull=True)
    return qs.order_by("item_created_at", "id")


@dataclass(frozen=True)
class Restored:
    archive_id: int
    agent_id: str
    item_id: str  # the new working item


def archive_restore(
    *, team: Team, archive_ids: list[int], ttl_seconds: int = RESTORE_TTL_SECONDS
) -> list[Restored]:
    """Puts evicted items of the team back into working memory, as new items (new id, written
    now: the newest, so the cap pushes out others first — which are archived in turn). An item
    already restored, or not evicted, or another team's, or of an agent deleted since, is
    skipped."""
    store = get_working_store()
    restored: list[Restored] = []
    rows = WorkingArchive.objects.filter(
        team=team,
        pk__in=archive_ids,
        reason=ArchiveReason.EVICTED,
        restored_at__isnull=True,
    ).order_by("item_created_at", "id")
    agents = set(
        Agent.objects.filter(team=team, agent_id__in={r.agent_id for r in rows}).values_list(
            "agent_id", flat=True
        )
    )
    for row in rows:
        if row.agent_id not in agents:
            continue
        # Marked first (a conditional UPDATE), so two restores of one row add it once; should the
        # add then fail, the mark is undone and the row stays restorable.
        if not WorkingArchive.objects.filter(pk=row.pk, restored_at__isnull=True).update(
            restored_at=timezone.now()
        ):
            continue
        try:
            item = store.add(
                team_id=team.id,
                agent_id=row.agent_id,
                content=row.content,
                ttl_seconds=ttl_seconds,
                run_id=row.run_id,
            )
        except Exception:
            WorkingArchive.objects.filter(pk=row.pk).update(restored_at=None)
            raise
        WorkingArchive.objects.filter(pk=row.pk).update(restored_item_id=item.id)
        restored.append(Restored(archive_id=row.pk, agent_id=row.agent_id, item_id=item.id))
    from memories.working.events import working_memory_written

    # As after an API write: the automatic pipeline may now compress the agent.
    for agent_id in sorted({r.agent_id for r in restored}):
        working_memory_written.send(sender=archive_restore, team=team, agent_id=agent_id)
    return restored


def on_working_memory_evicting(
    sender: Any, team_id: str, agent_id: str, items: list[WorkingItem], **kwargs: Any
) -> None:
    """The receiver of memories.working.events.working_memory_evicting (connected in lifecycle.apps)."""
    archive_evicted(team_id=team_id, agent_id=agent_id, items=items)


def archive_prune(*, now: datetime | None = None) -> int:
    """Deletes every team's archive rows archived more than ARCHIVE_RETENTION_DAYS ago (by
    `archived_at`, not the item's own time: a message ingested today with an old `at` is kept
    the full period); returns how many. 0 days keeps everything. Evicted items not restored by
    then go too: the retention is the operator's choice of how long anything is kept."""
    days = settings.ARCHIVE_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted = 0
    while True:
        # In batches by id (MariaDB cannot DELETE with a LIMIT through the ORM, and one huge
        # DELETE would hold its locks for as long as it takes).
        ids = list(
            WorkingArchive.objects.filter(archived_at__lt=cutoff)
            .order_by("id")
            .values_list("pk", flat=True)[:PRUNE_BATCH]
        )
        if not ids:
            break
        deleted += WorkingArchive.objects.filter(pk__in=ids).delete()[0]
    if deleted:
        logger.info("archive retention: %s row(s) archived before %s deleted", deleted, cutoff)
    return deleted
