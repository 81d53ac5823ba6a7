"""`make run`'s sample data: loaded once, through the real services, traceable to its sources."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from console.purge.forms import PurgeCriteriaForm
from graph.models import Entity
from lifecycle.models import Persona, WorkingArchive
from memories.models import Memory, Procedure
from memories.working import get_working_store
from tests.console_helpers import member_client

pytestmark = pytest.mark.django_db


def test_sample_data_is_loaded_once_and_traceable(team):
    out = StringIO()
    call_command("load_demo_data", "--team", team.id, stdout=out)
    assert "sample data loaded" in out.getvalue()
    count = Memory.objects.filter(team=team).count()
    assert count >= 15
    persona = Persona.objects.get(team=team, agent_id="researcher")
    assert persona.memory_ids
    # Facts extracted by the lifecycle point at the archived working items they came from.
    derived = Memory.objects.filter(team=team, metadata__source="extraction")
    assert derived.exists()
    items = {i for m in derived for i in m.metadata["source_items"]}
    assert items and WorkingArchive.objects.filter(team=team).count() >= len(items)
    assert Entity.objects.filter(team=team).exists()
    # Idle, unimportant memories for the purge preview to find on day one, at its defaults.
    lead = member_client(team, "demo_lead")
    form = PurgeCriteriaForm(team=team)
    defaults = {name: field.initial for name, field in form.fields.items() if name != "agent"}
    r = lead.get(f"/review/{team.id}/purge/", {**defaults, "preview": "1"})
    assert r.status_code == 200
    for content in ("Parking spot B12", "Old lunch order", "周五下午茶"):
        assert content in r.content.decode()
    # Cleanup at the team's defaults (a dry run) takes the two below importance 0.2: the
    # ladder's first step sends them cold.
    dry = StringIO()
    call_command("run_lifecycle", "--team", team.id, "--op", "cleanup", "--dry-run", stdout=dry)
    preview = json.loads(dry.getvalue())
    assert (preview["would_cool"], preview["would_clean"]) == (2, 0)
    # Agents' rules, and a proposal drawn from the repeated feedback, waiting for a lead.
    rules = lead.get(f"/review/{team.id}/lifecycle/procedures/").content.decode()
    assert "Run the full test suite before every commit." in rules
    (proposal,) = Procedure.objects.filter(team=team, status="proposed")
    assert (proposal.agent_id, proposal.source, len(proposal.evidence)) == (
        "researcher",
        "lifecycle",
        3,
    )
    assert "short answers" in proposal.rule and proposal.rule in rules
    # Working memory left for the user: extract-facts on it makes facts on day one.
    assert len(get_working_store().list(team_id=team.id, agent_id="quant")) == 3
    out_facts = StringIO()
    call_command(
        "run_lifecycle",
        "--team",
        team.id,
        "--agent",
        "quant",
        "--op",
        "extract-facts",
        stdout=out_facts,
    )
    assert json.loads(out_facts.getvalue())["count"] >= 1

    count = Memory.objects.filter(team=team).count()
    again = StringIO()
    call_command("load_demo_data", "--team", team.id, stdout=again)
    assert "already has memories" in again.getvalue()
    assert Memory.objects.filter(team=team).count() == count
