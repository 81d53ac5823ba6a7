"""The change log is read gap-safe: a write whose change id is lower than one an index already
applied (its transaction committed later) still reaches that index."""

from __future__ import annotations

import pytest

from memories.models import IndexChange, Memory, MemoryScope
from memories.retrieval import index
from memories.retrieval.embeddings import get_embedder
from memories.services import memory_create

pytestmark = pytest.mark.django_db


def _write(team, content: str) -> Memory:
    memory, _ = memory_create(team=team, scope=MemoryScope.PERSONAL, agent_id="a1", content=content)
    return memory


def _index(team) -> index.ScopeIndex:
    return index.registry.get(
        team_id=team.id, scope=MemoryScope.PERSONAL, agent_id="a1", embedder=get_embedder()
    )


def _committed_late(team, content: str, *, before: int) -> Memory:
    """A write whose change row carries an id below `before`, as if its id had been allocated
    before the newer row's and its transaction had committed after a sync saw the newer one."""
    memory = _write(team, content)
    row = IndexChange.objects.get(memory_id=memory.pk)
    IndexChange.objects.filter(pk=row.pk).update(id=before)
    return memory


def test_a_change_committed_out_of_id_order_is_not_skipped(team, settings):
    settings.INDEX_CHANGE_SETTLE_SECONDS = 60
    _write(team, "The staging database is refreshed on Sundays")
    ix = _index(team)
    # An id that a concurrent writer "holds": reserved by a row of another scope, then freed.
    reserved = IndexChange.objects.create(team=team, scope_key="elsewhere", memory_id=0).pk
    IndexChange.objects.filter(pk=reserved).delete()
    newer = _write(team, "Deploys happen on Tuesdays after the stand-up")
    ix = _index(team)  # this sync sees the newer change, whose id is above the reserved one
    assert newer.pk in ix.slot_of
    assert ix.last_change_id > reserved

    late = _committed_late(team, "The office plants are watered on Fridays", before=reserved)
    ix = _index(team)
    assert late.pk in ix.slot_of and ix.alive[ix.slot_of[late.pk]]


def test_the_settled_floor_advances_and_forgets_applied_ids(team, settings):
    settings.INDEX_CHANGE_SETTLE_SECONDS = 0
    _write(team, "The staging database is refreshed on Sundays")
    ix = _index(team)
    _write(team, "Deploys happen on Tuesdays after the stand-up")
    ix = _index(team)
    ix = _index(team)  # the second sync finds the first one's mark old enough
    assert ix.change_floor == ix.last_change_id
    assert not ix.applied_changes
