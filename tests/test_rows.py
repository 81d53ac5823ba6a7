"""core.rows.assign_given: the partial update the services save with `update_fields`."""

from __future__ import annotations

import pytest

from core.rows import assign_given
from memories.models import MemoryShare
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
