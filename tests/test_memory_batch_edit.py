"""Batch update and batch delete (`POST /memories/{personal,team}/batch/update` and
`…/batch/delete`): up to 100 memories in one request, each changed as its own PUT would be
(a revision each, new text re-embedded) or removed as its own DELETE would be (to the trash, or
erased with `purge`), with a result per item in input order. Refused items (a bad field, another
scope, another team, not the agent key's) are reported and change nothing; the others are still
applied."""

from __future__ import annotations

import pytest

from memories.models import Memory, MemoryRevision, TrashedMemory
from memoryplatform.client import MemoryAPIError, MemoryClient
from tenants.models import IdempotentRequest
from tenants.services import api_key_issue, team_upsert

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

NOT_FOUND = "memory not found"


def write(api, content, agent="researcher", scope="personal"):
    body = {"content": content, "enable_dedup": False}
    if scope == "personal":
        body["agent_id"] = agent
    r = api.post(f"/memories/{scope}", body)
    assert r.status_code == 201, r.content
    return ok_data(r)["id"]


def delete(api, ids, scope="personal", **extra):
    return api.post(f"/memories/{scope}/batch/delete", {"ids": ids, **extra})


def trashed(ids):
    return dict(
        TrashedMemory.objects.filter(memory_id__in=ids).values_list("memory_id", "removed_by")
    )


def test_each_id_is_trashed_or_reported_in_input_order(api):
    a, b, kept = (write(api, f"Fact number {n} about the release.") for n in (1, 2, 3))
    team_memory = write(api, "The team deploys on Fridays.", scope="team")
    r = delete(api, [b, 999_999, a, team_memory])
    assert r.status_code == 200, r.content
    assert ok_data(r) == {
        "results": [
            {"id": b, "status": 200},
            {"id": 999_999, "status": 404, "error": NOT_FOUND},
            {"id": a, "status": 200},
            # A team memory is not one of the personal scope, as DELETE /memories/personal/<id>.
            {"id": team_memory, "status": 404, "error": NOT_FOUND},
        ],
        "removed": 2,
    }
    assert trashed([a, b, kept, team_memory]) == {a: "api", b: "api"}
    assert set(Memory.objects.values_list("pk", flat=True)) == {kept, team_memory}
    # Restorable as any DELETE: the same id back.
    assert api.post(f"/memories/trash/{a}/restore", {}).status_code == 200
    assert Memory.objects.filter(pk=a).exists()
    # Deleting the same ids again: gone already, each a 404, nothing else touched.
    again = ok_data(delete(api, [b]))
    assert again == {"results": [{"id": b, "status": 404, "error": NOT_FOUND}], "removed": 0}


def test_team_memories_have_their_own_batch(api):
    ids = [write(api, f"Team rule {n}: review before merge.", scope="team") for n in (1, 2)]
    personal = write(api, "A personal note.")
    data = ok_data(delete(api, [*ids, personal], scope="team"))
    assert [x["status"] for x in data["results"]] == [200, 200, 404]
    assert trashed([*ids, personal]) == dict.fromkeys(ids, "api")


def test_purge_erases_at_once_everywhere(api):
    a = write(api, "The user's passport number is X1234567.")
    b = write(api, "The user's bank is Example Bank.")
    assert api.put(f"/memories/personal/{a}", {"importance": 0.9}).status_code == 200
    data = ok_data(delete(api, [a, b], purge=True))
    assert data == {"results": [{"id": a, "status": 200}, {"id": b, "status": 200}], "removed": 2}
    assert not Memory.objects.filter(pk__in=[a, b]).exists()
    assert not TrashedMemory.objects.filter(memory_id__in=[a, b]).exists()
    assert not MemoryRevision.objects.filter(memory_id__in=[a, b]).exists()
    body = {"agent_id": "researcher", "query": "passport number bank", "min_score": 0.0}
    assert ok_data(api.post("/memories/personal/search", body)) == []


def test_an_agent_key_removes_its_own_and_is_refused_the_others(api, agent_api):
    own = write(agent_api, "I prefer tabs over spaces.")
    other = write(api, "Bob's private note.", agent="bob")
    team_memory = write(api, "The team uses trunk-based development.", scope="team")
    data = ok_data(delete(agent_api, [own, other]))
    assert data["results"][0] == {"id": own, "status": 200}
    assert data["results"][1]["status"] == 403 and data["removed"] == 1
    assert Memory.objects.filter(pk=other).exists()
    # A team memory may be deleted by any agent of the team, as with one DELETE.
    assert ok_data(delete(agent_api, [team_memory], scope="team"))["removed"] == 1


def test_another_team_cannot_delete_or_detect_the_memories(api, other_api):
    mine = [write(api, f"Secret plan {n}.") for n in (1, 2)]
    missing = max(mine) + 1000
    data = ok_data(delete(other_api, [*mine, missing]))
    # The same answer as for an id that never existed: nothing tells them apart.
    assert data == {
        "results": [{"id": i, "status": 404, "error": NOT_FOUND} for i in [*mine, missing]],
        "removed": 0,
    }
    purged = ok_data(delete(other_api, mine, purge=True, scope="personal"))
    assert purged["removed"] == 0
    assert Memory.objects.filter(pk__in=mine).count() == 2
    assert not TrashedMemory.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ids": []},
        {"ids": list(range(1, 102))},
        {"ids": [1, 2, 1]},
        {"ids": ["1"]},
        {"ids": [True]},
        {"ids": [0]},
        {"ids": [2**63]},
        {"ids": [1.5]},
        {"ids": 1},
        {"ids": [1], "purge": "yes"},
    ],
)
def test_a_bad_body_is_a_400_naming_the_field_and_removes_nothing(api, body):
    mid = write(api, "Kept whatever the request says.")
    if "ids" in body and body["ids"] == [1, 2, 1]:
        body = {"ids": [mid, 2, mid]}
    r = delete(api, **body) if "ids" in body else api.post("/memories/personal/batch/delete", body)
    assert r.status_code == 400, r.content
    assert error_code(r) == "VALIDATION_ERROR"
    field = "purge" if "purge" in body else "ids"
    # The list, or the element (`ids.0`) at fault.
    assert any(k == field or k.startswith(f"{field}.") for k in r.json()["details"])
    assert Memory.objects.filter(pk=mid).exists()


def test_the_client_deletes_many(live_server):
    team, _ = team_upsert(team_id="batchdel", name="b")
    key = api_key_issue(team=team)
    client = MemoryClient(key.key_id, key.secret, base_url=live_server.url)
    try:
        ids = [client.write_memory("alice", f"Note {n} on the schedule.")["id"] for n in (1, 2)]
        done = client.delete_memories([ids[0], ids[0] + 10_000])
        assert done == {
            "results": [
                {"id": ids[0], "status": 200},
                {"id": ids[0] + 10_000, "status": 404, "error": NOT_FOUND},
            ],
            "removed": 1,
        }
        assert client.delete_memories([ids[1]], purge=True)["removed"] == 1
        # Each with a key of its own (the client re-sends it when no answer came).
        kept = IdempotentRequest.objects.filter(endpoint="memories/personal/batch/delete")
        assert kept.values("key").distinct().count() == 2
        assert client.delete_team_memories([ids[1]])["results"][0]["status"] == 404
        with pytest.raises(MemoryAPIError) as refused:
            client.delete_memories([])
        assert refused.value.code == "VALIDATION_ERROR" and "ids" in refused.value.details
    finally:
        client.session.close()


def update(api, items, scope="personal"):
    return api.post(f"/memories/{scope}/batch/update", {"items": items})


class TestUpdate:
    def test_each_item_is_applied_or_reported_in_input_order(self, api):
        a, b, kept = (write(api, f"Fact number {n} about the release.") for n in (1, 2, 3))
        team_memory = write(api, "The team deploys on Fridays.", scope="team")
        r = update(
            api,
            [
                {"id": b, "content": "The release moved to the 15th of January."},
                {"id": 999_999, "importance": 0.9},
                {"id": a, "importance": 0.9, "pinned": True},
                {"id": kept, "importance": 2},  # out of range: refused alone
                {"id": team_memory, "importance": 0.9},  # not a personal memory
                {"importance": 0.1},  # no id
            ],
        )
        assert r.status_code == 200, r.content
        data = ok_data(r)
        assert [(x["id"], x["status"]) for x in data["results"]] == [
            (b, 200),
            (999_999, 404),
            (a, 200),
            (kept, 400),
            (team_memory, 404),
            (None, 400),
        ]
        assert data["updated"] == 2
        assert (
            data["results"][0]["memory"]["content"] == "The release moved to the 15th of January."
        )
        assert data["results"][1]["error"] == NOT_FOUND
        assert "importance" in data["results"][3]["details"]
        assert "id" in data["results"][5]["details"]
        a_now, kept_now = Memory.objects.get(pk=a), Memory.objects.get(pk=kept)
        assert (a_now.importance, a_now.pinned) == (0.9, True)
        assert kept_now.importance == 0.5 and Memory.objects.get(pk=team_memory).importance == 0.5
        # As a PUT: a revision each, and the new text re-embedded (search finds it by it).
        assert MemoryRevision.objects.filter(memory_id__in=[a, b]).count() == 2
        body = {"agent_id": "researcher", "query": "release moved to January", "min_score": 0.0}
        assert ok_data(api.post("/memories/personal/search", body))[0]["id"] == b

    def test_team_memories_have_their_own_batch(self, api):
        mid = write(api, "Team rule: review before merge.", scope="team")
        data = ok_data(update(api, [{"id": mid, "category": "rule"}], scope="team"))
        assert data["results"][0]["memory"]["category"] == "rule"

    def test_an_agent_key_changes_its_own_and_what_is_shared_for_writing(self, api, agent_api):
        own = write(agent_api, "I prefer tabs over spaces.")
        shared = write(api, "Bob's runbook for deploys.", agent="bob")
        private = write(api, "Bob's private note.", agent="bob")
        body = {"agent_ids": ["researcher"], "permission": "write"}
        assert api.post(f"/memories/personal/{shared}/share", body).status_code == 200
        items = [{"id": i, "importance": 0.8} for i in (own, shared, private)]
        data = ok_data(update(agent_api, items))
        assert [x["status"] for x in data["results"]] == [200, 200, 403]
        assert Memory.objects.get(pk=private).importance == 0.5

    def test_another_team_cannot_change_or_detect_the_memories(self, api, other_api):
        mine = write(api, "Secret plan.")
        missing = mine + 1000
        items = [{"id": i, "content": "overwritten"} for i in (mine, missing)]
        data = ok_data(update(other_api, items))
        assert data == {
            "results": [{"id": i, "status": 404, "error": NOT_FOUND} for i in (mine, missing)],
            "updated": 0,
        }
        assert Memory.objects.get(pk=mine).content == "Secret plan."

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"items": []},
            {"items": [{"id": 1, "importance": 0.1}] * 101},
            {"items": "x"},
        ],
    )
    def test_a_bad_body_is_a_400_and_changes_nothing(self, api, body):
        mid = write(api, "Kept whatever the request says.")
        r = api.post("/memories/personal/batch/update", body)
        assert r.status_code == 400, r.content
        assert error_code(r) == "VALIDATION_ERROR" and "items" in r.json()["details"]
        assert Memory.objects.get(pk=mid).importance == 0.5

    def test_an_id_listed_twice_is_a_400_and_changes_nothing(self, api):
        mid = write(api, "Kept whatever the request says.")
        items = [{"id": mid, "importance": 0.1}, {"id": mid, "importance": 0.9}]
        r = update(api, items)
        assert r.status_code == 400 and "items[1].id" in r.json()["details"]
        assert Memory.objects.get(pk=mid).importance == 0.5

    def test_the_client_updates_many(self, live_server):
        team, _ = team_upsert(team_id="batchupd", name="b")
        key = api_key_issue(team=team)
        client = MemoryClient(key.key_id, key.secret, base_url=live_server.url)
        try:
            mid = client.write_memory("alice", "Note on the schedule.")["id"]
            done = client.update_memories([{"id": mid, "importance": 0.7}])
            assert done["updated"] == 1 and done["results"][0]["memory"]["importance"] == 0.7
            assert client.update_team_memories([{"id": mid, "importance": 0.1}])["updated"] == 0
        finally:
            client.session.close()


KEY = {"Idempotency-Key": "batch-5e1d"}


class TestSentAgain:
    """A batch sent again with its `Idempotency-Key` (its answer was lost) is run once and
    answered as the first time, as a batch write is."""

    def test_a_batch_delete_is_run_once(self, api):
        a, b, c = (write(api, f"Fact number {n} about the release.") for n in (1, 2, 3))
        body = {"ids": [a, b, 999_999]}
        first = api.post("/memories/personal/batch/delete", body, headers=KEY)
        assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
        again = api.post("/memories/personal/batch/delete", body, headers=KEY)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json() and ok_data(again)["removed"] == 2
        assert trashed([a, b]) == {a: "api", b: "api"}
        # Without the key, the same body is a new request: a moment later, both are gone.
        assert ok_data(delete(api, [a, b]))["removed"] == 0
        # The key with another body: refused, nothing removed.
        other = api.post("/memories/personal/batch/delete", {"ids": [c]}, headers=KEY)
        assert other.status_code == 409 and error_code(other) == "CONFLICT"
        assert Memory.objects.filter(pk=c).exists()

    def test_a_batch_update_is_run_once(self, api):
        a = write(api, "Fact about the release.")
        body = {"items": [{"id": a, "content": "Fact about the delayed release."}]}
        first = api.post("/memories/personal/batch/update", body, headers=KEY)
        assert ok_data(first)["updated"] == 1
        assert api.put(f"/memories/personal/{a}", {"importance": 0.2}).status_code == 200
        again = api.post("/memories/personal/batch/update", body, headers=KEY)
        assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json()
        assert MemoryRevision.objects.filter(memory_id=a).count() == 2  # the batch's and the PUT's
        assert Memory.objects.get(pk=a).importance == 0.2

    def test_a_refused_batch_records_nothing_so_a_corrected_one_is_run(self, api):
        a = write(api, "Fact about the release.")
        twice = {"items": [{"id": a, "importance": 0.1}, {"id": a, "importance": 0.9}]}
        refused = api.post("/memories/personal/batch/update", twice, headers=KEY)
        assert refused.status_code == 400
        corrected = {"items": [{"id": a, "importance": 0.9}]}
        done = api.post("/memories/personal/batch/update", corrected, headers=KEY)
        assert ok_data(done)["updated"] == 1 and "Idempotent-Replayed" not in done.headers

    def test_an_erasure_reaches_the_kept_answer_of_a_batch_update(self, api):
        a = write(api, "Fact about the release.")
        body = {"items": [{"id": a, "content": "The launch code is 0451."}]}
        api.post("/memories/personal/batch/update", body, headers=KEY)
        assert api.delete(f"/memories/personal/{a}?purge=true").status_code == 200
        again = api.post("/memories/personal/batch/update", body, headers=KEY)
        assert ok_data(again)["results"][0]["memory"] == {"id": a, "erased": True}
        assert b"0451" not in again.content
