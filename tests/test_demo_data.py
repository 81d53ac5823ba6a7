"""`make run`'s sample data: loaded once, through the real services, traceable to its sources."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from graph.models import Entity
from lifecycle.models import Persona, WorkingArchive
from memories.models import Memory
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
    # Idle, unimportant memories for the purge preview to find on day one.
    lead = member_client(team, "demo_lead")
    r = lead.get(
        f"/review/{team.id}/purge/",
        {"idle_days": 30, "importance_below": 0.3, "scopes": ["personal", "team"], "preview": "1"},
    )
    assert r.status_code == 200
    assert "Parking spot B12" in r.content.decode()

    again = StringIO()
    call_command("load_demo_data", "--team", team.id, stdout=again)
    assert "already has memories" in again.getvalue()
    assert Memory.objects.filter(team=team).count() == count
