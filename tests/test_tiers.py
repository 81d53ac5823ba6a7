"""Hot / warm / cold tiers (memories.tiers, docs/lifecycle.md "Tiers"): the rule, the tiering
pass, cold memories out of the index and of everyday search but found with include_cold, and
an agent's access bringing one back to hot."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from memories import tasks, tiers
from memories.models import IndexChange, Memory, MemoryShare
from memories.retrieval import index
from memories.retrieval.embeddings import get_embedder

from .factories import MemoryFactory
from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db


def idle(memory: Memory, days: float, **fields) -> None:
    when = timezone.now() - timedelta(days=days)
    Memory.objects.filter(pk=memory.pk).update(last_accessed=when, created_at=when, **fields)


def search_ids(api, query, agent="researcher", **extra) -> list[int]:
    body = {"agent_id": agent, "query": query, **extra}
    return [h["id"] for h in ok_data(api.post("/memories/personal/search", body))]


class TestRule:
    NOW = timezone.now()

    def tier(self, *, days, importance=0.5, access_count=0, pinned=False) -> str:
        last = self.NOW - timedelta(days=days)
        return tiers.tier_for(
            importance=importance,
            access_count=access_count,
            last_accessed=last,
            created_at=last,
            pinned=pinned,
            now=self.NOW,
        )

    def test_idleness_moves_a_memory_down_and_recalls_and_importance_hold_it(self):
        # importance 0.5: stability 45 days; retention 0.5 at ~31 days, 0.1 at ~104 days.
        assert self.tier(days=1) == "hot"
        assert self.tier(days=60) == "warm"
        assert self.tier(days=120) == "cold"
        # Recalled often: a longer memory (stability x (1 + ln 21) ~ x4).
        assert self.tier(days=120, access_count=20) == "hot"
        assert self.tier(days=0.5, importance=0.0) == "hot"
        assert self.tier(days=80, importance=0.0) == "cold"

    def test_pinned_and_important_memories_stay_hot(self):
        assert self.tier(days=3650, pinned=True) == "hot"
        assert self.tier(days=3650, importance=0.8) == "hot"
        assert self.tier(days=3650, importance=0.79) == "cold"

    def test_the_thresholds_are_settings(self, settings):
        settings.TIER_COLD_RETENTION = 0.0
        assert self.tier(days=3650) == "warm"
        settings.TIER_HOT_RETENTION = 0.0
        assert self.tier(days=3650) == "hot"


class TestTiering:
    def test_the_pass_moves_memories_and_is_idempotent(self, team, other_team):
        fresh = MemoryFactory(team=team, content="the user deploys on Fridays")
        quiet = MemoryFactory(team=team, content="the user once tried Haskell")
        old = MemoryFactory(team=team, content="the user liked a cafe in 2019")
        pinned = MemoryFactory(team=team, content="the production database password rule")
        theirs = MemoryFactory(team=other_team, content="another team's old note")
        idle(quiet, 60)
        idle(old, 200)
        idle(pinned, 200, pinned=True)
        idle(theirs, 200)
        result = tiers.memories_retier(team=team)
        assert result.examined == 4
        assert result.moves == {"hot->warm": 1, "hot->cold": 1}
        got = dict(Memory.objects.values_list("pk", "tier"))
        assert (got[fresh.pk], got[quiet.pk], got[old.pk], got[pinned.pk]) == (
            "hot",
            "warm",
            "cold",
            "hot",
        )
        assert got[theirs.pk] == "hot"  # another team's pass, not this one's
        assert tiers.memories_retier(team=team).moves == {}
        # The beat task runs the pass for every team.
        assert tasks.retier_memories() == {"hot->cold": 1}
        assert Memory.objects.get(pk=theirs.pk).tier == "cold"

    def test_a_move_into_or_out_of_cold_is_logged_for_every_process_index(self, team):
        old = MemoryFactory(team=team, content="a long forgotten detail")
        quiet = MemoryFactory(team=team, content="a quiet detail")
        idle(old, 200)
        idle(quiet, 60)
        # The highest id, not the count: MariaDB does not reuse ids of rolled-back tests.
        before = IndexChange.objects.order_by("-id").values_list("id", flat=True).first() or 0
        tiers.memories_retier(team=team)
        # hot -> warm changes nothing the index holds; hot -> cold is logged.
        assert list(
            IndexChange.objects.filter(id__gt=before).values_list("memory_id", flat=True)
        ) == [old.pk]


class TestColdSearch:
    @pytest.fixture
    def cold(self, team):
        memory = MemoryFactory(team=team, content="The user's first laptop was a ThinkPad X220.")
        MemoryFactory(team=team, content="The user works on a payments service in Go.")
        idle(memory, 300)
        return memory

    def test_a_cold_memory_leaves_a_loaded_index_and_everyday_search(self, team, api, cold):
        # The scope's index is loaded while the memory is still hot ...
        assert cold.pk in search_ids(api, "ThinkPad laptop")
        idle(cold, 300)  # (that search was a recall)
        tiers.memories_retier(team=team)
        assert Memory.objects.get(pk=cold.pk).tier == "cold"
        # ... and follows the move (index change log): gone from search and from the index.
        assert cold.pk not in search_ids(api, "ThinkPad laptop", min_score=0)
        ix = index.registry.get(
            team_id=team.id, scope="personal", agent_id="researcher", embedder=get_embedder()
        )
        assert cold.pk not in ix.slot_of
        # An empty query (most recent) leaves it out too.
        assert cold.pk not in search_ids(api, "")
        assert cold.pk in search_ids(api, "", include_cold=True)

    def test_a_fresh_index_does_not_load_cold_memories(self, team, api, cold):
        tiers.memories_retier(team=team)
        index.registry.clear()
        ix = index.registry.get(
            team_id=team.id, scope="personal", agent_id="researcher", embedder=get_embedder()
        )
        assert cold.pk not in ix.slot_of and ix.alive_count == 1

    def test_include_cold_finds_it_and_the_access_makes_it_hot(self, team, api, cold):
        tiers.memories_retier(team=team)
        hits = ok_data(
            api.post(
                "/memories/personal/search",
                {"agent_id": "researcher", "query": "ThinkPad laptop", "include_cold": True},
            )
        )
        assert hits[0]["id"] == cold.pk and hits[0]["tier"] == "cold"
        memory = Memory.objects.get(pk=cold.pk)
        assert memory.tier == "hot" and memory.access_count == 1
        # Hot again: back in everyday search, and the next pass keeps it there.
        assert cold.pk in search_ids(api, "ThinkPad laptop")
        tiers.memories_retier(team=team)
        assert Memory.objects.get(pk=cold.pk).tier == "hot"

    def test_a_weak_include_cold_result_is_not_promoted(self, team, api, cold):
        tiers.memories_retier(team=team)
        hits = ok_data(
            api.post(
                "/memories/personal/search",
                {
                    "agent_id": "researcher",
                    # No word in common with "The user's first laptop …" ("user's" is "user").
                    "query": "which computer does someone garden with",
                    "include_cold": True,
                    "min_score": 0,
                },
            )
        )
        weak = [h for h in hits if h["id"] == cold.pk]
        assert weak and weak[0]["score"] < 0.3
        assert Memory.objects.get(pk=cold.pk).tier == "cold"

    def test_reading_it_by_id_makes_it_hot(self, team, api, cold):
        tiers.memories_retier(team=team)
        body = ok_data(api.get(f"/memories/{cold.pk}"))
        assert body["tier"] == "hot"
        memory = Memory.objects.get(pk=cold.pk)
        assert memory.tier == "hot" and memory.access_count == 0  # not a recall
        assert cold.pk in search_ids(api, "ThinkPad laptop")

    def test_the_list_filters_on_tier(self, team, api, cold):
        tiers.memories_retier(team=team)
        filters = json.dumps({"tier": "cold"})
        items = ok_data(api.get(f"/memories?filters={filters}"))["items"]
        assert [m["id"] for m in items] == [cold.pk]
        bad = json.dumps({"tier": 3})
        assert error_code(api.get(f"/memories?filters={bad}")) == "VALIDATION_ERROR"

    def test_a_cold_shared_memory_only_with_include_cold(self, team, api, cold):
        MemoryShare.objects.create(memory=cold, team=team, agent_id="writer", permission="read")
        tiers.memories_retier(team=team)
        body = {"query": "ThinkPad laptop", "include_shared": True}
        assert cold.pk not in search_ids(api, agent="writer", **body)
        assert cold.pk in search_ids(api, agent="writer", include_cold=True, **body)

    def test_another_team_never_sees_or_wakes_it(self, team, api, other_api, cold):
        tiers.memories_retier(team=team)
        for body in (
            {"query": "ThinkPad laptop", "include_cold": True, "min_score": 0},
            {"query": "", "include_cold": True},
        ):
            hits = ok_data(
                other_api.post("/memories/personal/search", {"agent_id": "researcher", **body})
            )
            assert hits == []
        assert error_code(other_api.get(f"/memories/{cold.pk}")) == "NOT_FOUND"
        assert Memory.objects.get(pk=cold.pk).tier == "cold"


def test_writing_a_cold_memory_again_brings_it_back(team, api):
    memory = MemoryFactory(team=team, content="The user's first car was a red Volvo 240.")
    idle(memory, 300)
    tiers.memories_retier(team=team)
    data = ok_data(
        api.post(
            "/memories/personal",
            {"agent_id": "researcher", "content": "The user's first car was a red Volvo 240."},
        )
    )
    assert data["id"] == memory.pk and data["dedup_skipped"] is True and data["tier"] == "hot"
    assert memory.pk in search_ids(api, "first car Volvo")


class TestConsole:
    def test_the_dashboard_counts_tiers_and_the_list_filters_on_them(self, team, other_team):
        from .console_helpers import member_client

        hot = MemoryFactory(team=team, content="the user deploys on Fridays")
        cold = MemoryFactory(team=team, content="the user liked a cafe in 2019")
        idle(cold, 300)
        theirs = MemoryFactory(team=other_team, content="another team's old note")
        idle(theirs, 300)
        tiers.memories_retier()
        lead = member_client(team, "lead_tiers", "lead")
        page = lead.get(f"/review/{team.id}/dashboard/").content.decode()
        tiles = page.split('id="total-tiers"')[1].split("</li>")[0]
        assert "<strong>1</strong> hot" in tiles and "<strong>1</strong> cold" in tiles
        assert "<strong>0</strong> warm" in tiles
        listed = lead.get(f"/review/{team.id}/memories/?tier=cold").content.decode()
        assert f'data-id="{cold.pk}"' in listed and f'data-id="{hot.pk}"' not in listed
        assert f'data-id="{theirs.pk}"' not in listed
        # The console's search finds cold memories (a lead reviews everything) and leaves them
        # cold: reading is not an agent's recall.
        found = lead.get(f"/review/{team.id}/memories/?q=cafe+2019").content.decode()
        assert f'data-id="{cold.pk}"' in found
        assert Memory.objects.get(pk=cold.pk).tier == "cold"
        assert lead.get(f"/review/{team.id}/memories/?tier=lukewarm").status_code == 200
        # The detail page says why it is cold.
        detail = lead.get(f"/review/{team.id}/memories/{cold.pk}/").content.decode()
        assert ">cold: idle</span>" in detail


def test_the_command_runs_the_pass(team, other_team):
    from io import StringIO

    from django.core.management import CommandError, call_command

    old = MemoryFactory(team=team, content="an old note")
    idle(old, 300)
    out = StringIO()
    call_command("retier_memories", "--team", team.id, stdout=out)
    assert out.getvalue().strip() == "examined 1 memories; moves: hot->cold: 1"
    with pytest.raises(CommandError):
        call_command("retier_memories", "--team", "nope", stdout=StringIO())


def _direct_reference(rows, qvec, qtokens, mode, dense_weight, query_cjk=False):
    """_direct_candidates as first written (row by row, every content tokenised): the chunked
    version that reads stored tokens must score every row the same."""
    import numpy as np
    from django.conf import settings as dj

    from memories.retrieval import gloss
    from memories.retrieval.embeddings import from_bytes
    from memories.retrieval.scoring import bridge, fuse
    from memories.retrieval.search import Candidate
    from memories.retrieval.text import is_cjk, tokenize

    embedder = get_embedder()
    items = list(rows.values_list("id", "content", "embedding", "embedding_model"))
    dense_all = np.zeros(len(items), dtype=np.float32)
    cjk = np.array([is_cjk(c) for _, c, _, _ in items], dtype=bool)
    if qvec is not None:
        usable = [
            i
            for i, (_, _, emb, model) in enumerate(items)
            if emb and model == embedder.model_name and len(emb) == qvec.shape[0] * 4
        ]
        if usable:
            raw = np.vstack([from_bytes(items[i][2]) for i in usable]) @ qvec.astype(np.float32)
            other = cjk[np.array(usable)] != query_cjk
            dense_all[np.array(usable)] = np.where(
                other, embedder.cross_score(raw, query_cjk=query_cjk), embedder.score(raw)
            )
    out = []
    qset = set(qtokens)
    words = gloss.alternatives(qtokens) if qtokens else []
    weight = dj.SEARCH_XLING_LEXICAL_WEIGHT
    for i, (mid, content, _, _) in enumerate(items):
        dense = float(dense_all[i])
        held = set(tokenize(content)) if qset else set()
        lexical = len(qset & held) / len(qset) if qset else 0.0
        score = (
            dense
            if mode == "vector"
            else lexical
            if mode == "keyword"
            else float(fuse(np.array([dense]), np.array([lexical]), dense_weight)[0])
        )
        rank = score
        if mode == "hybrid" and bool(cjk[i]) != query_cjk:
            across = order = dense
            if weight > 0 and words and qvec is not None:
                share = sum(1 for terms in words if terms & held) / len(words)
                kept = dj.SEARCH_XLING_DENSE_WEIGHT
                order = float(bridge(np.array([dense]), np.array([share]), weight)[0])
                if lexical == 0:  # no query word as written: the embedding's share only
                    score = float(fuse(np.array([kept * dense]), np.zeros(1), dense_weight)[0])
                across = float(bridge(np.array([dense]), np.array([share]), weight, kept)[0])
            score = max(score, across)
            rank = max(rank, order)
        if score > 0:
            out.append(Candidate(mid, score, dense, lexical, rank))
    return out


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
@pytest.mark.parametrize("text", ["ThinkPad laptop for work", "用户的笔记本电脑", "Volvo 240"])
def test_cold_rows_are_scored_as_row_by_row_in_chunks(team, monkeypatch, mode, text):
    """include_cold scores cold rows from the database in chunks, reading their stored tokens
    (docs/benchmarks.md, "Tiers"): the same candidates and scores as tokenising each row."""
    from django.conf import settings as dj

    from memories.retrieval import search
    from memories.retrieval.embeddings import embed_query
    from memories.retrieval.text import is_cjk, tokenize

    contents = [
        "The user works on a ThinkPad X1 laptop.",
        "用户的笔记本电脑是 ThinkPad。",
        "The user's first car was a red Volvo 240.",
        "Müller prefers a laptop stand at work.",
        "用户喜欢喝绿茶。",
        "Nothing about computers here at all.",
    ]
    memories = [MemoryFactory(team=team, content=c) for c in contents]
    # One row without stored tokens (written before they existed), one from another tokenizer
    # version, one with another model's vector: each is read as the row-by-row code reads it.
    Memory.objects.filter(pk=memories[0].pk).update(search_tokens="")
    Memory.objects.filter(pk=memories[1].pk).update(search_tokens="t0.stale|laptop")
    Memory.objects.filter(pk=memories[3].pk).update(embedding_model="another-model")
    monkeypatch.setattr(search, "DIRECT_CHUNK", 2)
    rows = Memory.objects.filter(team=team).order_by("id")
    qvec = embed_query(text) if mode != "keyword" else None
    args = (qvec, tokenize(text), mode, dj.SEARCH_DENSE_WEIGHT, is_cjk(text))
    got = search._direct_candidates(rows, *args)
    want = _direct_reference(rows, *args)
    assert [c.memory_id for c in got] == [c.memory_id for c in want]
    # Equal up to float32 rounding: BLAS sums a chunk's matrix product in its own order.
    for mine, theirs in zip(got, want, strict=True):
        assert (mine.score, mine.dense, mine.lexical, mine.rank) == pytest.approx(
            (theirs.score, theirs.dense, theirs.lexical, theirs.rank), abs=1e-6
        )
    assert got  # the queries match something


class TestDeliberateMoves:
    """The tiering pass only follows idleness: a demotion made on purpose (consolidation, the
    cleanup ladder) stays until an agent asks for the memory, and a pin or an importance that
    makes a memory hot acts at once (docs/lifecycle.md, "Tiers")."""

    def test_consolidated_fragments_stay_cold_through_the_pass(self, team, api):
        from .test_consolidate import FRAGMENTS, _remember

        fragments = _remember(team, FRAGMENTS)
        data = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))
        assert data["count"] == 1
        # Fresh fragments: by idleness alone the rule calls them hot.
        tiers.memories_retier(team=team)
        for m in fragments:
            m.refresh_from_db()
            assert m.tier == "cold"
        hits = search_ids(api, "short answers", min_score=0)
        assert not {m.pk for m in fragments} & set(hits)

    def test_a_memory_cleanup_cooled_stays_cold_and_reaches_the_trash(self, team):
        from lifecycle.services.operations import cleanup

        # Unimportant and idle for 100 days (a cleanup candidate), but recalled three times
        # before: retention ~0.28, which the rule alone calls warm.
        memory = MemoryFactory(
            team=team, content="the user once asked about a font", importance=0.1
        )
        idle(memory, 100, access_count=3)
        result, _, _ = cleanup(team=team)
        assert result.cooled == [memory.pk]
        tiers.memories_retier(team=team)
        memory.refresh_from_db()
        assert memory.tier == "cold"
        # After the grace period, the next cleanup moves it to the trash.
        Memory.objects.filter(pk=memory.pk).update(
            tier_changed_at=timezone.now() - timedelta(days=8)
        )
        tiers.memories_retier(team=team)
        result, _, _ = cleanup(team=team)
        assert result.trashed == [memory.pk]

    @pytest.mark.parametrize("batch", [False, True], ids=["memory_update", "memories_update"])
    def test_pinning_or_weighting_a_cold_memory_makes_it_hot_at_once(self, team, api, batch):
        pinned = MemoryFactory(team=team, content="The user's first laptop was a ThinkPad X220.")
        weighted = MemoryFactory(team=team, content="The user's first phone was a Nokia 3310.")
        idle(pinned, 300)
        idle(weighted, 300)
        tiers.memories_retier(team=team)
        assert not {pinned.pk, weighted.pk} & set(search_ids(api, "first laptop phone"))
        before = IndexChange.objects.order_by("-id").values_list("id", flat=True).first() or 0
        from memories.services import Actor, MemoryAttributes, memories_update, memory_update

        if batch:  # an overwrite import's way
            memories_update(
                team=team,
                changes=[
                    (pinned.pk, MemoryAttributes(pinned=True)),
                    (weighted.pk, MemoryAttributes(importance=0.9)),
                ],
                actor=Actor(),
            )
        else:
            memory_update(memory=pinned, actor=Actor(), pinned=True)
            memory_update(memory=weighted, actor=Actor(), importance=0.9)
        got = dict(Memory.objects.filter(pk__in=[pinned.pk, weighted.pk]).values_list("pk", "tier"))
        assert got == {pinned.pk: "hot", weighted.pk: "hot"}
        # Logged for every process's index, and found by everyday search again.
        changed = IndexChange.objects.filter(id__gt=before).values_list("memory_id", flat=True)
        assert set(changed) == {pinned.pk, weighted.pk}
        assert {pinned.pk, weighted.pk} <= set(search_ids(api, "first laptop phone", min_score=0))

    def test_an_edit_that_keeps_a_memory_unimportant_leaves_its_tier(self, team):
        memory = MemoryFactory(team=team, content="The user's first bike was blue.")
        idle(memory, 300)
        tiers.memories_retier(team=team)
        from memories.services import Actor, memory_update

        memory_update(memory=memory, actor=Actor(), importance=0.5, category="history")
        memory.refresh_from_db()
        assert memory.tier == "cold"


class TestRewarm:
    """`retier_memories --rewarm`: after the cold threshold is lowered, the memories the pass
    cooled for idleness come back; deliberate demotions stay (docs/lifecycle.md, "Tiers")."""

    def _idle_cold(self, team, content):
        # Importance 0.5, never recalled, idle 110 days: retention ~0.087, cold under 0.1.
        memory = MemoryFactory(team=team, content=content, importance=0.5)
        idle(memory, 110)
        tiers.memories_retier(team=team)
        memory.refresh_from_db()
        assert (memory.tier, memory.cold_reason) == ("cold", "idle")
        return memory

    def test_what_the_pass_cooled_comes_back_when_the_rule_no_longer_calls_it_cold(
        self, settings, team, other_team, api
    ):
        memory = self._idle_cold(team, "The user's first car was a green Volvo.")
        theirs = self._idle_cold(other_team, "The user's first car was a green Volvo.")
        assert memory.pk not in search_ids(api, "first car Volvo")
        settings.TIER_COLD_RETENTION = 0.05
        assert tiers.memories_retier(team=team).moves == {}  # the hourly pass never warms
        before = IndexChange.objects.order_by("-id").values_list("id", flat=True).first() or 0
        assert tiers.memories_rewarm(team=team).moves == {"cold->warm": 1}
        memory.refresh_from_db()
        assert (memory.tier, memory.cold_reason) == ("warm", "")
        changed = IndexChange.objects.filter(id__gt=before).values_list("memory_id", flat=True)
        assert list(changed) == [memory.pk]
        assert memory.pk in search_ids(api, "first car Volvo")
        assert tiers.memories_rewarm(team=team).moves == {}  # idempotent
        assert Memory.objects.get(pk=theirs.pk).tier == "cold"  # another team's: not asked

    def test_cleanup_and_consolidation_demotions_stay_cold(self, settings, team, api):
        from lifecycle.services.operations import cleanup

        from .test_consolidate import FRAGMENTS, _remember

        candidate = MemoryFactory(team=team, content="the user once asked about a font")
        idle(candidate, 100, importance=0.1, access_count=3)
        result, _, _ = cleanup(team=team)
        assert result.cooled == [candidate.pk]
        fragments = _remember(team, FRAGMENTS)
        assert ok_data(api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))["count"]
        reasons = dict(Memory.objects.filter(tier="cold").values_list("pk", "cold_reason"))
        assert reasons == {candidate.pk: "cleanup"} | {m.pk: "consolidated" for m in fragments}
        settings.TIER_COLD_RETENTION = 0.0  # nothing is cold by the rule any more
        assert tiers.memories_rewarm(team=team).moves == {}
        assert Memory.objects.filter(tier="cold").count() == 1 + len(fragments)

    def test_a_memory_of_unknown_reason_comes_back_unless_it_is_a_fragment(self, settings, team):
        # Cooled before reasons were recorded: "" (the migration marks consolidated fragments).
        plain = MemoryFactory(team=team, content="The office moved to the fifth floor.")
        fragment = MemoryFactory(
            team=team, content="The office plants need water.", metadata={"consolidated_into": 1}
        )
        for m in (plain, fragment):
            idle(m, 200, tier="cold", cold_reason="")
        settings.TIER_COLD_RETENTION = 0.0
        assert tiers.memories_rewarm(team=team).moves == {"cold->warm": 1}
        assert Memory.objects.get(pk=plain.pk).tier == "warm"
        assert Memory.objects.get(pk=fragment.pk).tier == "cold"

    def test_an_access_clears_the_reason(self, team, api):
        memory = self._idle_cold(team, "The user's first bike was a red Peugeot.")
        assert memory.pk in search_ids(api, "first bike Peugeot", include_cold=True)
        memory.refresh_from_db()
        assert (memory.tier, memory.cold_reason) == ("hot", "")

    def test_the_command_rewarms_on_request_only(self, settings, team):
        from io import StringIO

        from django.core.management import call_command

        memory = self._idle_cold(team, "The user's first flat was in Leeds.")
        settings.TIER_COLD_RETENTION = 0.05
        out = StringIO()
        call_command("retier_memories", "--team", team.id, stdout=out)
        assert "rewarm" not in out.getvalue()
        assert Memory.objects.get(pk=memory.pk).tier == "cold"
        call_command("retier_memories", "--team", team.id, "--rewarm", stdout=out)
        assert "rewarm: examined 1 cold memories; moves: cold->warm: 1" in out.getvalue()
        assert Memory.objects.get(pk=memory.pk).tier == "warm"
