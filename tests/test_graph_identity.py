"""Team-level identity of graph entities across agents (graph.identity): what links (the same
organisation, a place named in both scripts with dictionary evidence), what never does (people,
the user, names without evidence, another team), idempotent backfill, and who sees the links
(team-wide views only, never an agent-scoped key)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from graph.identity import TeamLinker, link_team
from graph.models import Entity, EntityIdentity
from graph.services import entity_delete, entity_update, identities_relabel
from graph.tasks import prune_identities_task
from memoryplatform.celery import app
from tenants.models import Agent
from tenants.services import agent_delete, api_key_issue

from .console_helpers import member_client
from .factories import AgentFactory, EntityFactory, EntityIdentityFactory
from .helpers import SignedClient, ok_data

pytestmark = pytest.mark.django_db


def entity(team, name, entity_type, agent_id=""):
    return EntityFactory(team=team, name=name, entity_type=entity_type, agent_id=agent_id)


def identity_of(e: Entity):
    return Entity.objects.get(pk=e.pk).identity_id


def agent_client(team, agent_id: str) -> SignedClient:
    agent = Agent.objects.filter(team=team, agent_id=agent_id).first() or AgentFactory(
        team=team, agent_id=agent_id
    )
    k = api_key_issue(team=team, agent=agent, label=f"{agent_id}-scoped")
    return SignedClient(Client(), k.key_id, k.secret)


class TestWhatLinks:
    def test_the_same_organisation_of_two_agents_and_the_team_is_one_identity(self, team):
        alice = entity(team, "Binance", "organization", "alice")
        bob = entity(team, "binance", "organization", "bob")
        shared = entity(team, "Binance Inc.", "organization")  # team-wide, legal suffix
        result = link_team(team=team)
        assert (result.linked, result.identities_created) == (3, 1)
        identity = EntityIdentity.objects.get(team=team)
        assert {identity_of(alice), identity_of(bob), identity_of(shared)} == {identity.pk}
        # Labelled by the team-wide entity; each entity stays its own (nothing merged).
        assert (identity.name, identity.entity_type) == ("Binance Inc.", "organization")
        assert Entity.objects.filter(team=team).count() == 3

    @pytest.mark.parametrize("how", ["command", "extraction"])
    def test_two_agents_identity_is_labelled_by_the_older_member(self, team, how):
        """As it is labelled again when a member goes (the team-wide member's name, else the
        oldest's): whichever of the two the linker meets first. The command went through the
        oldest first and labelled the identity with the name it matched, the newer one."""
        alice = entity(team, "Binance", "organization", "alice")
        Entity.objects.filter(pk=alice.pk).update(created_at=timezone.now() - timedelta(hours=1))
        bob = entity(team, "binance", "organization", "bob")
        if how == "command":
            link_team(team=team)
        else:  # an extraction of bob's links what it just wrote
            TeamLinker(team).link(Entity.objects.get(pk=bob.pk))
        assert identity_of(alice) == identity_of(bob) is not None
        assert EntityIdentity.objects.get(team=team).name == "Binance"

    def test_a_concept_meets_a_typed_entity_of_the_same_name_and_gives_it_its_type(self, team):
        guess = entity(team, "Databricks", "concept", "alice")
        typed = entity(team, "Databricks", "organization", "bob")
        link_team(team=team)
        assert identity_of(guess) == identity_of(typed) is not None
        assert EntityIdentity.objects.get(team=team).entity_type == "organization"

    def test_a_place_in_both_scripts_links_on_dictionary_and_embedding_evidence(self, team):
        en = entity(team, "Singapore", "location", "alice")
        zh = entity(team, "新加坡", "location", "bob")
        china = entity(team, "China", "location", "carol")
        beijing = entity(team, "北京", "location", "dave")
        link_team(team=team)
        assert identity_of(en) == identity_of(zh) is not None
        # The dictionary glosses 北京 with "China" too; the embedding disagrees: no link.
        assert identity_of(china) is None and identity_of(beijing) is None

    def test_no_dictionary_entry_no_link_across_scripts(self, team):
        zh = entity(team, "币安", "organization", "alice")
        en = entity(team, "Binance", "organization", "bob")
        link_team(team=team)
        assert identity_of(zh) is None and identity_of(en) is None

    def test_skills_and_projects_link_by_key_but_never_across_types(self, team):
        py1 = entity(team, "Python 3.13", "skill", "alice")
        py2 = entity(team, "python", "skill", "bob")
        apollo = entity(team, "Apollo", "project", "alice")
        apollo_place = entity(team, "Apollo", "location", "bob")
        link_team(team=team)
        assert identity_of(py1) == identity_of(py2) is not None
        assert identity_of(apollo) is None and identity_of(apollo_place) is None

    def test_one_agents_entities_alone_make_no_identity(self, team):
        a = entity(team, "Python", "skill", "alice")
        b = entity(team, "Python 3", "skill", "alice")
        assert link_team(team=team).identities_created == 0
        assert identity_of(a) is None and identity_of(b) is None


class TestWhatNeverLinks:
    def test_the_user_of_each_agent_is_their_own(self, team):
        users = [
            entity(team, "用户", "person", "alice"),
            entity(team, "用户", "person", "bob"),
            entity(team, "the user", "person", "carol"),
            # A guess that typed the user as a concept is still some agent's user.
            entity(team, "用户", "concept", "dave"),
            entity(team, "User", "concept", "erin"),
        ]
        result = link_team(team=team)
        assert result.linked == 0 and not EntityIdentity.objects.exists()
        assert all(identity_of(u) is None for u in users)

    def test_people_never_link_whether_named_alike_or_not(self, team):
        people = [
            entity(team, "Alice", "person", "alice"),
            entity(team, "Alice", "person", "bob"),
            entity(team, "张伟", "person", "alice"),
            entity(team, "李娜", "person", "bob"),
        ]
        link_team(team=team)
        assert all(identity_of(p) is None for p in people)

    def test_preferences_goals_and_facts_are_about_one_agents_user(self, team):
        for t in ("preference", "goal", "fact", "custom"):
            entity(team, "concise answers", t, "alice")
            entity(team, "concise answers", t, "bob")
        assert link_team(team=team).linked == 0

    def test_another_team_is_never_linked_and_never_touched(self, team, other_team):
        mine = entity(team, "Binance", "organization", "alice")
        theirs = entity(other_team, "Binance", "organization", "bob")
        theirs_too = entity(other_team, "Binance", "organization", "carol")
        assert link_team(team=team).linked == 0
        assert identity_of(mine) is None and identity_of(theirs) is None
        link_team(team=other_team)
        assert identity_of(theirs) == identity_of(theirs_too) is not None
        assert identity_of(mine) is None
        assert EntityIdentity.objects.get().team_id == other_team.id
        with pytest.raises(ValueError):
            TeamLinker(team).link(theirs)

    def test_a_link_to_another_teams_identity_is_undone(self, team, other_team):
        foreign = EntityIdentityFactory(team=other_team, name="Acme")
        mine = entity(team, "Acme", "organization", "alice")
        Entity.objects.filter(pk=mine.pk).update(identity=foreign)  # as a bug would
        link_team(team=team)
        assert identity_of(mine) is None

    def test_a_match_linked_to_another_teams_identity_is_left_alone(self, team, other_team):
        foreign = EntityIdentityFactory(team=other_team, name="Gate")
        wrong = entity(team, "Gate", "organization", "alice")
        Entity.objects.filter(pk=wrong.pk).update(identity=foreign)  # as a bug would
        late = entity(team, "Gate", "organization", "bob")
        assert TeamLinker(team).link(late) is None  # never joins it, never fails
        assert identity_of(late) is None

    def test_deleting_the_team_takes_its_identities_and_no_other(self, team, other_team):
        from tenants.services import team_delete

        EntityIdentityFactory(team=team, name="Bitget")
        kept = EntityIdentityFactory(team=other_team, name="Bitget")
        team_delete(team=team)
        assert list(EntityIdentity.objects.all()) == [kept]
        assert Entity.objects.filter(identity=kept).count() == 2


class TestBackfill:
    def test_a_second_run_links_and_creates_nothing(self, team):
        for agent in ("alice", "bob", "carol"):
            entity(team, "Binance", "organization", agent)
            entity(team, "Redis", "skill", agent)
        entity(team, "Singapore", "location", "alice")
        entity(team, "新加坡", "location", "bob")
        first = link_team(team=team)
        assert (first.linked, first.identities_created) == (8, 3)
        before = dict(Entity.objects.values_list("id", "identity_id"))
        again = link_team(team=team)
        assert (again.linked, again.identities_created, again.identities_pruned) == (0, 0, 0)
        assert dict(Entity.objects.values_list("id", "identity_id")) == before

    def test_a_later_entity_joins_the_existing_identity(self, team):
        identity = EntityIdentityFactory(team=team, name="Kraken")
        late = entity(team, "Kraken", "organization", "carol")
        link_team(team=team)
        assert identity_of(late) == identity.pk
        assert EntityIdentity.objects.count() == 1

    def test_an_identity_left_with_one_scope_is_pruned(self, team):
        identity = EntityIdentityFactory(team=team, name="OKX")
        Entity.objects.filter(team=team, agent_id="bob").delete()
        assert link_team(team=team).identities_pruned == 1
        assert not EntityIdentity.objects.filter(pk=identity.pk).exists()
        assert Entity.objects.get(team=team, agent_id="alice").identity_id is None

    def test_a_rename_unlinks_the_entity(self, team):
        EntityIdentityFactory(team=team, name="Bybit")
        renamed = Entity.objects.get(team=team, agent_id="alice")
        entity_update(entity=renamed, description="an exchange")
        assert identity_of(renamed) is not None  # not renamed: still linked
        entity_update(entity=renamed, name="Bybit Earn")
        assert identity_of(renamed) is None
        assert link_team(team=team).identities_pruned == 1

    def test_the_command_links_one_team_or_all_and_refuses_an_unknown_team(
        self, team, other_team, capsys
    ):
        entity(team, "Binance", "organization", "alice")
        entity(team, "Binance", "organization", "bob")
        call_command("link_team_entities", "--team", team.id)
        out = capsys.readouterr().out
        assert f"{team.id}: 2 linkable entities, 2 linked, 1 identities created" in out
        call_command("link_team_entities")
        out = capsys.readouterr().out
        assert f"{team.id}: 2 linkable entities, 0 linked" in out and other_team.id in out
        with pytest.raises(CommandError):
            call_command("link_team_entities", "--team", "no_such_team")

    def test_a_bundle_never_carries_the_identity(self):
        from lifecycle.services import bundle

        assert "identity" not in {f.name for f in bundle._fields(bundle.SPECS["entity"])}


class TestExtraction:
    def test_extraction_links_a_place_across_agents_but_not_their_users(self, api, team):
        for agent, text in (
            ("alice", "The user lives in Singapore."),
            ("bob", "用户住在新加坡。"),
        ):
            r = api.post(
                "/memories/personal", {"agent_id": agent, "content": text, "enable_dedup": False}
            )
            assert r.status_code == 201, r.content
            r = api.post("/lifecycle/extract-graph", {"agent_id": agent})
            assert r.status_code == 200, r.content
        en = Entity.objects.get(team=team, agent_id="alice", entity_type="location")
        zh = Entity.objects.get(team=team, agent_id="bob", entity_type="location")
        assert (en.name, zh.name) == ("Singapore", "新加坡")
        assert en.identity_id == zh.identity_id is not None
        users = Entity.objects.filter(team=team, entity_type="person")
        assert users.count() == 2 and not users.filter(identity__isnull=False).exists()
        # A second extraction changes nothing.
        api.post("/lifecycle/extract-graph", {"agent_id": "bob"})
        assert EntityIdentity.objects.count() == 1

    def test_a_link_made_after_its_agents_deletion_makes_nothing(self, team):
        """Extraction links each entity it wrote outside the agent's write lock (a lock across
        the link could deadlock with other agents' extractions: graph.extraction._fenced). An
        agent deleted in between took the entity with it: the link, whose linker read the team
        before, finds it gone and makes no identity for the other agent's entity."""
        AgentFactory(team=team, agent_id="alice")
        alices = entity(team, "Kraken", "organization", "alice")
        bobs = entity(team, "Kraken", "organization", "bob")
        linker = TeamLinker(team)
        linker._load()  # the team read before the deletion, as an extraction's linker has it
        agent_delete(team=team, agent_id="alice")
        assert linker.link(alices) is None
        assert linker.link(bobs) is None  # its match was alice's
        assert not EntityIdentity.objects.filter(team=team).exists()
        assert identity_of(bobs) is None


class TestWhoSeesIt:
    @pytest.fixture
    def linked(self, team, other_team):
        identity = EntityIdentityFactory(team=team, name="Binance")
        alice = Entity.objects.get(team=team, agent_id="alice")
        bob = Entity.objects.get(team=team, agent_id="bob")
        EntityIdentityFactory(team=other_team, name="Binance")
        return {"identity": identity, "alice": alice, "bob": bob}

    def test_a_team_wide_key_sees_the_identity_on_every_entity_body(self, api, linked):
        want = str(linked["identity"].pk)
        items = ok_data(api.get("/graph/entities"))["items"]
        assert {e["identity_id"] for e in items} == {want}
        detail = ok_data(api.get(f"/graph/entities/{linked['alice'].pk}"))
        assert detail["entity"]["identity_id"] == want
        whole = ok_data(api.get("/graph"))
        assert {e["identity_id"] for e in whole["entities"]} == {want}

    def test_an_agent_scoped_key_sees_neither_the_link_nor_the_other_agent(self, team, linked):
        alice_api = agent_client(team, "alice")
        bodies = [
            ok_data(alice_api.get("/graph/entities"))["items"],
            ok_data(alice_api.get("/graph"))["entities"],
            [ok_data(alice_api.get(f"/graph/entities/{linked['alice'].pk}"))["entity"]],
            ok_data(alice_api.get("/graph/entities?q=Binance"))["items"],
        ]
        for body in bodies:
            assert [e["id"] for e in body] == [str(linked["alice"].pk)]
            assert all("identity_id" not in e for e in body)
        assert alice_api.get(f"/graph/entities/{linked['bob'].pk}").status_code == 403

    def test_another_team_sees_nothing_of_it(self, other_api, linked):
        for e in ("alice", "bob"):
            assert other_api.get(f"/graph/entities/{linked[e].pk}").status_code == 404
        items = ok_data(other_api.get("/graph/entities"))["items"]
        theirs = {e["identity_id"] for e in items}
        assert len(theirs) == 1 and str(linked["identity"].pk) not in theirs

    def test_the_console_team_view_groups_the_members_and_the_agent_view_does_not(
        self, team, linked, lead
    ):
        base = f"/review/{team.id}/graph/"
        body = lead.get(base + "data/").json()
        [group] = body["identities"]
        assert group["id"] == str(linked["identity"].pk) and group["name"] == "Binance"
        assert set(group["members"]) == {str(linked["alice"].pk), str(linked["bob"].pk)}
        panel = lead.get(base + f"entity/{linked['alice'].pk}/").json()
        assert [o["id"] for o in panel["same_as"]] == [str(linked["bob"].pk)]
        assert panel["same_as"][0]["agent_id"] == "bob"
        as_alice = lead.get(base + "data/?agent=alice").json()
        assert as_alice["identities"] == []
        assert all("identity_id" not in e for e in as_alice["entities"])
        panel = lead.get(base + f"entity/{linked['alice'].pk}/?agent=alice").json()
        assert "same_as" not in panel and "identity_id" not in panel["entity"]

    def test_another_teams_console_lead_sees_only_their_own(self, other_team, linked):
        theirs = member_client(other_team, "lead_b", "lead")
        body = theirs.get(f"/review/{other_team.id}/graph/data/").json()
        [group] = body["identities"]
        assert group["id"] != str(linked["identity"].pk)
        assert str(linked["alice"].pk) not in {e["id"] for e in body["entities"]}


class TestALabelGoesWithItsName:
    """An identity is labelled with a member's name. A member deleted (with its agent, whose
    deletion is final, or on its own) or renamed takes that name off the identity: the identity
    is labelled from the members it has left, and removed when it has none."""

    @pytest.fixture
    def binance(self, team):
        names = {"alice": "Binance Inc.", "bob": "binance", "carol": "Binance"}
        members = []
        for age, (agent_id, name) in enumerate(names.items()):
            AgentFactory(team=team, agent_id=agent_id)
            member = entity(team, name, "organization", agent_id)
            # Oldest first, a second apart: the label's choice does not hang on a clock tie.
            Entity.objects.filter(pk=member.pk).update(
                created_at=timezone.now() - timedelta(seconds=10 - age)
            )
            members.append(member)
        identity = EntityIdentityFactory(team=team, members=members)
        # Labelled with alice's name, as the linker does when hers is the member matched first.
        EntityIdentity.objects.filter(pk=identity.pk).update(name="Binance Inc.")
        identity.refresh_from_db()
        return identity

    def test_an_agents_deletion_takes_its_name_off_the_identity(self, api, team, binance):
        ok_data(api.delete(f"/agents/{team.id}/alice"))
        binance.refresh_from_db()
        assert binance.name == "binance"  # bob's: the oldest member left
        assert set(binance.members.values_list("agent_id", flat=True)) == {"bob", "carol"}
        assert not EntityIdentity.objects.filter(name="Binance Inc.").exists()

    def test_an_entitys_deletion_takes_its_name_off_the_identity(self, api, team, binance):
        alices = Entity.objects.get(team=team, agent_id="alice")
        ok_data(api.delete(f"/graph/entities/{alices.pk}"))
        binance.refresh_from_db()
        assert binance.name == "binance"

    def test_a_rename_takes_the_old_name_off_the_identity(self, api, team, binance):
        alices = Entity.objects.get(team=team, agent_id="alice")
        ok_data(api.put(f"/graph/entities/{alices.pk}", {"name": "Binance Earn"}))
        binance.refresh_from_db()
        assert binance.name == "binance" and identity_of(alices) is None

    def test_a_name_a_member_left_still_carries_stays(self, api, team, binance):
        # bob's, not the oldest's: labelled again only when no member carries the label.
        EntityIdentity.objects.filter(pk=binance.pk).update(name="binance")
        ok_data(api.delete(f"/agents/{team.id}/carol"))
        binance.refresh_from_db()
        assert binance.name == "binance"

    def test_a_team_wide_member_labels_before_an_older_agents_one(self, api, team, binance):
        EntityIdentity.objects.filter(pk=binance.pk).update(name="BINANCE")
        shared = entity(team, "BINANCE", "organization")
        Entity.objects.filter(pk=shared.pk).update(identity=binance)
        ok_data(api.delete(f"/graph/entities/{shared.pk}"))
        binance.refresh_from_db()
        assert binance.name == "Binance Inc."  # then the oldest agent's
        again = entity(team, "Binance Holdings", "organization")
        Entity.objects.filter(pk=again.pk).update(identity=binance)
        ok_data(api.delete(f"/agents/{team.id}/alice"))
        binance.refresh_from_db()
        assert binance.name == "Binance Holdings"  # team-wide, though the youngest

    def test_an_identity_left_without_members_is_removed(self, api, team, binance):
        for agent_id in ("alice", "bob"):
            ok_data(api.delete(f"/agents/{team.id}/{agent_id}"))
        binance.refresh_from_db()
        assert binance.name == "Binance"  # carol's, the one scope left: the command prunes it
        ok_data(api.delete(f"/agents/{team.id}/carol"))
        assert not EntityIdentity.objects.filter(pk=binance.pk).exists()

    def test_the_members_of_all_identities_are_read_at_once(self, team, binance):
        """A deleted agent's entities can be linked to hundreds of identities: two queries (lock
        the identities, read their members) whatever their number, when no label changes."""
        identities = [binance.pk]
        for name in ("Acme Capital", "Singapore"):
            one, two = (entity(team, name, "organization", a) for a in ("alice", "bob"))
            identities.append(EntityIdentityFactory(team=team, name=name, members=[one, two]).pk)
        with transaction.atomic(), CaptureQueriesContext(connection) as captured:
            identities_relabel(team=team, identity_ids=identities)
        assert len(captured.captured_queries) == 2, [q["sql"] for q in captured]

    def test_another_teams_identities_are_not_touched(self, api, team, other_team, binance):
        theirs = EntityIdentityFactory(team=other_team, name="Binance Inc.")
        ok_data(api.delete(f"/agents/{team.id}/alice"))
        theirs.refresh_from_db()
        assert theirs.name == "Binance Inc."
        assert theirs.members.count() == 2


class TestPruning:
    """An identity a member's deletion left with a single scope is removed by beat's hourly
    task (graph.prune_identities) in every team, as by the command; the others stay."""

    def test_beat_prunes_single_scope_identities_of_every_team(self, team, other_team):
        pairs = [EntityIdentityFactory(team=t, name="Binance") for t in (team, other_team)]
        kept = EntityIdentityFactory(team=team, name="Kraken")
        for identity in pairs:  # bob's entity deleted: alice's alone is left
            entity_delete(entity=identity.members.get(agent_id="bob"))
        assert prune_identities_task() == 2
        assert list(EntityIdentity.objects.all()) == [kept]
        alices = Entity.objects.filter(agent_id="alice", name="Binance")
        assert alices.count() == 2 and not alices.exclude(identity=None).exists()
        assert prune_identities_task() == 0  # idempotent
        entry = app.conf.beat_schedule["prune-identities"]
        assert (entry["task"], prune_identities_task.name) == ("graph.prune_identities",) * 2
        assert "graph.prune_identities" in app.tasks  # found by the worker's autodiscovery
