"""Forgetting that can be undone: every removal path of a long-term memory ends in the trash with
who removed it and why; the trash API lists, restores and erases; search touches only real recall.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from lifecycle.services import pipeline
from memories.models import Memory, MemoryRevision, MemoryShare, TrashedMemory

from .console_helpers import member_client
from .helpers import error_code, long_cold, ok_data

pytestmark = pytest.mark.django_db


def write(api, content, agent="alice", importance=0.5, **extra):
    r = api.post(
        "/memories/personal",
        {"agent_id": agent, "content": content, "importance": importance, **extra},
    )
    assert r.status_code == 201, r.content
    return ok_data(r)["id"]


def search_ids(api, query, agent="alice", **extra):
    body = {"agent_id": agent, "query": query, "min_score": 0.0, **extra}
    return [m["id"] for m in ok_data(api.post("/memories/personal/search", body))]


def age(*ids, days=200):
    when = timezone.now() - timedelta(days=days)
    Memory.objects.filter(pk__in=ids).update(last_accessed=when, created_at=when)


def trashed(mid):
    return TrashedMemory.objects.get(memory_id=mid)


def listed(api, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return ok_data(api.get(f"/memories/trash?{query}" if query else "/memories/trash"))


@pytest.fixture
def manual(api):
    """Pipeline off: only explicit calls clean up."""
    api.post("/lifecycle/auto-config", {"enabled": False})
    return api


@pytest.fixture
def stale(manual):
    """One unimportant, idle personal memory (a cleanup candidate, cold for longer than the
    ladder's grace period) and one that is not."""
    old = write(manual, "stale trivia about the cafeteria menu", importance=0.1)
    keep = write(manual, "the backup rule that must stay", importance=0.9)
    age(old, keep)
    long_cold(old)
    return {"old": old, "keep": keep}


# --- every removal path ends in the trash, with who and why -----------------------------------


class TestRemovalPaths:
    def test_api_delete_of_a_personal_and_a_team_memory(self, api):
        mid = write(api, "the user likes green tea")
        tid = ok_data(api.post("/memories/team", {"content": "deploys happen on Tuesdays"}))["id"]
        assert api.delete(f"/memories/personal/{mid}").status_code == 200
        assert api.delete(f"/memories/team/{tid}").status_code == 200
        assert not Memory.objects.filter(pk__in=[mid, tid]).exists()
        for item in (trashed(mid), trashed(tid)):
            assert item.removed_by == "api" and item.reason.startswith("deleted through the API")
        items = {i["id"]: i for i in listed(api)["items"]}
        assert items[mid]["scope"] == "personal" and items[tid]["scope"] == "team"
        assert items[mid]["content"] == "the user likes green tea"
        assert items[mid]["removed_by"] == "api" and items[mid]["removed_at"]

    def test_api_cleanup_lists_the_trashed_ids(self, manual, stale):
        data = ok_data(
            manual.post("/lifecycle/cleanup", {"max_age_days": 90, "min_importance": 0.2})
        )
        assert data["cleaned"] == 1 and data["trashed"] == [stale["old"]]
        item = trashed(stale["old"])
        assert item.removed_by == "cleanup" and "importance < 0.2" in item.reason
        assert Memory.objects.filter(pk=stale["keep"]).exists()

    def test_auto_run(self, api, team, stale):
        pipeline.config_update(team=team, enabled=True, cleanup_idle_days=90)
        results = ok_data(api.post("/lifecycle/auto-run", {}))["results"]
        cleanup = next(r for r in results if r["action"] == "cleanup")
        assert cleanup["trashed"] == [stale["old"]]
        assert trashed(stale["old"]).removed_by == "auto"

    def test_beat_cleanup(self, team, stale, django_capture_on_commit_callbacks):
        from lifecycle.tasks import schedule_cleanups_task

        pipeline.config_update(team=team, enabled=True, cleanup_idle_days=90)
        with django_capture_on_commit_callbacks(execute=True):
            assert schedule_cleanups_task() == 1
        assert trashed(stale["old"]).removed_by == "beat"

    def test_run_lifecycle_cleanup(self, team, stale):
        pipeline.config_update(team=team, cleanup_idle_days=90)
        call_command("run_lifecycle", "--team", team.id, "--op", "cleanup", stdout=StringIO())
        assert trashed(stale["old"]).removed_by == "command"

    def test_cleanup_memories_apply(self, team, stale):
        out = StringIO()
        args = ["--team", team.id, "--max-age-days", "90", "--min-importance", "0.2"]
        call_command("cleanup_memories", *args, "--apply", stdout=out)
        assert trashed(stale["old"]).removed_by == "command"
        assert "restorable" in out.getvalue()

    def test_console_bulk_delete(self, team, api):
        mid = write(api, "a memory a lead deletes in bulk")
        lead = member_client(team, "lead_a", "lead")
        r = lead.post(f"/review/{team.id}/memories/bulk/", {"ids": [str(mid)], "action": "delete"})
        assert r.status_code == 302
        item = trashed(mid)
        assert item.removed_by == "console" and "lead_a" in item.reason

    def test_extract_facts_delete_after_removes_no_long_term_memory(self, manual, stale):
        # It only consumes working memory (archived to L0): no long-term memory is removed.
        before = set(Memory.objects.values_list("pk", flat=True))
        manual.post("/memories/working", {"agent_id": "alice", "content": "we ship on Friday"})
        manual.post("/lifecycle/extract-facts", {"agent_id": "alice", "delete_after": True})
        assert before <= set(Memory.objects.values_list("pk", flat=True))
        assert not TrashedMemory.objects.exists()


# --- restore, purge, erase ----------------------------------------------------------------------


class TestRestore:
    def test_restore_brings_back_id_embedding_shares_revisions_and_search(self, api):
        mid = write(api, "the user prefers green tea in the morning")
        api.post(f"/memories/personal/{mid}/share", {"agent_ids": ["bob"], "permission": "write"})
        api.put(f"/memories/personal/{mid}", {"importance": 0.7})
        before = Memory.objects.get(pk=mid)
        revisions = list(MemoryRevision.objects.filter(memory_id=mid).values("action", "after"))
        assert search_ids(api, "green tea") == [mid]
        api.delete(f"/memories/personal/{mid}")
        assert search_ids(api, "green tea") == []

        r = api.post(f"/memories/trash/{mid}/restore")
        assert r.status_code == 200, r.content
        data = ok_data(r)
        assert data["id"] == mid and data["content"] == before.content
        assert data["importance"] == 0.7
        after = Memory.objects.get(pk=mid)
        assert bytes(after.embedding) == bytes(before.embedding)
        assert after.created_at == before.created_at
        assert list(
            MemoryShare.objects.filter(memory_id=mid).values_list("agent_id", "permission")
        ) == [("bob", "write")]
        assert (
            list(MemoryRevision.objects.filter(memory_id=mid).values("action", "after"))
            == revisions
        )
        assert not TrashedMemory.objects.exists()
        assert search_ids(api, "green tea") == [mid]
        # Restored once: a second restore finds nothing.
        assert api.post(f"/memories/trash/{mid}/restore").status_code == 404

    def test_purge_true_skips_the_trash_and_leaves_search_at_once(self, api):
        mid = write(api, "a secret the user wants gone")
        assert search_ids(api, "secret the user wants gone") == [mid]
        assert api.delete(f"/memories/personal/{mid}?purge=true").status_code == 200
        assert search_ids(api, "secret the user wants gone") == []
        assert not TrashedMemory.objects.exists() and not Memory.objects.filter(pk=mid).exists()
        assert api.post(f"/memories/trash/{mid}/restore").status_code == 404

    def test_purge_must_be_a_boolean(self, api):
        mid = write(api, "a memory")
        r = api.delete(f"/memories/personal/{mid}?purge=maybe")
        assert r.status_code == 400 and error_code(r) == "VALIDATION_ERROR"
        assert Memory.objects.filter(pk=mid).exists()

    def test_erase_from_the_trash_is_final(self, api):
        mid = write(api, "an address the user asked us to erase")
        assert search_ids(api, "address to erase") == [mid]
        api.delete(f"/memories/personal/{mid}")
        assert search_ids(api, "address to erase") == []
        r = api.delete(f"/memories/trash/{mid}")
        assert r.status_code == 200 and ok_data(r) is None
        assert not TrashedMemory.objects.exists()
        assert api.post(f"/memories/trash/{mid}/restore").status_code == 404
        assert api.delete(f"/memories/trash/{mid}").status_code == 404
        assert search_ids(api, "address to erase") == []

    def test_past_the_retention_restore_and_erase_answer_404(self, api, settings):
        mid = write(api, "an old forgotten note")
        api.delete(f"/memories/personal/{mid}")
        item = trashed(mid)
        past = timezone.now() - timedelta(days=settings.TRASH_RETENTION_DAYS, seconds=1)
        assert item.expires_at - item.purged_at == timedelta(days=settings.TRASH_RETENTION_DAYS)
        # As if the retention had passed (the beat job that empties the trash has not run yet).
        TrashedMemory.objects.filter(pk=item.pk).update(
            purged_at=past, expires_at=past + timedelta(days=settings.TRASH_RETENTION_DAYS)
        )
        assert listed(api)["total"] == 0
        assert error_code(api.post(f"/memories/trash/{mid}/restore")) == "NOT_FOUND"
        assert api.delete(f"/memories/trash/{mid}").status_code == 404
        assert not Memory.objects.filter(pk=mid).exists()

    def test_restoring_a_duplicate_of_a_live_memory_is_409(self, api):
        mid = write(api, "the office opens at nine")
        api.delete(f"/memories/personal/{mid}")
        again = write(api, "the office opens at nine")
        r = api.post(f"/memories/trash/{mid}/restore")
        assert r.status_code == 409 and error_code(r) == "CONFLICT"
        assert f"#{again}" in r.json()["error"]
        assert TrashedMemory.objects.filter(memory_id=mid).exists()
        assert not Memory.objects.filter(pk=mid).exists()
        # Another agent's scope holds no duplicate: its copy restores fine.
        other = write(api, "the office opens at nine", agent="bob")
        api.delete(f"/memories/personal/{other}")
        assert api.post(f"/memories/trash/{other}/restore").status_code == 200

    def test_a_key_in_other_capitals_is_no_duplicate(self, api):
        # "x7QZ" is not "x7Qz": both are kept, and the trashed one comes back beside the other.
        mid = write(api, "the deploy key ends in x7QZ")
        api.delete(f"/memories/personal/{mid}")
        other = write(api, "the deploy key ends in x7Qz")
        assert api.post(f"/memories/trash/{mid}/restore").status_code == 200
        contents = set(Memory.objects.values_list("content", flat=True))
        assert contents == {"the deploy key ends in x7QZ", "the deploy key ends in x7Qz"}
        assert Memory.objects.get(pk=mid).content_hash != Memory.objects.get(pk=other).content_hash

    def test_agent_deletion_is_final_and_empties_its_trash(self, api, team):
        mid = write(api, "a note of an agent about to be deleted", agent="gone")
        api.delete(f"/memories/personal/{mid}")
        assert api.delete(f"/agents/{team.id}/gone").status_code == 200
        assert not TrashedMemory.objects.exists()
        assert api.post(f"/memories/trash/{mid}/restore").status_code == 404


# --- listing, paging, isolation -------------------------------------------------------------------


class TestListAndIsolation:
    def test_paged_newest_first_and_filtered_by_agent(self, api):
        ids = [
            write(api, f"note number {w}", agent=a)
            for w, a in (("one", "alice"), ("two", "bob"), ("three", "alice"))
        ]
        for mid in ids:
            api.delete(f"/memories/personal/{mid}")
        first = listed(api, page=1, page_size=2)
        second = listed(api, page=2, page_size=2)
        assert first["total"] == 3 and (first["page"], first["page_size"]) == (1, 2)
        assert [i["id"] for i in first["items"] + second["items"]] == sorted(ids, reverse=True)
        alice = listed(api, agent_id="alice")
        assert {i["id"] for i in alice["items"]} == {ids[0], ids[2]}
        assert api.get("/memories/trash?page=0").status_code == 400
        assert api.get("/memories/trash?agent_id=bad%20id").status_code == 400

    def test_another_teams_trash_is_404_like_a_missing_id(self, api, other_api):
        mid = write(api, "team a's private note")
        api.delete(f"/memories/personal/{mid}")
        missing = 10**9
        assert listed(other_api)["total"] == 0
        for method, path in (
            ("post", "/memories/trash/{}/restore"),
            ("delete", "/memories/trash/{}"),
        ):
            theirs = getattr(other_api, method)(path.format(mid))
            absent = getattr(other_api, method)(path.format(missing))
            assert theirs.status_code == absent.status_code == 404
            assert theirs.json() == absent.json()
        assert trashed(mid).team_id == "team_a"

    def test_an_agent_key_sees_its_own_and_team_trash_only(self, api, agent_api):
        mine = write(api, "researcher's own note", agent="researcher")
        theirs = write(api, "alice's private note", agent="alice")
        shared = ok_data(api.post("/memories/team", {"content": "a team-wide fact"}))["id"]
        for mid in (mine, theirs):
            api.delete(f"/memories/personal/{mid}")
        api.delete(f"/memories/team/{shared}")
        assert {i["id"] for i in listed(agent_api)["items"]} == {mine, shared}
        assert agent_api.get("/memories/trash?agent_id=alice").status_code == 403
        assert agent_api.post(f"/memories/trash/{theirs}/restore").status_code == 404
        assert agent_api.delete(f"/memories/trash/{theirs}").status_code == 404
        assert TrashedMemory.objects.filter(memory_id=theirs).exists()
        assert agent_api.post(f"/memories/trash/{shared}/restore").status_code == 200
        assert agent_api.post(f"/memories/trash/{mine}/restore").status_code == 200

    def test_an_agent_key_cannot_trash_another_agents_memory(self, api, agent_api):
        theirs = write(api, "alice's note", agent="alice")
        assert agent_api.delete(f"/memories/personal/{theirs}").status_code == 403
        assert agent_api.delete(f"/memories/personal/{theirs}?purge=true").status_code == 403
        assert Memory.objects.filter(pk=theirs).exists() and not TrashedMemory.objects.exists()


# --- recall counts ----------------------------------------------------------------------------


class TestTouch:
    @pytest.fixture
    def notes(self, api):
        return {
            "bananas": write(api, "Bananas are yellow and grow in bunches."),
            "report": write(api, "The report about bananas is due soon."),
            "other": write(api, "The quarterly report is due on the fifth of each month."),
        }

    def search(self, api, min_score):
        body = {"agent_id": "alice", "query": "yellow fruit", "min_score": min_score}
        return {m["id"]: m["score"] for m in ok_data(api.post("/memories/personal/search", body))}

    def test_only_results_above_the_effective_min_score_are_touched(self, api, notes, settings):
        scores = self.search(api, 0.0)
        floor = settings.SEARCH_TOUCH_MIN_SCORE
        assert scores[notes["bananas"]] >= floor
        # Returned (min_score 0) but under the floor: junk, not a recall.
        assert 0 < scores[notes["report"]] < floor
        counts = dict(Memory.objects.values_list("pk", "access_count"))
        assert counts == {notes["bananas"]: 1, notes["report"]: 0, notes["other"]: 0}
        assert Memory.objects.get(pk=notes["report"]).last_accessed is None

    def test_the_floor_is_the_setting(self, api, notes, settings):
        # Without the floor a min_score 0 search would count the junk as recalled too.
        settings.SEARCH_TOUCH_MIN_SCORE = 0.0
        self.search(api, 0.0)
        counts = dict(Memory.objects.values_list("pk", "access_count"))
        assert counts == {notes["bananas"]: 1, notes["report"]: 1, notes["other"]: 0}

    def test_the_console_and_recent_keep_their_rules(self, api, notes, team):
        lead = member_client(team, "lead_a", "lead")
        assert lead.get(f"/review/{team.id}/memories/", {"q": "yellow fruit"}).status_code == 200
        assert set(Memory.objects.values_list("access_count", flat=True)) == {0}
        # Recent (an explicit fetch, no score) still counts as recall, as the API documents.
        ok_data(api.get("/memories/personal/recent/alice?limit=1"))
        assert Memory.objects.get(pk=notes["other"]).access_count == 1
