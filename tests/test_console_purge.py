"""Console dry-run purge, audit and trash (the lead's bulk removal): preview, exact-set confirm, restore."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from memories import tasks
from memories.models import (
    IndexChange,
    Memory,
    MemoryRevision,
    MemoryShare,
    PurgeRun,
    TrashedMemory,
)
from memories.services import Actor, memories_touch, memory_create, memory_share, memory_update
from tenants.models import Agent

from .console_helpers import member_client
from .factories import AgentFactory
from .helpers import ok_data

pytestmark = pytest.mark.django_db

CRITERIA = {
    "idle_days": 30,
    "importance_below": 0.3,
    "scopes": ["personal", "team"],
    "preview": "1",
}


def mk(
    team,
    content,
    *,
    agent="alice",
    scope="personal",
    importance=0.1,
    idle=60,
    accessed=True,
    pinned=False,
):
    """A memory written through the service, then aged: idle `idle` days (or created then, never accessed)."""
    memory, _ = memory_create(
        team=team,
        scope=scope,
        agent_id=agent,
        content=content,
        importance=importance,
        enable_dedup=False,
        pinned=pinned,
    )
    now = timezone.now()
    Memory.objects.filter(pk=memory.pk).update(
        created_at=now - timedelta(days=idle + (0 if not accessed else 10)),
        last_accessed=now - timedelta(days=idle) if accessed else None,
        access_count=3 if accessed else 0,
    )
    return Memory.objects.get(pk=memory.pk)


def url(team, suffix=""):
    return f"/review/{team.id}/purge/{suffix}"


def preview(client, team, **overrides):
    params = {**CRITERIA, **overrides}
    return client.get(url(team), params)


def token_of(response) -> str:
    match = re.search(r'name="token" value="([^"]+)"', response.content.decode())
    assert match, "no confirm form in the preview"
    return match.group(1)


def confirm(client, team, token):
    return client.post(url(team, "confirm/"), {"token": token})


@pytest.fixture
def world(team, other_team):
    """Matching, non-matching and protected memories of team A, plus a matching one of team B."""
    for agent_id in ("alice", "bob"):
        AgentFactory(team=team, agent_id=agent_id)
    m = {
        "alice_old": mk(team, "alice old low note about tea", idle=60, importance=0.1),
        "alice_never": mk(team, "alice never read note", idle=45, importance=0.2, accessed=False),
        "bob_old": mk(team, "bob old note about parking", agent="bob", idle=45, importance=0.2),
        "team_old": mk(team, "team note about the old printer", agent="bob", scope="team", idle=90),
        "alice_recent": mk(team, "alice recent note", idle=5, importance=0.1),
        "alice_important": mk(team, "alice important note", idle=60, importance=0.5),
        "alice_pinned": mk(team, "alice pinned note", idle=60, importance=0.1, pinned=True),
        "superseded": mk(team, "the office is on floor 2", idle=60, importance=0.1),
        "superseding": mk(team, "the office is on floor 3", idle=60, importance=0.1),
        "b_old": mk(other_team, "team b old note", idle=60, importance=0.1),
    }
    Memory.objects.filter(pk=m["superseded"].pk).update(superseded_by=m["superseding"])
    return m


def ids(*memories):
    return {x.pk for x in memories}


class TestPreview:
    def test_it_lists_exactly_the_matching_items_with_reasons_counts_and_protected(
        self, team, lead, world
    ):
        r = preview(lead, team)
        assert r.status_code == 200
        p = r.context["preview"]
        w = world
        assert {i.memory.pk for i in p.items} == ids(
            w["alice_old"], w["alice_never"], w["bob_old"], w["team_old"], w["superseded"]
        )
        assert {i.memory.pk: i.protected for i in p.protected} == {
            w["alice_pinned"].pk: "pinned",
            w["superseding"].pk: "supersedes an older memory",
        }
        assert p.per_agent == [("alice", 3), ("bob", 2)]
        reasons = {i.memory.pk: i.reason for i in p.items}
        assert reasons[w["alice_old"].pk] == "idle 60 d, importance 0.10 < 0.30"
        assert reasons[w["alice_never"].pk] == "idle 45 d, importance 0.20 < 0.30, never accessed"
        assert reasons[w["superseded"].pk].endswith(f"superseded by #{w['superseding'].pk}")
        html = r.content.decode()
        assert "idle 60 d, importance 0.10 &lt; 0.30" in html
        assert "alice pinned note" in html and "Protected" in html
        assert "team b old note" not in html
        assert 'id="confirm-button"' in html

    def test_agent_and_scope_narrow_the_set(self, team, lead, world):
        p = preview(lead, team, agent="bob").context["preview"]
        assert {i.memory.pk for i in p.items} == ids(world["bob_old"], world["team_old"])
        p = preview(lead, team, agent="bob", scopes=["personal"]).context["preview"]
        assert {i.memory.pk for i in p.items} == ids(world["bob_old"])
        p = preview(lead, team, idle_days=50, importance_below=0.15).context["preview"]
        assert {i.memory.pk for i in p.items} == ids(
            world["alice_old"], world["team_old"], world["superseded"]
        )

    def test_a_preview_changes_nothing(self, team, lead, world):
        before = list(Memory.objects.order_by("id").values())
        changes = IndexChange.objects.count()
        assert preview(lead, team).status_code == 200
        assert list(Memory.objects.order_by("id").values()) == before
        assert IndexChange.objects.count() == changes
        assert PurgeRun.objects.count() == 0 and TrashedMemory.objects.count() == 0

    @pytest.mark.parametrize(
        "bad",
        [
            {"importance_below": "2"},
            {"importance_below": "0"},
            {"idle_days": "-1"},
            {"idle_days": "many"},
            {"scopes": []},
            {"scopes": ["working"]},
            {"agent": "someone_of_team_b"},
        ],
    )
    def test_bad_criteria_re_render_the_form_with_errors(self, team, lead, world, bad):
        r = preview(lead, team, **bad)
        assert r.status_code == 400
        assert r.context["preview"] is None
        assert r.context["form"].errors
        assert "errorlist" in r.content.decode()

    def test_nothing_matching_has_no_confirm(self, team, lead, world):
        r = preview(lead, team, importance_below=0.01)
        assert r.context["preview"].items == []
        assert 'id="confirm-button"' not in r.content.decode()


class TestConfirm:
    def test_it_purges_exactly_the_previewed_set_and_audits_it(self, team, lead, world):
        r = preview(lead, team)
        expected = {i.memory.pk for i in r.context["preview"].items}
        r = confirm(lead, team, token_of(r))
        assert r.status_code == 302
        run = PurgeRun.objects.get()
        assert r["Location"].endswith(f"/review/{team.id}/purge/trash/?run={run.pk}")
        assert not Memory.objects.filter(pk__in=expected).exists()
        survivors = set(Memory.objects.values_list("pk", flat=True))
        assert survivors == {m.pk for k, m in world.items()} - expected
        assert run.status == "confirmed" and run.count == len(expected)
        assert set(run.memory_ids) == expected
        assert run.user.username == "lead_a" and run.actor == "user lead_a"
        assert run.criteria == {
            "agent_id": "",
            "idle_days": 30,
            "importance_below": 0.3,
            "scopes": ["personal", "team"],
        }
        trashed = TrashedMemory.objects.filter(team=team)
        assert {t.memory_id for t in trashed} == expected
        for t in trashed:
            assert t.purge_run == run
            assert t.expires_at - t.purged_at == timedelta(days=30)
        history = lead.get(url(team)).content.decode()
        assert (
            f"#{run.pk}" in history
            and "user lead_a" in history
            and "importance &lt; 0.30" in history
        )

    @pytest.mark.parametrize("change", ["added", "accessed", "pinned", "edited", "deleted"])
    def test_a_changed_set_purges_nothing_says_what_changed_and_previews_again(
        self, team, lead, world, change
    ):
        r = preview(lead, team)
        token = token_of(r)
        w = world
        if change == "added":
            new = mk(team, "a fresh match appeared", idle=40, importance=0.1)
            expect = ("added", new.pk)
        elif change == "accessed":
            memories_touch(memory_ids=[w["alice_old"].pk])
            expect = ("removed", w["alice_old"].pk)
        elif change == "pinned":
            memory_update(memory=w["bob_old"], actor=Actor(), pinned=True)
            expect = ("removed", w["bob_old"].pk)
        elif change == "edited":
            memory_update(memory=w["bob_old"], actor=Actor(), importance=0.25)
            expect = ("modified", w["bob_old"].pk)
        else:
            Memory.objects.filter(pk=w["team_old"].pk).delete()
            expect = ("removed", w["team_old"].pk)
        count = Memory.objects.count()
        r = confirm(lead, team, token)
        assert r.status_code == 409
        assert Memory.objects.count() == count
        assert TrashedMemory.objects.count() == 0
        run = PurgeRun.objects.get()
        assert run.status == "changed" and run.count == 0
        kind, mid = expect
        assert mid in run.changes[kind]
        html = r.content.decode()
        assert "Nothing was purged" in html and f"#{mid}" in html
        # The new preview is there, and confirming it purges its own set.
        new_token = token_of(r)
        assert new_token != token
        new_set = {i.memory.pk for i in r.context["preview"].items}
        assert confirm(lead, team, new_token).status_code == 302
        assert not Memory.objects.filter(pk__in=new_set).exists()
        assert PurgeRun.objects.filter(status="confirmed").get().count == len(new_set)

    def test_the_same_token_cannot_purge_twice(self, team, lead, world):
        token = token_of(preview(lead, team))
        assert confirm(lead, team, token).status_code == 302
        r = confirm(lead, team, token)
        assert r.status_code == 409  # every previewed memory is gone: "changed", nothing purged
        assert PurgeRun.objects.filter(status="confirmed").count() == 1

    def test_a_forged_or_other_teams_token_is_refused(self, team, other_team, lead, world):
        r = confirm(lead, team, token_of(preview(lead, team))[:-3] + "abc")
        assert r.status_code == 302
        assert PurgeRun.objects.count() == 0
        assert "Invalid preview token" in lead.get(url(team)).content.decode()
        lead_b = member_client(other_team, "lead_b", "lead")
        token_b = token_of(preview(lead_b, other_team))
        confirm(lead, team, token_b)
        assert PurgeRun.objects.count() == 0
        assert Memory.objects.filter(pk=world["b_old"].pk).exists()

    def test_a_purged_memory_never_comes_back_in_api_search_nor_by_id(self, team, lead, api, world):
        target = world["bob_old"]
        query = {"agent_id": "bob", "query": "parking", "min_score": 0.0, "mode": "keyword"}
        found = ok_data(api.post("/memories/personal/search", query))
        assert target.pk in {m["id"] for m in found}  # the index is loaded in this process
        assert api.get(f"/lifecycle/sources/{target.pk}").status_code == 200
        # The search marked it as recalled: make it idle again before previewing.
        Memory.objects.filter(pk=target.pk).update(
            last_accessed=timezone.now() - timedelta(days=45)
        )
        assert confirm(lead, team, token_of(preview(lead, team))).status_code == 302
        found = ok_data(api.post("/memories/personal/search", query))
        assert target.pk not in {m["id"] for m in found}
        found = ok_data(api.post("/memories/personal/search", {**query, "mode": "hybrid"}))
        assert target.pk not in {m["id"] for m in found}
        assert api.get(f"/lifecycle/sources/{target.pk}").status_code == 404
        assert api.delete(f"/memories/personal/{target.pk}").status_code == 404


class TestTrash:
    def purge_all(self, client, team):
        assert confirm(client, team, token_of(preview(client, team))).status_code == 302
        return PurgeRun.objects.get(status="confirmed")

    def test_restore_brings_it_back_with_the_same_id_fields_shares_and_search(
        self, team, lead, api, world
    ):
        m = world["alice_old"]
        memory_share(memory=m, agent_ids=["bob"], permission="write")
        memory_update(memory=m, actor=Actor(label="user x"), category="drinks")
        m = Memory.objects.get(pk=m.pk)
        original = Memory.objects.filter(pk=m.pk).values().get()
        query = {"agent_id": "alice", "query": "tea", "min_score": 0.0, "mode": "keyword"}
        assert m.pk in {x["id"] for x in ok_data(api.post("/memories/personal/search", query))}
        Memory.objects.filter(pk=m.pk).update(last_accessed=original["last_accessed"])
        original = Memory.objects.filter(pk=m.pk).values().get()
        self.purge_all(lead, team)
        assert not Memory.objects.filter(pk=m.pk).exists()
        assert not MemoryShare.objects.filter(memory_id=m.pk).exists()
        assert m.pk not in {x["id"] for x in ok_data(api.post("/memories/personal/search", query))}

        item = TrashedMemory.objects.get(memory_id=m.pk)
        trash_page = lead.get(url(team, "trash/")).content.decode()
        assert "alice old low note about tea" in trash_page
        r = lead.post(url(team, f"trash/{item.pk}/restore/"))
        assert r.status_code == 302
        restored = Memory.objects.filter(pk=m.pk).values().get()
        assert restored == original  # same id, content, embedding, timestamps, counts, links
        assert list(
            MemoryShare.objects.filter(memory_id=m.pk).values_list("agent_id", "permission")
        ) == [("bob", "write")]
        assert MemoryRevision.objects.filter(memory_id=m.pk, after={"category": "drinks"}).exists()
        assert not TrashedMemory.objects.filter(pk=item.pk).exists()
        found = ok_data(api.post("/memories/personal/search", query))
        assert m.pk in {x["id"] for x in found}
        found = ok_data(api.post("/memories/personal/search", {**query, "mode": "hybrid"}))
        assert m.pk in {x["id"] for x in found}
        assert api.get(f"/lifecycle/sources/{m.pk}").status_code == 200
        assert "Restored 1 memory" in lead.get(url(team, "trash/")).content.decode()

    def test_restore_puts_back_the_graph_links(self, team, lead, world):
        from graph.models import Entity, EntityMention, Relation

        m = world["alice_old"]
        tea = Entity.objects.create(
            team=team, name="tea", normalized_name="tea", entity_type="preference", source_memory=m
        )
        alice = Entity.objects.create(
            team=team, name="Alice", normalized_name="alice", entity_type="person"
        )
        gone = Entity.objects.create(
            team=team, name="cup", normalized_name="cup", entity_type="concept"
        )
        for e in (tea, alice, gone):
            EntityMention.objects.create(team=team, entity=e, memory=m)
        rel = Relation.objects.create(
            team=team, source=alice, target=tea, relation_type="prefers", source_memory=m
        )
        self.purge_all(lead, team)
        assert not EntityMention.objects.filter(memory_id=m.pk).exists()
        assert Entity.objects.get(pk=tea.pk).source_memory_id is None
        gone.delete()
        item = TrashedMemory.objects.get(memory_id=m.pk)
        r = lead.post(url(team, f"trash/{item.pk}/restore/"), follow=True)
        assert set(
            EntityMention.objects.filter(memory_id=m.pk).values_list("entity_id", flat=True)
        ) == {
            tea.pk,
            alice.pk,
        }
        assert Entity.objects.get(pk=tea.pk).source_memory_id == m.pk
        assert Relation.objects.get(pk=rel.pk).source_memory_id == m.pk
        assert "graph entities it mentioned that no longer exist: 1." in r.content.decode()

    def test_restore_a_whole_run_with_its_links(self, team, lead, world):
        promoted = mk(team, "promoted team copy", scope="team", importance=0.9, idle=1)
        Memory.objects.filter(pk=promoted.pk).update(promoted_from=world["alice_old"])
        run = self.purge_all(lead, team)
        assert Memory.objects.get(pk=promoted.pk).promoted_from_id is None  # SET_NULL on delete
        r = lead.post(url(team, f"runs/{run.pk}/restore/"), {"run": run.pk})
        assert r.status_code == 302 and r["Location"].endswith(f"?run={run.pk}")
        assert set(
            Memory.objects.filter(pk__in=run.memory_ids).values_list("pk", flat=True)
        ) == set(run.memory_ids)
        assert (
            Memory.objects.get(pk=world["superseded"].pk).superseded_by_id
            == world["superseding"].pk
        )
        assert Memory.objects.get(pk=promoted.pk).promoted_from_id == world["alice_old"].pk
        assert TrashedMemory.objects.count() == 0

    def test_a_taken_id_is_reported_not_failed_and_agent_deletion_empties_its_trash(
        self, team, lead, world
    ):
        self.purge_all(lead, team)
        bob_item = TrashedMemory.objects.get(memory_id=world["bob_old"].pk)
        # Agent deletion is final: its personal memories already in the trash go with it (a new
        # agent registered under the same id must never get them back).
        Agent.objects.get(team=team, agent_id="bob").delete()
        assert not TrashedMemory.objects.filter(pk=bob_item.pk).exists()
        taken = TrashedMemory.objects.get(memory_id=world["alice_old"].pk)
        # Another memory now holds the id (e.g. created by a restore of a backup): never overwrite it.
        Memory.objects.create(
            pk=taken.memory_id,
            team=team,
            scope="personal",
            agent_id="alice",
            content="other",
            content_hash="x",
        )
        lead.post(url(team, f"trash/{taken.pk}/restore/"))
        page = lead.get(url(team, "trash/")).content.decode()
        assert "the id is taken" in page
        assert TrashedMemory.objects.filter(pk=taken.pk).count() == 1
        assert Memory.objects.get(pk=taken.memory_id).content == "other"

    def test_filters_by_run_and_agent(self, team, lead, world):
        run = self.purge_all(lead, team)
        r = lead.get(url(team, "trash/"), {"run": run.pk, "agent": "bob"})
        assert {t.memory_id for t in r.context["page"].object_list} == ids(
            world["bob_old"], world["team_old"]
        )
        assert lead.get(url(team, f"trash/{TrashedMemory.objects.first().pk}/")).status_code == 200

    def test_the_expiry_task_removes_only_expired_items(self, team, lead, world):
        self.purge_all(lead, team)
        first, *rest = TrashedMemory.objects.order_by("id")
        TrashedMemory.objects.filter(pk=first.pk).update(
            expires_at=timezone.now() - timedelta(minutes=1)
        )
        assert tasks.empty_expired_trash() == 1
        assert set(TrashedMemory.objects.values_list("pk", flat=True)) == {t.pk for t in rest}
        assert tasks.empty_expired_trash() == 0  # idempotent


class TestScoping:
    def test_other_teams_runs_items_and_memories_answer_404_and_are_never_listed(
        self, team, other_team, lead, world
    ):
        lead_b = member_client(other_team, "lead_b", "lead")
        assert confirm(lead_b, other_team, token_of(preview(lead_b, other_team))).status_code == 302
        run_b = PurgeRun.objects.get(team=other_team)
        item_b = TrashedMemory.objects.get(team=other_team)
        assert lead.get(url(team, "trash/"), {"run": run_b.pk}).status_code == 404
        assert lead.get(url(team, f"trash/{item_b.pk}/")).status_code == 404
        assert lead.post(url(team, f"trash/{item_b.pk}/restore/")).status_code == 404
        assert lead.post(url(team, f"runs/{run_b.pk}/restore/")).status_code == 404
        assert not Memory.objects.filter(pk=item_b.memory_id).exists()
        for suffix in ("", "trash/", f"trash/{item_b.pk}/"):
            assert lead.get(url(other_team, suffix)).status_code == 404
        assert lead.post(url(other_team, "confirm/"), {"token": "x"}).status_code == 404
        assert lead.post(url(other_team, f"runs/{run_b.pk}/restore/")).status_code == 404
        assert "team b old note" not in lead.get(url(team, "trash/")).content.decode()
        history = lead.get(url(team)).context["history"]
        assert run_b.pk not in {h["run"].pk for h in history}
        assert "team b old note" not in preview(lead, team).content.decode()

    def test_a_viewer_sees_preview_history_and_trash_but_cannot_change_anything(
        self, team, lead, viewer, world
    ):
        r = preview(viewer, team)
        assert r.status_code == 200 and r.context["preview"].items
        assert 'id="confirm-button"' not in r.content.decode()
        token = token_of(preview(lead, team))
        assert confirm(viewer, team, token).status_code == 403
        assert PurgeRun.objects.count() == 0
        assert confirm(lead, team, token).status_code == 302
        run = PurgeRun.objects.get()
        item = TrashedMemory.objects.first()
        assert viewer.get(url(team)).status_code == 200
        page = viewer.get(url(team, "trash/"), {"run": run.pk})
        assert page.status_code == 200 and "restore-button" not in page.content.decode()
        assert viewer.get(url(team, f"trash/{item.pk}/")).status_code == 200
        assert viewer.post(url(team, f"trash/{item.pk}/restore/")).status_code == 403
        assert viewer.post(url(team, f"runs/{run.pk}/restore/")).status_code == 403
        assert TrashedMemory.objects.count() == run.count


def test_the_empty_trash_command_deletes_expired_items(team, lead, world):
    from io import StringIO

    from django.core.management import call_command

    assert confirm(lead, team, token_of(preview(lead, team))).status_code == 302
    TrashedMemory.objects.filter(team=team).update(expires_at=timezone.now() - timedelta(days=1))
    out = StringIO()
    call_command("empty_trash", "--team", team.id, stdout=out)
    assert "deleted 5 expired" in out.getvalue()
    assert TrashedMemory.objects.count() == 0


def test_opening_the_purge_page_empties_expired_trash_of_the_team(team, lead, world):
    assert confirm(lead, team, token_of(preview(lead, team))).status_code == 302
    TrashedMemory.objects.filter(team=team).update(expires_at=timezone.now() - timedelta(days=1))
    assert lead.get(url(team)).status_code == 200
    assert TrashedMemory.objects.count() == 0
