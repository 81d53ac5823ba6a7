"""The exact-duplicate check of a write (`selectors.memory_same_content_id`) finds the right row
and is an index look-up on the content hash, not a scan.

It runs under the scope's write lock (memories.locks), so its cost is paid by every writer of the
scope that waits for the lock. With the hash index as (team, scope, agent_id, content_hash), the
team-scope check (which has no agent_id) could only use (team, scope), and asked for ORDER BY id
LIMIT 1 MariaDB chose the primary key and read the whole table, every team's memories, per team
write (SQLite the team_id index). The plan of the SQL the selector runs is read from the database
itself (EXPLAIN), on SQLite and on MariaDB, whichever DATABASE_URL selects: this asserts no
timing (bench/multinode.py measures that).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories.models import Memory, MemoryScope
from memories.retrieval.text import content_hash
from memories.selectors import memory_same_content_id

from .factories import MemoryFactory, TeamFactory

pytestmark = pytest.mark.django_db

SAID = "The deploy window is Tuesday 14:00 UTC."


@pytest.fixture
def scopes() -> dict[str, Any]:
    team, other = TeamFactory(), TeamFactory()
    # Enough rows in the scopes checked and in another team that a look-up of the hash and a
    # walk of the scope differ, for the planner as for the clock.
    for n in range(30):
        for t in (team, other):
            MemoryFactory(team=t, scope=MemoryScope.TEAM, agent_id=f"author-{n % 3}")
            MemoryFactory(team=t, scope=MemoryScope.PERSONAL, agent_id="a1")
    rows = {
        "team_first": MemoryFactory(team=team, scope=MemoryScope.TEAM, agent_id="a1", content=SAID),
        "team_again": MemoryFactory(team=team, scope=MemoryScope.TEAM, agent_id="", content=SAID),
        "personal": MemoryFactory(
            team=team, scope=MemoryScope.PERSONAL, agent_id="a1", content=SAID
        ),
        "personal_other_agent": MemoryFactory(
            team=team, scope=MemoryScope.PERSONAL, agent_id="a2", content=SAID
        ),
        "other_team": MemoryFactory(
            team=other, scope=MemoryScope.TEAM, agent_id="a1", content=SAID
        ),
    }
    return {"team": team, **rows}


def _same(scopes: dict[str, Any], scope: str, agent_id: str) -> int | None:
    return memory_same_content_id(
        team=scopes["team"], scope=scope, agent_id=agent_id, chash=content_hash(SAID)
    )


def test_team_scope_matches_every_author_oldest_first(scopes: dict[str, Any]) -> None:
    assert _same(scopes, MemoryScope.TEAM, "someone") == scopes["team_first"].pk


def test_personal_scope_matches_only_the_agent(scopes: dict[str, Any]) -> None:
    assert _same(scopes, MemoryScope.PERSONAL, "a1") == scopes["personal"].pk
    assert _same(scopes, MemoryScope.PERSONAL, "a2") == scopes["personal_other_agent"].pk
    assert _same(scopes, MemoryScope.PERSONAL, "a3") is None


def test_superseded_memories_do_not_count(scopes: dict[str, Any]) -> None:
    Memory.objects.filter(pk=scopes["team_first"].pk).update(superseded_by=scopes["team_again"])
    assert _same(scopes, MemoryScope.TEAM, "") == scopes["team_again"].pk


def _mysql_key_parts(plan: Any) -> list[list[str]]:
    """`used_key_parts` of every access to memories_memory in an EXPLAIN FORMAT=JSON tree."""
    found: list[list[str]] = []
    if isinstance(plan, dict):
        if plan.get("table_name") == "memories_memory":
            found.append(list(plan.get("used_key_parts", [])))
        for value in plan.values():
            found += _mysql_key_parts(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _mysql_key_parts(value)
    return found


@pytest.mark.parametrize("scope", [MemoryScope.TEAM, MemoryScope.PERSONAL])
def test_the_check_looks_up_the_hash_in_an_index(scopes: dict[str, Any], scope: str) -> None:
    if connection.vendor not in ("mysql", "sqlite"):
        pytest.skip(f"no plan check for {connection.vendor}")
    with CaptureQueriesContext(connection) as ctx:
        _same(scopes, scope, "a1")
    (query,) = ctx.captured_queries  # one query, as the write runs it
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("EXPLAIN FORMAT=JSON " + query["sql"])
            parts = _mysql_key_parts(json.loads(cursor.fetchone()[0]))
            assert parts and all("content_hash" in p for p in parts), parts
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            # "SEARCH memories_memory USING INDEX mem_hash (team_id=? AND scope=? AND
            # content_hash=?)"; a walk of the scope or the team constrains only their columns.
            assert "content_hash=?" in plan, plan
