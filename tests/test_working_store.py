"""The working-memory store: one suite, run against both backends (memories/working/).

The Redis backend runs against the real Redis of REDIS_URL (skipped without it, failing instead
under REQUIRE_SERVICES=1); the database backend runs on whatever database the suite uses. Nothing
is mocked except, where a test says so, the store's clock (`memories.working.base._now`), so
that expiry and identical timestamps can be tested without sleeping.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings as django_settings
from redis.backoff import NoBackoff
from redis.retry import Retry
from rest_framework import serializers

from core.errors import DomainError
from memories import working
from memories.models import WorkingMemoryItem
from memories.presenters import working_item_body
from memories.working import (
    DatabaseWorkingStore,
    RedisWorkingStore,
    WorkingItem,
    WorkingMemoryStore,
    get_working_store,
    purge_expired_working_items,
)

pytestmark = pytest.mark.django_db

A, B = "team_a", "team_b"  # the ids of the `team` and `other_team` fixtures
TTL = 3600
CHINESE = "用户偏好：喜欢简洁的回答，讨厌冗长的解释。「记忆」—— 第二行\n\t😀 e\u0301 ﬁ"


@pytest.fixture(
    params=["database", pytest.param("redis", marks=pytest.mark.services)],
)
def store(request: pytest.FixtureRequest, team, other_team) -> WorkingMemoryStore:
    # Backends are built directly, not through get_working_store(): the database backend must
    # be tested even when REDIS_URL is set (its selection is tested on its own below).
    if request.param == "redis":
        request.getfixturevalue("redis_required")  # skips (or fails in CI) without Redis
        return RedisWorkingStore()
    return DatabaseWorkingStore()


@pytest.fixture
def redis_store(redis_required, team, other_team) -> RedisWorkingStore:
    return RedisWorkingStore()


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Freezes the store's clock; Redis key TTLs stay real (they only free memory)."""
    c = Clock(datetime(2026, 11, 29, 13, 0, 21, 164516, tzinfo=UTC))
    monkeypatch.setattr("memories.working.base._now", c)
    return c


def add(
    store: WorkingMemoryStore, content: str, *, team: str = A, agent: str = "x", ttl: int = TTL
):
    return store.add(team_id=team, agent_id=agent, content=content, ttl_seconds=ttl)


def contents(store: WorkingMemoryStore, *, team: str = A, agent: str = "x", **kw) -> list[str]:
    return [i.content for i in store.list(team_id=team, agent_id=agent, **kw)]


# --- the shared behaviour (both backends) -------------------------------------------------------


def test_add_returns_the_item_and_list_is_oldest_first(store):
    first = add(store, "first", ttl=60)
    second = add(store, "second")
    third = add(store, "third")

    assert len(first.id) == 32 and int(first.id, 16) >= 0
    assert len({first.id, second.id, third.id}) == 3
    assert first.agent_id == "x" and first.content == "first"
    assert first.created_at.tzinfo is not None and first.created_at.utcoffset() == timedelta(0)
    assert first.expires_at - first.created_at == timedelta(seconds=60)
    # What add() returned is exactly what list() gives back, microseconds included.
    assert store.list(team_id=A, agent_id="x") == [first, second, third]
    assert store.list(team_id=A, agent_id="nobody") == []


def test_identical_timestamps_keep_insertion_order(store, clock):
    items = [add(store, f"item {n}") for n in range(25)]
    assert len({i.created_at for i in items}) == 1
    assert store.list(team_id=A, agent_id="x") == items


def test_list_limit(store):
    for n in range(5):
        add(store, f"m{n}")
    assert contents(store, limit=2) == ["m0", "m1"]
    assert contents(store, limit=5) == ["m0", "m1", "m2", "m3", "m4"]
    assert contents(store, limit=50) == ["m0", "m1", "m2", "m3", "m4"]
    assert contents(store, limit=None) == ["m0", "m1", "m2", "m3", "m4"]
    assert contents(store, limit=0) == []


def test_each_item_expires_on_its_own_ttl(store, clock):
    # The store's clock decides expiry, not Redis: a key outlives its items (KEY_GRACE_MS), so
    # moving the clock on is what a second of waiting would do, without the wait.
    short = add(store, "short", ttl=1)
    add(store, "long", ttl=60)
    add(store, "other agent, short", agent="y", ttl=1)
    assert store.count(team_id=A, agent_id="x") == 2

    clock.advance(1.2)

    assert contents(store) == ["long"]
    assert store.count(team_id=A, agent_id="x") == 1
    assert store.count(team_id=A, agent_id="y") == 0
    assert store.count_team(team_id=A) == 1
    assert store.remove(team_id=A, agent_id="x", item_ids=[short.id]) == 0  # gone already
    assert store.clear(team_id=A, agent_id="x") == 1  # only the live one counts


def test_expired_items_are_never_returned_and_limit_skips_them(store, clock):
    add(store, "old 1", ttl=10)
    add(store, "old 2", ttl=10)
    add(store, "lasting", ttl=100)
    clock.advance(5)
    add(store, "newer", ttl=100)
    clock.advance(6)  # "old 1" and "old 2" are 11 s old now: expired
    assert contents(store, limit=1) == ["lasting"]
    assert contents(store) == ["lasting", "newer"]
    assert store.count(team_id=A, agent_id="x") == 2
    clock.advance(200)
    assert contents(store) == []
    assert store.count(team_id=A, agent_id="x") == 0
    assert store.count_team(team_id=A) == 0


def test_the_cap_drops_the_oldest(store, settings):
    settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT = 3
    add(store, "y's", agent="y")
    for n in range(5):
        add(store, f"m{n}")
    assert contents(store) == ["m2", "m3", "m4"]
    assert store.count(team_id=A, agent_id="x") == 3
    assert contents(store, agent="y") == ["y's"]  # the cap is per agent
    assert store.count_team(team_id=A) == 4


def test_the_cap_counts_only_live_items(store, settings, clock):
    settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT = 3
    for n in range(3):
        add(store, f"old{n}", ttl=10)
    clock.advance(11)
    add(store, "new0")
    add(store, "new1")
    # Three expired leftovers must not push the new items out.
    assert contents(store) == ["new0", "new1"]
    add(store, "new2")
    add(store, "new3")
    assert contents(store) == ["new1", "new2", "new3"]


def test_the_cap_default_is_1000(settings):
    del settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT  # may not exist: getattr default applies
    assert working.max_items_per_agent() == 1000


def test_remove_removes_exactly_the_given_ids(store):
    a, b, c = add(store, "a"), add(store, "b"), add(store, "c")
    ys = add(store, "y's", agent="y")
    theirs = add(store, "team b's", team=B)

    removed = store.remove(team_id=A, agent_id="x", item_ids=[a.id, c.id, "f" * 32, a.id])
    assert removed == 2
    assert store.list(team_id=A, agent_id="x") == [b]
    assert store.remove(team_id=A, agent_id="x", item_ids=[a.id]) == 0
    assert store.remove(team_id=A, agent_id="x", item_ids=[]) == 0
    # Another agent's or another team's ids are not this agent's to remove.
    assert store.remove(team_id=A, agent_id="x", item_ids=[ys.id, theirs.id]) == 0
    assert store.list(team_id=A, agent_id="y") == [ys]
    assert store.list(team_id=B, agent_id="x") == [theirs]


def test_clear_returns_the_number_of_live_items_removed(store):
    for n in range(3):
        add(store, f"m{n}")
    add(store, "y's", agent="y")
    add(store, "team b's", team=B)

    assert store.clear(team_id=A, agent_id="x") == 3
    assert contents(store) == []
    assert store.clear(team_id=A, agent_id="x") == 0
    assert contents(store, agent="y") == ["y's"]
    assert contents(store, team=B) == ["team b's"]
    add(store, "after the clear")
    assert contents(store) == ["after the clear"]


def test_purge_agent_and_purge_team(store):
    add(store, "x1")
    add(store, "x2")
    add(store, "y1", agent="y")
    add(store, "team b's x", team=B)
    add(store, "team b's y", team=B, agent="y")

    store.purge_agent(team_id=A, agent_id="x")
    assert contents(store) == []
    assert contents(store, agent="y") == ["y1"]
    assert store.count_team(team_id=A) == 1

    add(store, "x again")
    store.purge_team(team_id=A)
    assert contents(store) == [] and contents(store, agent="y") == []
    assert store.count_team(team_id=A) == 0
    # The other team is untouched.
    assert contents(store, team=B) == ["team b's x"]
    assert contents(store, team=B, agent="y") == ["team b's y"]
    assert store.count_team(team_id=B) == 2
    # A purged team can write again.
    add(store, "fresh start")
    assert contents(store) == ["fresh start"]


def test_count_and_count_team(store):
    for n in range(2):
        add(store, f"x{n}")
    for n in range(3):
        add(store, f"y{n}", agent="y")
    for n in range(4):
        add(store, f"b{n}", team=B)
    assert store.count(team_id=A, agent_id="x") == 2
    assert store.count(team_id=A, agent_id="y") == 3
    assert store.count(team_id=A, agent_id="nobody") == 0
    assert store.count_team(team_id=A) == 5
    assert store.count_team(team_id=B) == 4
    assert store.count_team(team_id="team_without_items") == 0


def test_teams_never_see_each_others_items(store):
    mine = add(store, "team a's secret")
    theirs = add(store, "team b's secret", team=B)
    assert store.list(team_id=A, agent_id="x") == [mine]
    assert store.list(team_id=B, agent_id="x") == [theirs]
    assert store.count(team_id=A, agent_id="x") == 1
    assert store.clear(team_id=B, agent_id="x") == 1
    assert store.list(team_id=A, agent_id="x") == [mine]
    store.purge_team(team_id=B)
    assert store.list(team_id=A, agent_id="x") == [mine]


def test_agent_ids_with_colons_do_not_collide(store):
    # Agent ids may contain ':' (and '@', '.', '-'); prefixes of one another, and suffixes that
    # look like the store's own key parts, must all stay separate agents.
    agents = ["a", "a:b", "a:b:c", "b", "b:c", "a:it", "it", "idx", "x@host.example-1", "a:"]
    for agent in agents:
        add(store, f"{A}/{agent}", agent=agent)
    add(store, f"{B}/a:b", team=B, agent="a:b")

    for agent in agents:
        assert contents(store, agent=agent) == [f"{A}/{agent}"], agent
        assert store.count(team_id=A, agent_id=agent) == 1
    assert store.count_team(team_id=A) == len(agents)
    assert contents(store, team=B, agent="a:b") == [f"{B}/a:b"]

    assert store.clear(team_id=A, agent_id="a") == 1
    store.purge_agent(team_id=A, agent_id="a:b")
    assert contents(store, agent="a:b:c") == [f"{A}/a:b:c"]
    assert contents(store, agent="b:c") == [f"{A}/b:c"]
    assert contents(store, team=B, agent="a:b") == [f"{B}/a:b"]
    assert store.count_team(team_id=A) == len(agents) - 2


def test_chinese_content_round_trips_byte_exact(store):
    item = add(store, CHINESE)
    [listed] = store.list(team_id=A, agent_id="x")
    assert listed.content.encode("utf-8") == CHINESE.encode("utf-8")
    assert item.content == CHINESE
    assert working_item_body(listed)["content"] == CHINESE


def test_bad_ids_and_ttls_are_refused(store):
    with pytest.raises(ValueError):
        store.add(team_id="team:a", agent_id="x", content="c", ttl_seconds=TTL)
    with pytest.raises(ValueError):
        store.add(team_id=A, agent_id="x}y", content="c", ttl_seconds=TTL)
    with pytest.raises(ValueError):
        store.list(team_id=A, agent_id="")
    with pytest.raises(ValueError):
        store.add(team_id=A, agent_id="x", content="c", ttl_seconds=0)
    assert store.count_team(team_id=A) == 0


def test_items_carry_the_run_they_were_written_in(store, settings):
    settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT = 3
    plain = add(store, "no run")
    first = store.add(team_id=A, agent_id="x", content="在会话里", ttl_seconds=TTL, run_id="s-1")
    second = store.add(team_id=A, agent_id="x", content="next", ttl_seconds=TTL, run_id="s:2")
    assert (plain.run_id, first.run_id, second.run_id) == ("", "s-1", "s:2")
    # list() gives back exactly what add() returned, run included.
    assert store.list(team_id=A, agent_id="x") == [plain, first, second]
    assert working_item_body(first)["run_id"] == "s-1" and "run_id" not in working_item_body(plain)
    # An item the cap pushes out is handed over with its run.
    from memories.working.events import working_memory_evicting

    handed: list[WorkingItem] = []

    def keep(sender, items, **kwargs):
        handed.extend(items)

    working_memory_evicting.connect(keep, dispatch_uid="test-run-eviction")
    try:
        store.add(team_id=A, agent_id="x", content="4th", ttl_seconds=TTL, run_id="s-1")
        store.add(team_id=A, agent_id="x", content="5th", ttl_seconds=TTL, run_id="s-1")
    finally:
        working_memory_evicting.disconnect(dispatch_uid="test-run-eviction")
    assert [(i.content, i.run_id) for i in handed] == [("no run", ""), ("在会话里", "s-1")]


def test_a_bad_run_id_is_refused(store):
    for bad in ("has space", "x" * 65, "a}b"):
        with pytest.raises(ValueError):
            store.add(team_id=A, agent_id="x", content="c", ttl_seconds=TTL, run_id=bad)
    assert store.count_team(team_id=A) == 0


def test_ping(store):
    assert store.ping() is True


# --- the item ------------------------------------------------------------------------------------


def test_item_body_renders_like_drf():
    field = serializers.DateTimeField()
    created = datetime(2026, 11, 29, 13, 0, 21, 164516, tzinfo=UTC)
    whole_second = datetime(2026, 12, 2, 13, 0, 21, tzinfo=UTC)
    item = WorkingItem("ab" * 16, "x", "c", created, whole_second)
    assert working_item_body(item) == {
        "id": "ab" * 16,
        "agent_id": "x",
        "content": "c",
        "created_at": "2026-11-29T13:00:21.164516Z",
        "expires_at": "2026-12-02T13:00:21Z",
    }
    assert working_item_body(item)["created_at"] == field.to_representation(created)
    assert working_item_body(item)["expires_at"] == field.to_representation(whole_second)


# --- choosing the backend ------------------------------------------------------------------------


def test_get_working_store_follows_redis_url(settings):
    settings.REDIS_URL = ""
    assert isinstance(get_working_store(), DatabaseWorkingStore)
    assert get_working_store().name == "database"
    settings.REDIS_URL = "redis://127.0.0.1:6379/15"
    assert isinstance(get_working_store(), RedisWorkingStore)
    assert get_working_store().name == "redis"


# --- Redis specifics -----------------------------------------------------------------------------


def _raw_conn() -> redis.Redis:
    from django_redis import get_redis_connection

    return get_redis_connection("default")


def _key_prefix() -> str:
    prefix = django_settings.CACHES["default"].get("KEY_PREFIX", "")
    return f"{prefix}:wm:" if prefix else "wm:"


def test_redis_keys_are_prefixed_tagged_and_all_expire(redis_store):
    add(redis_store, "hello", agent="a:b", ttl=120)
    conn = _raw_conn()
    base = _key_prefix()
    keys = sorted(k.decode() for k in conn.keys(f"{base}*"))
    assert keys, "no keys written"
    agent_tag, team_tag = f"{base}{{{A}:a:b}}:", f"{base}{{{A}}}:agents"
    for key in keys:
        assert key.startswith(agent_tag) or key == team_tag, key
        # Nothing lives forever: an idle agent's keys vanish on their own, none before its item.
        assert 120_000 <= conn.pttl(key) <= 121_000, key
    assert {k.rsplit(":", 1)[-1] for k in keys if ":it:" not in k} == {
        "idx",
        "exp",
        "seq",
        "agents",
    }


def test_redis_container_expiry_follows_the_longest_lived_item(redis_store):
    add(redis_store, "long", ttl=300)
    add(redis_store, "short", ttl=10)  # must not shorten the index's life
    conn = _raw_conn()
    idx = f"{_key_prefix()}{{{A}:x}}:idx"
    assert conn.pttl(idx) > 290_000
    add(redis_store, "longer", ttl=600)
    assert conn.pttl(idx) > 590_000


def test_redis_forgets_expired_and_dropped_items(redis_store, settings, clock):
    settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT = 2
    conn = _raw_conn()
    tag = f"{_key_prefix()}{{{A}:x}}"
    old = [add(redis_store, f"old{n}", ttl=10) for n in range(2)]
    clock.advance(11)
    fresh = [add(redis_store, f"fresh{n}") for n in range(3)]  # the first one is dropped by the cap
    assert conn.zcard(f"{tag}:idx") == 2
    assert conn.zcard(f"{tag}:exp") == 2
    assert [i.id for i in redis_store.list(team_id=A, agent_id="x")] == [f.id for f in fresh[1:]]
    for gone in [*old, fresh[0]]:
        assert not conn.exists(f"{tag}:it:{gone.id}")


def test_redis_content_is_stored_as_utf8(redis_store):
    item = add(redis_store, CHINESE)
    raw = _raw_conn().get(f"{_key_prefix()}{{{A}:x}}:it:{item.id}")
    # Stored as UTF-8 text (not \\u escapes), and decoded back to the very same string.
    assert "用户偏好：喜欢简洁的回答".encode() in raw
    assert json.loads(raw)["content"] == CHINESE


def test_redis_items_stored_before_runs_were_kept_have_no_run(redis_store):
    item = redis_store.add(team_id=A, agent_id="x", content="c", ttl_seconds=TTL, run_id="s-1")
    key = f"{_key_prefix()}{{{A}:x}}:it:{item.id}"
    conn = _raw_conn()
    data = json.loads(conn.get(key))
    assert data["run_id"] == "s-1"
    del data["run_id"]  # the payload of an item written by the previous version
    conn.set(key, json.dumps(data), keepttl=True)
    [listed] = redis_store.list(team_id=A, agent_id="x")
    assert listed.id == item.id and listed.run_id == ""


def _unreachable_store() -> RedisWorkingStore:
    # Port 1: nothing listens, the connection is refused. No retries, so the test is quick.
    client = redis.Redis(
        host="127.0.0.1",
        port=1,
        socket_connect_timeout=0.5,
        socket_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    return RedisWorkingStore(client)


CALLS: dict[str, Callable[[WorkingMemoryStore], object]] = {
    "add": lambda s: s.add(team_id=A, agent_id="x", content="c", ttl_seconds=TTL),
    "list": lambda s: s.list(team_id=A, agent_id="x"),
    "count": lambda s: s.count(team_id=A, agent_id="x"),
    "remove": lambda s: s.remove(team_id=A, agent_id="x", item_ids=["f" * 32]),
    "clear": lambda s: s.clear(team_id=A, agent_id="x"),
    "purge_team": lambda s: s.purge_team(team_id=A),
    "purge_agent": lambda s: s.purge_agent(team_id=A, agent_id="x"),
    "count_team": lambda s: s.count_team(team_id=A),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_redis_unreachable_raises_working_memory_unavailable(call):
    with pytest.raises(DomainError) as exc_info:
        CALLS[call](_unreachable_store())
    err = exc_info.value
    assert (err.code, err.status) == ("WORKING_MEMORY_UNAVAILABLE", 503)
    assert err.message == "working memory (Redis) is unavailable"
    assert not isinstance(err, redis.RedisError)
    assert isinstance(err.__cause__, redis.RedisError)


def test_redis_unreachable_ping_is_false():
    assert _unreachable_store().ping() is False


def test_the_configured_connection_maps_errors_too(settings):
    # The production path: get_working_store() with the django-redis cache (as settings/base.py
    # builds it) pointing nowhere. It fails fast: no retry/backoff configured there.
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "KEY_PREFIX": "mp",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 0.5,
                "SOCKET_TIMEOUT": 0.5,
            },
        }
    }
    store = get_working_store()
    assert store.name == "redis"
    with pytest.raises(DomainError) as exc_info:
        store.count(team_id=A, agent_id="x")
    assert exc_info.value.code == "WORKING_MEMORY_UNAVAILABLE"


# --- database specifics --------------------------------------------------------------------------


def test_database_add_deletes_that_agents_expired_rows(team, clock):
    store = DatabaseWorkingStore()
    add(store, "x old", ttl=10)
    add(store, "y old", agent="y", ttl=10)
    clock.advance(11)
    add(store, "x new")
    rows = WorkingMemoryItem.objects.filter(team_id=A)
    assert sorted(rows.values_list("content", flat=True)) == ["x new", "y old"]


def test_purge_expired_working_items(team, other_team, clock):
    store = DatabaseWorkingStore()
    add(store, "a expired", ttl=10)
    add(store, "b expired", team=B, agent="y", ttl=10)
    add(store, "a live", ttl=100)
    clock.advance(11)
    assert purge_expired_working_items() == 2
    assert purge_expired_working_items() == 0
    assert list(WorkingMemoryItem.objects.values_list("content", flat=True)) == ["a live"]
