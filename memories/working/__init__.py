"""Working memory: short-lived items per (team, agent), each expiring on its own TTL.

Two backends with identical behaviour, chosen by `get_working_store()`:

* `RedisWorkingStore` (production, `REDIS_URL` set) — keys in the Redis of the default cache;
* `DatabaseWorkingStore` (embedded mode) — `WorkingMemoryItem` rows.

Behaviour both backends share (tests/test_working_store.py runs one suite against both):

* **Expiry.** `add` stamps an item with the current UTC time; it expires `ttl_seconds` later,
  independently of every other item. Expired items are never returned, counted or removed-counted.
  The application clock decides expiry in both backends (Redis keys outlive their item by a short
  grace period and only free memory), so both backends agree to the microsecond.
* **Order.** Oldest first by `created_at`; items with identical timestamps keep insertion order.
* **Cap.** At most `settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT` (default 1000) live items per
  agent. When an `add` goes beyond it, the *oldest* live items of that agent are pushed out —
  but never lost: they are first handed to the `working_memory_evicting` signal (the lifecycle
  archives them, restorable) and removed only after that returned; if it fails they stay, above
  the cap, until a later add hands them over. The write itself always succeeds. Expired items
  never count against the cap (and are not archived: expiring is how working memory ends). A
  value of 0 or less disables the cap.
* **Run.** `add` may name the agent's session (`run_id`, agent id rules; "" = none); the item
  keeps it (`WorkingItem.run_id`), through the cap's hand-over too. Items stored before runs
  were kept read as "".
* **Tenancy.** Every key and every row is scoped by team id *and* agent id: team_a's agent "x" and
  team_b's agent "x" never see, count or clear each other's items.
* **Failures.** Any Redis error (refused, timeout, ...) raises
  `DomainError("WORKING_MEMORY_UNAVAILABLE")` (503), never a raw redis exception.

Modules: `base` (the interface, the item, the clock, shared helpers), `redis` (the Redis store),
`database` (the database store and the purge of expired rows). This package exports what callers
use.
"""

from __future__ import annotations

from django.conf import settings

from .base import WorkingItem, WorkingMemoryStore, max_items_per_agent
from .database import DatabaseWorkingStore, purge_expired_working_items
from .redis import RedisWorkingStore

__all__ = [
    "DatabaseWorkingStore",
    "RedisWorkingStore",
    "WorkingItem",
    "WorkingMemoryStore",
    "get_working_store",
    "max_items_per_agent",
    "purge_expired_working_items",
]


def get_working_store() -> WorkingMemoryStore:
    """The backend for the current settings. Both constructors are trivial (the Redis one looks
    its connection up per call), so building one per request is cheap and always follows settings
    that tests change."""
    if settings.REDIS_URL:
        return RedisWorkingStore()
    return DatabaseWorkingStore()
