"""A memory's own expiry (`expires_at`): what an agent knows stops being true at a date ("on
leave until Friday"). From then on search and listings leave it out; the hourly trash pass moves
it to the trash, restorable like every removal; a pin protects it; dedup never lets an expiring
memory swallow a write that outlives it; an update sets or clears it with a revision; a bundle
carries it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.dates import iso
from graph.models import Entity
from memories import tasks
from memories.models import Memory, MemoryRevision, TrashedMemory
from memories.purge import memories_expire
from memories.services import Actor, memory_promote, memory_revert
from memoryplatform.client import MemoryAPIError, MemoryClient
from tenants.services import api_key_issue, team_upsert

from .helpers import error_code, ok_data
from .test_export_import import export_bundle, import_bundle, make_bundle, read_bundle

pytestmark = pytest.mark.django_db

LEAVE = "The user is on parental leave and answers no work messages."


def ahead(days: float = 3) -> str:
    return (timezone.now() + timedelta(days=days)).isoformat()


def write(api, content=LEAVE, agent="alice", **extra):
    r = api.post("/memories/personal", {"agent_id": agent, "content": content, **extra})
    assert r.status_code == 201, r.content
    return ok_data(r)


def expire(*ids, ago=timedelta(minutes=1)):
    """Moves the memories' expiry into the past, as time passing would."""
    Memory.objects.filter(pk__in=ids).update(expires_at=timezone.now() - ago)


def search_ids(api, query="parental leave work messages", agent="alice"):
    body = {"agent_id": agent, "query": query, "min_score": 0.0}
    return [m["id"] for m in ok_data(api.post("/memories/personal/search", body))]


def listed_ids(api, agent="alice"):
    return [m["id"] for m in ok_data(api.get(f"/memories?agent_id={agent}"))["items"]]


def recent_ids(api, agent="alice"):
    return [m["id"] for m in ok_data(api.get(f"/memories/personal/recent/{agent}"))]


class TestWrite:
    def test_the_expiry_is_stored_and_answered_in_utc(self, api):
        when = datetime(2031, 5, 1, 18, 0, tzinfo=UTC)
        body = write(api, expires_at="2031-05-01T20:00:00+02:00")
        assert body["expires_at"] == "2031-05-01T18:00:00Z"
        assert Memory.objects.get(pk=body["id"]).expires_at == when
        assert ok_data(api.get(f"/memories/{body['id']}"))["expires_at"] == ("2031-05-01T18:00:00Z")

    def test_without_an_offset_it_is_utc_and_without_one_at_all_no_key(self, api):
        assert write(api, expires_at="2031-05-01T18:00:00")["expires_at"] == "2031-05-01T18:00:00Z"
        assert "expires_at" not in write(api, "The user drinks green tea.")
        assert "expires_at" not in write(api, "The user drinks black tea.", expires_at=None)

    @pytest.mark.parametrize(
        "value, message",
        [
            ("next friday", "ISO 8601"),
            (1893456000, "ISO 8601"),
            (True, "ISO 8601"),
            ({"at": "2031-01-01"}, "ISO 8601"),
            ("2031-02-30T00:00:00Z", "ISO 8601"),
            ("2020-01-01T00:00:00Z", "in the future"),
            ("9999-12-31T23:59:59-05:00", "out of range"),  # past the last year once in UTC
        ],
    )
    def test_a_bad_expiry_is_a_400_naming_it_and_writes_nothing(self, api, value, message):
        r = api.post(
            "/memories/personal", {"agent_id": "alice", "content": LEAVE, "expires_at": value}
        )
        assert r.status_code == 400, r.content
        assert error_code(r) == "VALIDATION_ERROR"
        assert message in r.json()["details"]["expires_at"][0]
        assert not Memory.objects.exists()

    def test_a_batch_item_carries_its_expiry_and_a_bad_one_is_refused_alone(self, api):
        r = api.post(
            "/memories/personal/batch",
            {
                "items": [
                    {"agent_id": "alice", "content": LEAVE, "expires_at": ahead()},
                    {"agent_id": "alice", "content": "The user likes tea.", "expires_at": "no"},
                ]
            },
        )
        results = ok_data(r)["results"]
        assert results[0]["status"] == 201 and "expires_at" in results[0]["memory"]
        assert results[1]["status"] == 400 and "expires_at" in results[1]["details"]
        assert Memory.objects.get().expires_at is not None


class TestOnceExpired:
    def test_out_of_search_listing_and_recent_at_once_but_still_readable(self, api):
        gone = write(api, expires_at=ahead())["id"]
        kept = write(api, "The user is on leave from the chess club.", expires_at=ahead())["id"]
        assert set(search_ids(api)) == {gone, kept}
        expire(gone)
        assert search_ids(api) == [kept]
        assert listed_ids(api) == [kept]
        assert recent_ids(api) == [kept]
        # Asked for by id, it is still there until the trash pass, and says it has expired.
        assert ok_data(api.get(f"/memories/{gone}"))["id"] == gone

    def test_a_pinned_memory_does_not_expire(self, api):
        mid = write(api, expires_at=ahead(), pinned=True)["id"]
        expire(mid)
        assert search_ids(api) == [mid] and listed_ids(api) == [mid]
        assert memories_expire() == 0
        assert Memory.objects.filter(pk=mid).exists()

    def test_team_memories_expire_too(self, api):
        body = {"content": "The release freeze lasts until the audit ends.", "expires_at": ahead()}
        mid = ok_data(api.post("/memories/team", body))["id"]
        expire(mid)
        found = ok_data(api.post("/memories/team/search", {"query": "release freeze audit"}))
        assert found == []
        assert memories_expire() == 1
        assert TrashedMemory.objects.get(memory_id=mid).scope == "team"


class TestFilters:
    def test_search_and_listing_filter_on_the_expiry(self, api):
        soon = write(api, expires_at="2031-01-01T00:00:00Z")["id"]
        later = write(api, "The user is on leave from the chess club.", expires_at=ahead(4000))[
            "id"
        ]
        never = write(api, "The user is on leave from the choir for good.")["id"]

        def found(filters):
            body = {"agent_id": "alice", "query": "on leave", "min_score": 0.0, "filters": filters}
            searched = {m["id"] for m in ok_data(api.post("/memories/personal/search", body))}
            query = urlencode({"agent_id": "alice", "filters": json.dumps(filters)})
            listed = ok_data(api.get(f"/memories?{query}"))
            assert searched == {m["id"] for m in listed["items"]}
            return searched

        assert found({"expires_at": None}) == {never}
        assert found({"expires_at": {"$ne": None}}) == {soon, later}
        assert found({"expires_at": {"$lte": "2031-06-01T00:00:00Z"}}) == {soon}
        assert found({"$or": [{"expires_at": None}, {"expires_at": {"$gt": "2031-06-01"}}]}) == {
            later,
            never,
        }

    @pytest.mark.parametrize(
        "filters, field",
        [
            ({"expires_at": "soon"}, "expires_at"),
            ({"expires_at": {"$lt": None}}, "expires_at"),
            ({"expires_at": [1]}, "expires_at"),
            ({"expires_at": {"$gt": "2031-02-30T00:00:00Z"}}, "expires_at"),
            # A well-formed date with no such day was a 500 (the parser's ValueError).
            ({"created_at": {"$lt": "2031-02-30T00:00:00"}}, "created_at"),
            ({"created_after": "2031-02-30T00:00:00"}, "created_after"),
            # No time in UTC: a 500 at the query once.
            ({"created_at": {"$gt": "9999-12-31T23:59:59-05:00"}}, "created_at"),
            ({"expires_at": {"$lt": "0001-01-01T00:00:00+01:00"}}, "expires_at"),
        ],
    )
    def test_a_bad_date_filter_is_a_400_naming_it(self, api, filters, field):
        body = {"agent_id": "alice", "query": "x", "filters": filters}
        r = api.post("/memories/personal/search", body)
        assert r.status_code == 400 and field in json.dumps(r.json()["details"])
        query = urlencode({"agent_id": "alice", "filters": json.dumps(filters)})
        r = api.get(f"/memories?{query}")
        assert r.status_code == 400 and field in r.json()["error"]


class TestTrashPass:
    def test_the_hourly_pass_moves_expired_memories_to_the_trash_with_why(self, api):
        gone = write(api, expires_at=ahead())["id"]
        later = write(api, "The user is travelling to Oslo.", expires_at=ahead(30))["id"]
        forever = write(api, "The user drinks green tea.")["id"]
        expire(gone)
        tasks.empty_expired_trash()
        assert set(Memory.objects.values_list("pk", flat=True)) == {later, forever}
        item = TrashedMemory.objects.get(memory_id=gone)
        assert item.removed_by == "expiry"
        assert item.reason.startswith("expired at ")
        trash = ok_data(api.get("/memories/trash"))["items"]
        assert [(t["id"], t["removed_by"]) for t in trash] == [(gone, "expiry")]
        assert tasks.empty_expired_trash() == 0 and memories_expire() == 0  # idempotent

    def test_a_restore_clears_a_passed_expiry_and_keeps_one_ahead(self, api):
        gone = write(api, expires_at=ahead())["id"]
        expire(gone)
        memories_expire()
        restored = ok_data(api.post(f"/memories/trash/{gone}/restore"))
        assert restored["id"] == gone and "expires_at" not in restored
        assert Memory.objects.get(pk=gone).expires_at is None
        assert search_ids(api) == [gone]

        deleted = write(api, "The user is travelling to Oslo.", expires_at=ahead(30))["id"]
        was = Memory.objects.get(pk=deleted).expires_at
        assert api.delete(f"/memories/personal/{deleted}").status_code == 200
        ok_data(api.post(f"/memories/trash/{deleted}/restore"))
        assert Memory.objects.get(pk=deleted).expires_at == was

    def test_each_team_finds_its_own_expired_memory_in_its_own_trash(self, api, other_api):
        mine = write(api, expires_at=ahead())["id"]
        theirs = write(other_api, expires_at=ahead())["id"]
        expire(mine, theirs)
        assert memories_expire() == 2
        assert TrashedMemory.objects.get(memory_id=mine).team_id != (
            TrashedMemory.objects.get(memory_id=theirs).team_id
        )
        assert [t["id"] for t in ok_data(api.get("/memories/trash"))["items"]] == [mine]
        assert other_api.post(f"/memories/trash/{mine}/restore").status_code == 404

    def test_the_command_moves_one_teams_expired_memories(self, api, other_api, team):
        mine = write(api, expires_at=ahead())["id"]
        theirs = write(other_api, expires_at=ahead())["id"]
        expire(mine, theirs)
        out = StringIO()
        call_command("empty_trash", "--team", team.pk, stdout=out)
        assert "moved 1 expired memory(ies) to the trash" in out.getvalue()
        assert list(TrashedMemory.objects.values_list("memory_id", flat=True)) == [mine]
        assert Memory.objects.filter(pk=theirs).exists()


class TestUpdate:
    def test_set_then_clear_with_a_revision_each_and_a_revert(self, api):
        mid = write(api)["id"]
        when = ahead(10)
        body = ok_data(api.put(f"/memories/personal/{mid}", {"expires_at": when}))
        assert body["expires_at"].startswith(when[:16])
        cleared = ok_data(api.put(f"/memories/personal/{mid}", {"expires_at": None}))
        assert "expires_at" not in cleared
        first, second = MemoryRevision.objects.filter(memory_id=mid).order_by("id")
        assert first.before == {"expires_at": None}
        assert first.after["expires_at"] == second.before["expires_at"] is not None
        assert second.after == {"expires_at": None}
        # Reverting the clearing (the console's revert) puts the expiry back, and reverting the
        # setting takes it away.
        memory = Memory.objects.get(pk=mid)
        memory = memory_revert(memory=memory, revision=second, actor=Actor(label="lead"))
        assert iso(memory.expires_at) == first.after["expires_at"]
        memory = memory_revert(memory=memory, revision=first, actor=Actor(label="lead"))
        assert memory.expires_at is None

    def test_clearing_an_expired_memory_brings_it_back_and_the_pass_leaves_it(self, api):
        mid = write(api, expires_at=ahead())["id"]
        expire(mid)
        assert search_ids(api) == []
        ok_data(api.put(f"/memories/personal/{mid}", {"expires_at": None}))
        assert search_ids(api) == [mid]
        assert memories_expire() == 0

    def test_a_past_expiry_is_refused_and_another_team_cannot_set_one(self, api, other_api):
        mid = write(api)["id"]
        r = api.put(f"/memories/personal/{mid}", {"expires_at": "2001-01-01T00:00:00Z"})
        assert r.status_code == 400 and "expires_at" in r.json()["details"]
        r = other_api.put(f"/memories/personal/{mid}", {"expires_at": ahead()})
        assert r.status_code == 404
        assert error_code(r) == error_code(
            other_api.put("/memories/personal/999999", {"pinned": True})
        )
        assert Memory.objects.get(pk=mid).expires_at is None


class TestDedup:
    def test_a_write_that_outlives_the_stored_memory_is_stored_and_linked(self, api):
        stored = write(api, expires_at=ahead(1))["id"]
        again = write(api)  # the same words, never expiring
        assert again["id"] != stored and "dedup_skipped" not in again
        assert again["metadata"]["related_to"] == [stored]
        later = write(api, expires_at=ahead(5))
        assert later["id"] not in (stored, again["id"])

    def test_a_write_the_stored_memory_outlives_is_skipped(self, api):
        stored = write(api)["id"]
        r = api.post(
            "/memories/personal", {"agent_id": "alice", "content": LEAVE, "expires_at": ahead()}
        )
        assert r.status_code == 200 and ok_data(r)["dedup_skipped"] is True
        assert ok_data(r)["id"] == stored

    def test_an_expired_copy_never_swallows_the_same_words(self, api):
        stored = write(api, expires_at=ahead(1))["id"]
        expire(stored)
        r = api.post(
            "/memories/personal", {"agent_id": "alice", "content": LEAVE, "expires_at": ahead(2)}
        )
        assert r.status_code == 201, r.content
        assert search_ids(api) == [ok_data(r)["id"]]


FRAGMENTS = [
    "The user wants short answers without long explanations.",
    "The user asked again for shorter answers, no long explanations.",
    "The user prefers short answers and dislikes long explanations.",
]


def fragments(api, days=(1, 3, 2), agent="alice"):
    """The three fragments consolidation groups, each expiring in `days` (None: never)."""
    ids = []
    for text, d in zip(FRAGMENTS, days, strict=True):
        extra = {} if d is None else {"expires_at": ahead(d)}
        ids.append(
            write(api, text, agent=agent, category="preference", enable_dedup=False, **extra)["id"]
        )
    return ids


class TestLifecycle:
    """What the lifecycle reads and derives: an expired memory feeds nothing, and nothing the
    lifecycle writes lets an expiring memory stand in for a fact that does not expire."""

    @pytest.mark.parametrize("passed", [False, True], ids=["expiring", "expired"])
    def test_an_ingested_fact_an_expiring_memory_says_is_added_and_linked(self, api, passed):
        said = {
            "agent_id": "alice",
            "messages": [{"role": "user", "content": "My leverage limit is 3x."}],
        }
        first = ok_data(api.post("/memories/ingest", said))
        old = first["facts"][0]["memory"]["id"]
        assert api.put(f"/memories/personal/{old}", {"expires_at": ahead(1)}).status_code == 200
        if passed:
            expire(old)
        (fact,) = ok_data(api.post("/memories/ingest", said))["facts"]
        # Not a NOOP: the fact would leave with the memory that "already says it".
        assert fact["decision"] == "ADD" and fact["memory"]["id"] != old
        assert fact["memory"]["metadata"]["related_to"] == [old]
        assert "expires_at" not in fact["memory"]
        expire(old)
        assert search_ids(api, "leverage limit") == [fact["memory"]["id"]]

    def test_a_fact_that_writes_out_its_end_date_expires_then(self, api):
        said = [
            "I am on parental leave until 2031-01-31.",
            "我休假直到2031年3月1日。",
            "The code freeze lasts till 2031-02-10T18:00Z.",
            "I was on leave until 2020-01-31.",  # past: a statement about the past
            "The report is due by 2031-01-31.",  # a deadline, not the end of the fact
            "I am on call until further notice.",  # no day named
        ]
        body = {"agent_id": "alice", "messages": [{"role": "user", "content": t} for t in said]}
        facts = ok_data(api.post("/memories/ingest", body))["facts"]
        ends = {f["memory"]["content"]: f["memory"].get("expires_at") for f in facts}
        assert ends == {
            said[0].rstrip("."): "2031-02-01T00:00:00Z",  # the whole day, in UTC
            said[1].rstrip("。"): "2031-03-02T00:00:00Z",
            said[2].rstrip("."): "2031-02-10T18:00:00Z",
            said[3].rstrip("."): None,
            said[4].rstrip("."): None,
            said[5].rstrip("."): None,
        }
        # extract-facts reads the same way, and its answer shows the end.
        api.post("/memories/working", {"agent_id": "bob", "content": said[0]})
        (fact,) = ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "bob"}))["facts"]
        assert fact["expires_at"] == "2031-02-01T00:00:00Z"

    def test_a_fact_that_names_its_end_from_the_day_it_was_said_expires_after_that_day(self, api):
        wednesday = "2031-01-08T10:00:00Z"
        said = [
            ("I am on call until Friday.", wednesday),
            ("我直到下周一都在上海出差。", wednesday),
            ("The user is away till the end of the month.", "2031-01-08T23:30:00-05:00"),
            ("The standup was moved to Friday.", wednesday),  # moved, not ended
            ("会议推迟到周五。", wednesday),  # the same, in Chinese
            ("I was on leave until Friday.", "2020-01-08T10:00:00Z"),  # long past: kept as is
            ("I am working from Rome for the next three days.", wednesday),  # a stretch
            ("接下来两周我只做回测。", wednesday),
            ("I have been vegan for two years.", wednesday),  # a stretch up to now
            ("The user is in Lisbon until March 10.", wednesday),  # a day with no year
            ("我直到15号都在深圳。", wednesday),  # a day with no month
            ("We climb until the 5th floor.", wednesday),  # a place, not a day
            ("I am on call until tomorrow.", "9999-12-31T10:00:00Z"),  # no day after: none
            # A clause that names no end: the fact outlives everything it says.
            ("I am on call until Friday and my desk is by the window.", wednesday),
            ("I am on leave until 2031-03-31, while Bob leads the desk.", wednesday),
        ]
        body = {
            "agent_id": "alice",
            "messages": [{"role": "user", "content": t, "at": at} for t, at in said],
        }
        facts = ok_data(api.post("/memories/ingest", body))["facts"]
        ends = {f["memory"]["content"]: f["memory"].get("expires_at") for f in facts}
        assert ends == {
            # Friday the 10th, and the day after it: the speaker's time zone is not known.
            "I am on call until Friday": "2031-01-12T00:00:00Z",
            "我直到下周一都在上海出差": "2031-01-15T00:00:00Z",  # Monday the 13th
            # Said on the 9th in UTC: the 31st, and the day after.
            "The user is away till the end of the month": "2031-02-02T00:00:00Z",
            "The standup was moved to Friday": None,
            "会议推迟到周五": None,
            "I was on leave until Friday": None,
            # Saturday the 11th (a stretch that starts the next day), and the day after.
            "I am working from Rome for the next three days": "2031-01-13T00:00:00Z",
            "接下来两周我只做回测": "2031-01-24T00:00:00Z",  # Wednesday the 22nd
            "I have been vegan for two years": None,
            "The user is in Lisbon until March 10": "2031-03-11T00:00:00Z",  # when it ends
            "我直到15号都在深圳": "2031-01-16T00:00:00Z",
            "We climb until the 5th floor": None,
            "I am on call until tomorrow": None,
            "I am on call until Friday and my desk is by the window": None,
            "I am on leave until 2031-03-31, while Bob leads the desk": None,
        }
        # Without `at`, from the day it is ingested; extract-facts from the item's own day.
        before = timezone.now().astimezone(UTC).date()
        message = {"role": "user", "content": "I am travelling till tomorrow."}
        (fact,) = ok_data(api.post("/memories/ingest", {"agent_id": "bob", "messages": [message]}))[
            "facts"
        ]
        api.post("/memories/working", {"agent_id": "carol", "content": "我直到明天都在开会。"})
        (item,) = ok_data(api.post("/lifecycle/extract-facts", {"agent_id": "carol"}))["facts"]
        after = timezone.now().astimezone(UTC).date()
        days = {f"{(d + timedelta(days=3)).isoformat()}T00:00:00Z" for d in (before, after)}
        assert fact["memory"]["expires_at"] in days and item["expires_at"] in days

    @pytest.mark.parametrize("engine", ["offline", "llm"])
    def test_a_summary_expires_only_when_all_it_says_does(self, api, engine, request):
        said = {
            "dave": [
                "I am on call until tomorrow.",
                "I am working from Rome for the next three days.",
            ],
            "erin": ["I am on call until tomorrow.", "I drink green tea with breakfast."],
        }
        if engine == "llm":  # the model's summaries, read the same way
            fake = request.getfixturevalue("fake_llm")
            for texts in said.values():
                summary = {"content": " ".join(texts), "importance": 0.6, "source_indexes": [0, 1]}
                fake.chat_replies.append(json.dumps({"summaries": [summary]}))
        before = timezone.now().astimezone(UTC).date()
        ends = {}
        for agent, texts in said.items():
            for text in texts:
                api.post("/memories/working", {"agent_id": agent, "content": text})
            body = {"agent_id": agent, "target_count": 1}
            (memory_id,) = ok_data(api.post("/lifecycle/compress", body))["memory_ids"]
            ends[agent] = ok_data(api.get(f"/memories/{memory_id}")).get("expires_at")
        after = timezone.now().astimezone(UTC).date()
        # Three days from the day it was said, as a stretch starting the next day, and the day
        # after; one sentence that lasts keeps the whole summary for good.
        days = {f"{(d + timedelta(days=5)).isoformat()}T00:00:00Z" for d in (before, after)}
        assert ends["dave"] in days and ends["erin"] is None

    def test_the_llm_gives_the_end_date_and_a_bad_one_drops_only_the_date(self, api, fake_llm):
        facts = [
            {"content": "The user is in Lisbon until 2031-04-30.", "expires_at": "2031-04-30"},
            {"content": "The user is on call this week.", "expires_at": "next Friday"},
            {"content": "The user likes green tea.", "expires_at": None},
            {"content": "The user is in Porto until Friday.", "expires_at": None},
        ]
        fake_llm.chat_replies.append(json.dumps({"facts": facts}))
        said = [
            {
                "role": "user",
                "content": "Lisbon until the end of April, Porto until Friday; on call; tea.",
                "at": "2031-01-08T10:00:00Z",
            }
        ]
        answer = ok_data(api.post("/memories/ingest", {"agent_id": "alice", "messages": said}))
        ends = {f["memory"]["content"]: f["memory"].get("expires_at") for f in answer["facts"]}
        assert ends == {
            "The user is in Lisbon until 2031-04-30.": "2031-05-01T00:00:00Z",
            "The user is on call this week.": None,
            "The user likes green tea.": None,
            # Counted by the platform from the day it was said, never by the model.
            "The user is in Porto until Friday.": "2031-01-12T00:00:00Z",
        }
        chats = [r for r in fake_llm.requests if r["path"].endswith("/chat/completions")]
        prompt = " ".join(m["content"] for m in chats[-1]["body"]["messages"])
        assert "expires_at" in prompt and "never guess" in prompt

    def test_a_fact_that_ends_later_than_the_same_memory_is_added_and_linked(self, api):
        leave = "The user is on parental leave from the trading desk."
        said = {"agent_id": "alice", "messages": [{"role": "user", "content": leave}]}
        old = ok_data(api.post("/memories/ingest", said))["facts"][0]["memory"]["id"]
        assert api.put(f"/memories/personal/{old}", {"expires_at": ahead(1)}).status_code == 200
        # The same words, now said with a later end: it outlives the stored one.
        later = "The user is on parental leave from the trading desk until 2031-01-31."
        assert api.put(f"/memories/personal/{old}", {"content": later}).status_code == 200
        said["messages"][0]["content"] = later
        (fact,) = ok_data(api.post("/memories/ingest", said))["facts"]
        assert fact["decision"] == "ADD" and fact["memory"]["metadata"]["related_to"] == [old]
        assert fact["memory"]["expires_at"] == "2031-02-01T00:00:00Z"
        # Said again with that end: the stored fact already says it, until then.
        (again,) = ok_data(api.post("/memories/ingest", said))["facts"]
        assert again["decision"] == "NOOP" and again["memory"]["id"] == fact["memory"]["id"]

    def test_a_change_for_a_while_is_linked_and_never_hides_what_it_changes(self, api, fake_llm):
        def said(text: str, expires_at: str | None = None) -> dict:
            # The model's fact carries its end apart from its words: as close as can be to
            # the memory it changes.
            facts = [{"content": text, "expires_at": expires_at}]
            fake_llm.chat_replies.append(json.dumps({"facts": facts}))
            body = {"agent_id": "alice", "messages": [{"role": "user", "content": text}]}
            (fact,) = ok_data(api.post("/memories/ingest", body))["facts"]
            return fact

        kept = said("My leverage limit is 3x.")["memory"]["id"]
        change = said("My leverage limit is 5x.", "2031-01-31")
        # Not an UPDATE: superseded, the 3x would stay hidden once the 5x expires.
        assert change["decision"] == "ADD" and "supersedes" not in change
        assert change["memory"]["metadata"]["related_to"] == [kept]
        assert Memory.objects.get(pk=kept).superseded_by_id is None
        assert sorted(search_ids(api, "leverage limit")) == sorted([kept, change["memory"]["id"]])
        expire(change["memory"]["id"])
        assert search_ids(api, "leverage limit") == [kept]
        # A change that lasts still replaces it.
        lasting = said("My leverage limit is 4x.")
        assert lasting["decision"] == "UPDATE" and lasting["supersedes"] == kept

    def test_a_consolidated_fact_expires_with_its_last_fragment(self, api):
        ids = fragments(api)
        (done,) = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "alice"}))["consolidated"]
        assert sorted(done["fragments"]) == sorted(ids)
        fact = Memory.objects.get(pk=done["memory"]["id"])
        assert fact.expires_at == Memory.objects.get(pk=ids[1]).expires_at
        assert done["memory"]["expires_at"] == iso(fact.expires_at.astimezone(UTC))

    def test_a_fragment_that_never_expires_gives_a_fact_that_never_does(self, api):
        fragments(api, days=(1, None, 2))
        (done,) = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "alice"}))["consolidated"]
        assert Memory.objects.get(pk=done["memory"]["id"]).expires_at is None

    def test_an_expired_fragment_is_not_consolidated(self, api):
        ids = fragments(api, days=(None, None, None))
        expire(ids[0])
        data = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "alice"}))
        assert (data["count"], data["examined"]) == (0, 2)

    def test_an_expired_memory_feeds_no_rule_scenario_persona_or_graph(self, api):
        ids = fragments(api, days=(None, None, None))
        gone = write(api, "Alice works at Google.", enable_dedup=False)["id"]
        write(api, "Bob works at Stripe.", enable_dedup=False)
        expire(ids[0], gone)
        data = ok_data(api.post("/lifecycle/propose-procedures", {"agent_id": "alice"}))
        assert (data["count"], data["examined"]) == (0, 2)  # two repeats are not a rule
        scenes = ok_data(api.post("/lifecycle/aggregate-scenes", {"agent_id": "alice"}))
        grouped = {i for s in scenes["scenarios"] for i in s["memory_ids"]}
        assert {ids[1], ids[2]} <= grouped and not {ids[0], gone} & grouped
        ok_data(api.post("/lifecycle/generate-persona", {"agent_id": "alice"}))
        persona = ok_data(api.get("/lifecycle/persona/alice"))
        used = set(persona["memory_ids"])
        assert {ids[1], ids[2]} <= used and not {ids[0], gone} & used
        graph = ok_data(api.post("/lifecycle/extract-graph", {"agent_id": "alice"}))
        assert graph["memories"] == 3
        names = set(Entity.objects.values_list("name", flat=True))
        assert "Stripe" in names and "Google" not in names


def test_a_promoted_copy_expires_with_its_original(api):
    original = Memory.objects.get(pk=write(api, expires_at="2031-05-01T18:00:00Z")["id"])
    copy, hit = memory_promote(memory=original, actor=Actor(label="lead"))
    assert hit is None and copy.scope == "team"
    assert copy.expires_at == original.expires_at


class TestBundle:
    def test_an_export_and_import_keep_the_expiry(
        self, api, other_api, django_capture_on_commit_callbacks
    ):
        mid = write(api, expires_at="2031-05-01T18:00:00Z")["id"]
        data = export_bundle(api, django_capture_on_commit_callbacks)
        header, records = read_bundle(data)
        (rec,) = [r for r in records if r["kind"] == "memory" and r["id"] == mid]
        assert rec["expires_at"] == "2031-05-01T18:00:00Z"
        header["team_id"] = "other"
        assert import_bundle(other_api, make_bundle(header, records)).status_code == 200
        (copy,) = Memory.objects.exclude(pk=mid)
        assert copy.expires_at == datetime(2031, 5, 1, 18, 0, tzinfo=UTC)

    def test_an_overwrite_import_sets_the_bundles_expiry_on_the_memory_met(
        self, api, django_capture_on_commit_callbacks
    ):
        mid = write(api, expires_at="2031-05-01T18:00:00Z")["id"]
        data = export_bundle(api, django_capture_on_commit_callbacks)
        ok_data(api.put(f"/memories/personal/{mid}", {"expires_at": None}))
        assert ok_data(import_bundle(api, data, on_conflict="overwrite"))["imported"]["memory"] == 1
        memory = Memory.objects.get()
        assert memory.pk == mid and memory.expires_at == datetime(2031, 5, 1, 18, tzinfo=UTC)
        last = MemoryRevision.objects.filter(memory_id=mid).order_by("id").last()
        assert last.after == {"expires_at": "2031-05-01T18:00:00Z"}

    @pytest.mark.parametrize(
        "value",
        [
            "soon",
            "2031-05-01T18:00:00",  # a bundle's times carry their offset
            "9999-12-31T23:59:59-05:00",  # past the last year once in UTC
            "0999-12-31T23:59:59Z",  # before the databases' first
            "2031-02-30T00:00:00Z",  # no such day
        ],
    )
    def test_a_bundle_with_a_bad_expiry_is_refused_whole(
        self, api, django_capture_on_commit_callbacks, value
    ):
        write(api, expires_at="2031-05-01T18:00:00Z")
        header, records = read_bundle(export_bundle(api, django_capture_on_commit_callbacks))
        Memory.objects.all().delete()
        for rec in records:
            if rec["kind"] == "memory":
                rec["expires_at"] = value
        r = import_bundle(api, make_bundle(header, records))
        assert r.status_code == 400, r.content
        assert "expires_at" in r.json()["error"]
        assert not Memory.objects.exists()


def test_the_client_sets_and_clears_an_expiry(live_server):
    team, _ = team_upsert(team_id="expiring", name="e")
    key = api_key_issue(team=team)
    client = MemoryClient(key.key_id, key.secret, base_url=live_server.url)
    try:
        written = client.write_memory("alice", LEAVE, expires_at="2031-05-01T18:00:00Z")
        assert written["expires_at"] == "2031-05-01T18:00:00Z"
        assert "expires_at" not in client.update_memory(written["id"], expires_at=None)
        with pytest.raises(MemoryAPIError) as past:
            client.write_memory("alice", "x", expires_at="2001-01-01")
        assert past.value.code == "VALIDATION_ERROR" and "expires_at" in past.value.details
    finally:
        client.session.close()
