"""Export and import of bundles (docs/export.md): POST /export as a job, GET /export/<job_id>
streamed from the database, POST /import with a signed gzip body; the commands; the client."""

from __future__ import annotations

import gzip
import json
import os
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from graph.models import Entity, EntityMention, Relation
from graph.services import (
    embedding_text,
    entities_update,
    entity_create_or_merge,
    entity_mention,
    relation_create,
)
from lifecycle.models import ExportChunk, JobKind, JobRun, Persona, Scenario, WorkingArchive
from lifecycle.selectors import archive_item_get
from lifecycle.services import bundle as bundle_module
from lifecycle.services.bundle import KINDS, exports_prune
from memories.models import (
    IndexChange,
    Memory,
    MemoryRevision,
    MemoryShare,
    Procedure,
    ProcedureRevision,
    ProfileField,
    ProfileRevision,
    ScopeLock,
)
from memories.retrieval.embeddings import embed_passages, get_embedder, to_bytes
from memories.retrieval.text import tokens_for_storage
from memories.services import (
    Actor,
    MemoryAttributes,
    memories_update,
    memory_create,
    memory_promote,
    memory_share,
    memory_supersede,
    memory_update,
    procedure_create,
    procedure_delete,
    procedure_update,
    profile_learn,
    profile_set,
)
from memoryplatform.client import MemoryClient
from tenants.models import Agent
from tenants.services import api_key_issue

from .factories import (
    JobRunFactory,
    PersonaFactory,
    ScenarioFactory,
    TeamFactory,
    WorkingArchiveFactory,
)
from .helpers import SignedClient, error_code, ok_data
from .livestack import manage

pytestmark = pytest.mark.django_db

GZIP = {"Content-Type": "application/gzip"}


# --- helpers ---------------------------------------------------------------------------------------


def populate(team) -> dict[str, Any]:
    """A team with a bit of everything a bundle carries, written through the services."""
    actor = Actor(label="tests")
    tea, _ = memory_create(
        team=team, scope="personal", agent_id="alice", content="Alice drinks oolong tea daily"
    )
    memory_update(memory=tea, actor=actor, importance=0.9, metadata={"source": "chat"})
    old, _ = memory_create(
        team=team, scope="personal", agent_id="alice", content="Alice lives in Berlin"
    )
    new, _ = memory_create(
        team=team, scope="personal", agent_id="alice", content="Alice moved to Munich in May"
    )
    memory_supersede(old=old, new=new, actor=actor)
    memory_share(memory=tea, agent_ids=["bob"], permission="write")
    promoted, _ = memory_promote(memory=tea, actor=actor)
    team_fact, _ = memory_create(
        team=team, scope="team", agent_id="", content="The release train leaves every Tuesday"
    )
    bob, _ = memory_create(
        team=team, scope="personal", agent_id="bob", content="Bob is learning the cello"
    )
    # Columns added lately travel like the others (the bundle carries every column).
    Memory.objects.filter(pk=tea.pk).update(run_id="run-7")
    WorkingArchiveFactory(
        team=team,
        agent_id="alice",
        content="we talked about tea",
        role="user",
        name="Alice",
        run_id="run-7",
    )
    scenario = ScenarioFactory(
        team=team, agent_id="alice", name="Drinks", memory_ids=[tea.pk, new.pk]
    )
    PersonaFactory(
        team=team,
        agent_id="alice",
        memory_ids=[tea.pk],
        scenario_ids=[scenario.pk],
        scenarios_snapshot=[
            {"id": scenario.pk, "name": "Drinks", "summary": "tea", "memory_ids": [tea.pk]}
        ],
    )
    alice_e, _ = entity_create_or_merge(
        team=team, name="Alice", entity_type="person", agent_id="alice", source_memory=tea
    )
    oolong, _ = entity_create_or_merge(
        team=team, name="Oolong", entity_type="preference", agent_id="alice", source_memory=tea
    )
    entity_mention(entity=oolong, memory=new)
    relation_create(source=alice_e, target=oolong, relation_type="prefers", source_memory=tea)
    team_e, _ = entity_create_or_merge(team=team, name="Release train", entity_type="project")
    # Procedural memory and the profile (a value read from a memory, one set by the API and
    # its history).
    procedure_create(team=team, agent_id="alice", rule="Answer in Chinese.", source="agent")
    procedure_create(
        team=team,
        agent_id="alice",
        rule="Alice drinks oolong tea daily",
        source="lifecycle",
        status="proposed",
        evidence=[tea.pk],
    )
    # A rule's history: a rewording, and a rule removed since (its history is all that is left).
    reworded = procedure_create(team=team, agent_id="alice", rule="Be brief.", source="agent")
    procedure_update(procedure=reworded, actor=actor, rule="Be brief and kind.")
    gone = procedure_create(team=team, agent_id="alice", rule="Reply in haiku.", source="agent")
    procedure_delete(procedure=gone, actor=actor)
    profile_set(team=team, agent_id="alice", fields={"location": "Berlin"}, actor=actor)
    profile_set(team=team, agent_id="alice", fields={"location": "Munich"}, actor=actor)
    profile_learn(
        team=team,
        agent_id="alice",
        fields={"occupation": "tea taster"},
        source="extraction",
        source_memory_id=tea.pk,
        actor=actor,
    )
    return {
        "tea": tea,
        "old": old,
        "new": new,
        "promoted": promoted,
        "team_fact": team_fact,
        "bob": bob,
        "team_entity": team_e,
    }


def read_bundle(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in gzip.decompress(data).splitlines()]
    return lines[0], lines[1:]


def make_bundle(header: dict[str, Any], records: list[dict[str, Any]]) -> bytes:
    text = "".join(json.dumps(x) + "\n" for x in [header, *records])
    return gzip.compress(text.encode())


def export_bundle(api: SignedClient, capture, body: dict[str, Any] | None = None) -> bytes:
    with capture(execute=True):
        r = api.post("/export", body or {})
    assert r.status_code == 202, r.content
    job_id = ok_data(r)["job_id"]
    job = ok_data(api.get(f"/jobs/{job_id}"))
    assert job["status"] == "succeeded", job
    assert job["result"]["download"] == f"/export/{job_id}"
    r = api.get(f"/export/{job_id}")
    assert r.status_code == 200
    assert r["Content-Type"] == "application/gzip"
    assert f"-{job_id}.jsonl.gz" in r["Content-Disposition"]
    data = b"".join(r.streaming_content)
    assert len(data) == job["result"]["bytes"] == int(r["Content-Length"])
    return data


def import_bundle(api: SignedClient, data: bytes, on_conflict: str | None = None):
    path = "/import" + (f"?on_conflict={on_conflict}" if on_conflict else "")
    return api.call("POST", path, raw=data, headers=GZIP)


def normalise(data: bytes) -> list[dict[str, Any]]:
    """The bundle with every id replaced by its position among its kind (references too) and
    the team / export time left out: two bundles of the same data compare equal."""
    header, records = read_bundle(data)
    order: dict[str, dict[Any, str]] = {k: {} for k in KINDS}
    for rec in records:
        order[rec["kind"]][rec["id"]] = f"{rec['kind']}#{len(order[rec['kind']])}"
    mem, scen, ent = order["memory"], order["scenario"], order["entity"]
    # A rule's history names its rule by id: one of the bundle, or a removed rule (numbered in
    # the order its history first names it).
    rules = dict(order["procedure"])
    for rec in records:
        if rec["kind"] == "procedure_revision" and rec["procedure_id"] not in rules:
            rules[rec["procedure_id"]] = f"removed#{len(rules)}"

    def m(x: Any) -> Any:
        return mem.get(x, x)

    out: list[dict[str, Any]] = [
        {k: v for k, v in header.items() if k not in ("exported_at", "team_id")}
    ]
    for rec in records:
        r = dict(rec)
        r["id"] = order[r["kind"]][r["id"]]
        for key in ("superseded_by", "promoted_from", "source_memory"):
            if r.get(key) is not None:
                r[key] = m(r[key])
        if r["kind"] in ("revision", "share") or r["kind"] == "mention":
            r["memory"] = m(r["memory"])
        if r["kind"] in ("relation",):
            r["source"], r["target"] = ent[r["source"]], ent[r["target"]]
        if r["kind"] == "mention":
            r["entity"] = ent[r["entity"]]
        for key in ("before", "after", "metadata"):
            if isinstance(r.get(key), dict):
                d = dict(r[key])
                for k in ("superseded_by", "promoted_to", "promoted_from", "consolidated_into"):
                    if d.get(k) is not None:
                        d[k] = m(d[k])
                for k in ("related_to", "consolidated_from"):
                    if isinstance(d.get(k), list):
                        d[k] = [m(x) for x in d[k]]
                r[key] = d
        if "memory_ids" in r:
            r["memory_ids"] = [m(x) for x in r["memory_ids"]]
        if r["kind"] == "procedure":
            r["evidence"] = [m(x) for x in r["evidence"]]
        if r["kind"] == "procedure_revision":
            r["procedure_id"] = rules[r["procedure_id"]]
        if r["kind"] in ("profile", "profile_revision") and r["source_memory_id"] is not None:
            r["source_memory_id"] = m(r["source_memory_id"])
        if "scenario_ids" in r:
            r["scenario_ids"] = [scen[x] for x in r["scenario_ids"]]
        if "scenarios_snapshot" in r:
            r["scenarios_snapshot"] = [
                {
                    **s,
                    "id": scen.get(s["id"], s["id"]),
                    "memory_ids": [m(x) for x in s["memory_ids"]],
                }
                for s in r["scenarios_snapshot"]
            ]
        out.append(r)
    return out


def team_counts(team) -> dict[str, int]:
    return {
        "memory": Memory.objects.filter(team=team).count(),
        "revision": MemoryRevision.objects.filter(team=team).count(),
        "share": MemoryShare.objects.filter(team=team).count(),
        "archive": WorkingArchive.objects.filter(team=team).count(),
        "scenario": Scenario.objects.filter(team=team).count(),
        "persona": Persona.objects.filter(team=team).count(),
        "entity": Entity.objects.filter(team=team).count(),
        "relation": Relation.objects.filter(team=team).count(),
        "mention": EntityMention.objects.filter(team=team).count(),
        "procedure": Procedure.objects.filter(team=team).count(),
        "procedure_revision": ProcedureRevision.objects.filter(team=team).count(),
        "profile": ProfileField.objects.filter(team=team).count(),
        "profile_revision": ProfileRevision.objects.filter(team=team).count(),
    }


@pytest.fixture
def fresh(db) -> tuple[Any, SignedClient]:
    team = TeamFactory(id="team_c", name="Team C")
    k = api_key_issue(team=team, label="tests")
    return team, SignedClient(Client(), k.key_id, k.secret)


# --- round trip ----------------------------------------------------------------------------------


def test_round_trip_into_a_fresh_team_exports_the_same_bundle(
    team, api, fresh, django_capture_on_commit_callbacks
):
    rows = populate(team)
    first = export_bundle(api, django_capture_on_commit_callbacks)
    header, records = read_bundle(first)
    assert header["format"] == "memoryplatform-bundle" and header["version"] == 1
    assert header["team_id"] == team.id and header["agent_id"] is None
    assert header["embedding_model"] == get_embedder().model_name
    assert header["embedding_dim"] == get_embedder().dim
    kinds = [r["kind"] for r in records]
    assert kinds == sorted(kinds, key=KINDS.index)  # bundle order
    assert header["counts"] == {k: kinds.count(k) for k in KINDS}
    assert all(header["counts"][k] > 0 for k in KINDS), header["counts"]
    by_id = {r["id"]: r for r in records if r["kind"] == "memory"}
    assert by_id[rows["old"].pk]["superseded_by"] == rows["new"].pk
    assert by_id[rows["promoted"].pk]["promoted_from"] == rows["tea"].pk
    assert "search_tokens" not in by_id[rows["tea"].pk]
    assert "content_hash" not in by_id[rows["tea"].pk]
    assert by_id[rows["tea"].pk]["embedding"] and by_id[rows["tea"].pk]["embedding_model"]
    assert by_id[rows["tea"].pk]["run_id"] == "run-7"
    archived = next(r for r in records if r["kind"] == "archive")
    assert (archived["role"], archived["name"], archived["run_id"]) == ("user", "Alice", "run-7")

    target, target_api = fresh
    changes_before = IndexChange.objects.filter(team=target).count()
    answer = ok_data(import_bundle(target_api, first))
    assert answer["imported"] == header["counts"]
    assert answer["skipped"] == dict.fromkeys(KINDS, 0)
    assert answer["reembedded"] == 0  # same model: the stored vectors are used
    assert team_counts(target) == header["counts"]
    assert IndexChange.objects.filter(team=target).count() > changes_before

    second = export_bundle(target_api, django_capture_on_commit_callbacks)
    assert read_bundle(second)[0]["team_id"] == "team_c"
    assert normalise(second) == normalise(first)

    tea = Memory.objects.get(team=target, scope="personal", content="Alice drinks oolong tea daily")
    assert tea.run_id == "run-7"
    assert WorkingArchive.objects.get(team=target).role == "user"
    # The links point inside the new team, and its index finds what was imported.
    old = Memory.objects.get(team=target, content="Alice lives in Berlin")
    assert old.superseded_by.content == "Alice moved to Munich in May"
    assert old.superseded_by.team_id == target.id
    hits = ok_data(
        target_api.post("/memories/personal/search", {"agent_id": "alice", "query": "oolong tea"})
    )
    assert hits and hits[0]["content"] == "Alice drinks oolong tea daily"
    assert Memory.objects.get(pk=hits[0]["id"]).team_id == target.id
    persona = Persona.objects.get(team=target)
    scenario = Scenario.objects.get(team=target)
    assert persona.scenario_ids == [scenario.pk] and scenario.pk != rows["tea"].pk
    assert set(scenario.memory_ids) <= set(
        Memory.objects.filter(team=target).values_list("pk", flat=True)
    )


def test_a_consolidation_moves_with_its_tiers_and_links(
    team, api, fresh, django_capture_on_commit_callbacks
):
    for text in (
        "The user wants short answers without long explanations.",
        "The user asked again for shorter answers, no long explanations.",
        "The user prefers short answers and dislikes long explanations.",
    ):
        memory_create(team=team, scope="personal", agent_id="alice", content=text)
    done = ok_data(api.post("/lifecycle/consolidate", {"agent_id": "alice"}))["consolidated"]
    assert len(done) == 1
    bundle = export_bundle(api, django_capture_on_commit_callbacks)
    target, target_api = fresh
    ok_data(import_bundle(target_api, bundle))
    fact = Memory.objects.get(team=target, metadata__source="consolidation")
    fragments = Memory.objects.filter(team=target, tier="cold")
    assert fragments.count() == 3
    assert {f.cold_reason for f in fragments} == {"consolidated"}  # never re-warmed there
    assert {f.metadata["consolidated_into"] for f in fragments} == {fact.pk}
    assert sorted(fact.metadata["consolidated_from"]) == sorted(f.pk for f in fragments)
    # Cold on this side too: out of everyday search, found with include_cold.
    body = {"agent_id": "alice", "query": "short answers long explanations"}
    hits = ok_data(target_api.post("/memories/personal/search", body))
    assert [h["id"] for h in hits] == [fact.pk]
    hits = ok_data(target_api.post("/memories/personal/search", {**body, "include_cold": True}))
    assert {f.pk for f in fragments} <= {h["id"] for h in hits}


def test_the_same_data_exports_to_the_same_bytes_but_for_the_time(
    team, api, django_capture_on_commit_callbacks
):
    populate(team)
    one = export_bundle(api, django_capture_on_commit_callbacks)
    two = export_bundle(api, django_capture_on_commit_callbacks)
    h1, r1 = read_bundle(one)
    h2, r2 = read_bundle(two)
    assert r1 == r2
    assert {**h1, "exported_at": ""} == {**h2, "exported_at": ""}


def test_an_export_is_stored_in_chunks_and_pruned_after_its_retention(
    team, api, settings, django_capture_on_commit_callbacks, monkeypatch
):
    from lifecycle.services import bundle

    monkeypatch.setattr(bundle, "CHUNK_BYTES", 512)
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    job = JobRun.objects.get(team=team, kind=JobKind.EXPORT)
    assert job.counts["chunks"] == ExportChunk.objects.filter(job=job).count() > 1
    assert all(len(c.data) <= 512 for c in ExportChunk.objects.filter(job=job))
    assert read_bundle(data)[0]["format"] == "memoryplatform-bundle"
    assert exports_prune() == 0  # still within EXPORT_RETENTION_HOURS
    JobRun.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(hours=25))
    call_command("prune_exports")
    assert not ExportChunk.objects.filter(job=job).exists()
    r = api.get(f"/export/{job.pk}")
    assert r.status_code == 404 and error_code(r) == "NOT_FOUND"


# --- the history of the agents' rules --------------------------------------------------------------


def _rule_history(api: SignedClient, agent_id: str) -> list[tuple[Any, ...]]:
    """The agent's rule changes through the API, oldest first, with the rule's text now (None:
    removed) in place of its id."""
    answer = ok_data(api.get(f"/procedures/{agent_id}/history?limit=500"))
    listed = ok_data(api.get(f"/procedures/{agent_id}"))["procedures"]
    rules = {r["id"]: r["rule"] for r in listed}
    fields = ("change", "rule", "rule_before", "status", "by", "at")
    return [
        (*(r[f] for f in fields), rules.get(r["procedure_id"]))
        for r in reversed(answer["revisions"])
    ]


def test_a_rules_history_moves_with_it_and_a_removed_rule_can_be_restored(
    team, api, fresh, django_capture_on_commit_callbacks
):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    header, _ = read_bundle(data)
    assert header["counts"]["procedure_revision"] == 6  # 4 added, 1 reworded, 1 removed
    target, target_api = fresh
    ok_data(import_bundle(target_api, data))
    history = _rule_history(target_api, "alice")
    assert history == _rule_history(api, "alice")  # who, when, what, in order
    assert [h[:2] for h in history if h[-1] is None] == [
        ("added", "Reply in haiku."),
        ("removed", "Reply in haiku."),
    ]
    # The removed rule has an id of its own there, which no new rule takes, and is restored
    # with it.
    removed = ok_data(target_api.get("/procedures/alice/history?limit=1"))["revisions"][0]
    later = target_api.post("/procedures/alice", {"rule": "Something new."})
    assert later.status_code == 201, later.content
    assert ok_data(later)["id"] != removed["procedure_id"]
    back = target_api.post(f"/procedures/alice/{removed['procedure_id']}/restore", {})
    assert back.status_code == 201, back.content
    assert (ok_data(back)["id"], ok_data(back)["rule"]) == (
        removed["procedure_id"],
        "Reply in haiku.",
    )
    # Every change went to the rule it was made to, in the team it went to.
    rules = set(Procedure.objects.filter(team=target).values_list("pk", flat=True))
    assert (
        set(ProcedureRevision.objects.filter(team=target).values_list("procedure_id", flat=True))
        <= rules
    )
    assert not ProcedureRevision.objects.filter(procedure_id__in=rules).exclude(team=target)


def test_a_rules_history_is_never_met_in_another_team(
    team, api, other_team, other_api, fresh, django_capture_on_commit_callbacks
):
    """Another team holding the very same changes (it imported the bundle first) is not where a
    removed rule's history is found: each team gets rules of its own, and the other's history
    is left as it was."""
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    ok_data(import_bundle(other_api, data))
    fields = ("procedure_id", "change", "rule", "at")
    theirs = list(ProcedureRevision.objects.filter(team=other_team).values_list(*fields))
    target, target_api = fresh
    answer = ok_data(import_bundle(target_api, data))
    assert answer["imported"]["procedure_revision"] == 6
    assert list(ProcedureRevision.objects.filter(team=other_team).values_list(*fields)) == theirs
    ids = {
        t.id: set(ProcedureRevision.objects.filter(team=t).values_list("procedure_id", flat=True))
        for t in (team, other_team, target)
    }
    assert not ids[target.id] & (ids[team.id] | ids[other_team.id])


def test_an_agent_key_imports_only_its_agents_rule_history(team, agent_api):
    record = {
        **{"kind": "procedure_revision", "id": 1, "agent_id": "alice", "procedure_id": 3},
        **{"change": "added", "rule": "r", "status": "active", "at": "2024-01-01T00:00Z"},
    }
    counts = {"procedure_revision": 1}
    r = import_bundle(agent_api, make_bundle(_header(counts=counts), [record]))
    assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
    assert not ProcedureRevision.objects.filter(team=team).exists()
    own = make_bundle(_header(counts=counts), [{**record, "agent_id": "researcher"}])
    assert ok_data(import_bundle(agent_api, own))["imported"]["procedure_revision"] == 1
    assert ProcedureRevision.objects.get(team=team).agent_id == "researcher"


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite"])
def test_a_rules_history_imported_again_is_not_doubled(
    team, api, fresh, django_capture_on_commit_callbacks, on_conflict
):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    _, target_api = fresh
    ok_data(import_bundle(target_api, data))
    history = _rule_history(target_api, "alice")
    answer = ok_data(import_bundle(target_api, data, on_conflict))
    assert answer["imported"]["procedure_revision"] == 0
    assert answer["skipped"]["procedure_revision"] == 6
    assert _rule_history(target_api, "alice") == history
    # Into the team it came from, too: its own rules' and removed rule's changes are met.
    answer = ok_data(import_bundle(api, data, on_conflict))
    assert answer["skipped"]["procedure_revision"] == 6
    assert ProcedureRevision.objects.filter(team=team).count() == 6


def test_a_rule_met_here_keeps_its_own_history_unless_overwritten(
    team, api, fresh, django_capture_on_commit_callbacks
):
    """skip: a rule kept as it was here keeps its history (as a profile key does); overwrite:
    the bundle's changes of it are added, those here already once."""
    procedure_create(team=team, agent_id="alice", rule="Answer in Chinese.", source="agent")
    data = export_bundle(api, django_capture_on_commit_callbacks)
    target, target_api = fresh
    mine = procedure_create(
        team=target, agent_id="alice", rule="answer in  chinese.", source="console"
    )
    answer = ok_data(import_bundle(target_api, data))
    assert (answer["imported"]["procedure_revision"], answer["skipped"]["procedure_revision"]) == (
        0,
        1,
    )
    assert list(ProcedureRevision.objects.filter(team=target).values_list("procedure_id")) == [
        (mine.pk,)
    ]
    answer = ok_data(import_bundle(target_api, data, "overwrite"))
    assert answer["imported"]["procedure_revision"] == 1
    assert ProcedureRevision.objects.filter(team=target, procedure_id=mine.pk).count() == 2
    answer = ok_data(import_bundle(target_api, data, "overwrite"))
    assert answer["skipped"]["procedure_revision"] == 1
    assert ProcedureRevision.objects.filter(team=target).count() == 2


def test_new_ids_writes_a_rules_history_again_under_new_ids(
    team, api, django_capture_on_commit_callbacks
):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    removed = set(
        ProcedureRevision.objects.filter(team=team, change="removed").values_list(
            "procedure_id", flat=True
        )
    )
    answer = ok_data(import_bundle(api, data, "new_ids"))
    assert answer["imported"]["procedure_revision"] == 6
    assert ProcedureRevision.objects.filter(team=team).count() == 12
    again = set(
        ProcedureRevision.objects.filter(team=team, change="removed").values_list(
            "procedure_id", flat=True
        )
    )
    assert len(again) == 2 and removed < again  # the copy is another removed rule


# --- on_conflict ---------------------------------------------------------------------------------


def test_skip_keeps_what_is_here_and_counts_it(team, api, django_capture_on_commit_callbacks):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    before = team_counts(team)
    answer = ok_data(import_bundle(api, data))  # skip is the default
    assert team_counts(team) == before
    assert answer["imported"] == dict.fromkeys(KINDS, 0)
    header, _ = read_bundle(data)
    assert answer["skipped"] == header["counts"]


def test_overwrite_updates_through_the_service_with_a_revision(
    team, api, django_capture_on_commit_callbacks
):
    tea, _ = memory_create(team=team, scope="personal", agent_id="alice", content="Tea at five")
    data = export_bundle(api, django_capture_on_commit_callbacks)
    memory_update(memory=tea, actor=Actor(label="tests"), importance=0.1, category="changed")
    revisions = MemoryRevision.objects.filter(memory=tea).count()
    answer = ok_data(import_bundle(api, data, "overwrite"))
    assert answer["imported"]["memory"] == 1 and answer["skipped"]["memory"] == 0
    tea.refresh_from_db()
    assert (tea.importance, tea.category) == (0.5, "general")
    assert Memory.objects.filter(team=team).count() == 1
    assert MemoryRevision.objects.filter(memory=tea).count() == revisions + 1
    latest = MemoryRevision.objects.filter(memory=tea).first()
    assert latest.after == {"importance": 0.5, "category": "general"}
    assert latest.actor.startswith("key ")


def test_overwrite_sets_the_other_kinds_from_the_bundle(
    team, api, django_capture_on_commit_callbacks
):
    rows = populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    share = MemoryShare.objects.get(memory=rows["tea"])
    MemoryShare.objects.filter(pk=share.pk).update(permission="read")
    Scenario.objects.filter(team=team).update(summary="changed since")
    WorkingArchive.objects.filter(team=team).update(content="changed since")
    Entity.objects.filter(team=team, name="Oolong").update(description="changed since")
    before = team_counts(team)
    skipped = ok_data(import_bundle(api, data))  # skip leaves the changes alone
    assert Scenario.objects.get(team=team).summary == "changed since"
    assert sum(skipped["imported"].values()) == 0
    answer = ok_data(import_bundle(api, data, "overwrite"))
    assert team_counts(team)["memory"] == before["memory"]
    assert answer["imported"]["share"] == 1 and answer["imported"]["scenario"] == 1
    assert MemoryShare.objects.get(pk=share.pk).permission == "write"
    assert Scenario.objects.get(team=team).summary != "changed since"
    assert WorkingArchive.objects.get(team=team).content == "we talked about tea"
    assert Entity.objects.get(team=team, name="Oolong").description == ""


def test_new_ids_inserts_everything_again(team, api, django_capture_on_commit_callbacks):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    header, _ = read_bundle(data)
    before = team_counts(team)
    answer = ok_data(import_bundle(api, data, "new_ids"))
    after = team_counts(team)
    assert after["memory"] == 2 * before["memory"]
    assert answer["imported"]["memory"] == header["counts"]["memory"]
    # An entity's (name, type) is unique in its scope: the existing one is used, and what hangs
    # on it (relations between existing entities) is the existing row too.
    assert after["entity"] == before["entity"]
    assert answer["skipped"]["entity"] == header["counts"]["entity"]
    assert answer["skipped"]["relation"] == header["counts"]["relation"]


def test_on_conflict_must_be_known(api):
    r = import_bundle(api, make_bundle(_header(), []), "merge")
    assert r.status_code == 400 and error_code(r) == "VALIDATION_ERROR"


# --- isolation and access --------------------------------------------------------------------------


def test_importing_never_touches_another_team(
    team, api, other_team, other_api, django_capture_on_commit_callbacks
):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    memory_create(team=other_team, scope="personal", agent_id="zed", content="Zed's secret plan")
    # A header naming another team changes nothing: the key's team is the target.
    header, records = read_bundle(data)
    forged = make_bundle({**header, "team_id": other_team.id}, records)
    theirs = team_counts(other_team)
    ours = team_counts(team)
    answer = ok_data(import_bundle(api, forged, "new_ids"))
    assert answer["imported"]["memory"] == header["counts"]["memory"]
    assert team_counts(other_team) == theirs
    assert team_counts(team)["memory"] == 2 * ours["memory"]
    hits = ok_data(
        api.post("/memories/personal/search", {"agent_id": "zed", "query": "secret plan"})
    )
    assert hits == []


def test_another_teams_export_is_not_found(
    team, api, other_api, django_capture_on_commit_callbacks
):
    populate(team)
    with django_capture_on_commit_callbacks(execute=True):
        job_id = ok_data(api.post("/export", {}))["job_id"]
    for path in (f"/export/{job_id}", f"/jobs/{job_id}"):
        r = other_api.get(path)
        assert r.status_code == 404 and error_code(r) == "NOT_FOUND"
    r = api.get(f"/export/{job_id + 1000}")
    assert r.status_code == 404 and error_code(r) == "NOT_FOUND"
    # A job of another kind is no export either.
    other = JobRunFactory(team=team, kind=JobKind.COMPRESS)
    assert api.get(f"/export/{other.pk}").status_code == 404


def test_a_download_before_the_job_succeeded_is_a_conflict(team, api):
    with_job = JobRunFactory(team=team, kind=JobKind.EXPORT, agent_id="", status="queued")
    r = api.get(f"/export/{with_job.pk}")
    assert r.status_code == 409 and error_code(r) == "CONFLICT"
    # Without the on-commit hand-over the job stays queued: the same answer.
    job_id = ok_data(api.post("/export", {}))["job_id"]
    assert error_code(api.get(f"/export/{job_id}")) == "CONFLICT"


def test_an_agent_key_exports_and_imports_only_its_own_agent(
    team, api, agent_api, django_capture_on_commit_callbacks
):
    memory_create(team=team, scope="personal", agent_id="researcher", content="I read papers")
    memory_create(team=team, scope="personal", agent_id="alice", content="Alice's own note")
    memory_create(team=team, scope="team", agent_id="", content="A team-wide fact")
    ScenarioFactory(team=team, agent_id="researcher", name="Reading")
    ScenarioFactory(team=team, agent_id="alice", name="Alice things")

    for body in ({}, {"agent_id": "alice"}):
        r = agent_api.post("/export", body)
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
    own = export_bundle(agent_api, django_capture_on_commit_callbacks, {"agent_id": "researcher"})
    header, records = read_bundle(own)
    assert header["agent_id"] == "researcher"
    assert [r["content"] for r in records if r["kind"] == "memory"] == ["I read papers"]
    assert [r["name"] for r in records if r["kind"] == "scenario"] == ["Reading"]

    # The team's export (a team-wide key) is refused to the agent key as a whole.
    team_bundle = export_bundle(api, django_capture_on_commit_callbacks)
    before = team_counts(team)
    r = import_bundle(agent_api, team_bundle, "new_ids")
    assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
    assert team_counts(team) == before  # all or nothing
    # Its own bundle it may import.
    answer = ok_data(import_bundle(agent_api, own, "new_ids"))
    assert answer["imported"]["memory"] == 1
    # Another agent's job is as missing as another team's.
    with django_capture_on_commit_callbacks(execute=True):
        job_id = ok_data(api.post("/export", {"agent_id": "alice"}))["job_id"]
    assert agent_api.get(f"/export/{job_id}").status_code == 404


# --- embeddings --------------------------------------------------------------------------------------


def test_a_bundle_of_another_model_is_embedded_again(
    team, api, fresh, django_capture_on_commit_callbacks
):
    populate(team)
    data = export_bundle(api, django_capture_on_commit_callbacks)
    header, records = read_bundle(data)
    for rec in records:
        if rec["kind"] in ("memory", "entity"):
            rec["embedding"] = rec["embedding"][:8]  # another model's vector: a wrong size too
            rec["embedding_model"] = "other-model"
    other = make_bundle({**header, "embedding_model": "other-model"}, records)
    target, target_api = fresh
    answer = ok_data(import_bundle(target_api, other))
    assert answer["reembedded"] == header["counts"]["memory"] + header["counts"]["entity"]
    model = get_embedder().model_name
    assert set(Memory.objects.filter(team=target).values_list("embedding_model", flat=True)) == {
        model
    }
    assert all(
        len(m.embedding) == 4 * get_embedder().dim for m in Memory.objects.filter(team=target)
    )
    hits = ok_data(
        target_api.post("/memories/personal/search", {"agent_id": "alice", "query": "oolong tea"})
    )
    assert hits[0]["content"] == "Alice drinks oolong tea daily"


# --- malformed bundles ------------------------------------------------------------------------------


def _header(**over: Any) -> dict[str, Any]:
    return {
        "format": "memoryplatform-bundle",
        "version": 1,
        "exported_at": "2026-01-01T00:00:00Z",
        "team_id": "x",
        "agent_id": None,
        "embedding_model": get_embedder().model_name,
        "embedding_dim": get_embedder().dim,
        "counts": {"memory": 0},
        **over,
    }


MEMORY = {
    "kind": "memory",
    "id": 7,
    "scope": "personal",
    "agent_id": "alice",
    "content": "A memory from a bundle",
}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty body"),
        (b"not gzip at all", "line 1: not a complete gzip stream"),
        (gzip.compress(b"{not json}\n"), "line 1: not JSON"),
        (gzip.compress(b"[1, 2]\n"), "line 1: not a JSON object"),
        (make_bundle({"format": "zip", "version": 1}, []), "line 1: not a bundle header"),
        (make_bundle(_header(version=2), []), "line 1: bundle version 2 is not supported"),
        (
            gzip.compress(
                b'{"format": "memoryplatform-bundle", "version": 1, "counts": {}}\n'
                b'{"kind": "memory"\n'
            ),
            "line 2: not JSON",
        ),
        (make_bundle(_header(), [{"kind": "photo", "id": 1}]), "line 2: unknown record kind"),
        (
            make_bundle(_header(counts={"memory": 1}), [{**MEMORY, "importance": "high"}]),
            "line 2: memory: importance must be a number",
        ),
        (
            make_bundle(_header(counts={"memory": 1}), [{**MEMORY, "importance": 1.5}]),
            "line 2: memory: importance must be within 0..1",
        ),
        (
            make_bundle(_header(counts={"memory": 1}), [{**MEMORY, "content": "  "}]),
            "line 2: memory: content is required",
        ),
        (
            make_bundle(_header(counts={"memory": 1}), [{**MEMORY, "scope": "global"}]),
            "line 2: memory: scope 'global' is not one of the allowed values",
        ),
        (
            make_bundle(_header(counts={"memory": 1}), [{**MEMORY, "embedding": "%%%"}]),
            "line 2: memory: embedding is not valid base64",
        ),
        (
            make_bundle(
                _header(counts={"memory": 1, "share": 1}),
                [MEMORY, {"kind": "share", "id": 1, "memory": 99, "agent_id": "bob"}],
            ),
            "line 3: share: memory 99 is no memory of the bundle",
        ),
        (
            make_bundle(
                _header(counts={"memory": 1}),
                [{**MEMORY, "metadata": json.loads("[" * 40 + "]" * 40)}],
            ),
            "line 2: JSON nested deeper than 22 levels",
        ),
        (
            make_bundle(_header(counts={"memory": 2}), [MEMORY]),
            "the bundle has 1 memory records, its header says 2",
        ),
        (
            gzip.compress(b'{"format": "memoryplatform-bundle", "version": 1, "counts": {}}\n')[
                :-6
            ],
            "line 2: not a complete gzip stream",
        ),
    ],
)
def test_a_malformed_bundle_is_a_validation_error_naming_the_line(team, api, body, message):
    r = import_bundle(api, body)
    assert r.status_code == 400, r.content
    assert error_code(r) == "VALIDATION_ERROR"
    assert message in r.json()["error"]
    assert Memory.objects.filter(team=team).count() == 0


def test_an_index_already_loaded_finds_what_an_import_wrote(team, api, other_team):
    memory_create(team=team, scope="personal", agent_id="alice", content="Alice plays chess")
    # The scope's index is loaded in this process before the import...
    assert ok_data(api.post("/memories/personal/search", {"agent_id": "alice", "query": "chess"}))
    records = [{**MEMORY, "content": "Alice keeps bees on the roof"}]
    answer = ok_data(import_bundle(api, make_bundle(_header(counts={"memory": 1}), records)))
    assert answer["imported"]["memory"] == 1
    # ... and brought up to date from the change log the import wrote.
    hits = ok_data(
        api.post("/memories/personal/search", {"agent_id": "alice", "query": "bees on the roof"})
    )
    assert hits[0]["content"] == "Alice keeps bees on the roof"


def test_an_agent_id_differing_in_case_is_another_agent_on_import(team, api):
    """The import's "already here?" compares agent ids exactly, as the database does on every
    backend: a bundle's "Alice" is not this team's "alice" (MariaDB's collation once said so)."""
    memory_create(team=team, scope="personal", agent_id="alice", content="Alice plays chess")
    records = [{**MEMORY, "agent_id": "Alice", "content": "Alice plays chess"}]
    answer = ok_data(import_bundle(api, make_bundle(_header(counts={"memory": 1}), records)))
    assert (answer["imported"]["memory"], answer["skipped"]["memory"]) == (1, 0)
    assert sorted(Memory.objects.filter(team=team).values_list("agent_id", flat=True)) == [
        "Alice",
        "alice",
    ]
    assert sorted(Agent.objects.filter(team=team).values_list("agent_id", flat=True)) == [
        "Alice",
        "alice",
    ]
    # The same bundle again: now "Alice"'s memory is here, and skipped.
    answer = ok_data(import_bundle(api, make_bundle(_header(counts={"memory": 1}), records)))
    assert (answer["imported"]["memory"], answer["skipped"]["memory"]) == (0, 1)


def test_entities_sharing_a_resolution_key_meet_their_own_names_on_import(team, api):
    """ "Sprint 12" and "Sprint 13" share a resolution key ("sprint"): the import reads them
    once, and each record meets the entity of its own name (case and width aside), here or
    written earlier by the same bundle; a relation or mention given twice is written once."""
    here, _ = entity_create_or_merge(
        team=team, agent_id="alice", name="Sprint 12", entity_type="project"
    )
    here_memory, _ = memory_create(team=team, scope="personal", agent_id="alice", content="kickoff")
    entity_mention(entity=here, memory=here_memory)
    sprint = {"kind": "entity", "agent_id": "alice", "entity_type": "project"}
    records = [
        {**MEMORY, "id": 1, "content": "Sprint 13 ships the importer"},
        {**MEMORY, "id": 2, "content": "kickoff"},  # here already: skipped
        {**sprint, "id": "a", "name": "ＳＰＲＩＮＴ 12"},  # here already, in another width
        {**sprint, "id": "b", "name": "Sprint 13"},
        {**sprint, "id": "c", "name": "sprint 13"},  # the bundle's own "Sprint 13"
        {**sprint, "id": "d", "name": "Sprint 14"},
    ]
    relation = {"kind": "relation", "relation_type": "related_to"}
    records += [
        {**relation, "id": "r1", "source": "b", "target": "a"},
        {**relation, "id": "r2", "source": "c", "target": "a"},  # the same relation again
        {**relation, "id": "r3", "source": "a", "target": "d"},
    ]
    records += [
        {"kind": "mention", "entity": "b", "memory": 1},
        {"kind": "mention", "entity": "c", "memory": 1},  # the same mention again
        {"kind": "mention", "entity": "a", "memory": 2},  # here already
        {"kind": "mention", "entity": "a", "memory": 1},
    ]
    counts = {"memory": 2, "entity": 4, "relation": 3, "mention": 4}
    answer = ok_data(import_bundle(api, make_bundle(_header(counts=counts), records)))
    got = {k: (answer["imported"][k], answer["skipped"][k]) for k in counts}
    assert got == {"memory": (1, 1), "entity": (2, 2), "relation": (2, 1), "mention": (2, 2)}
    names = sorted(Entity.objects.filter(team=team).values_list("name", flat=True))
    assert names == ["Sprint 12", "Sprint 13", "Sprint 14"]
    assert sorted(
        Relation.objects.filter(team=team).values_list("source__name", "target__name")
    ) == [("Sprint 12", "Sprint 14"), ("Sprint 13", "Sprint 12")]
    assert sorted(
        EntityMention.objects.filter(team=team).values_list("entity__name", "memory__content")
    ) == [
        ("Sprint 12", "Sprint 13 ships the importer"),
        ("Sprint 12", "kickoff"),
        ("Sprint 13", "Sprint 13 ships the importer"),
    ]
    # The same bundle again: everything is here now.
    answer = ok_data(import_bundle(api, make_bundle(_header(counts=counts), records)))
    assert answer["imported"] == dict.fromkeys(KINDS, 0)
    assert Relation.objects.filter(team=team).count() == 2
    assert EntityMention.objects.filter(team=team).count() == 3


def test_held_rows_go_in_by_batches_and_a_name_the_database_folds_meets_its_entity(
    team, api, monkeypatch
):
    """New entities, relations and mentions are inserted a batch at a time (two here). MariaDB's
    collation calls "Cafe" and "café", "Creme" and "Crème" the same name, Python does not: there
    a batch that clashes goes in row by row, and the clashing record meets the entity already
    here, or the one the bundle wrote first; relations and mentions follow it. Elsewhere each
    name is an entity of its own. Either way nothing is lost and nothing fails."""
    monkeypatch.setattr(bundle_module, "_ROW_BATCH", 2)
    here, _ = entity_create_or_merge(
        team=team, agent_id="alice", name="café", entity_type="concept"
    )
    concept = {"kind": "entity", "agent_id": "alice", "entity_type": "concept"}
    records = [{**MEMORY, "id": 1, "content": "Cafe, tea and creme"}]
    records += [
        {**concept, "id": "a", "name": "Cafe", "created_at": "2024-01-02T03:04:05+00:00"},
        {**concept, "id": "b", "name": "Tea"},
        {**concept, "id": "c", "name": "Café"},  # here already, as Python compares too
        {**concept, "id": "d", "name": "Crème"},
        {**concept, "id": "e", "name": "Creme"},
    ]
    relation = {"kind": "relation", "relation_type": "related_to"}
    records += [
        {**relation, "id": "r1", "source": "a", "target": "b"},
        {**relation, "id": "r2", "source": "e", "target": "b"},
        {**relation, "id": "r3", "source": "d", "target": "a"},
    ]
    records += [{"kind": "mention", "entity": e, "memory": 1} for e in "abde"]
    counts = {"memory": 1, "entity": 5, "relation": 3, "mention": 4}
    answer = ok_data(import_bundle(api, make_bundle(_header(counts=counts), records)))
    got = {k: (answer["imported"][k], answer["skipped"][k]) for k in counts}
    relations = sorted(
        Relation.objects.filter(team=team).values_list("source__name", "target__name")
    )
    mentioned = sorted(
        EntityMention.objects.filter(team=team).values_list("entity__name", flat=True)
    )
    names = sorted(Entity.objects.filter(team=team).values_list("name", flat=True))
    if connection.vendor == "mysql":
        assert names == ["Crème", "Tea", "café"]
        assert got == {"memory": (1, 0), "entity": (2, 3), "relation": (3, 0), "mention": (3, 1)}
        assert relations == [("Crème", "Tea"), ("Crème", "café"), ("café", "Tea")]
        assert mentioned == ["Crème", "Tea", "café"]
    else:
        assert names == ["Cafe", "Creme", "Crème", "Tea", "café"]
        assert got == {"memory": (1, 0), "entity": (4, 1), "relation": (3, 0), "mention": (4, 0)}
        assert relations == [("Cafe", "Tea"), ("Creme", "Tea"), ("Crème", "Cafe")]
        assert mentioned == ["Cafe", "Creme", "Crème", "Tea"]
        # The time the record gives is kept through the batch's insert.
        cafe = Entity.objects.get(team=team, name="Cafe")
        assert cafe.created_at.isoformat() == "2024-01-02T03:04:05+00:00"
    assert Entity.objects.get(pk=here.pk).name == "café"
    # The same bundle again: everything is here now.
    answer = ok_data(import_bundle(api, make_bundle(_header(counts=counts), records)))
    assert answer["imported"] == dict.fromkeys(KINDS, 0)
    assert sorted(Entity.objects.filter(team=team).values_list("name", flat=True)) == names


@pytest.mark.parametrize(
    ("on_conflict", "returns_ids"), [("skip", True), ("overwrite", True), ("skip", False)]
)
def test_revisions_and_shares_go_in_by_batches_with_their_times(
    team, api, monkeypatch, on_conflict, returns_ids
):
    """Revisions and shares are held and inserted a batch at a time (two here), each keeping the
    time its record gives. A share given twice for a memory the import wrote meets the first
    (skipped, or overwriting it); an existing memory's revisions are its own. Where the backend
    does not return the ids of a bulk insert (MySQL), revisions go in one by one."""
    monkeypatch.setattr(bundle_module, "_ROW_BATCH", 2)
    if not returns_ids:
        monkeypatch.setattr(type(connection.features), "can_return_rows_from_bulk_insert", False)
    here, _ = memory_create(team=team, scope="personal", agent_id="alice", content="kept here")
    times = [f"2024-03-0{d}T10:00:00+00:00" for d in range(1, 4)]
    revision = {"kind": "revision", "memory": 1, "action": "update", "actor": "key mk_x"}
    share = {"kind": "share", "permission": "read"}
    records = [
        {**MEMORY, "id": 1, "content": "new from the bundle"},
        {**MEMORY, "id": 2, "content": "kept here"},
        *({**revision, "after": {"importance": i}, "created_at": t} for i, t in enumerate(times)),
        {**revision, "memory": 2},  # the memory here keeps its own history
        {**share, "memory": 1, "agent_id": "bob", "created_at": times[0]},
        {**share, "memory": 1, "agent_id": "bob", "permission": "write"},  # given twice
        {**share, "memory": 1, "agent_id": "carol", "created_at": times[1]},
        {**share, "memory": 2, "agent_id": "bob", "created_at": times[2]},
    ]
    counts = {"memory": 2, "revision": 4, "share": 4}
    answer = ok_data(import_bundle(api, make_bundle(_header(counts=counts), records), on_conflict))
    got = {k: (answer["imported"][k], answer["skipped"][k]) for k in counts}
    if on_conflict == "skip":
        assert got == {"memory": (1, 1), "revision": (3, 1), "share": (3, 1)}
    else:
        assert got == {"memory": (2, 0), "revision": (3, 1), "share": (4, 0)}
    new = Memory.objects.get(team=team, content="new from the bundle")
    revisions = list(
        MemoryRevision.objects.filter(memory=new)
        .order_by("created_at")
        .values("after", "created_at")
    )
    assert [r["after"] for r in revisions] == [{"importance": i} for i in range(3)]
    assert [r["created_at"].isoformat() for r in revisions] == times
    shares = {
        (s.memory_id, s.agent_id): (s.permission, s.created_at.isoformat())
        for s in MemoryShare.objects.filter(team=team)
    }
    assert shares == {
        (new.pk, "bob"): ("read" if on_conflict == "skip" else "write", times[0]),
        (new.pk, "carol"): ("read", times[1]),
        (here.pk, "bob"): ("read", times[2]),
    }


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite", "new_ids"])
def test_archive_items_go_in_by_batches_and_meet_those_here(team, api, monkeypatch, on_conflict):
    """Archive items are held and inserted a batch at a time (two here); one query a batch finds
    those here (same agent and item id): skipped or overwritten; an item given twice meets the
    first. new_ids inserts every one."""
    monkeypatch.setattr(bundle_module, "_ROW_BATCH", 2)
    WorkingArchiveFactory(team=team, agent_id="alice", item_id="i1", content="here")
    item = {"kind": "archive", "item_created_at": "2024-02-01T00:00:00+00:00", "reason": "evicted"}
    when = "2024-02-02T00:00:00+00:00"
    records = [
        {**item, "id": 1, "agent_id": "alice", "item_id": "i1", "content": "bundle i1"},
        {**item, "id": 2, "agent_id": "bob", "item_id": "i1", "content": "bob's i1"},
        {
            **item,
            "id": 3,
            "agent_id": "alice",
            "item_id": "i2",
            "content": "i2",
            "archived_at": when,
        },
        {**item, "id": 4, "agent_id": "alice", "item_id": "i2", "content": "i2 again"},
        {**item, "id": 5, "agent_id": "alice", "item_id": "i3", "content": "i3"},
        # Item ids are exact, as in Redis: another item on every database.
        {**item, "id": 6, "agent_id": "alice", "item_id": "I1", "content": "I1"},
    ]
    answer = ok_data(
        import_bundle(api, make_bundle(_header(counts={"archive": 6}), records), on_conflict)
    )
    got = (answer["imported"]["archive"], answer["skipped"]["archive"])
    rows = sorted(
        WorkingArchive.objects.filter(team=team).values_list("agent_id", "item_id", "content")
    )
    if on_conflict == "new_ids":
        assert got == (6, 0)
        assert len(rows) == 7
        return
    i1, i2 = ("here", "i2") if on_conflict == "skip" else ("bundle i1", "i2 again")
    assert got == ((4, 2) if on_conflict == "skip" else (6, 0))
    assert archive_item_get(team=team, item_id="I1").content == "I1"
    assert archive_item_get(team=team, item_id="i1").content == i1
    assert rows == [
        ("alice", "I1", "I1"),
        ("alice", "i1", i1),
        ("alice", "i2", i2),
        ("alice", "i3", "i3"),
        ("bob", "i1", "bob's i1"),
    ]
    i2_row = WorkingArchive.objects.get(team=team, agent_id="alice", item_id="i2")
    assert i2_row.archived_at.isoformat() == "2024-02-02T00:00:00+00:00"


def _graph_bundle(n: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """n memories of alice, each shared with bob, naming an entity of its own, mentioned by it
    and related to the previous one."""
    concept = {"kind": "entity", "agent_id": "alice", "entity_type": "concept"}
    records: list[dict[str, Any]] = [
        {**MEMORY, "id": i, "content": f"Alice works on topic {i}"} for i in range(n)
    ]
    records += [{"kind": "share", "memory": i, "agent_id": "bob"} for i in range(n)]
    records += [{**concept, "id": f"e{i}", "name": f"Topic {i}"} for i in range(n)]
    relation = {"kind": "relation", "relation_type": "related_to"}
    records += [
        {**relation, "id": i, "source": f"e{i}", "target": f"e{i - 1}"} for i in range(1, n)
    ]
    records += [{"kind": "mention", "entity": f"e{i}", "memory": i} for i in range(n)]
    counts = {"memory": n, "share": n, "entity": n, "relation": n - 1, "mention": n}
    return records, counts


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite"])
def test_a_graph_here_already_is_read_by_batches_not_a_query_a_record(db, on_conflict):
    """A re-import (every memory and entity here already): the shares, relations and mentions
    whose first end is here are read for all those ends at once, so the import's queries do not
    grow with the bundle (they were one query a record, each holding SQLite's write lock); nor
    are the entities here embedded again before the transaction. An overwrite of the same bundle
    reads its memories and entities by batches too, and writes none of them (unchanged)."""
    queries = {}
    for n in (5, 15):
        team = TeamFactory()
        k = api_key_issue(team=team, label="tests")
        api = SignedClient(Client(), k.key_id, k.secret)
        records, counts = _graph_bundle(n)
        data = make_bundle(_header(counts=counts), records)
        ok_data(import_bundle(api, data))
        with CaptureQueriesContext(connection) as captured:
            answer = ok_data(import_bundle(api, data, on_conflict))
        # Mentions have nothing to overwrite: met, they are skipped either way.
        if on_conflict == "skip":
            assert answer["imported"] == dict.fromkeys(KINDS, 0)
            assert {k: answer["skipped"][k] for k in counts} == counts
        else:
            assert {k: answer["imported"][k] for k in counts} == {**counts, "mention": 0}
            assert answer["skipped"]["mention"] == n
        queries[n] = len(captured)
        # From a server of another model: nothing here is embedded again, not even ahead.
        other = make_bundle(_header(counts=counts, embedding_model="another-model"), records)
        ahead: list[int] = []

        def embedding(total: int) -> Any:
            ahead.append(total)  # called only when there is something to embed ahead
            return lambda k: None

        result = bundle_module.bundle_import(team=team, data=other, embedding_progress=embedding)
        assert (result.reembedded, ahead) == (0, [])
    assert queries[15] == queries[5], queries


def test_memories_that_differ_are_overwritten_by_batches(db):
    """A backup restored over a team whose memories changed since: every memory met differs,
    and each gets the bundle's values and a revision, by batches (they were a lock, a save and
    a revision insert each): the import runs as many queries for 5 memories as for 15."""
    queries = {}
    for n in (5, 15):
        team = TeamFactory()
        records = [
            {**MEMORY, "id": i, "content": f"Alice works on topic {i}", "importance": 0.5}
            for i in range(n)
        ]
        bundle_module.bundle_import(
            team=team, data=make_bundle(_header(counts={"memory": n}), records)
        )
        before = MemoryRevision.objects.filter(team=team).count()
        restored = [
            {**r, "importance": 0.75, "category": "work", "metadata": {"from": "backup"}}
            for r in records
        ]
        data = make_bundle(_header(counts={"memory": n}), restored)
        with CaptureQueriesContext(connection) as captured:
            result = bundle_module.bundle_import(team=team, data=data, on_conflict="overwrite")
        queries[n] = len(captured)
        assert result.imported["memory"] == n
        rows = Memory.objects.filter(team=team)
        assert {(m.importance, m.category, m.metadata["from"]) for m in rows} == {
            (0.75, "work", "backup")
        }
        revisions = MemoryRevision.objects.filter(team=team).order_by("id")[before:]
        assert [(r.before["importance"], r.after["importance"]) for r in revisions] == [
            (0.5, 0.75)
        ] * n
        assert {r.actor for r in revisions} == {"import"}
    assert queries[15] == queries[5], queries


def test_memories_update_applies_in_order_and_only_to_its_team(team):
    """The batch service the overwrite uses: changes apply in order (a revision each), a
    memory that already holds the values is not written, another team's memory or one deleted
    meanwhile is left out."""
    tea, _ = memory_create(team=team, scope="personal", agent_id="alice", content="Tea at five")
    same, _ = memory_create(team=team, scope="team", agent_id="", content="Lunch at noon")
    gone, _ = memory_create(team=team, scope="team", agent_id="", content="Dinner at eight")
    theirs, _ = memory_create(
        team=TeamFactory(), scope="team", agent_id="", content="Their own memory"
    )
    long_ago = timezone.now() - timedelta(days=400)
    Memory.objects.filter(pk=same.pk).update(updated_at=long_ago)
    gone_pk = gone.pk
    gone.delete()
    written = memories_update(
        team=team,
        changes=[
            (tea.pk, MemoryAttributes(importance=0.9, metadata={"k": 1})),
            (same.pk, MemoryAttributes(importance=same.importance, category=same.category)),
            (gone_pk, MemoryAttributes(importance=0.9)),
            (theirs.pk, MemoryAttributes(importance=0.9)),
            (tea.pk, MemoryAttributes(importance=0.2, category="drinks")),
        ],
        actor=Actor(label="restore"),
    )
    assert set(written) == {tea.pk}
    tea.refresh_from_db()
    assert (tea.importance, tea.category, tea.metadata) == (0.2, "drinks", {"k": 1})
    history = MemoryRevision.objects.filter(memory=tea, actor="restore").order_by("id")
    assert [(r.before, r.after) for r in history] == [
        ({"importance": 0.5, "metadata": {}}, {"importance": 0.9, "metadata": {"k": 1}}),
        ({"importance": 0.9, "category": "general"}, {"importance": 0.2, "category": "drinks"}),
    ]
    same.refresh_from_db()
    theirs.refresh_from_db()
    assert same.updated_at == long_ago
    assert not MemoryRevision.objects.filter(memory=same, actor="restore").exists()
    assert theirs.importance == 0.5
    assert not MemoryRevision.objects.filter(memory=theirs).exists()


def test_entities_that_differ_are_overwritten_by_batches(db):
    """The same for entities: each gets the bundle's description (its new text embedded before
    the transaction) and properties, by batches (they were an embedding, a lock and a save each,
    inside the transaction): as many queries for 5 entities as for 15."""
    queries = {}
    for n in (5, 15):
        team = TeamFactory()
        concept = {"kind": "entity", "agent_id": "alice", "entity_type": "concept"}
        records = [{**concept, "id": f"e{i}", "name": f"Topic {i}"} for i in range(n)]
        counts = {"entity": n}
        bundle_module.bundle_import(team=team, data=make_bundle(_header(counts=counts), records))
        restored = [
            {**r, "description": f"restored topic {i}", "properties": {"from": "backup"}}
            for i, r in enumerate(records)
        ]
        data = make_bundle(_header(counts=counts), restored)
        ahead: list[int] = []

        def embedding(total: int) -> Any:
            ahead.append(total)
            return lambda k: None

        with CaptureQueriesContext(connection) as captured:
            result = bundle_module.bundle_import(
                team=team, data=data, on_conflict="overwrite", embedding_progress=embedding
            )
        queries[n] = len(captured)
        assert result.imported["entity"] == n
        # Their new texts were embedded before the transaction, not under its lock.
        assert ahead == [n]
        for entity in Entity.objects.filter(team=team):
            assert entity.description == f"restored {entity.name.lower()}"
            assert entity.properties == {"from": "backup"}
            text = embedding_text(entity.name, entity.description)
            assert bytes(entity.embedding) == to_bytes(embed_passages([text])[0])
    assert queries[15] == queries[5], queries


def test_entities_update_applies_in_order_and_only_to_its_team(team):
    """The batch service the overwrite uses: in order; a description that ends as it was is not
    embedded again; a vector given is used; an entity already so is not written; another team's
    entity or one deleted meanwhile is left out."""

    def entity(name: str, of: Any = team, **fields: Any) -> Entity:
        row, _ = entity_create_or_merge(
            team=of, agent_id="", name=name, entity_type="concept", **fields
        )
        return row

    tea = entity("Tea", description="a drink", properties={"origin": "Fujian"})
    back = entity("Coffee", description="a drink")
    same = entity("Water", description="a drink")
    gone = entity("Juice")
    theirs = entity("Milk", of=TeamFactory())
    long_ago = timezone.now() - timedelta(days=400)
    Entity.objects.filter(pk__in=[back.pk, same.pk]).update(updated_at=long_ago)
    back_vector, gone_pk = bytes(back.embedding), gone.pk
    gone.delete()
    given = b"\x00" * len(bytes(tea.embedding))  # not a real vector: proves it is the one used
    written = entities_update(
        team=team,
        changes=[
            (tea.pk, "a tea", {"grade": "AAA"}),
            (back.pk, "a bean", None),
            (same.pk, "a drink ", {}),
            (gone_pk, "gone", None),
            (theirs.pk, "a cow's", None),
            (back.pk, "a drink", {"roast": "dark"}),
        ],
        # Coffee's: used only if it were embedded again.
        vectors={embedding_text("Tea", "a tea"): given, embedding_text("Coffee", "a drink"): given},
    )
    assert set(written) == {tea.pk, back.pk}
    tea.refresh_from_db()
    assert (tea.description, tea.properties) == ("a tea", {"origin": "Fujian", "grade": "AAA"})
    assert bytes(tea.embedding) == given
    back.refresh_from_db()
    assert (back.description, back.properties) == ("a drink", {"roast": "dark"})
    assert bytes(back.embedding) == back_vector  # its text ends as it was
    assert back.updated_at > long_ago
    same.refresh_from_db()
    assert same.updated_at == long_ago
    theirs.refresh_from_db()
    assert theirs.description == ""


def test_an_overwrite_writes_only_what_differs(team, api):
    """An overwrite re-import of what is here already (a client retrying one) writes no memory
    and no entity: no revision, no new `updated_at` (each was a lock and a save). What differs
    goes through the services; a record given twice ends as its last copy says, even when the
    row held that value before the first copy changed it."""
    tea, _ = memory_create(team=team, scope="personal", agent_id="alice", content="Tea at five")
    oolong, _ = entity_create_or_merge(
        team=team,
        agent_id="alice",
        name="Oolong",
        entity_type="concept",
        description="a tea",
        properties={"origin": "Fujian"},
    )
    long_ago = timezone.now() - timedelta(days=400)
    Memory.objects.filter(pk=tea.pk).update(updated_at=long_ago)
    Entity.objects.filter(pk=oolong.pk).update(updated_at=long_ago)
    revisions = MemoryRevision.objects.filter(memory=tea).count()
    memory = {
        **MEMORY,
        "content": "Tea at five",
        "importance": 0.5,
        "category": "general",
        "metadata": {},
        "pinned": False,
    }
    entity = {
        "kind": "entity",
        "id": "o",
        "agent_id": "alice",
        "entity_type": "concept",
        "name": "Oolong",
        "description": "a tea",
        "properties": {"origin": "Fujian"},
    }
    counts = {"memory": 1, "entity": 1}
    same = make_bundle(_header(counts=counts), [memory, entity])
    answer = ok_data(import_bundle(api, same, "overwrite"))
    assert answer["imported"] == {**dict.fromkeys(KINDS, 0), **counts}
    tea.refresh_from_db()
    oolong.refresh_from_db()
    assert (tea.updated_at, oolong.updated_at) == (long_ago, long_ago)
    assert MemoryRevision.objects.filter(memory=tea).count() == revisions
    # Given twice: the first copy changes the row, the second sets it back to what it was.
    changed = [
        {**memory, "importance": 0.9, "metadata": {"source": "bundle"}},
        {**memory, "id": 8},
        {**entity, "description": "a drink", "properties": {"origin": "Taiwan"}},
        {**entity, "id": "o2", "description": "a tea", "properties": {"origin": "Fujian"}},
    ]
    twice = make_bundle(_header(counts={"memory": 2, "entity": 2}), changed)
    ok_data(import_bundle(api, twice, "overwrite"))
    tea.refresh_from_db()
    oolong.refresh_from_db()
    assert (tea.importance, tea.metadata) == (0.5, {})
    assert (oolong.description, oolong.properties) == ("a tea", {"origin": "Fujian"})
    assert oolong.updated_at > long_ago
    afters = MemoryRevision.objects.filter(memory=tea).order_by("created_at", "id")
    assert [r.after for r in afters][revisions:] == [
        {"importance": 0.9, "metadata": {"source": "bundle"}},
        {"importance": 0.5, "metadata": {}},
    ]


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite"])
def test_records_given_twice_between_rows_here_go_in_once(team, api, on_conflict):
    """Relations, mentions and shares whose ends were here: one here already meets it, a new one
    goes in, and one the bundle gives twice goes in once, the second meeting the first (the
    second copy was refused with 400 "Duplicate entry")."""
    kept, _ = memory_create(team=team, scope="personal", agent_id="alice", content="kept here")
    a, _ = entity_create_or_merge(team=team, agent_id="alice", name="Alpha", entity_type="concept")
    b, _ = entity_create_or_merge(team=team, agent_id="alice", name="Beta", entity_type="concept")
    relation_create(source=a, target=b, relation_type="related_to", description="old")
    long_ago = timezone.now() - timedelta(days=400)
    part, _ = relation_create(source=a, target=b, relation_type="part_of")
    Relation.objects.filter(pk=part.pk).update(updated_at=long_ago)
    entity_mention(entity=a, memory=kept)
    memory_share(memory=kept, agent_ids=["bob"], permission="read")
    concept = {"kind": "entity", "agent_id": "alice", "entity_type": "concept"}
    relation = {"kind": "relation", "relation_type": "related_to"}
    times = {"created_at": "2024-05-01T00:00:00+00:00", "updated_at": "2024-05-02T00:00:00+00:00"}
    records = [
        {**MEMORY, "id": 1, "content": "kept here"},
        {"kind": "share", "memory": 1, "agent_id": "bob", "permission": "write"},  # here
        {"kind": "share", "memory": 1, "agent_id": "carol", "permission": "read"},
        {"kind": "share", "memory": 1, "agent_id": "carol", "permission": "write"},  # twice
        {**concept, "id": "a", "name": "Alpha"},
        {**concept, "id": "b", "name": "Beta"},
        {**concept, "id": "c", "name": "Gamma"},
        {
            **relation,
            **times,
            **{"id": "r1", "source": "a", "target": "b", "description": "new"},
            "properties": {"since": 2024},
        },
        {**relation, "id": "r2", "source": "b", "target": "a", "description": "first"},
        {**relation, "id": "r3", "source": "b", "target": "a", "description": "twice"},
        {**relation, "id": "r4", "source": "a", "target": "c"},
        {**relation, "id": "r5", "source": "a", "target": "b", "relation_type": "part_of"},  # here
        {"kind": "mention", "entity": "a", "memory": 1},  # here
        {"kind": "mention", "entity": "b", "memory": 1},
        {"kind": "mention", "entity": "b", "memory": 1},  # twice
    ]
    counts = {"memory": 1, "share": 3, "entity": 3, "relation": 5, "mention": 3}
    answer = ok_data(import_bundle(api, make_bundle(_header(counts=counts), records), on_conflict))
    got = {k: (answer["imported"][k], answer["skipped"][k]) for k in counts}
    relations = dict(
        ((s, t), d)
        for s, t, d in Relation.objects.filter(team=team, relation_type="related_to").values_list(
            "source__name", "target__name", "description"
        )
    )
    shares = dict(MemoryShare.objects.filter(memory=kept).values_list("agent_id", "permission"))
    mentioned = sorted(EntityMention.objects.filter(memory=kept).values_list("entity__name"))
    assert mentioned == [("Alpha",), ("Beta",)]
    # (imported, skipped) of memory, share, entity, relation, mention; the descriptions of
    # Alpha -> Beta, Beta -> Alpha; bob's and carol's permissions.
    expected = {
        "skip": ([(0, 1), (1, 2), (1, 2), (2, 3), (1, 2)], ("old", "first"), ("read", "read")),
        "overwrite": ([(1, 0), (3, 0), (3, 0), (5, 0), (1, 2)], ("new", "twice"), ("write",) * 2),
    }[on_conflict]
    assert got == dict(zip(counts, expected[0], strict=True))
    assert relations == {
        ("Alpha", "Beta"): expected[1][0],
        ("Beta", "Alpha"): expected[1][1],
        ("Alpha", "Gamma"): "",
    }
    assert shares == dict(zip(("bob", "carol"), expected[2], strict=True))
    # An overwrite keeps the times the record gives, else stamps its update now (as a save).
    stamped = {
        (r.source.name, r.target.name, r.relation_type): (r.created_at, r.updated_at)
        for r in Relation.objects.filter(team=team).select_related("source", "target")
    }
    alpha_beta = [t.isoformat() for t in stamped["Alpha", "Beta", "related_to"]]
    assert (alpha_beta == list(times.values())) is (on_conflict == "overwrite")
    properties = Relation.objects.get(source=a, target=b, relation_type="related_to").properties
    assert properties == ({"since": 2024} if on_conflict == "overwrite" else {})
    assert (stamped["Alpha", "Beta", "part_of"][1] > long_ago) is (on_conflict == "overwrite")


def _lifecycle_bundle(n: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """n scenarios, personas, procedures and profile keys (a revision each) of two agents, and
    the history of n removed rules."""
    records: list[dict[str, Any]] = []
    kinds = (
        "scenario",
        "persona",
        "procedure",
        "procedure_revision",
        "profile",
        "profile_revision",
    )
    for kind in kinds:
        for k in (*range(n), *(range(n, 2 * n) if kind == "procedure_revision" else ())):
            agent = ("alice", "bob")[k % 2]
            when = f"2024-03-01T00:{k:02d}:00+00:00"
            records.append(
                {
                    "scenario": {"id": f"s{k}", "name": f"Topic {k}", "summary": f"about {k}"},
                    "persona": {"id": f"p{k}", "summary": f"persona {k}", "created_at": when},
                    "procedure": {"id": k, "rule": f"Rule {k}", "source": "agent"},
                    # Rules 0..n-1 added; n..2n-1 removed (no record of their own).
                    "procedure_revision": {
                        **{"procedure_id": k, "change": "added" if k < n else "removed"},
                        **{"rule": f"Rule {k}", "status": "active", "by": "key mk_x", "at": when},
                    },
                    "profile": {"key": f"key_{k}", "value": f"value {k}", "source": "api"},
                    "profile_revision": {
                        **{"key": f"key_{k}", "before": "", "after": f"value {k}"},
                        **{"source": "api", "by": "key mk_x", "at": when},
                    },
                }[kind]
                | {"kind": kind, "agent_id": agent}
            )
    return records, {**dict.fromkeys(kinds, n), "procedure_revision": 2 * n}


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite", "new_ids"])
def test_lifecycle_rows_go_in_by_batches_and_meet_those_here(db, on_conflict):
    """Scenarios, personas, procedures, profile keys and their revisions are inserted a batch at
    a time, and those here are read once an agent, not a query a record; those met are
    overwritten a batch at a time. An import and a re-import (skip, overwrite) run as many
    queries for 5 records of each kind as for 15."""
    queries: dict[int, list[int]] = {}
    for n in (5, 15):
        team = TeamFactory()
        records, counts = _lifecycle_bundle(n)
        data = make_bundle(_header(counts=counts), records)
        queries[n] = []
        for again in (None, "skip", "overwrite"):
            with CaptureQueriesContext(connection) as captured:
                result = bundle_module.bundle_import(
                    team=team, data=data, on_conflict=again or on_conflict
                )
            queries[n].append(len(captured))
            if again is None:
                assert result.imported == {**dict.fromkeys(KINDS, 0), **counts}
        assert Scenario.objects.filter(team=team).count() == n
        assert sorted(
            ProfileRevision.objects.filter(team=team).values_list("at", flat=True)
        ) == sorted(
            datetime.fromisoformat(r["at"]) for r in records if r["kind"] == "profile_revision"
        )
    assert queries[15] == queries[5], queries


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite"])
def test_lifecycle_records_given_twice_or_here_meet_one_row(team, on_conflict):
    """A scenario, persona, rule or profile key given twice, or here already, is one row: the
    second copy meets the first (skipped, or overwriting it), as it did when each went in at
    once. Names compare exactly, rules by their text as the API meets them (case and spacing
    aside), on every database."""
    here = ScenarioFactory(team=team, agent_id="alice", name="Deploys", summary="here")
    Procedure.objects.create(team=team, agent_id="alice", rule="Rule here", source="agent")
    when = "2024-03-01T00:00:00+00:00"
    records = [
        {"kind": "scenario", "id": 1, "agent_id": "alice", "name": "Deploys", "summary": "b1"},
        {"kind": "scenario", "id": 2, "agent_id": "alice", "name": "deploys", "summary": "b2"},
        {"kind": "scenario", "id": 3, "agent_id": "alice", "name": "deploys", "summary": "b3"},
        {"kind": "persona", "id": 1, "agent_id": "alice", "summary": "p1", "created_at": when},
        {"kind": "persona", "id": 2, "agent_id": "alice", "summary": "p2", "created_at": when},
        {"kind": "procedure", "agent_id": "alice", "rule": "rule  HERE", "status": "rejected"},
        {"kind": "procedure", "agent_id": "alice", "rule": "Rule new", "status": "active"},
        {"kind": "procedure", "agent_id": "alice", "rule": "rule new", "status": "rejected"},
        {"kind": "profile", "agent_id": "alice", "key": "editor", "value": "vim", "source": "api"},
        {"kind": "profile", "agent_id": "alice", "key": "editor", "value": "ed", "source": "api"},
    ]
    counts = {"scenario": 3, "persona": 2, "procedure": 3, "profile": 2}
    result = bundle_module.bundle_import(
        team=team, data=make_bundle(_header(counts=counts), records), on_conflict=on_conflict
    )
    got = {k: (result.imported[k], result.skipped[k]) for k in counts}
    scenarios = dict(Scenario.objects.filter(team=team).values_list("name", "summary"))
    personas = list(Persona.objects.filter(team=team).values_list("summary", flat=True))
    rules = dict(Procedure.objects.filter(team=team).values_list("rule", "status"))
    editor = ProfileField.objects.get(team=team, agent_id="alice", key="editor").value
    if on_conflict == "skip":
        assert got == {
            "scenario": (1, 2),
            "persona": (1, 1),
            "procedure": (1, 2),
            "profile": (1, 1),
        }
        assert scenarios == {"Deploys": "here", "deploys": "b2"}
        assert (personas, editor) == (["p1"], "vim")
        assert rules == {"Rule here": "active", "Rule new": "active"}
    else:
        assert got == {k: (n, 0) for k, n in counts.items()}
        assert scenarios == {"Deploys": "b1", "deploys": "b3"}
        assert (personas, editor) == (["p2"], "ed")
        assert rules == {"Rule here": "rejected", "Rule new": "rejected"}
    assert Scenario.objects.get(pk=here.pk).name == "Deploys"


def test_an_entity_mentioned_everywhere_is_not_read_whole(team, monkeypatch):
    """A bundle of one agent meets a team entity that every memory of the team mentions: the
    mentions already here are read by the bundle's memories (a few each), not by the entity
    (all of them)."""
    user, _ = entity_create_or_merge(team=team, name="The user", entity_type="person")
    for i in range(30):
        other, _ = memory_create(team=team, scope="personal", agent_id="bob", content=f"Bob {i}")
        entity_mention(entity=user, memory=other)
    mine, _ = memory_create(team=team, scope="personal", agent_id="alice", content="Alice's")
    entity_mention(entity=user, memory=mine)
    read: list[int] = []
    row_here = bundle_module._Import.row_here

    def counted(self: Any, kind: str, key: tuple[Any, ...]) -> Any:
        found = row_here(self, kind, key)
        read.append(len(self.here[kind]))
        return found

    monkeypatch.setattr(bundle_module._Import, "row_here", counted)
    records = [
        {**MEMORY, "id": 1, "content": "Alice's"},
        {"kind": "entity", "id": "u", "agent_id": "", "entity_type": "person", "name": "The user"},
        {"kind": "mention", "entity": "u", "memory": 1},
    ]
    counts = {"memory": 1, "entity": 1, "mention": 1}
    result = bundle_module.bundle_import(
        team=team, data=make_bundle(_header(counts=counts), records)
    )
    assert result.skipped["mention"] == 1
    assert read == [1]


@pytest.mark.parametrize("on_conflict", ["skip", "overwrite"])
def test_a_row_written_after_the_import_looked_is_met_not_refused(team, on_conflict):
    """A relation, mention or share between rows here that another writer adds after the import
    read those here (and before the import's held rows go in) clashes in the unique constraint:
    the batch goes in row by row and the clashing record meets the row now there. Here the other
    writer is the import's own progress callback, on its connection, so that it lands at a known
    point on every backend (tests/test_import_concurrent.py races another process). A row
    met here that the other writer deletes before the import overwrites it stays deleted."""
    kept, _ = memory_create(team=team, scope="personal", agent_id="alice", content="kept here")
    names = ("Alpha", "Beta", "Gamma")
    ents = [
        entity_create_or_merge(team=team, agent_id="alice", name=n, entity_type="concept")[0]
        for n in names
    ]
    gone, _ = relation_create(source=ents[0], target=ents[2], relation_type="part_of")
    concept = {"kind": "entity", "agent_id": "alice", "entity_type": "concept"}
    relation = {"kind": "relation", "relation_type": "related_to"}
    records = [
        {**MEMORY, "id": 1, "content": "kept here"},
        {"kind": "share", "memory": 1, "agent_id": "bob"},
        {"kind": "share", "memory": 1, "agent_id": "carol", "permission": "read"},
        *({**concept, "id": n, "name": n} for n in names),
        {**relation, "id": "r1", "source": "Alpha", "target": "Beta"},
        {**relation, "id": "r2", "source": "Beta", "target": "Gamma", "description": "bundle's"},
        {**relation, "id": "r3", "source": "Alpha", "target": "Gamma", "relation_type": "part_of"},
        {"kind": "mention", "entity": "Alpha", "memory": 1},
        {"kind": "mention", "entity": "Beta", "memory": 1},
    ]
    counts = {"memory": 1, "share": 2, "entity": 3, "relation": 3, "mention": 2}
    # After the last record of a kind is read (held, not inserted yet), its row is written.
    writes = {
        3: lambda: memory_share(memory=kept, agent_ids=["carol"], permission="write"),
        8: lambda: relation_create(source=ents[1], target=ents[2], relation_type="related_to"),
        9: gone.delete,
        11: lambda: entity_mention(entity=ents[1], memory=kept),
    }
    read = [0]

    def progress(k: int) -> None:
        read[0] += k
        if read[0] in writes:
            writes[read[0]]()

    result = bundle_module.bundle_import(
        team=team,
        data=make_bundle(_header(counts=counts), records),
        on_conflict=on_conflict,
        progress=progress,
    )
    got = {k: (result.imported[k], result.skipped[k]) for k in counts}
    if on_conflict == "skip":
        assert got == {
            "memory": (0, 1),
            "share": (1, 1),
            "entity": (0, 3),
            "relation": (1, 2),
            "mention": (1, 1),
        }
    else:
        assert got["share"] == (2, 0) and got["relation"] == (3, 0)
    assert not Relation.objects.filter(pk=gone.pk).exists()
    assert EntityMention.objects.filter(memory=kept).count() == 2
    # The rows met are the other writer's, as it wrote them, or overwritten from the bundle.
    shares = dict(MemoryShare.objects.filter(memory=kept).values_list("agent_id", "permission"))
    described = dict(
        Relation.objects.filter(team=team, relation_type="related_to").values_list(
            "source__name", "description"
        )
    )
    if on_conflict == "skip":
        assert (shares["carol"], described) == ("write", {"Alpha": "", "Beta": ""})
    else:
        assert (shares["carol"], described) == ("read", {"Alpha": "", "Beta": "bundle's"})


def test_a_bundle_over_the_size_limit_is_413_in_the_envelope(api, settings):
    settings.REQUEST_BYTES_BY_PATH = {"/import": 100}
    r = import_bundle(api, b"x" * 101)
    assert r.status_code == 413 and error_code(r) == "PAYLOAD_TOO_LARGE"
    # Not declared (chunked): counted as it is read.
    settings.IMPORT_MAX_UNCOMPRESSED_BYTES = 50
    settings.REQUEST_BYTES_BY_PATH = {"/import": 10_000}
    r = import_bundle(api, make_bundle(_header(), []))
    assert r.status_code == 413 and error_code(r) == "PAYLOAD_TOO_LARGE"


def test_a_bundle_larger_than_a_json_request_is_accepted(team, api, settings):
    settings.MAX_REQUEST_BYTES = 200
    records = [
        {**MEMORY, "id": i, "content": f"memory number {i} of a big bundle"} for i in range(40)
    ]
    data = make_bundle(_header(counts={"memory": 40}), records)
    assert len(data) > 200
    answer = ok_data(import_bundle(api, data))
    assert answer["imported"]["memory"] == 40 and answer["reembedded"] == 40


# --- signatures, the client and the commands -------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_the_clients_signature_covers_the_gzip_body(team, issued, version):
    client = MemoryClient(issued.key_id, issued.secret, signature_version=version)
    data = make_bundle(_header(counts={"memory": 1}), [MEMORY])
    method, url, raw, headers = client._prepare(
        "POST", "/import", None, {"on_conflict": "skip"}, raw=data, content_type="application/gzip"
    )
    assert raw == data and headers["Content-Type"] == "application/gzip"
    path = url.removeprefix(client.base_url)
    r = Client().generic(method, path, data=raw, content_type="application/gzip", headers=headers)
    assert ok_data(r)["imported"]["memory"] == 1
    # One byte changed after signing: refused.
    method, url, raw, headers = client._prepare(
        "POST", "/import", None, None, raw=data, content_type="application/gzip"
    )
    r = Client().generic(
        method,
        "/import",
        data=raw[:-1] + bytes([raw[-1] ^ 1]),
        content_type="application/gzip",
        headers=headers,
    )
    assert r.status_code == 401 and error_code(r) == "INVALID_SIGNATURE"


def test_the_commands_export_and_import_with_the_same_code(team, tmp_path, capsys):
    populate(team)
    target = TeamFactory(id="team_d", name="Team D")
    path = tmp_path / "team.jsonl.gz"
    call_command("export_team", "--team", team.id, "--output", str(path))
    header, _ = read_bundle(path.read_bytes())
    call_command("import_team", str(path), "--team", target.id, "--on-conflict", "new_ids")
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["imported"] == header["counts"]
    assert team_counts(target) == header["counts"]
    call_command("export_team", "--team", target.id, "--output", str(tmp_path / "again.gz"))
    assert normalise((tmp_path / "again.gz").read_bytes()) == normalise(path.read_bytes())
    agent_path = tmp_path / "alice.gz"
    call_command("export_team", "--team", team.id, "--agent", "alice", "--output", str(agent_path))
    header, records = read_bundle(agent_path.read_bytes())
    assert header["agent_id"] == "alice"
    assert {r["agent_id"] for r in records if r["kind"] == "memory"} == {"alice"}


def _import_command_of_another_model(team, tmp_path, capsys) -> tuple[dict[str, Any], str]:
    """`import_team` of 40 memories of another model: its answer and what it wrote on stderr."""
    records = [
        {**MEMORY, "id": i, "content": f"memory number {i} of another model"} for i in range(40)
    ]
    path = tmp_path / "other.jsonl.gz"
    path.write_bytes(make_bundle(_header(embedding_model="other", counts={"memory": 40}), records))
    call_command("import_team", str(path), "--team", team.id)
    out, err = capsys.readouterr()
    return json.loads(out.strip().splitlines()[-1]), err


def test_the_import_command_shows_the_embedding_done_before_the_import(team, tmp_path, capsys):
    answer, err = _import_command_of_another_model(team, tmp_path, capsys)
    assert answer["reembedded"] == 40
    lines = err.splitlines()
    embedded = next(i for i, line in enumerate(lines) if line.startswith("embedded: 40/40 (100 %)"))
    imported = next(i for i, line in enumerate(lines) if line.startswith("imported: 40/40"))
    assert embedded < imported


def test_an_import_embeds_at_most_its_cap_ahead_and_the_rest_inside(
    team, tmp_path, capsys, settings
):
    settings.IMPORT_EMBED_AHEAD_MAX = 10
    answer, err = _import_command_of_another_model(team, tmp_path, capsys)
    assert answer["reembedded"] == 40
    assert "embedded: 10/10 (100 %)" in err
    assert {len(m.embedding) for m in Memory.objects.filter(team=team)} == {4 * get_embedder().dim}


def test_the_search_tokens_read_ahead_are_capped_too(team, settings):
    """The tokens read before the transaction are kept until the import ends, like the vectors:
    at most IMPORT_EMBED_AHEAD_MAX of them; the rest are read inside, and every memory gets its
    own."""
    settings.IMPORT_EMBED_AHEAD_MAX = 10
    records = [{**MEMORY, "id": i, "content": f"memory number {i} about kites"} for i in range(40)]
    data = make_bundle(_header(embedding_model="other", counts={"memory": 40}), records)
    embedder = get_embedder()
    state = bundle_module._Import(
        team=team,
        on_conflict="skip",
        acting_agent=None,
        actor=Actor(label="import"),
        reembed_all=True,
        model_name=embedder.model_name,
        dim=embedder.dim,
    )
    bundle_module._embed_ahead(data, state)
    assert (len(state.hashes), len(state.tokens), len(state.vectors)) == (40, 10, 10)

    answer = bundle_module.bundle_import(team=team, data=data)
    assert answer.imported["memory"] == 40
    rows = Memory.objects.filter(team=team).values_list("content", "search_tokens")
    assert len(rows) == 40
    assert all(tokens == tokens_for_storage(content) for content, tokens in rows)


def test_a_bundle_moves_to_a_fresh_database_and_exports_the_same(team, tmp_path):
    """Export here, import into another installation (a fresh SQLite database, migrated from
    scratch, the commands run as real processes), export there: the same bundle, ids mapped."""
    populate(team)
    path = tmp_path / "team.jsonl.gz"
    call_command("export_team", "--team", team.id, "--output", str(path))
    env = {
        **os.environ,
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path}/other.sqlite3",
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
    }
    env.pop("REDIS_URL", None)

    manage(env, "migrate", "-v0")
    manage(env, "create_api_key", "--team", "moved", "--json")
    answer = json.loads(
        manage(env, "import_team", str(path), "--team", "moved").strip().splitlines()[-1]
    )
    header, _ = read_bundle(path.read_bytes())
    assert answer["imported"] == header["counts"] and answer["reembedded"] == 0
    manage(env, "export_team", "--team", "moved", "--output", str(tmp_path / "moved.gz"))
    moved = (tmp_path / "moved.gz").read_bytes()
    assert read_bundle(moved)[0]["team_id"] == "moved"
    assert normalise(moved) == normalise(path.read_bytes())


@pytest.mark.parametrize(
    "records",
    [
        [{"kind": "memory", "id": [1], "scope": "team", "content": "x"}],
        [{"kind": "memory", "id": 1, "scope": "team", "content": 5}],
        [{"kind": "memory", "id": 1, "scope": "team", "content": "x", "created_at": "yesterday"}],
        [{"kind": "memory", "id": 1, "scope": "team", "content": "x", "metadata": None}],
        [{"kind": "archive", "id": 1, "agent_id": "alice", "item_id": "i1", "content": "c"}],
        [{"kind": "archive", "id": 1, "agent_id": "a" * 65, "item_id": "i1", "content": "c"}],
        [{"kind": "scenario", "id": {"x": 1}, "agent_id": "alice", "name": "n", "summary": "s"}],
        [
            {
                "kind": "persona",
                "id": "p",
                "agent_id": "alice",
                "scenarios_snapshot": [{"id": [1], "memory_ids": "no"}],
            }
        ],
        [{"kind": "entity", "id": "e", "name": "X", "entity_type": "planet", "agent_id": ""}],
        [{"kind": "entity", "id": "e", "name": "", "entity_type": "person"}],
        [{"kind": "relation", "id": "r", "source": {"a": 1}, "target": 1}],
        [{"kind": "mention", "id": 1, "entity": None, "memory": None}],
        [{"kind": "revision", "id": 1, "memory": [7]}],
        [{"kind": "procedure_revision", "id": 1, "agent_id": "alice", "change": "added"}],
        [
            {
                **{"kind": "procedure_revision", "id": 1, "agent_id": "alice"},
                **{"procedure_id": {"id": 3}, "change": "added", "rule": "r", "status": "active"},
            }
        ],
        [
            {
                **{"kind": "procedure_revision", "id": 1, "agent_id": "alice", "procedure_id": 3},
                **{"change": "forgot", "rule": "r", "status": "active", "at": "2024-01-01T00:00Z"},
            }
        ],
    ],
)
def test_odd_records_are_refused_without_a_server_error(team, api, records):
    counts: dict[str, int] = {}
    for rec in records:
        counts[rec["kind"]] = counts.get(rec["kind"], 0) + 1
    r = import_bundle(api, make_bundle(_header(counts=counts), records))
    assert r.status_code == 400, r.content
    assert error_code(r) == "VALIDATION_ERROR"
    assert r.json()["error"].startswith("line 2: ")


def test_an_import_holds_the_write_lock_of_each_scope_it_writes(team, api):
    """The import locks its scopes as any write does (the race itself: test_export_snapshot);
    a lock row missing when the transaction opens (team deleted and re-created) is created."""
    from memories import locks

    records = [
        {**MEMORY, "id": 1, "agent_id": "bob", "content": "Bob's own"},
        {**MEMORY, "id": 2, "scope": "team", "agent_id": "bob", "content": "The team's"},
    ]
    ok_data(import_bundle(api, make_bundle(_header(counts={"memory": 2}), records)))
    keys = set(ScopeLock.objects.filter(team=team).values_list("scope_key", flat=True))
    assert keys == {"team_a|personal|bob", "team_a|team|"}
    with transaction.atomic():
        locks.scope_locks(team_id=team.id, scopes=[("personal", "carol"), ("team", "")])
    assert ScopeLock.objects.filter(team=team, scope_key="team_a|personal|carol").exists()
