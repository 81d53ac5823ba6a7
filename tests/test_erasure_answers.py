"""An erasure reaches the answers kept for retries (`Idempotency-Key`): a memory erased — by a
purge, the trash's erase or expiry, or its agent's deletion — is no longer shown by the answer a
retry of the write that made it gets; a move to the trash, which can be undone, changes nothing.
Another team's answers are never touched."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.models import Memory, TrashedMemory
from memories.purge import trash_empty_expired
from memories.services import _erased_in, _shows_any, answers_forget
from tenants.models import IdempotentRequest

from .factories import AgentFactory
from .helpers import ok_data

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "The vault code is 4711."
KEPT = "The office opens at nine."


def _write(api, content: str, key: str):
    body = {"agent_id": "researcher", "content": content, "enable_dedup": False}
    return api.post("/memories/personal", body, headers={"Idempotency-Key": key})


def _batch(api, key: str):
    body = {
        "items": [
            {"agent_id": "researcher", "content": SECRET, "enable_dedup": False},
            {"agent_id": "researcher", "content": KEPT, "enable_dedup": False},
        ]
    }
    return api.post("/memories/personal/batch", body, headers={"Idempotency-Key": key})


def _stored_text(team_id: str) -> str:
    """Every answer the team's retries would get, as stored."""
    return json.dumps(
        list(IdempotentRequest.objects.filter(team_id=team_id).values_list("body", flat=True)),
        ensure_ascii=False,
    )


def test_a_purged_memory_is_replayed_as_erased_and_not_written_again(team, agent, api):
    first = _write(api, SECRET, "w-1")
    assert first.status_code == 201
    mid = first.json()["data"]["id"]
    assert SECRET in _stored_text(team.id)
    assert api.delete(f"/memories/personal/{mid}?purge=true").status_code == 200
    assert SECRET not in _stored_text(team.id)
    retry = _write(api, SECRET, "w-1")
    assert (retry.status_code, retry.headers["Idempotent-Replayed"]) == (201, "true")
    assert retry.json()["data"] == {"id": mid, "erased": True}
    assert not Memory.objects.filter(team=team).exists()


def test_the_trash_keeps_the_answer_and_its_erase_forgets_one_memory_of_a_batch(team, agent, api):
    results = ok_data(_batch(api, "b-1"))["results"]
    secret_id, kept_id = (r["memory"]["id"] for r in results)
    # To the trash: it can come back, so the answer still shows it.
    assert api.delete(f"/memories/personal/{secret_id}").status_code == 200
    assert ok_data(_batch(api, "b-1"))["results"] == results
    # Erased from the trash: that one memory is gone from the answer, the other stays.
    assert api.delete(f"/memories/trash/{secret_id}").status_code == 200
    replayed = ok_data(_batch(api, "b-1"))["results"]
    assert replayed[0] == {**results[0], "memory": {"id": secret_id, "erased": True}}
    assert replayed[1] == results[1] and replayed[1]["memory"]["id"] == kept_id
    assert SECRET not in _stored_text(team.id) and KEPT in _stored_text(team.id)


def test_the_trashs_expiry_forgets_what_it_empties(team, agent, api, other_api, other_team):
    mid = ok_data(_write(api, SECRET, "w-2"))["id"]
    AgentFactory(team=other_team, agent_id="researcher")
    theirs = _write(other_api, SECRET, "w-2")
    assert theirs.status_code == 201
    assert api.delete(f"/memories/personal/{mid}").status_code == 200
    TrashedMemory.objects.filter(team=team).update(expires_at=timezone.now() - timedelta(days=1))
    assert trash_empty_expired() == 1
    assert ok_data(_write(api, SECRET, "w-2")) == {"id": mid, "erased": True}
    # Another team's answer, of the same text and key, is its own: untouched.
    assert SECRET in _stored_text(other_team.id)
    assert ok_data(_write(other_api, SECRET, "w-2")) == theirs.json()["data"]


def test_an_agents_deletion_forgets_its_memories_and_profile_in_ingest_answers(team, agent, api):
    messages = [
        {"role": "user", "content": "I live in Singapore and trade crypto on Binance."},
        {"role": "user", "content": "My leverage limit is 3x on every account."},
    ]
    body = {"agent_id": "researcher", "messages": messages}
    first = ok_data(api.post("/memories/ingest", body, headers={"Idempotency-Key": "i-1"}))
    assert first["facts"] and first["profile"]
    # An asynchronous ingest's job answers under its own key (a retry of the job replays it).
    later = {
        "agent_id": "researcher",
        "messages": [{"role": "user", "content": "I work as a pilot."}],
    }
    job_id = ok_data(api.post("/memories/ingest", {**later, "async": True}))["job_id"]
    job_answer = IdempotentRequest.objects.get(endpoint="ingest-job", key=str(job_id))
    assert "pilot" in json.dumps(job_answer.body) and job_answer.body.get("profile")
    trashed = ok_data(_write(api, SECRET, "w-3"))["id"]
    assert api.delete(f"/memories/personal/{trashed}").status_code == 200
    assert api.delete(f"/agents/{team.id}/researcher").status_code == 200
    stored = _stored_text(team.id)
    assert "Singapore" not in stored and SECRET not in stored and "pilot" not in stored
    replayed = ok_data(api.post("/memories/ingest", body, headers={"Idempotency-Key": "i-1"}))
    assert "profile" not in replayed
    assert [f["memory"] for f in replayed["facts"]] == [
        {"id": f["memory"]["id"], "erased": True} for f in first["facts"]
    ]
    assert [f["decision"] for f in replayed["facts"]] == [f["decision"] for f in first["facts"]]
    assert ok_data(_write(api, SECRET, "w-3")) == {"id": trashed, "erased": True}
    assert not Memory.objects.filter(team=team).exists()


def test_an_agents_deletion_of_many_memories_asks_for_its_id_and_spares_other_agents(
    team, agent, api
):
    """More memories than the database is asked to look for by id: it looks for the agent's id
    (every answer showing one of its memories holds it), and each such answer is still
    rewritten, another agent's left as it was."""
    AgentFactory(team=team, agent_id="analyst")
    items = [
        {"agent_id": "researcher", "content": f"{SECRET} Copy {i}.", "enable_dedup": False}
        for i in range(40)
    ]
    many = ok_data(
        api.post("/memories/personal/batch", {"items": items}, headers={"Idempotency-Key": "m"})
    )
    one = ok_data(_write(api, SECRET, "w-4"))
    theirs = {"agent_id": "analyst", "content": KEPT, "enable_dedup": False}
    kept = api.post("/memories/personal", theirs, headers={"Idempotency-Key": "a-1"})
    assert kept.status_code == 201
    with CaptureQueriesContext(connection) as queries:
        assert api.delete(f"/agents/{team.id}/researcher").status_code == 200
    # Read now: the next request clears the connection's query log.
    asked = [q["sql"] for q in queries.captured_queries]
    assert "Copy" not in _stored_text(team.id) and SECRET not in _stored_text(team.id)
    replayed = ok_data(
        api.post("/memories/personal/batch", {"items": items}, headers={"Idempotency-Key": "m"})
    )
    assert [r["memory"] for r in replayed["results"]] == [
        {"id": r["memory"]["id"], "erased": True} for r in many["results"]
    ]
    assert ok_data(_write(api, SECRET, "w-4")) == {"id": one["id"], "erased": True}
    again = api.post("/memories/personal", theirs, headers={"Idempotency-Key": "a-1"})
    assert again.json()["data"] == kept.json()["data"]
    # What the database was asked to look for (the ids would be 41 patterns).
    assert any("%researcher%" in sql for sql in asked)


# --- the test on the stored text that spares decoding most answers ----------------------------

# JSON values as answers hold them, ids included: integers (some of the erased ones), and what an
# integer id is not (a float, a boolean, a string of digits).
_IDS = {3, 17, 4711}
_scalars = st.one_of(
    st.sampled_from([3, 17, 4711, -3, 0, 170, 3.0, 17.5, 1e3, True, False, None, "3", "id"]),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.text(max_size=12),
)
_bodies = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(["id", "content", "memory", "facts", "x"]), children),
    ),
    max_leaves=20,
)
# How an answer's JSON may be spaced once stored (json.dumps, compact, indented, escaped).
_DUMPS = [
    {},
    {"separators": (",", ":")},
    {"indent": 2},
    {"ensure_ascii": False},
    {"separators": (" , ", " : ")},
]


@settings(max_examples=1500, deadline=None)
@given(body=_bodies, spacing=st.sampled_from(_DUMPS))
def test_the_text_test_never_skips_an_answer_that_shows_an_erased_memory(body, spacing):
    stored = json.dumps(body, **spacing)
    if _erased_in(json.loads(stored), _IDS) is not None:
        assert _shows_any(stored, _IDS)
        assert any(str(pk) in stored for pk in _IDS)  # what the database filters on first


def test_the_stored_text_is_read_back_from_this_database_and_the_answer_rewritten(team):
    """The text test reads the answer's JSON as this database gives its text back (SQLite's
    text, MariaDB's), not the decoded value: an id it shows is found, ids it does not show
    change nothing."""
    shown = {"results": [{"memory": {"id": 4711, "content": SECRET}}, {"id": 5, "content": KEPT}]}
    for key in ("odd", "many"):
        IdempotentRequest.objects.create(
            team=team,
            endpoint="memories/personal/batch",
            key=key,
            request_hash="0" * 64,
            status_code=200,
            body=shown,
        )
    # 471 and 47 are in the text (the database lets the answer through), but no id of it.
    assert answers_forget(team_id=team.id, memory_ids=[4712, 471, 47]) == 0
    assert answers_forget(team_id=team.id, memory_ids=[4711]) == 2
    # More ids than the database is asked to look for: every answer read, the same outcome.
    IdempotentRequest.objects.filter(key="many").update(body=shown)
    assert answers_forget(team_id=team.id, memory_ids=[4711, *range(10**6, 10**6 + 40)]) == 1
    for key in ("odd", "many"):
        body = IdempotentRequest.objects.get(key=key).body
        assert body["results"] == [{"memory": {"id": 4711, "erased": True}}, shown["results"][1]]


def test_a_batch_erasure_forgets_every_memory_and_reads_the_answers_once(team, agent, api):
    """A batch delete with `purge` of 40 memories: every kept answer stops showing any of them,
    and the kept answers are read once, not once per memory."""
    items = [
        {"agent_id": "researcher", "content": f"{SECRET} Copy {i}.", "enable_dedup": False}
        for i in range(40)
    ]
    many = ok_data(
        api.post("/memories/personal/batch", {"items": items}, headers={"Idempotency-Key": "m"})
    )
    ids = [r["memory"]["id"] for r in many["results"]]
    kept = ok_data(_write(api, KEPT, "w-kept"))
    with CaptureQueriesContext(connection) as queries:
        r = api.post("/memories/personal/batch/delete", {"ids": ids, "purge": True})
    assert ok_data(r)["removed"] == 40
    reads = [q["sql"] for q in queries.captured_queries if "idempotent" in q["sql"].lower()]
    # One read of the kept answers, then one of each that shows an erased memory (here one).
    assert len([sql for sql in reads if sql.lstrip().upper().startswith("SELECT")]) <= 2
    assert "Copy" not in _stored_text(team.id) and KEPT in _stored_text(team.id)
    replayed = ok_data(
        api.post("/memories/personal/batch", {"items": items}, headers={"Idempotency-Key": "m"})
    )
    assert [r["memory"] for r in replayed["results"]] == [{"id": i, "erased": True} for i in ids]
    assert ok_data(_write(api, KEPT, "w-kept")) == kept
    assert not TrashedMemory.objects.filter(team=team).exists()
