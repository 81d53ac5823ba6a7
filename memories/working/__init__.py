"""Working memory: short-lived items per (team, agent), each expiring on its own TTL.

The package's API; the stores live in `base`.
"""

from .base import (
    DatabaseWorkingStore,
    RedisWorkingStore,
    WorkingItem,
    WorkingMemoryStore,
    get_working_store,
    max_items_per_agent,
    purge_expired_working_items,
)

__all__ = [
    "DatabaseWorkingStore",
    "RedisWorkingStore",
    "WorkingItem",
    "WorkingMemoryStore",
    "get_working_store",
    "max_items_per_agent",
    "purge_expired_working_items",
]
