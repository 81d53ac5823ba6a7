"""Working memory in Redis (`RedisWorkingStore`, production: `REDIS_URL` set).

Redis layout (`P` = the default cache's KEY_PREFIX, so several deployments can share one Redis;
the raw connection does not apply it for us):

    P:wm:{<team>:<agent>}:idx         zset  member -> created_at (µs)   order + membership
    P:wm:{<team>:<agent>}:exp         zset  member -> expires_at (µs)   finds expired items in O(log n)
    P:wm:{<team>:<agent>}:seq         counter for the insertion-order tiebreak
    P:wm:{<team>:<agent>}:it:<id>     string, the item as JSON, PX = ttl + grace
    P:wm:{<team>}:agents              set of agent ids with working memory (for purge_team, count_team)

A member is `<seq as 16 hex digits>:<item id>`: equal scores sort by member, so equal timestamps
keep insertion order. The `{...}` hash tag puts all keys of one agent in one Redis Cluster slot, so
each multi-key transaction below stays within one slot; the team set lives in another slot and is
only ever written in its own command batch. Every key has an expiry at least as long as the
longest live item's (PEXPIRE NX then GT — **needs Redis >= 7.0**), so an idle agent's keys vanish
on their own. Expired members are removed lazily, by whichever operation notices them.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from redis.exceptions import RedisError

from core.errors import DomainError, ErrorCode

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

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

logger = logging.getLogger(__name__)

# Redis keys outlive their item by this much: the application clock (the same one the database
# backend uses, and the one that produced `expires_at`) decides when an item is expired, so a
# key must never vanish before that moment because of rounding or latency.
KEY_GRACE_MS = 1000
# purge_team repeats while agents keep appearing (an add racing the purge re-registers its agent
# after writing, see RedisWorkingStore.add); a few rounds are plenty, it must not spin forever.
PURGE_TEAM_ROUNDS = 5
UNAVAILABLE_MESSAGE = "working memory (Redis) is unavailable"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _to_us(dt: datetime) -> int:
    # Integer arithmetic, not timestamp() floats: microseconds must round-trip exactly.
    return (dt - _EPOCH) // _MICROSECOND


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


@contextmanager
def _redis_errors() -> Iterator[None]:
    """Turns every Redis failure into the API's 503, logged with the real cause."""
    try:
        yield
    except (RedisError, OSError) as exc:
        logger.warning("working memory: Redis error %s: %s", type(exc).__name__, exc)
        raise DomainError(ErrorCode.WORKING_MEMORY_UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc


def _text(value: object) -> str:
    # The raw connection answers bytes (no decode_responses); redis-py's stubs say "maybe".
    return value.decode() if isinstance(value, bytes) else str(value)


def _member_item_id(member: str) -> str:
    return member.split(":", 1)[1]


@dataclass(frozen=True)
class _AgentKeys:
    idx: str
    exp: str
    seq: str
    item_prefix: str

    def item(self, item_id: str) -> str:
        return self.item_prefix + item_id


class RedisWorkingStore:
    """Working memory in Redis; see the module docstring for the key layout."""

    name = "redis"

    def __init__(self, client: Redis | None = None, *, key_prefix: str | None = None) -> None:
        # `client` lets tests (and tools) point the store at a given server, e.g. an unreachable
        # one; by default the default cache's connection is looked up on every call.
        self._client = client
        self._key_prefix = key_prefix

    # keys

    def _base(self) -> str:
        prefix = self._key_prefix
        if prefix is None:
            prefix = str(settings.CACHES.get("default", {}).get("KEY_PREFIX", "") or "")
        return f"{prefix}:wm:" if prefix else "wm:"

    def _agent_keys(self, team_id: str, agent_id: str) -> _AgentKeys:
        # Team ids never contain ':' (TEAM_ID_RE), so the tag "{team:agent}" splits unambiguously
        # at its first ':' even though agent ids may contain ':' — ("a", "b:c") and a team "a:b"
        # with agent "c" cannot both exist. Neither id contains '}', so the tag always ends where
        # we mean it to. The team set's tag "{team}" never contains ':', so it cannot equal any
        # agent's tag either.
        tag = f"{self._base()}{{{team_id}:{agent_id}}}"
        return _AgentKeys(
            idx=f"{tag}:idx", exp=f"{tag}:exp", seq=f"{tag}:seq", item_prefix=f"{tag}:it:"
        )

    def _team_key(self, team_id: str) -> str:
        return f"{self._base()}{{{team_id}}}:agents"

    def _conn(self) -> Redis:
        if self._client is not None:
            return self._client
        from django_redis import get_redis_connection

        conn: Redis = get_redis_connection("default")
        return conn

    # building blocks (queue commands on a pipeline; the caller executes)

    @staticmethod
    def _queue_forget(pipe: Pipeline, keys: _AgentKeys, members: builtins.list[str]) -> None:
        """Removes members from both zsets and deletes their item keys (all one slot)."""
        if not members:
            return
        pipe.zrem(keys.idx, *members)
        pipe.zrem(keys.exp, *members)
        pipe.delete(*(keys.item(_member_item_id(m)) for m in members))

    @staticmethod
    def _queue_extend(pipe: Pipeline, key: str, ttl_ms: int) -> None:
        # NX gives a key created just now its first expiry; GT then only ever lengthens it. The
        # pair keeps each container alive at least as long as its longest-lived item, in one
        # transaction, without reading the current TTL first (which would race with other adds).
        pipe.pexpire(key, ttl_ms, nx=True)
        pipe.pexpire(key, ttl_ms, gt=True)

    @staticmethod
    def _parse(raw: bytes | str | None) -> tuple[str, WorkingItem] | None:
        """(index member, item) from an item key's value; None when the key is gone or unreadable."""
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return str(data["member"]), WorkingItem(
                id=str(data["id"]),
                agent_id=str(data["agent_id"]),
                content=str(data["content"]),
                created_at=_from_us(int(data["created_us"])),
                expires_at=_from_us(int(data["expires_us"])),
                # Items written before runs were kept have none.
                run_id=str(data.get("run_id", "")),
            )
        except (ValueError, KeyError, TypeError):
            # Unreadable means unusable: treat it as gone so it gets cleaned up, and say so.
            logger.warning("working memory: dropping an unreadable item")
            return None

    @classmethod
    def _decode(cls, raw: bytes | str | None, now_us: int) -> WorkingItem | None:
        """The item, or None when its key is gone, it has expired, or it cannot be read."""
        parsed = cls._parse(raw)
        if parsed is None or _to_us(parsed[1].expires_at) <= now_us:
            return None
        return parsed[1]

    def _expired_members(self, conn: Redis, keys: _AgentKeys, now_us: int) -> builtins.list[str]:
        return [_text(m) for m in conn.zrangebyscore(keys.exp, "-inf", now_us)]

    # the interface

    def add(
        self, *, team_id: str, agent_id: str, content: str, ttl_seconds: int, run_id: str = ""
    ) -> WorkingItem:
        _check_ids(team_id, agent_id)
        item = _new_item(agent_id, content, ttl_seconds, run_id)
        keys = self._agent_keys(team_id, agent_id)
        created_us, expires_us = _to_us(item.created_at), _to_us(item.expires_at)
        ttl_ms = ttl_seconds * 1000 + KEY_GRACE_MS
        cap = max_items_per_agent()
        with _redis_errors():
            conn = self._conn()
            # 1. The tiebreak counter and the items that have expired by now: they must go before
            #    the cap is applied, or expired leftovers would push out live items.
            pipe = conn.pipeline(transaction=True)
            pipe.incr(keys.seq)
            pipe.zrangebyscore(keys.exp, "-inf", created_us)
            seq, expired_raw = pipe.execute()
            member = f"{int(seq):016x}:{item.id}"
            payload = json.dumps(
                {
                    "id": item.id,
                    "agent_id": agent_id,
                    "content": content,
                    "created_us": created_us,
                    "expires_us": expires_us,
                    "run_id": item.run_id,
                    # remove() finds the index member (with its tiebreak) from the id alone.
                    "member": member,
                },
                ensure_ascii=False,
                separators=(",", ":"),
            )
            # 2. One transaction in the agent's slot: forget the expired, store and index the
            #    item, and cut the index to the newest `cap` members. ZRANGE + ZREMRANGEBYRANK by
            #    "all but the newest cap" is exact even when adds race: each trims to the same
            #    boundary instead of each removing "one too many".
            pipe = conn.pipeline(transaction=True)
            self._queue_forget(pipe, keys, [_text(m) for m in expired_raw])
            pipe.set(keys.item(item.id), payload, px=ttl_ms)
            pipe.zadd(keys.idx, {member: created_us})
            pipe.zadd(keys.exp, {member: expires_us})
            trim_at = len(pipe)
            if cap > 0:
                # Read (at the instant of this insert), not removed: see step 4.
                pipe.zrange(keys.idx, 0, -(cap + 1))
            for key in (keys.idx, keys.exp, keys.seq):
                self._queue_extend(pipe, key, ttl_ms)
            results = pipe.execute()
            overflow = [_text(m) for m in results[trim_at]] if cap > 0 else []
            # 3. Not atomic with step 2, and need not be: the team set is another slot.
            #    Registering the agent *after* the item is indexed means a concurrent purge_agent
            #    (which unregisters first) can never leave indexed items behind an unregistered
            #    agent. (Should Redis fail between 2 and 3, the caller gets the 503 although the
            #    item is stored; the agent's next add registers it, and its keys expire on their
            #    own regardless.)
            pipe = conn.pipeline(transaction=False)
            team_key = self._team_key(team_id)
            pipe.sadd(team_key, agent_id)
            self._queue_extend(pipe, team_key, ttl_ms)
            pipe.execute()
            # 4. The cap: the items beyond it are handed over (archived) first and only then
            #    removed — exactly the members read in step 2, so racing adds each remove what
            #    they archived (the last one sees the whole overflow) and an item is never gone
            #    before it is kept. A failure in between leaves it in working memory.
            if overflow:
                try:
                    self._evict(conn, keys, team_id, agent_id, overflow, created_us)
                except (RedisError, OSError) as exc:
                    # The item is stored: this write succeeded. The overflow stays (above the
                    # cap) until the next add of this agent, and may be archived twice then.
                    logger.warning(
                        "working memory: cap not applied: %s: %s", type(exc).__name__, exc
                    )
        return item

    def _evict(
        self,
        conn: Redis,
        keys: _AgentKeys,
        team_id: str,
        agent_id: str,
        members: builtins.list[str],
        now_us: int,
    ) -> None:
        raws = conn.mget([keys.item(_member_item_id(m)) for m in members])
        # Gone (a compress removed it meanwhile) or expired: nothing to keep.
        items = [i for i in (self._decode(raw, now_us) for raw in raws) if i is not None]
        if not _hand_over_evicted(self, team_id, agent_id, items):
            return
        pipe = conn.pipeline(transaction=True)
        self._queue_forget(pipe, keys, members)
        pipe.execute()

    def list(
        self, *, team_id: str, agent_id: str, limit: int | None = None
    ) -> builtins.list[WorkingItem]:
        _check_ids(team_id, agent_id)
        if limit is not None and limit <= 0:
            return []
        keys = self._agent_keys(team_id, agent_id)
        now_us = _to_us(base._now())
        items: builtins.list[WorkingItem] = []
        stale: builtins.list[str] = []
        with _redis_errors():
            conn = self._conn()
            # Expired members are pruned first so they do not fill the page we ask for.
            expired = self._expired_members(conn, keys, now_us)
            if expired:
                pipe = conn.pipeline(transaction=True)
                self._queue_forget(pipe, keys, expired)
                pipe.execute()
            start = 0
            while True:
                wanted = None if limit is None else limit - len(items)
                stop = -1 if wanted is None else start + wanted - 1
                members = [_text(m) for m in conn.zrange(keys.idx, start, stop)]
                if not members:
                    break
                raws = conn.mget([keys.item(_member_item_id(m)) for m in members])
                for member, raw in zip(members, raws, strict=True):
                    item = self._decode(raw, now_us)
                    if item is None:
                        # Key gone (evicted, or expired since the prune): lazy ZREM below. Not
                        # removed yet, so the ranks of the next page stay where they were.
                        stale.append(member)
                    else:
                        items.append(item)
                start += len(members)
                if wanted is None or len(members) < wanted:
                    break  # that was the rest of the index
                if limit is not None and len(items) >= limit:
                    break
            if stale:
                pipe = conn.pipeline(transaction=True)
                self._queue_forget(pipe, keys, stale)
                pipe.execute()
        return items

    def _count_agents(
        self, conn: Redis, team_id: str, agent_ids: builtins.list[str], now_us: int
    ) -> int:
        """Live items of these agents: prune what has expired, then count the indexes."""
        if not agent_ids:
            return 0
        all_keys = [self._agent_keys(team_id, a) for a in agent_ids]
        # Agents are in different slots: a plain pipeline, never one transaction across them.
        pipe = conn.pipeline(transaction=False)
        for keys in all_keys:
            pipe.zrangebyscore(keys.exp, "-inf", now_us)
            pipe.zcard(keys.idx)
        results = pipe.execute()
        total = 0
        pipe = conn.pipeline(transaction=False)
        recount: builtins.list[int] = []  # positions of the ZCARDs queued after a prune
        for i, keys in enumerate(all_keys):
            expired = [_text(m) for m in results[2 * i]]
            if expired:
                self._queue_forget(pipe, keys, expired)
                recount.append(len(pipe))
                pipe.zcard(keys.idx)
            else:
                total += int(results[2 * i + 1])
        if recount:
            results = pipe.execute()
            total += sum(int(results[pos]) for pos in recount)
        return total

    def count(self, *, team_id: str, agent_id: str) -> int:
        _check_ids(team_id, agent_id)
        with _redis_errors():
            return self._count_agents(self._conn(), team_id, [agent_id], _to_us(base._now()))

    def count_team(self, *, team_id: str) -> int:
        _check_ids(team_id)
        with _redis_errors():
            conn = self._conn()
            agents = sorted(_text(a) for a in conn.smembers(self._team_key(team_id)))
            return self._count_agents(conn, team_id, agents, _to_us(base._now()))

    def remove(self, *, team_id: str, agent_id: str, item_ids: builtins.list[str]) -> int:
        _check_ids(team_id, agent_id)
        ids = _unique(item_ids)
        if not ids:
            return 0
        keys = self._agent_keys(team_id, agent_id)
        now_us = _to_us(base._now())
        with _redis_errors():
            conn = self._conn()
            # Item keys are named by team, agent and id, so another agent's or team's id is
            # simply not found here.
            raws = conn.mget([keys.item(i) for i in ids])
            pipe = conn.pipeline(transaction=True)
            counted: builtins.list[int] = []  # positions of the ZREMs whose success counts
            for item_id, raw in zip(ids, raws, strict=True):
                if raw is None:
                    continue
                parsed = self._parse(raw)
                if parsed is not None:
                    member, item = parsed
                    if _to_us(item.expires_at) > now_us:
                        # Only a live item this call actually took out of the index counts: two
                        # concurrent removes of one id report it once, and an item the cap is
                        # dropping right now (already out of the index) is not counted.
                        counted.append(len(pipe))
                    pipe.zrem(keys.idx, member)
                    pipe.zrem(keys.exp, member)
                pipe.delete(keys.item(item_id))
            if len(pipe) == 0:
                return 0
            results = pipe.execute()
        return sum(1 for pos in counted if results[pos] == 1)

    def _clear(self, conn: Redis, keys: _AgentKeys, now_us: int) -> int:
        # Read both indexes at one instant, then remove exactly what was read: an item added
        # concurrently after the read survives (the clear happened before it).
        pipe = conn.pipeline(transaction=True)
        pipe.zrange(keys.idx, 0, -1)
        pipe.zrange(keys.exp, 0, -1, withscores=True)
        idx_raw, exp_raw = pipe.execute()
        indexed = [_text(m) for m in idx_raw]
        expires = {_text(m): int(score) for m, score in exp_raw}
        live = [m for m in indexed if expires.get(m, now_us + 1) > now_us]
        everything = _unique([*indexed, *expires])
        if not everything:
            return 0
        pipe = conn.pipeline(transaction=True)
        if live:
            pipe.zrem(keys.idx, *live)
        self._queue_forget(pipe, keys, everything)
        results = pipe.execute()
        return int(results[0]) if live else 0

    def clear(self, *, team_id: str, agent_id: str) -> int:
        _check_ids(team_id, agent_id)
        with _redis_errors():
            return self._clear(
                self._conn(), self._agent_keys(team_id, agent_id), _to_us(base._now())
            )

    def purge_agent(self, *, team_id: str, agent_id: str) -> None:
        _check_ids(team_id, agent_id)
        keys = self._agent_keys(team_id, agent_id)
        with _redis_errors():
            conn = self._conn()
            # Unregister first: an add racing this purge registers again after indexing its item
            # (see add), so the agent can never end up with items but unregistered.
            conn.srem(self._team_key(team_id), agent_id)
            self._clear(conn, keys, _to_us(base._now()))
            conn.delete(keys.seq)

    def purge_team(self, *, team_id: str) -> None:
        _check_ids(team_id)
        with _redis_errors():
            conn = self._conn()
            team_key = self._team_key(team_id)
            for _ in range(PURGE_TEAM_ROUNDS):
                agents = [_text(a) for a in conn.smembers(team_key)]
                if not agents:
                    break
                for agent_id in agents:
                    self.purge_agent(team_id=team_id, agent_id=agent_id)

    def ping(self) -> bool:
        try:
            return bool(self._conn().ping())
        except Exception as exc:
            logger.warning("working memory: Redis ping failed: %s: %s", type(exc).__name__, exc)
            return False
