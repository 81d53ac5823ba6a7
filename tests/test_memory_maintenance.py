"""reembed_memories, change-log pruning, index memory budget and self-healing."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from memories.models import IndexChange, Memory
from memories.retrieval import index
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.search import SearchQuery
from memories.services import index_changes_prune, memory_create, memory_recall

pytestmark = pytest.mark.django_db


def test_reembed_memories_embeds_what_another_model_made(team, capsys):
    m1, _ = memory_create(
        team=team, scope="personal", agent_id="a", content="alpha fact about ports"
    )
    m2, _ = memory_create(
        team=team, scope="personal", agent_id="a", content="beta fact about ships"
    )
    Memory.objects.filter(pk=m1.pk).update(embedding_model="old-model", embedding=b"\x00" * 16)
    out = StringIO()
    call_command("reembed_memories", "--team", team.id, stdout=out)
    assert "1 memories to embed" in out.getvalue()
    assert "re-embedded 1" in out.getvalue()
    assert "1/1" in capsys.readouterr().err  # the progress bar
    m1.refresh_from_db()
    assert m1.embedding_model == get_embedder().model_name
    assert len(m1.embedding) == get_embedder().dim * 4
    call_command("reembed_memories", "--all", stdout=StringIO())
    assert IndexChange.objects.filter(memory_id=m2.pk).count() == 2


def _search(team, **kw):
    """An agent's search, recorded as recalled like the API's."""
    return [
        {"id": h.memory.pk, "score": h.score}
        for h in memory_recall(query=SearchQuery(team=team, scope="personal", **kw))
    ]


def test_a_memory_made_by_another_model_is_still_found_by_keyword(team):
    m, _ = memory_create(
        team=team, scope="personal", agent_id="a", content="the lighthouse keeper's logbook"
    )
    Memory.objects.filter(pk=m.pk).update(embedding_model="old-model")
    res = _search(team, agent_id="a", text="lighthouse logbook", min_score=0.0)
    assert [r["id"] for r in res] == [m.pk]


def test_pruning_drops_only_old_change_rows(team):
    memory_create(team=team, scope="personal", agent_id="a", content="x1 log")
    memory_create(team=team, scope="personal", agent_id="a", content="y2 other")
    old = IndexChange.objects.order_by("id").first()
    IndexChange.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    assert index_changes_prune(older_than_seconds=86400) == 1
    assert IndexChange.objects.count() == 1


def test_an_index_idle_past_the_retention_reloads_from_the_database(team, settings):
    memory_create(team=team, scope="personal", agent_id="a", content="first note on kites")
    _search(team, agent_id="a", text="kites")
    ix = index.registry.get(
        team_id=team.id, scope="personal", agent_id="a", embedder=get_embedder()
    )
    # A change whose log row was pruned: only a reload can know about it.
    m, _ = memory_create(
        team=team, scope="personal", agent_id="a", content="second note on kites and wind"
    )
    IndexChange.objects.all().delete()
    ix.synced_at -= settings.INDEX_CHANGE_RETENTION_SECONDS
    res = _search(team, agent_id="a", text="kites wind", min_score=0.0)
    assert m.pk in [r["id"] for r in res]


@pytest.mark.local_index
def test_the_memory_budget_evicts_least_recently_used_scopes(team, settings):
    for agent in ("a", "b", "c"):
        memory_create(
            team=team, scope="personal", agent_id=agent, content=f"note of {agent} about budgets"
        )
        _search(team, agent_id=agent, text="budgets")
    assert len(index.registry.loaded()) == 3
    settings.INDEX_MEMORY_BUDGET_MB = 0  # everything but the scope in use must go
    _search(team, agent_id="a", text="budgets")
    memory_create(team=team, scope="personal", agent_id="d", content="note of d")
    _search(team, agent_id="d", text="note")
    assert index.registry.loaded() == [index.scope_key(team.id, "personal", "d")]


def test_a_stale_index_entry_never_returns_a_deleted_memory(team):
    m, _ = memory_create(
        team=team, scope="personal", agent_id="a", content="temporary fact about moons"
    )
    _search(team, agent_id="a", text="moons")
    # Deleted behind the index's back (no change row): the database still has the last word.
    Memory.objects.filter(pk=m.pk).delete()
    IndexChange.objects.all().delete()
    assert _search(team, agent_id="a", text="moons", min_score=0.0) == []
    assert (
        index.scope_key(team.id, "personal", "a") not in index.registry.loaded()
    )  # dropped to rebuild


@pytest.mark.local_index
def test_deleting_a_team_drops_its_indexes(api, team, django_capture_on_commit_callbacks):
    api.post("/memories/personal", {"agent_id": "a", "content": "team to be deleted"})
    api.post("/memories/personal/search", {"agent_id": "a", "query": "deleted"})
    assert index.registry.loaded()
    with django_capture_on_commit_callbacks(execute=True):
        api.delete("/teams/team_a")
    assert index.registry.loaded() == []
    assert not Memory.objects.exists()


@pytest.mark.parametrize("command", ["reembed_memories", "empty_trash", "retier_memories"])
def test_an_unknown_team_is_an_error_not_a_run_over_nothing(team, command):
    from django.core.management import CommandError

    from memories.models import MemoryTier

    memory, _ = memory_create(team=team, scope="personal", agent_id="a", content="kept as it is")
    with pytest.raises(CommandError, match="no team nope"):
        call_command(command, "--team", "nope", stdout=StringIO(), stderr=StringIO())
    memory.refresh_from_db()  # still there, untouched
    assert memory.tier == MemoryTier.HOT
