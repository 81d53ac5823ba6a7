"""POST /lifecycle/consolidate: fragments about one thing become one stable fact; the fragments
go cold (kept, traceable, found with include_cold), never deleted."""

from __future__ import annotations

import json

import pytest

from lifecycle.models import JobRun
from memories.models import Memory

from .factories import MemoryFactory
from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

FRAGMENTS = [
    "The user wants short answers without long explanations.",
    "The user asked again for shorter answers, no long explanations.",
    "The user prefers short answers and dislikes long explanations.",
]


def _remember(team, texts, **extra):
    return [
        MemoryFactory(team=team, agent_id="researcher", content=t, category="preference", **extra)
        for t in texts
    ]


def test_fragments_become_one_fact_and_stay_traceable(team, api):
    fragments = _remember(team, FRAGMENTS)
    other = _remember(team, ["The user drinks green tea every morning."])[0]
    data = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))
    assert data["count"] == 1 and data["examined"] == 4
    (done,) = data["consolidated"]
    assert sorted(done["fragments"]) == sorted(m.pk for m in fragments)
    fact = Memory.objects.get(pk=done["memory"]["id"])
    assert fact.metadata["source"] == "consolidation"
    assert sorted(fact.metadata["consolidated_from"]) == sorted(m.pk for m in fragments)
    assert "short answers" in fact.content and fact.category == "preference"
    # Nothing deleted: each fragment is cold and points at the fact, with a revision.
    for m in fragments:
        m.refresh_from_db()
        assert (m.tier, m.metadata["consolidated_into"]) == ("cold", fact.pk)
        assert m.superseded_by_id is None
        history = ok_data(api.get(f"/memories/{m.pk}/history"))["revisions"]
        assert history[-1]["after"]["metadata"]["consolidated_into"] == fact.pk
    other.refresh_from_db()
    assert other.tier == "hot" and "consolidated_into" not in other.metadata
    # Search now finds the one fact, not three fragments.
    hits = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "researcher", "query": "short answers", "min_score": 0},
        )
    )
    assert fact.pk in [h["id"] for h in hits]
    assert not {m.pk for m in fragments} & {h["id"] for h in hits}
    # The fragments are still found when asked for: an include_cold search.
    cold_hits = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "researcher", "query": "short answers", "include_cold": True},
        )
    )
    assert {m.pk for m in fragments} <= {h["id"] for h in cold_hits}
    job = JobRun.objects.get(kind="consolidate")
    assert (job.status, job.counts["count"]) == ("succeeded", 1)
    # Run again: nothing left to consolidate.
    assert ok_data(api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))["count"] == 0


def test_too_few_fragments_pinned_memories_and_episodes_are_left_alone(team, api):
    _remember(team, FRAGMENTS[:2])
    _remember(team, FRAGMENTS[2:], pinned=True)
    assert ok_data(api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))["count"] == 0
    assert not Memory.objects.filter(tier="cold").exists()


def test_the_llm_engine_writes_the_fact(team, api, fake_llm):
    fragments = _remember(team, FRAGMENTS)
    fake_llm.chat_replies.append(
        json.dumps(
            {
                "summaries": [
                    {
                        "content": "The user wants short answers.",
                        "importance": 0.9,
                        "source_indexes": [0, 1, 2],
                    }
                ]
            }
        )
    )
    data = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))
    assert data["consolidated"][0]["memory"]["content"] == "The user wants short answers."
    assert data["consolidated"][0]["memory"]["importance"] == 0.9
    assert sorted(data["consolidated"][0]["fragments"]) == sorted(m.pk for m in fragments)


def test_consolidation_is_the_agents_own(team, agent, agent_api, other_api):
    from .factories import AgentFactory

    AgentFactory(team=team, agent_id="trader")
    _remember(team, FRAGMENTS)
    assert agent_api.post("/lifecycle/consolidate", {"agent_id": "trader"}).status_code == 403
    # Another team's agent of the same id has no memories here: nothing to consolidate.
    assert (
        ok_data(other_api.post("/lifecycle/consolidate", {"agent_id": "researcher"}))["count"] == 0
    )
    assert not Memory.objects.filter(tier="cold").exists()
    assert error_code(
        agent_api.post("/lifecycle/consolidate", {"agent_id": "researcher", "min_fragments": 1})
    ) == ("VALIDATION_ERROR")


@pytest.mark.django_db(transaction=True)
def test_a_team_setting_consolidates_after_each_fact_extraction(team, api):
    from .test_lifecycle_api import working

    bad = api.post("/lifecycle/auto-config", {"consolidate_min_fragments": 1})
    assert error_code(bad) == "VALIDATION_ERROR"
    api.post(
        "/lifecycle/auto-config",
        {
            "compress_every_n": 0,
            "scenario_min_interval_seconds": 0,
            "persona_every_n": 0,
            "consolidate_min_fragments": 3,
        },
    )
    assert ok_data(api.get("/lifecycle/auto-config"))["consolidate_min_fragments"] == 3
    # Fragments the agent already holds; a fact extraction of something else triggers the step.
    _remember(team, FRAGMENTS)
    working(api, "researcher", ["The user drinks green tea every morning."])
    ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "researcher"}))
    job = JobRun.objects.get(kind="consolidate")
    assert (job.trigger, job.status, job.params) == ("auto", "succeeded", {"min_fragments": 3})
    fact = Memory.objects.get(metadata__source="consolidation")
    assert len(fact.metadata["consolidated_from"]) == 3
    assert Memory.objects.filter(metadata__consolidated_into=fact.pk, tier="cold").count() == 3
