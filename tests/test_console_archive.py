"""The console's archive item page: an archived message or working item and the memories derived
from it, reached from a memory's sources page (the chain both ways); another team's ids 404."""

from __future__ import annotations

import pytest

from lifecycle.models import ArchiveReason, WorkingArchive
from memories.models import Memory

from .factories import WorkingArchiveFactory
from .helpers import ok_data

pytestmark = pytest.mark.django_db


def url(team_id: str, rest: str) -> str:
    return f"/review/{team_id}/lifecycle/{rest}"


@pytest.fixture
def ingested(api):
    ok_data(
        api.post(
            "/memories/ingest",
            {
                "agent_id": "researcher",
                "run_id": "s-3",
                "messages": [
                    {"role": "user", "content": "我决定把杠杆上限定为三倍。", "name": "alice"},
                    {"role": "assistant", "content": "好的。"},
                ],
            },
        )
    )
    memory = Memory.objects.get(team_id="team_a", metadata__source="ingest")
    item = WorkingArchive.objects.get(team_id="team_a", role="user")
    return memory, item


def test_memory_to_its_messages_and_back(viewer, ingested):
    memory, item = ingested
    sources = viewer.get(url("team_a", f"memories/{memory.pk}/sources/")).content.decode()
    item_url = url("team_a", f"archive/{item.item_id}/")
    assert item_url in sources
    assert "user (alice), run <code>s-3</code>" in sources
    page = viewer.get(item_url)
    assert page.status_code == 200
    assert [m.pk for m in page.context["derived"]] == [memory.pk]
    body = page.content.decode()
    assert "我决定把杠杆上限定为三倍。" in body
    assert f"/review/team_a/memories/{memory.pk}/" in body
    assert url("team_a", f"memories/{memory.pk}/sources/") in body


def test_an_evicted_item_says_nothing_was_derived(viewer, team):
    item = WorkingArchiveFactory(team=team, reason=ArchiveReason.EVICTED, content="draft")
    page = viewer.get(url("team_a", f"archive/{item.item_id}/"))
    assert page.status_code == 200 and page.context["derived"] == []
    assert "the working-memory cap moved this item here" in page.content.decode()


def test_another_teams_item_is_404_like_a_missing_one(lead, team, other_team):
    theirs = WorkingArchiveFactory(team=other_team, content="their secret")
    assert lead.get(url("team_a", f"archive/{theirs.item_id}/")).status_code == 404
    assert lead.get(url("team_a", "archive/0123456789abcdef0123456789abcdef/")).status_code == 404
    # And their console is not ours to open.
    assert lead.get(url("team_b", f"archive/{theirs.item_id}/")).status_code == 404
