"""POST /memories/ingest: a conversation archived as L0 and each fact decided ADD / UPDATE / NOOP
against the agent's memories; async as a job; Idempotency-Key honoured."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from lifecycle.models import ArchiveReason, JobRun, WorkingArchive
from memories.models import Memory
from tenants.models import IdempotentRequest
from tenants.services import api_key_issue

from .factories import AgentFactory
from .helpers import SignedClient, error_code, ok_data

pytestmark = pytest.mark.django_db(transaction=True)

CONVERSATION = [
    {
        "role": "user",
        "content": "I live in Singapore and trade crypto on Binance.",
        "name": "alice",
    },
    {"role": "assistant", "content": "Noted. I will keep answers about Binance short."},
    {"role": "user", "content": "My leverage limit is 3x on every account."},
]


def _ingest(api: SignedClient, messages, *, agent_id="researcher", **extra):
    return api.post("/memories/ingest", {"agent_id": agent_id, "messages": messages, **extra})


def test_messages_are_archived_with_role_time_and_run_and_facts_are_added(api):
    messages = [dict(CONVERSATION[0], at="2026-11-30T09:00:00Z"), *CONVERSATION[1:]]
    data = ok_data(_ingest(api, messages, run_id="session-1"))
    assert data["archived"] == 3
    decisions = [f["decision"] for f in data["facts"]]
    assert decisions and set(decisions) == {"ADD"}
    contents = [f["memory"]["content"] for f in data["facts"]]
    # Facts come from the user's messages only (the default), not the assistant's reply.
    assert any("Singapore" in c for c in contents) and any("3x" in c for c in contents)
    assert not any("Noted" in c for c in contents)
    for f in data["facts"]:
        assert f["memory"]["run_id"] == "session-1"
        assert f["memory"]["agent_id"] == "researcher"
        assert f["memory"]["metadata"]["source"] == "ingest"
    rows = list(WorkingArchive.objects.filter(team_id="team_a").order_by("id"))
    assert [(r.role, r.name, r.run_id, r.reason) for r in rows] == [
        ("user", "alice", "session-1", ArchiveReason.INGESTED),
        ("assistant", "", "session-1", ArchiveReason.INGESTED),
        ("user", "", "session-1", ArchiveReason.INGESTED),
    ]
    assert rows[0].item_created_at.isoformat().startswith("2026-11-30T09:00:00")
    # Traceable both ways: the fact's sources are the archived messages it came from.
    fact = next(f for f in data["facts"] if "3x" in f["memory"]["content"])
    sources = ok_data(api.get(f"/lifecycle/sources/{fact['memory']['id']}"))
    assert [s["content"] for s in sources["source_items"]] == [CONVERSATION[2]["content"]]


def test_a_repeat_is_noop_and_a_contradiction_supersedes(api):
    first = ok_data(_ingest(api, [{"role": "user", "content": "My leverage limit is 3x."}]))
    assert [f["decision"] for f in first["facts"]] == ["ADD"]
    old_id = first["facts"][0]["memory"]["id"]

    again = ok_data(_ingest(api, [{"role": "user", "content": "My leverage limit is 3x."}]))
    assert [f["decision"] for f in again["facts"]] == ["NOOP"]
    assert again["facts"][0]["memory"]["id"] == old_id

    changed = ok_data(_ingest(api, [{"role": "user", "content": "My leverage limit is 5x."}]))
    assert [f["decision"] for f in changed["facts"]] == ["UPDATE"]
    assert changed["facts"][0]["supersedes"] == old_id
    new_id = changed["facts"][0]["memory"]["id"]
    # Never a silent delete: the old memory stays, replaced, in the new one's history.
    assert Memory.objects.get(pk=old_id).superseded_by_id == new_id
    history = ok_data(api.get(f"/memories/{new_id}/history"))
    assert history["supersedes"] == [old_id]
    hits = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "researcher", "query": "leverage limit", "min_score": 0},
        )
    )
    assert [h["id"] for h in hits] == [new_id]


def test_infer_false_archives_only(api):
    data = ok_data(_ingest(api, CONVERSATION, infer=False))
    assert data == {"archived": 3, "facts": []}
    assert not Memory.objects.filter(team_id="team_a").exists()


def test_fact_roles_chooses_whose_messages_facts_come_from(api):
    data = ok_data(_ingest(api, CONVERSATION, fact_roles=["assistant"]))
    contents = [f["memory"]["content"] for f in data["facts"]]
    assert contents and all("Binance" in c for c in contents)


def test_the_offline_engine_is_deterministic(api, other_team):
    other = api_key_issue(team=other_team)
    other_api = SignedClient(Client(), other.key_id, other.secret)
    a = ok_data(_ingest(api, CONVERSATION))
    b = ok_data(_ingest(other_api, CONVERSATION))

    def shape(data):
        return [
            (f["decision"], f["memory"]["content"], f["memory"]["category"]) for f in data["facts"]
        ]

    assert shape(a) == shape(b)


def test_a_retry_with_the_same_idempotency_key_does_not_write_twice(api):
    body = {"agent_id": "researcher", "messages": CONVERSATION, "run_id": "r1"}
    first = api.post("/memories/ingest", body, headers={"Idempotency-Key": "req-42"})
    assert first.status_code == 200
    memories = Memory.objects.filter(team_id="team_a").count()
    archived = WorkingArchive.objects.filter(team_id="team_a").count()
    retry = api.post("/memories/ingest", body, headers={"Idempotency-Key": "req-42"})
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json()["data"] == first.json()["data"]
    assert Memory.objects.filter(team_id="team_a").count() == memories
    assert WorkingArchive.objects.filter(team_id="team_a").count() == archived
    # The same key with another body is refused, not replayed.
    other = api.post(
        "/memories/ingest",
        {**body, "run_id": "r2"},
        headers={"Idempotency-Key": "req-42"},
    )
    assert other.status_code == 409 and error_code(other) == "CONFLICT"
    # Without a key, the same body is a new request (its facts are NOOP, its messages archived).
    plain = ok_data(api.post("/memories/ingest", body))
    assert {f["decision"] for f in plain["facts"]} == {"NOOP"}
    assert WorkingArchive.objects.filter(team_id="team_a").count() == 2 * archived


def test_an_idempotency_key_expires_after_its_ttl(api, settings):
    body = {"agent_id": "researcher", "messages": CONVERSATION[:1], "infer": False}
    assert api.post("/memories/ingest", body, headers={"Idempotency-Key": "k"}).status_code == 200
    IdempotentRequest.objects.update(created_at="2020-01-01T00:00:00Z")
    again = api.post("/memories/ingest", body, headers={"Idempotency-Key": "k"})
    assert again.status_code == 200 and "Idempotent-Replayed" not in again.headers
    assert WorkingArchive.objects.filter(team_id="team_a").count() == 2


def test_beat_prunes_expired_idempotency_keys(api):
    from lifecycle.tasks import prune_idempotency_keys_task

    body = {"agent_id": "researcher", "messages": CONVERSATION[:1], "infer": False}
    api.post("/memories/ingest", body, headers={"Idempotency-Key": "old"})
    api.post("/memories/ingest", body, headers={"Idempotency-Key": "new"})
    IdempotentRequest.objects.filter(key="old").update(created_at="2020-01-01T00:00:00Z")
    assert prune_idempotency_keys_task() == 1
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new"]


def test_idempotency_keys_are_per_team(api, other_team):
    other = api_key_issue(team=other_team)
    other_api = SignedClient(Client(), other.key_id, other.secret)
    body = {"agent_id": "researcher", "messages": CONVERSATION[:1], "infer": False}
    assert api.post("/memories/ingest", body, headers={"Idempotency-Key": "k"}).status_code == 200
    # Another team's use of the same key is its own request: not replayed, nothing revealed.
    theirs = other_api.post("/memories/ingest", body, headers={"Idempotency-Key": "k"})
    assert theirs.status_code == 200 and "Idempotent-Replayed" not in theirs.headers
    assert WorkingArchive.objects.filter(team_id="team_b").count() == 1


def test_async_returns_202_and_the_result_is_on_the_job(api):
    body = {"agent_id": "researcher", "messages": CONVERSATION, "async": True}
    response = api.post("/memories/ingest", body, headers={"Idempotency-Key": "async-1"})
    assert response.status_code == 202
    job_id = response.json()["data"]["job_id"]
    job = ok_data(api.get(f"/jobs/{job_id}"))  # LIFECYCLE_INLINE in tests: already run
    assert job["kind"] == "ingest" and job["status"] == "succeeded"
    assert job["result"]["archived"] == 3
    assert {f["decision"] for f in job["result"]["facts"]} == {"ADD"}
    assert job["counts"] == {"archived": 3}
    # The messages stayed on the job only until it ran: they are in the archive now.
    assert JobRun.objects.get(pk=job_id).params["messages"] == 3
    # A retry of the async request answers the same job, and queues nothing.
    retry = api.post("/memories/ingest", body, headers={"Idempotency-Key": "async-1"})
    assert retry.status_code == 202 and retry.json()["data"] == {"job_id": job_id}
    assert JobRun.objects.filter(kind="ingest").count() == 1


def test_a_retried_ingest_job_whose_first_run_committed_replays_it(api):
    from lifecycle.services import jobs, pipeline

    response = api.post(
        "/memories/ingest", {"agent_id": "researcher", "messages": CONVERSATION, "async": True}
    )
    first = JobRun.objects.get(pk=response.json()["data"]["job_id"])
    memories = Memory.objects.count()
    # Finished, the job keeps how many messages it was given, not them (they are archived).
    assert first.params["messages"] == len(CONVERSATION)
    # The first run committed, then (say) its worker died before recording it: the retry, given
    # the same messages, must not ingest again.
    given = [
        {"role": m["role"], "content": m["content"], "at": None, "name": m.get("name", "")}
        for m in CONVERSATION
    ]
    retry = jobs.job_start(
        team=first.team,
        kind="ingest",
        trigger="api",
        agent_id="researcher",
        params={**first.params, "messages": given},
    )
    JobRun.objects.filter(pk=retry.pk).update(retry_of=first)
    retry.refresh_from_db()
    result = pipeline.job_run(job=retry)
    assert Memory.objects.count() == memories
    assert WorkingArchive.objects.filter(team_id="team_a").count() == 3
    retry.refresh_from_db()
    assert retry.result == first.result and type(result).__name__ == "JobReplayed"


def test_malformed_llm_output_is_skipped(api, fake_llm):
    fake_llm.chat_replies.append(
        json.dumps(
            {
                "facts": [
                    {
                        "content": "The user trades on Binance.",
                        "importance": 0.8,
                        "category": "fact",
                        "source_indexes": [0],
                    },
                    {"content": 42},
                    None,
                    ["a", "list"],
                    {"importance": 0.5},
                ]
            }
        )
    )
    data = ok_data(_ingest(api, CONVERSATION))
    assert [f["memory"]["content"] for f in data["facts"]] == ["The user trades on Binance."]
    fake_llm.chat_replies.append("this is not JSON at all")
    data = ok_data(_ingest(api, CONVERSATION[2:]))
    assert data == {"archived": 1, "facts": []}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "agent_id"),
        ({"agent_id": "researcher", "messages": []}, "messages"),
        ({"agent_id": "researcher", "messages": [{"role": "robot", "content": "x"}]}, "messages"),
        ({"agent_id": "researcher", "messages": [{"role": "user", "content": "  "}]}, "messages"),
        ({"agent_id": "researcher", "messages": [{"role": "user"}]}, "messages"),
        (
            {
                "agent_id": "researcher",
                "messages": [{"role": "user", "content": "x", "at": "soon"}],
            },
            "messages",
        ),
        ({"agent_id": "researcher", "messages": "hello"}, "messages"),
        (
            {"agent_id": "researcher", "messages": [{"role": "user", "content": "x"}] * 201},
            "messages",
        ),
        ({"agent_id": "researcher", "messages": CONVERSATION, "run_id": "a b"}, "run_id"),
        ({"agent_id": "researcher", "messages": CONVERSATION, "async": "yes"}, "async"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(api, body, field):
    response = api.post("/memories/ingest", body)
    assert response.status_code == 400 and error_code(response) == "VALIDATION_ERROR"
    assert any(name.split(".")[0] == field for name in response.json()["details"])
    assert not WorkingArchive.objects.exists() and not Memory.objects.exists()


def test_a_bad_idempotency_key_is_a_400(api):
    body = {"agent_id": "researcher", "messages": CONVERSATION[:1]}
    response = api.post("/memories/ingest", body, headers={"Idempotency-Key": "x" * 201})
    assert response.status_code == 400 and error_code(response) == "VALIDATION_ERROR"


def test_an_agent_key_ingests_only_for_itself(team, agent, agent_api):
    AgentFactory(team=team, agent_id="trader")
    refused = _ingest(agent_api, CONVERSATION, agent_id="trader")
    assert refused.status_code == 403
    assert not WorkingArchive.objects.exists()
    assert ok_data(_ingest(agent_api, CONVERSATION))["archived"] == 3


def test_another_teams_job_is_404_like_a_missing_one(api, other_team, team, agent, agent_api):
    other = api_key_issue(team=other_team)
    other_api = SignedClient(Client(), other.key_id, other.secret)
    response = api.post(
        "/memories/ingest",
        {"agent_id": "researcher", "messages": CONVERSATION, "async": True},
    )
    job_id = response.json()["data"]["job_id"]
    theirs = other_api.get(f"/jobs/{job_id}")
    missing = other_api.get("/jobs/999999")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    # An agent key sees its own agent's jobs only.
    AgentFactory(team=team, agent_id="trader")
    trader_job = api.post(
        "/memories/ingest", {"agent_id": "trader", "messages": CONVERSATION, "async": True}
    ).json()["data"]["job_id"]
    assert agent_api.get(f"/jobs/{job_id}").status_code == 200
    assert agent_api.get(f"/jobs/{trader_job}").status_code == 404


def test_run_id_filters_search_and_list(api):
    ok_data(_ingest(api, [{"role": "user", "content": "I trade BTC futures."}], run_id="a"))
    ok_data(_ingest(api, [{"role": "user", "content": "I trade ETH options."}], run_id="b"))
    api.post("/memories/personal", {"agent_id": "researcher", "content": "I trade gold."})
    hits = ok_data(
        api.post(
            "/memories/personal/search",
            {"agent_id": "researcher", "query": "trade", "min_score": 0, "run_id": "b"},
        )
    )
    assert [h["content"] for h in hits] == ["I trade ETH options"]
    page = ok_data(api.get("/memories?run_id=a"))
    assert [m["content"] for m in page["items"]] == ["I trade BTC futures"]
    both = ok_data(api.get('/memories?filters={"run_id":{"$in":["a","b"]}}'))
    assert sorted(m["content"] for m in both["items"]) == [
        "I trade BTC futures",
        "I trade ETH options",
    ]
    bad = api.get('/memories?filters={"run_id":{"$like":"a"}}')
    assert bad.status_code == 400 and "$like" in bad.json()["error"]
    assert api.get("/memories?filters=nope").status_code == 400
    assert api.get("/memories?run_id=a%20b").status_code == 400
