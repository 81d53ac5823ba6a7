"""Per-scope write lock: serialises the dedup decision of concurrent writers across processes.

Deduplication is "read the scope, decide, insert". Without a lock, two workers given the same
content at the same moment both read "no duplicate" and both insert (measured: 8 clients x the
same 25 contents left 48 rows on SQLite, 61 on MariaDB). The lock is a row per scope
(`ScopeLock`), locked with SELECT … FOR UPDATE inside the writing transaction, so the check and
the insert of one writer happen before the next writer of that scope can check; other scopes
are not blocked. Under READ COMMITTED (Django's MySQL default) every read after the lock sees
the rows the previous holder committed. On SQLite `select_for_update` is a no-op; there the
writing transaction itself is the lock (settings: `transaction_mode` IMMEDIATE takes the
database's write lock at BEGIN), which is why the dedup read must run inside that transaction.

The row is created *before* the transaction, in its own autocommit statement: on InnoDB, two
writers that both run INSERT IGNORE on a fresh key inside their transactions keep shared locks
on it and then deadlock upgrading them to FOR UPDATE — exactly what the first writes of a new
agent do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import transaction

from core.errors import NotFound
from core.localcache import TTLCache
from tenants.models import Agent

from .models import MemoryScope, ScopeLock
from .retrieval.index import scope_key

# Keys known to have a lock row, so a write does not check for it every time. A stale entry (the
# team was deleted and re-created meanwhile) is handled by scope_lock itself.
_known: TTLCache[str, bool] = TTLCache(ttl_seconds=3600, max_entries=50_000)


def scope_lock_prepare(*, team_id: str, scope: str, agent_id: str) -> None:
    """Makes sure the scope's lock row exists; call before the transaction that locks it."""
    scope_locks_prepare(team_id=team_id, scopes=[(scope, agent_id)])


def scope_lock(*, team_id: str, scope: str, agent_id: str) -> None:
    """Holds the scope's write lock until the current transaction ends."""
    scope_locks(team_id=team_id, scopes=[(scope, agent_id)])


@contextmanager
def agent_locked(*, team_id: str, agent_id: str) -> Iterator[None]:
    """A transaction holding the agent's personal-scope lock from its first statement: what
    every writer of the agent's personal rows that decides on what is there (memories, profile
    keys, rules, scenarios, the archive of an ingest) runs in. The lock's row is made before the
    transaction opens (see the module's docstring)."""
    scope_lock_prepare(team_id=team_id, scope=MemoryScope.PERSONAL, agent_id=agent_id)
    with transaction.atomic():
        scope_lock(team_id=team_id, scope=MemoryScope.PERSONAL, agent_id=agent_id)
        yield


def agent_lock_if_made(*, team_id: str, agent_id: str) -> None:
    """Inside a transaction: the agent's personal-scope lock, when its row exists (it is never
    made here: see the module's docstring). No row: nothing of the agent was written under it."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("scope locks must be taken inside transaction.atomic()")
    key = scope_key(team_id, MemoryScope.PERSONAL, agent_id)
    list(ScopeLock.objects.select_for_update().filter(scope_key=key))


def scope_locks_prepare(*, team_id: str, scopes: Iterable[tuple[str, str]]) -> None:
    """Makes sure the lock rows of these (scope, agent_id) exist; call before the transaction
    that locks them. A query per 500 keys not already known to exist (none for a write to a
    scope seen in the last hour)."""
    unknown = sorted(
        k for k in {scope_key(team_id, s, a) for s, a in scopes} if _known.get(k) is None
    )
    for start in range(0, len(unknown), 500):
        chunk = unknown[start : start + 500]
        here = set(
            ScopeLock.objects.filter(scope_key__in=chunk).values_list("scope_key", flat=True)
        )
        ScopeLock.objects.bulk_create(
            [ScopeLock(team_id=team_id, scope_key=k) for k in chunk if k not in here],
            ignore_conflicts=True,
        )
        for key in chunk:
            _known.set(key, True)


def scope_locks(*, team_id: str, scopes: Iterable[tuple[str, str]]) -> None:
    """Holds the write locks of these (scope, agent_id) until the current transaction ends: one
    for a memory write, many for an import (memories of many agents at once). Taken in key
    order, so two holders of several locks cannot wait for each other in a cycle."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("scope locks must be taken inside transaction.atomic()")
    keys = sorted({scope_key(team_id, s, a) for s, a in scopes})
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        locked = ScopeLock.objects.select_for_update().filter(scope_key__in=chunk)
        found = set(locked.order_by("scope_key").values_list("scope_key", flat=True))
        missing = [k for k in chunk if k not in found]
        if missing:  # gone since prepare (team deleted and re-created): created here
            ScopeLock.objects.bulk_create(
                [ScopeLock(team_id=team_id, scope_key=k) for k in missing], ignore_conflicts=True
            )
            list(ScopeLock.objects.select_for_update().filter(scope_key__in=missing))
            for key in missing:
                _known.set(key, True)


def job_agent_check(*, team_id: str, agent_id: str, job_id: int | None) -> None:
    """Under the agent's write lock, before a job writes anything of the agent: raises
    NotFound("agent") when the agent was deleted while the job ran (during its engine call,
    mostly).

    The deletion takes that lock before it reads what to erase (memories.services.purge_agent):
    a job that took it first has committed, and the deletion erases what it wrote with the
    rest; a job that takes it after finds the agent gone, writes nothing and fails saying so.
    Without the check it wrote for an agent that is gone, and its write registered the agent
    again. Only a job checks: the API registers a job's agent before queueing it, while a direct
    call (a test, a shell) may run for an agent never registered."""
    if job_id is not None and not Agent.objects.filter(team_id=team_id, agent_id=agent_id).exists():
        raise NotFound("agent")
