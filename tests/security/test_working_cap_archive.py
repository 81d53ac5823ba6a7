"""Reaching the working-memory cap never loses an item: the items it pushes out are archived
(marked evicted, counted in the job log and /stats, restorable) before they leave working memory,
on both working-memory backends, and stay in working memory when archiving fails."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from lifecycle.models import JobRun, WorkingArchive
from lifecycle.services import archive
from memories.working import get_working_store
from memories.working.events import working_memory_evicting

from ..helpers import ok_data

pytestmark = pytest.mark.django_db

CAP = 5


@pytest.fixture(params=["database", pytest.param("redis", marks=pytest.mark.services)])
def backend(request: pytest.FixtureRequest, settings) -> str:
    """The API's working store: the database backend (REDIS_URL unset) or Redis."""
    if request.param == "redis":
        request.getfixturevalue("redis_required")
    else:
        settings.REDIS_URL = ""
    settings.WORKING_MEMORY_MAX_ITEMS_PER_AGENT = CAP
    assert get_working_store().name == request.param
    return request.param


def _write(api, content: str, agent: str = "a") -> dict:
    r = api.post("/memories/working", {"agent_id": agent, "content": content})
    assert r.status_code == 201, r.content
    return ok_data(r)


def _working(api, agent: str = "a") -> list[str]:
    return [i["content"] for i in ok_data(api.get(f"/memories/working/{agent}"))]


def _evicted(team, agent: str = "a") -> list[str]:
    return list(archive.evicted_list(team=team, agent_id=agent).values_list("content", flat=True))


def test_writing_past_the_cap_archives_what_it_pushes_out(api, team, backend):
    written = [_write(api, f"第 {n} 条")["content"] for n in range(CAP + 3)]
    assert _working(api) == written[3:]
    assert _evicted(team) == written[:3]
    assert sorted(_working(api) + _evicted(team)) == sorted(written)  # nothing lost
    rows = WorkingArchive.objects.filter(team=team, reason="evicted")
    assert all(r.job and r.job.kind == "cap-archive" for r in rows)
    cap_jobs = JobRun.objects.filter(team=team, kind="cap-archive")
    assert sum(j.counts["evicted"] for j in cap_jobs) == 3
    assert {j.status for j in cap_jobs} == {"succeeded"}
    assert ok_data(api.get("/stats"))["working_evicted_to_archive"] == 3


def test_the_cap_is_per_agent_and_per_team(api, other_api, team, other_team, backend):
    for n in range(CAP):
        _write(api, f"a{n}")
        _write(api, f"b{n}", agent="b")
        _write(other_api, f"x{n}")
    _write(api, "a-new")
    assert _evicted(team) == ["a0"] and _evicted(team, "b") == [] and _evicted(other_team) == []
    assert ok_data(other_api.get("/stats"))["working_evicted_to_archive"] == 0


def test_when_archiving_fails_the_items_stay_and_the_write_succeeds(api, team, backend):
    def failing_archive(**kwargs: object) -> None:
        raise RuntimeError("archive down")

    written = [_write(api, f"第 {n} 条")["content"] for n in range(CAP)]
    working_memory_evicting.connect(failing_archive, dispatch_uid="test.failing")
    try:
        written.append(_write(api, "over the cap")["content"])
    finally:
        working_memory_evicting.disconnect(dispatch_uid="test.failing")
    # Kept above the cap rather than lost; the lifecycle's own archive rows were rolled back.
    assert _working(api) == written and _evicted(team) == []
    written.append(_write(api, "next write")["content"])
    assert _evicted(team) == written[:2] and _working(api) == written[2:]


def test_racing_hand_overs_archive_an_item_once(team):
    item = get_working_store().add(team_id=team.id, agent_id="a", content="x", ttl_seconds=60)
    assert archive.archive_evicted(team_id=team.id, agent_id="a", items=[item]) == 1
    assert archive.archive_evicted(team_id=team.id, agent_id="a", items=[item]) == 0
    assert WorkingArchive.objects.count() == 1


def test_evicted_items_can_be_restored_and_nothing_is_lost_doing_it(api, team, backend):
    written = [_write(api, f"第 {n} 条")["content"] for n in range(CAP + 2)]
    out = StringIO()
    call_command("restore_working", "--team", team.id, "--agent", "a", stdout=out)
    assert "2 evicted item(s) restorable" in out.getvalue()  # a listing: nothing changed
    assert _evicted(team) == written[:2]
    call_command("restore_working", "--team", team.id, "--agent", "a", "--apply", stdout=StringIO())
    # Back as the newest items; at the cap, that pushes the next oldest into the archive.
    assert _working(api) == written[4:] + written[:2]
    assert _evicted(team) == written[2:4]
    restored = WorkingArchive.objects.filter(team=team, restored_at__isnull=False)
    assert restored.count() == 2 and all(r.restored_item_id for r in restored)
    all_kept = _working(api) + _evicted(team)
    assert sorted(all_kept) == sorted(written)


def test_restore_never_touches_another_teams_archive(api, other_api, team, other_team, backend):
    for n in range(CAP + 1):
        _write(other_api, f"x{n}")
    (row,) = WorkingArchive.objects.filter(team=other_team)
    assert archive.archive_restore(team=team, archive_ids=[row.pk]) == []
    row.refresh_from_db()
    assert row.restored_at is None


def test_restore_skips_an_agent_deleted_since(
    api, team, backend, django_capture_on_commit_callbacks
):
    for n in range(CAP + 1):
        _write(api, f"第 {n} 条", agent="gone")
    (row,) = WorkingArchive.objects.filter(team=team, agent_id="gone")
    with django_capture_on_commit_callbacks(execute=True):
        ok_data(api.delete("/agents/team_a/gone"))
    assert archive.archive_restore(team=team, archive_ids=[row.pk]) == []
    assert get_working_store().count(team_id=team.id, agent_id="gone") == 0


def test_reaching_the_cap_compresses_when_the_team_automates(
    api, team, backend, django_capture_on_commit_callbacks
):
    api.post(
        "/lifecycle/auto-config",
        {"compress_every_n": 100, "warmup_max_memories": 0, "compress_target_count": 1},
    )
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(CAP):
            _write(api, f"第 {n} 条")
    job = JobRun.objects.get(kind="compress")
    assert (job.trigger, job.status, job.counts["compressed"]) == ("auto", "succeeded", CAP)
    assert _working(api) == [] and _evicted(team) == []
