"""Working memory as `WorkingMemoryItem` rows (`DatabaseWorkingStore`, embedded mode: no
Redis), and the periodic purge of expired rows.
"""

from __future__ import annotations

import builtins
import logging
from datetime import UTC
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from memories.models import WorkingMemoryItem

# One clock for both stores, read as base._now() (not imported by name) so that a test
# freezing it there freezes it here too.
from . import base
from .base import (
    WorkingItem,
    _check_ids,
    _hand_over_evicted,
    _new_item,
    _unique,
    max_items_per_agent,
)

logger = logging.getLogger(__name__)

# Rows per DELETE in the database purge: bounded transactions on a large table.
PURGE_BATCH_SIZE = 1000


def _row_item(row: tuple[Any, ...]) -> WorkingItem:
    item_id, agent_id, content, created_at, expires_at, run_id = row
    return WorkingItem(
        id=item_id,
        agent_id=agent_id,
        content=content,
        created_at=created_at.astimezone(UTC),
        expires_at=expires_at.astimezone(UTC),
        run_id=run_id,
    )


_ROW_FIELDS = ("item_id", "agent_id", "content", "created_at", "expires_at", "run_id")
# IN lists are chunked so a large remove never hits a backend's parameter limit.
_IN_CHUNK = 500


class DatabaseWorkingStore:
    """Working memory as `WorkingMemoryItem` rows (embedded mode, no Redis)."""

    name = "database"

    @staticmethod
    def _rows(team_id: str, agent_id: str) -> QuerySet[WorkingMemoryItem]:
        return WorkingMemoryItem.objects.filter(team_id=team_id, agent_id=agent_id)

    def add(
        self, *, team_id: str, agent_id: str, content: str, ttl_seconds: int, run_id: str = ""
    ) -> WorkingItem:
        _check_ids(team_id, agent_id)
        item = _new_item(agent_id, content, ttl_seconds, run_id)
        cap = max_items_per_agent()
        with transaction.atomic():
            rows = self._rows(team_id, agent_id)
            # Opportunistic cleanup of this agent (the periodic purge handles idle agents); it
            # also keeps expired rows from counting against the cap below.
            rows.filter(expires_at__lte=item.created_at).delete()
            WorkingMemoryItem.objects.create(
                team_id=team_id,
                agent_id=agent_id,
                item_id=item.id,
                content=content,
                created_at=item.created_at,
                expires_at=item.expires_at,
                run_id=item.run_id,
            )
            if cap > 0:
                # The newest row beyond the cap, if any: it and everything older goes. Cutting
                # by boundary (not "n oldest") stays right when adds race: each keeps the newest
                # `cap` rows it can see. (MariaDB cannot DELETE ... IN (subquery with LIMIT).)
                beyond = builtins.list(
                    rows.order_by("-created_at", "-id").values_list("created_at", "id")[
                        cap : cap + 1
                    ]
                )
                if beyond:
                    at, pk = beyond[0]
                    overflow = builtins.list(
                        rows.filter(Q(created_at__lt=at) | Q(created_at=at, id__lte=pk))
                        .order_by("created_at", "id")
                        .values_list("id", *_ROW_FIELDS)
                    )
                    # Archived in this same transaction, so kept and removed commit together.
                    if _hand_over_evicted(
                        self, team_id, agent_id, [_row_item(r[1:]) for r in overflow]
                    ):
                        pks = [r[0] for r in overflow]
                        for start in range(0, len(pks), _IN_CHUNK):
                            WorkingMemoryItem.objects.filter(
                                pk__in=pks[start : start + _IN_CHUNK]
                            ).delete()
        return item

    def list(
        self, *, team_id: str, agent_id: str, limit: int | None = None
    ) -> builtins.list[WorkingItem]:
        _check_ids(team_id, agent_id)
        if limit is not None and limit <= 0:
            return []
        # The auto id breaks created_at ties: it grows in insertion order.
        qs = (
            self._rows(team_id, agent_id)
            .filter(expires_at__gt=base._now())
            .order_by("created_at", "id")
            .values_list(*_ROW_FIELDS)
        )
        if limit is not None:
            qs = qs[:limit]
        return [_row_item(row) for row in qs]

    def count(self, *, team_id: str, agent_id: str) -> int:
        _check_ids(team_id, agent_id)
        return int(self._rows(team_id, agent_id).filter(expires_at__gt=base._now()).count())

    def count_team(self, *, team_id: str) -> int:
        _check_ids(team_id)
        return WorkingMemoryItem.objects.filter(team_id=team_id, expires_at__gt=base._now()).count()

    def remove(self, *, team_id: str, agent_id: str, item_ids: builtins.list[str]) -> int:
        _check_ids(team_id, agent_id)
        ids = _unique(item_ids)
        now = base._now()
        removed = 0
        with transaction.atomic():
            rows = self._rows(team_id, agent_id)
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                # Count only live rows (an expired item no longer exists), delete both.
                removed += rows.filter(item_id__in=chunk, expires_at__gt=now).delete()[0]
                rows.filter(item_id__in=chunk).delete()
        return removed

    def clear(self, *, team_id: str, agent_id: str) -> int:
        _check_ids(team_id, agent_id)
        with transaction.atomic():
            rows = self._rows(team_id, agent_id)
            removed = int(rows.filter(expires_at__gt=base._now()).delete()[0])
            rows.delete()
        return removed

    def purge_team(self, *, team_id: str) -> None:
        _check_ids(team_id)
        WorkingMemoryItem.objects.filter(team_id=team_id).delete()

    def purge_agent(self, *, team_id: str, agent_id: str) -> None:
        _check_ids(team_id, agent_id)
        self._rows(team_id, agent_id).delete()

    def ping(self) -> bool:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
            return True
        except Exception as exc:
            logger.warning("working memory: database ping failed: %s: %s", type(exc).__name__, exc)
            return False


def purge_expired_working_items() -> int:
    """Deletes expired working-memory rows of every team, in batches; returns how many.

    For the periodic task: the database backend only cleans an agent's rows when that agent
    writes, so idle agents' rows would otherwise stay. (Redis expires its own keys; rows left
    from an earlier embedded-mode run are cleaned here too.)
    """
    now = base._now()
    total = 0
    while True:
        batch = builtins.list(
            WorkingMemoryItem.objects.filter(expires_at__lte=now)
            .order_by("expires_at")
            .values_list("pk", flat=True)[:PURGE_BATCH_SIZE]
        )
        if not batch:
            return total
        total += WorkingMemoryItem.objects.filter(pk__in=batch).delete()[0]
