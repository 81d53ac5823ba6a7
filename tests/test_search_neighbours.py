"""Neighbours: memories of a scope written one after the other within SEARCH_NEIGHBOUR_SECONDS
are one conversation. Hybrid search orders with that context (the previous memory's words in the
ranking's BM25, a share of the better neighbour's rank, never lifting a memory above that
neighbour); `score` stays what the memory itself matches, so `min_score` keeps its meaning."""

from __future__ import annotations

import pytest

from memories.models import Memory, MemoryScope
from memories.retrieval import index
from memories.retrieval import search as search_service
from memories.retrieval.embeddings import get_embedder
from memories.services import memory_create, memory_delete

pytestmark = pytest.mark.django_db


def _write(team, content: str, agent_id: str = "a1") -> Memory:
    memory, _ = memory_create(
        team=team,
        scope=MemoryScope.PERSONAL,
        agent_id=agent_id,
        content=content,
        enable_dedup=False,
    )
    return memory


def _index(team, agent_id: str = "a1") -> index.ScopeIndex:
    return index.registry.get(
        team_id=team.id, scope=MemoryScope.PERSONAL, agent_id=agent_id, embedder=get_embedder()
    )


def _search(team, query: str, **kw):
    hits = search_service.memory_search(
        search_service.SearchQuery(
            team=team, scope=MemoryScope.PERSONAL, agent_id="a1", text=query, **kw
        )
    )
    return [{"id": h.memory.pk, "score": h.score, "content": h.content} for h in hits]


def test_neighbours_are_the_memories_written_before_and_after(team):
    a = _write(team, "Alice asked about the quarterly report")
    b = _write(team, "Bob said it is due on Friday")
    c = _write(team, "Carol will review it")
    ix = _index(team)
    import numpy as np

    slots = np.array([ix.slot_of[a.pk], ix.slot_of[b.pk], ix.slot_of[c.pk]])
    prev, nxt = ix.neighbour_slots(slots)
    assert prev.tolist() == [-1, ix.slot_of[a.pk], ix.slot_of[b.pk]]
    assert nxt.tolist() == [ix.slot_of[b.pk], ix.slot_of[c.pk], -1]


def _neighbours_on(settings) -> None:
    # A fresh index, so that nothing of the previous search's state can explain the result.
    settings.SEARCH_NEIGHBOUR_SECONDS = 3600
    index.registry.clear()


def _slots(ix: index.ScopeIndex, *memories: Memory):
    import numpy as np

    return np.array([ix.slot_of[m.pk] for m in memories])


def test_only_memories_of_the_same_scope_are_neighbours(team):
    a = _write(team, "Deploy window opens at nine")
    _write(team, "Another agent's note about lunch", agent_id="a2")
    b = _write(team, "Rollback needs the release manager")
    ix = _index(team)
    prev, nxt = ix.neighbour_slots(_slots(ix, a, b))
    assert nxt[0] == ix.slot_of[b.pk] and prev[1] == ix.slot_of[a.pk]


def test_a_removed_memory_is_skipped_and_an_updated_one_keeps_its_place(team):
    from memories.services import Actor, memory_update

    a = _write(team, "First step: back up the database")
    b = _write(team, "Second step: stop the workers")
    c = _write(team, "Third step: run the migration")
    memory_delete(memory=b)
    ix = _index(team)
    prev, nxt = ix.neighbour_slots(_slots(ix, a, c))
    assert nxt[0] == ix.slot_of[c.pk] and prev[1] == ix.slot_of[a.pk]
    memory_update(memory=a, actor=Actor(), content="First step: back up the database twice")
    ix = _index(team)
    prev, _ = ix.neighbour_slots(_slots(ix, c))
    assert prev[0] == ix.slot_of[a.pk]


def test_memories_written_further_apart_than_the_window_are_not_neighbours(team, settings):
    from datetime import timedelta

    a = _write(team, "The printer on floor two is broken")
    b = _write(team, "Facilities will fix it tomorrow")
    Memory.objects.filter(pk=a.pk).update(created_at=b.created_at - timedelta(hours=2))
    index.registry.clear()
    _neighbours_on(settings)
    ix = _index(team)
    prev, _ = ix.neighbour_slots(_slots(ix, b))
    assert prev[0] == -1
    settings.SEARCH_NEIGHBOUR_SECONDS = 3 * 3600
    prev, _ = ix.neighbour_slots(_slots(ix, b))
    assert prev[0] == ix.slot_of[a.pk]


FILLER = [
    "The office coffee machine was descaled on Monday",
    "Quarterly taxes are filed by the finance team",
    "Parking passes are renewed every January",
    "The team lunch moved to the Thai place downstairs",
    # Shares a word with the query and is no one's neighbour in the conversation asked about.
    "The lake house rent is due at the end of the month",
]


def _conversation(team) -> tuple[Memory, Memory]:
    for text in FILLER[:3]:
        _write(team, text)
    subject = _write(team, "Melanie: we went hiking on the trail around the lake last weekend")
    answer = _write(team, "Caroline: it was beautiful, three deer came down to drink from the lake")
    for text in FILLER[3:]:
        _write(team, text)
    return subject, answer


def test_the_turn_after_the_subject_ranks_by_its_context(team, settings):
    subject, answer = _conversation(team)
    query = "hiking trail around the lake"
    settings.SEARCH_NEIGHBOUR_SECONDS = 0
    alone = [r["id"] for r in _search(team, query, min_score=0.0, limit=10)]
    _neighbours_on(settings)
    with_context = [r["id"] for r in _search(team, query, min_score=0.0, limit=10)]
    assert with_context[0] == subject.pk
    assert with_context[1] == answer.pk
    assert answer.pk not in alone[:2]


def test_scores_are_the_memories_own_whatever_the_order(team, settings):
    _conversation(team)
    query = "hiking trail around the lake"
    settings.SEARCH_NEIGHBOUR_SECONDS = 0
    alone = {r["id"]: r["score"] for r in _search(team, query, min_score=0.0, limit=20)}
    _neighbours_on(settings)
    with_context = {r["id"]: r["score"] for r in _search(team, query, min_score=0.0, limit=20)}
    for memory_id, score in with_context.items():
        if memory_id in alone:
            assert score == pytest.approx(alone[memory_id], abs=1e-6)
        else:  # found through its neighbour only: its own match is weak
            assert score < 0.3
    # min_score filters on the memory's own score: context never lifts one over it.
    strict = _search(team, query, min_score=0.3, limit=20)
    assert {r["id"] for r in strict} == {i for i, s in alone.items() if s >= 0.3}


def test_keyword_and_vector_modes_ignore_neighbours(team, settings):
    _conversation(team)
    query = "hiking trail around the lake"
    for mode in ("keyword", "vector"):
        settings.SEARCH_NEIGHBOUR_SECONDS = 0
        alone = [r["id"] for r in _search(team, query, min_score=0.0, mode=mode)]
        _neighbours_on(settings)
        assert [r["id"] for r in _search(team, query, min_score=0.0, mode=mode)] == alone


def test_a_misspelt_fusion_or_neighbour_setting_stops_the_server(settings):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    call_command("check")
    settings.SEARCH_FUSION = "noisy-or"
    with pytest.raises(SystemCheckError, match=r"memories\.E001"):
        call_command("check")
    settings.SEARCH_FUSION = "noisy_or"
    settings.SEARCH_NEIGHBOUR_WEIGHT = 3.0
    with pytest.raises(SystemCheckError, match=r"memories\.E002"):
        call_command("check")


def test_links_hold_when_memories_arrive_out_of_id_order():
    """A commit that lands after a newer one (ids allocated before commit) still gets its place."""
    ix = index.ScopeIndex("t|personal|a1", 4, "m")

    def row(memory_id: int) -> index.Row:
        return index.Row(memory_id, f"note {memory_id}", None, "m", False, "", 1000.0 + memory_id)

    ix.upsert_many([row(1), row(3)])
    ix.upsert_many([row(2)])
    ix.upsert_many([row(4)])
    import numpy as np

    slots = np.array([ix.slot_of[i] for i in (1, 2, 3, 4)])
    prev, nxt = ix.neighbour_slots(slots)
    assert [int(ix.ids[s]) if s >= 0 else None for s in prev] == [None, 1, 2, 3]
    assert [int(ix.ids[s]) if s >= 0 else None for s in nxt] == [2, 3, 4, None]


def test_a_memory_written_after_the_newest_was_deleted_links_to_the_one_before(team):
    a = _write(team, "Sprint planning is on Monday")
    b = _write(team, "Retro moved to Thursday")
    _index(team)
    memory_delete(memory=b)
    _index(team)
    c = _write(team, "Demo day is Friday")
    ix = _index(team)
    prev, _ = ix.neighbour_slots(_slots(ix, c))
    assert prev[0] == ix.slot_of[a.pk]


# Unrelated facts written back to back (an import, the facts of one document): neighbours by
# time, not a conversation. Neighbours share words and a theme, as sorted or grouped facts do;
# each is asked for by its translation, whose own match is weaker than a same-language one.
BURST = [
    ("The garden shed key hangs behind the kitchen door", "花园棚屋的钥匙挂在厨房门后面"),
    (
        "The garden hose leaks at the tap near the kitchen window",
        "花园的水管在厨房窗边的水龙头处漏水",
    ),
    ("The garage door opener needs new batteries", "车库门的遥控器需要换新电池"),
    ("The gas meter is read on the first Monday of the month", "煤气表在每个月的第一个星期一抄表"),
    ("The guest room heater rattles when it is switched on", "客房的暖气一打开就咔咔作响"),
    (
        "The gutter above the kitchen window is blocked with leaves",
        "厨房窗户上方的排水沟被树叶堵住了",
    ),
    ("The grocery list is stuck to the fridge with a magnet", "购物清单用磁铁贴在冰箱上"),
    ("The green bin is collected every other Thursday", "绿色垃圾桶每隔一个星期四收一次"),
]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_in_a_burst_of_unrelated_facts_the_exact_match_stays_first(team, settings, language):
    written = [_write(team, en) for en, _ in BURST]
    _neighbours_on(settings)
    for i, (en, zh) in enumerate(BURST):
        query = en if language == "en" else zh
        found = [r["id"] for r in _search(team, query, min_score=0.0, limit=5)]
        assert found[0] == written[i].pk, (query, found)


def test_in_a_conversation_the_answer_after_the_turn_that_names_the_subject_is_found(
    team, settings
):
    for text in FILLER[:2]:
        _write(team, text)
    subject = _write(team, "Priya: my sister finally adopted a rescue greyhound last week")
    _write(team, "Tom: lovely! what did she call him?")
    answer = _write(team, "Priya: Comet, because he runs like one")
    for text in FILLER[2:]:
        _write(team, text)
    query = "What did Priya's sister name her greyhound?"
    settings.SEARCH_NEIGHBOUR_SECONDS = 0
    alone = [r["id"] for r in _search(team, query, min_score=0.0)]
    _neighbours_on(settings)
    found = [r["id"] for r in _search(team, query, min_score=0.0)]
    assert found[0] == subject.pk
    # The answer never names the greyhound: the turns before it bring it up, below the subject.
    assert answer.pk in found[:3]
    assert found.index(answer.pk) <= alone.index(answer.pk)
