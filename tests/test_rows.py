"""core.rows: assign_given, the partial update the services save with `update_fields`; and
rows_restamp, the times an import keeps after a bulk insert."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.rows import assign_given, rows_restamp
from graph.models import Entity, EntityMention
from memories.models import Memory, MemoryShare
from tenants.models import Team

pytestmark = pytest.mark.django_db


def test_only_the_given_fields_are_set_and_saved():
    Team.objects.create(id="rows", name="Rows", description="kept", config={"a": 1})
    stale = Team.objects.get(pk="rows")
    # Another request changes the description after `stale` was read.
    Team.objects.filter(pk="rows").update(description="changed meanwhile")
    fields = assign_given(stale, name="Renamed", description=None, config={"b": 2})
    assert fields == ["name", "config", "updated_at"]
    stale.save(update_fields=fields)
    row = Team.objects.get(pk="rows")
    assert (row.name, row.description, row.config) == ("Renamed", "changed meanwhile", {"b": 2})


def test_falsy_values_count_and_no_stamp_without_updated_at():
    share = MemoryShare(agent_id="a", permission="read")
    assert assign_given(share, agent_id="", permission=None) == ["agent_id"]
    assert share.agent_id == ""


def test_rows_restamp_writes_the_times_by_primary_key_or_by_a_unique_key():
    """bulk_create stamps the insert time; rows_restamp writes the times the objects hold, each
    row found by its primary key, or by a unique key where a backend returns no auto ids, and
    touches no other row."""
    team = Team.objects.create(id="stamps", name="Stamps")
    memory = Memory.objects.create(team=team, scope="team", content="m")
    entities = Entity.objects.bulk_create(
        [Entity(team=team, name=n, entity_type="concept", normalized_name=n) for n in "abc"]
    )
    mentions = EntityMention.objects.bulk_create(
        [EntityMention(team=team, entity=e, memory=memory) for e in entities]
    )
    then = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    for e in entities[:2]:
        e.created_at, e.updated_at = then, then
    rows_restamp(entities[:2], fields=("created_at", "updated_at"))
    mentions[1].created_at = then
    rows_restamp([mentions[1]], fields=("created_at",), key=("entity", "memory"))
    stamped = dict(Entity.objects.filter(team=team).values_list("name", "updated_at"))
    assert stamped["a"] == stamped["b"] == then
    assert stamped["c"] != then
    by_entity = dict(EntityMention.objects.values_list("entity__name", "created_at"))
    assert by_entity["b"] == then
    assert by_entity["a"] != then and by_entity["c"] != then
    rows_restamp([], fields=("created_at",))  # nothing to write: no query
