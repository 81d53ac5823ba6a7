"""The working-memory store interface (`WorkingMemoryStore`), its item (`WorkingItem`), the
clock and the helpers both stores share; the package docstring says what they guarantee.
"""

from __future__ import annotations

import builtins
import logging
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.db import transaction

from core.validators import AGENT_ID_RE, TEAM_ID_RE

from .events import working_memory_evicting

logger = logging.getLogger(__name__)

DEFAULT_MAX_ITEMS_PER_AGENT = 1000


def _now() -> datetime:
    """The clock of both backends (aware UTC); one function so tests can freeze it."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class WorkingItem:
    id: str  # uuid4 hex
    agent_id: str
    content: str
    created_at: datetime  # aware UTC
    expires_at: datetime
    # The agent's session (run) the item was written in, "" when the writer named none: the
    # automatic pipeline warms up per run (lifecycle.services.pipeline.compress_threshold).
    run_id: str = ""


class WorkingMemoryStore(Protocol):
    name: str  # "redis" | "database"

    def add(
        self, *, team_id: str, agent_id: str, content: str, ttl_seconds: int, run_id: str = ""
    ) -> WorkingItem: ...

    def list(
        self, *, team_id: str, agent_id: str, limit: int | None = None
    ) -> builtins.list[WorkingItem]: ...

    def count(self, *, team_id: str, agent_id: str) -> int: ...

    def remove(self, *, team_id: str, agent_id: str, item_ids: builtins.list[str]) -> int: ...

    def clear(self, *, team_id: str, agent_id: str) -> int: ...

    def purge_team(self, *, team_id: str) -> None: ...

    def purge_agent(self, *, team_id: str, agent_id: str) -> None: ...

    def count_team(self, *, team_id: str) -> int: ...

    def ping(self) -> bool: ...


def max_items_per_agent() -> int:
    return int(getattr(settings, "WORKING_MEMORY_MAX_ITEMS_PER_AGENT", DEFAULT_MAX_ITEMS_PER_AGENT))


def _check_ids(team_id: str, agent_id: str | None = None) -> None:
    # The API validates ids; this guard keeps a bad caller from building ambiguous Redis keys
    # (the key layout relies on team ids never containing ':' and neither id containing braces)
    # and gives both backends the same answer to bad input.
    if not isinstance(team_id, str) or not re.fullmatch(TEAM_ID_RE, team_id):
        raise ValueError(f"invalid team id {team_id!r}")
    if agent_id is not None and (
        not isinstance(agent_id, str) or not re.fullmatch(AGENT_ID_RE, agent_id)
    ):
        raise ValueError(f"invalid agent id {agent_id!r}")


def _new_item(agent_id: str, content: str, ttl_seconds: int, run_id: str = "") -> WorkingItem:
    # bool is an int; a TTL of True seconds is a caller bug, not one second.
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or ttl_seconds < 1:
        raise ValueError(f"ttl_seconds must be a positive integer, got {ttl_seconds!r}")
    # A run id follows the agent id rules (the API validates it; this keeps both backends
    # answering a bad caller the same way). "" is "no run".
    if not isinstance(run_id, str) or (run_id and not re.fullmatch(AGENT_ID_RE, run_id)):
        raise ValueError(f"invalid run id {run_id!r}")
    now = _now()
    return WorkingItem(
        id=uuid.uuid4().hex,
        agent_id=agent_id,
        content=content,
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds),
        run_id=run_id,
    )


def _unique(values: Iterable[str]) -> builtins.list[str]:
    return builtins.list(dict.fromkeys(values))


def _hand_over_evicted(
    store: WorkingMemoryStore, team_id: str, agent_id: str, items: builtins.list[WorkingItem]
) -> bool:
    """Gives the items the cap pushes out to whoever keeps them (memories.working.events); True when
    they may now be removed. The lifecycle's receiver archives them in its own transaction (a
    savepoint inside the database backend's add), committed before the caller removes them."""
    if not items:
        return True
    try:
        with transaction.atomic():
            receivers = working_memory_evicting.send(
                sender=type(store), team_id=team_id, agent_id=agent_id, items=items
            )
    except Exception:
        logger.exception(
            "working memory cap reached for %s/%s: %s item(s) could not be archived; kept",
            team_id,
            agent_id,
            len(items),
        )
        return False
    if not receivers:  # the memories app on its own: nothing keeps them
        logger.warning(
            "working memory cap reached for %s/%s: dropped %s oldest item(s)",
            team_id,
            agent_id,
            len(items),
        )
    return True
