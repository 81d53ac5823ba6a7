"""Maintenance tasks of the memories app (thin: they call services)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

logger = logging.getLogger(__name__)


@shared_task(name="memories.prune_index_changes", ignore_result=True)
def prune_index_changes() -> int:
    from .services import index_changes_prune

    return index_changes_prune(older_than_seconds=settings.INDEX_CHANGE_RETENTION_SECONDS)


@shared_task(name="memories.purge_expired_working_items", ignore_result=True)
def purge_expired_working_items() -> int:
    from .working import purge_expired_working_items as purge

    return purge()


@shared_task(name="memories.empty_expired_trash", ignore_result=True)
def empty_expired_trash() -> int:
    """The trash's hourly upkeep: memories past their own `expires_at` go into it, then what is
    past its retention leaves it. Idempotent."""
    from .purge import memories_expire, trash_empty_expired

    memories_expire()
    return trash_empty_expired()


@shared_task(name="memories.retier_memories", ignore_result=True)
def retier_memories() -> dict[str, int]:
    """Hot / warm / cold by the tier rule (memories.tiers), every team; idempotent."""
    from .tiers import memories_retier

    return memories_retier().moves


@shared_task(name="memories.ship_search_changes", ignore_result=True)
def ship_search_changes() -> int:
    """Sends the change log to the search engine (SEARCH_BACKEND=milvus; a no-op on local)."""
    if settings.SEARCH_BACKEND != "milvus":
        return 0
    from .retrieval.milvus import ship_changes

    return ship_changes()


def queue_search_ship() -> None:
    """After a logged write commits (index.set_ship_hook): ship at once in the embedded job mode
    (eager), queue the task otherwise. A broker hiccup must not fail a committed write: the
    beat schedule ships what is left."""
    try:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            # The embedded mode, decided by the settings as lifecycle's dispatch does: run here
            # and now, whatever the Celery app's own configuration holds.
            ship_search_changes.apply()
        else:
            ship_search_changes.delay()
    except Exception:
        logger.exception("could not queue the search shipping task")
