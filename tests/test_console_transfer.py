"""Console import & export: a lead imports a file (a bundle, or mem0's, Letta's or Zep's export)
through the same code as POST /import, all or nothing, and exports the team or one agent as a
bundle job it downloads here; viewers only look; other teams' pages and exports are 404."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from lifecycle.models import JobRun, WorkingArchive
from memories.models import Memory

from .console_helpers import member_client
from .factories import AgentFactory, MemoryFactory
from .test_import_letta import AGENT_FILE
from .test_import_zep import EXPORT

pytestmark = pytest.mark.django_db


def url(team_id: str, rest: str = "") -> str:
    return f"/review/{team_id}/transfer/{rest}"


def upload(client: Client, team_id: str, content: bytes, name: str = "export.json", **fields):
    data = {"source": "bundle", "on_conflict": "skip", "agent_from": "user_id", **fields}
    data["file"] = SimpleUploadedFile(name, content)
    return client.post(url(team_id, "import/"), data)


def test_a_lead_imports_a_zep_export_and_sees_what_came_in(team, lead, caplog):
    caplog.set_level("INFO", logger="lifecycle.services.bundle")
    response = upload(lead, team.id, json.dumps(EXPORT).encode(), "alice.json", source="zep")
    assert response.status_code == 200, response.content.decode()[:2000]
    result = response.context["result"]
    assert result["name"] == "alice.json"
    rows = {kind: (imported, skipped) for kind, imported, skipped in result["rows"]}
    assert rows == {
        "memory": (4, 0),
        "archive": (2, 0),
        "entity": (4, 0),
        "relation": (2, 0),
        "mention": (8, 0),
    }
    assert 'id="import-result"' in response.content.decode()
    assert Memory.objects.filter(team=team, agent_id="alice").count() == 4
    # The operator's trail: who imported what, in counts (never a memory's text).
    (line,) = [r.getMessage() for r in caplog.records if r.name == "lifecycle.services.bundle"]
    assert line.startswith("import into team team_a by user lead_a: imported {'memory': 4,")
    assert "Alice" not in line
    # Again: everything is met, nothing doubled.
    again = upload(lead, team.id, json.dumps(EXPORT).encode(), source="zep")
    rows = {
        kind: (imported, skipped) for kind, imported, skipped in again.context["result"]["rows"]
    }
    assert rows["memory"] == (0, 4) and rows["archive"] == (0, 2)
    assert Memory.objects.filter(team=team).count() == 4


def test_mem0_and_letta_files_take_their_agent_fields(team, lead):
    listing = [{"memory": "Prefers tea", "created_at": "2025-01-01T00:00:00Z"}]
    refused = upload(lead, team.id, json.dumps(listing).encode(), source="mem0")
    assert refused.status_code == 400
    assert "memory 0: no user_id, and no default agent given" in refused.content.decode()
    ok = upload(lead, team.id, json.dumps(listing).encode(), source="mem0", default_agent="helper")
    assert ok.status_code == 200
    assert Memory.objects.get(team=team, content="Prefers tea").agent_id == "helper"
    letta = upload(
        lead, team.id, json.dumps(AGENT_FILE).encode(), "sam.af", source="letta", agent_id="sam"
    )
    assert letta.status_code == 200
    assert Memory.objects.filter(team=team, agent_id="sam", pinned=True).count() == 5
    bad_id = upload(lead, team.id, b"{}", source="letta", agent_id="not an id")
    assert bad_id.status_code == 400 and bad_id.context["import_form"].errors["agent_id"]


@pytest.mark.parametrize(
    "content, source, message",
    [
        (b'{"user_id": "alice", "edges": [{"fact": ""}]}', "zep", "edge 0: &quot;fact&quot;"),
        (json.dumps(EXPORT).encode(), "bundle", "line 1: not a complete gzip stream"),
        (b"\xff\xfe", "mem0", "not UTF-8"),
        (gzip.compress(b'{"format": "other"}\n'), "bundle", "line 1"),
    ],
)
def test_a_bad_file_is_a_400_naming_what_and_writes_nothing(team, lead, content, source, message):
    response = upload(lead, team.id, content, source=source)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["import_form"].errors["file"]
    assert not Memory.objects.filter(team=team).exists()
    assert not WorkingArchive.objects.filter(team=team).exists()


def test_a_file_over_the_import_limit_is_refused_with_the_way_round(team, lead, settings):
    """A file just over IMPORT_MAX_BYTES gets the form's message: the request may carry it (the
    limit of the import form's path has room for the other fields)."""
    settings.IMPORT_MAX_BYTES = 100
    settings.MAX_REQUEST_BYTES = 2_000
    settings.REQUEST_BYTES_BY_PATH_PATTERN = {r"/review/[^/]+/transfer/import/": 100 + 2_000}
    response = upload(lead, team.id, b"x" * 500, source="zep")
    assert response.status_code == 400
    assert "over the limit of 100 bytes" in response.content.decode()
    assert "import_team" in response.content.decode()


def test_the_import_form_has_the_imports_body_limit_not_the_apis(team, lead, settings):
    """The console's import path takes a file up to IMPORT_MAX_BYTES, as POST /import does;
    every other console form keeps MAX_REQUEST_BYTES."""
    settings.MAX_REQUEST_BYTES = 2_000
    big = json.dumps(EXPORT | {"note": "x" * 5_000}).encode()
    assert upload(lead, team.id, big, source="zep").status_code == 200
    other = lead.post(f"/review/{team.id}/keys/issue/", {"label": "x" * 5_000})
    assert other.status_code == 413
    settings.REQUEST_BYTES_BY_PATH_PATTERN = {r"/review/[^/]+/transfer/import/": 3_000}
    assert upload(lead, team.id, big, source="zep").status_code == 413


def test_a_lead_exports_the_team_or_one_agent_and_downloads_the_bundle(
    team, other_team, lead, django_capture_on_commit_callbacks
):
    AgentFactory(team=team, agent_id="alice")
    MemoryFactory(team=team, agent_id="alice", content="Alice likes green tea.")
    MemoryFactory(team=team, agent_id="bob", content="Bob likes coffee.")
    with django_capture_on_commit_callbacks(execute=True):
        started = lead.post(url(team.id, "export/"), {"agent": "alice"})
    assert started.status_code == 302
    job = JobRun.objects.get(team=team, kind="export")
    assert (job.agent_id, job.trigger, job.status) == ("alice", "admin", "succeeded")
    page = lead.get(url(team.id)).content.decode()
    assert f'href="{url(team.id, f"export/{job.pk}/")}"' in page
    download = lead.get(url(team.id, f"export/{job.pk}/"))
    assert download.status_code == 200
    assert download["Content-Type"] == "application/gzip"
    assert f"memoryplatform-{team.id}-alice-{job.pk}.jsonl.gz" in download["Content-Disposition"]
    bundle = b"".join(download.streaming_content)
    lines = [json.loads(x) for x in gzip.decompress(bundle).splitlines()]
    assert [x["content"] for x in lines if x.get("kind") == "memory"] == ["Alice likes green tea."]
    # Into another team, through its own lead's import form: the same memory there.
    other_lead = member_client(other_team, "lead_b")
    moved = upload(other_lead, other_team.id, bundle, "alice.jsonl.gz")
    assert moved.status_code == 200
    assert Memory.objects.get(team=other_team).content == "Alice likes green tea."
    # That lead cannot see or download this team's export, nor learn it exists.
    assert other_lead.get(url(team.id, f"export/{job.pk}/")).status_code == 404
    assert other_lead.get(url(other_team.id, f"export/{job.pk}/")).status_code == 404
    # The whole team, then: both agents.
    with django_capture_on_commit_callbacks(execute=True):
        lead.post(url(team.id, "export/"), {"agent": ""})
    whole = JobRun.objects.filter(team=team, kind="export").order_by("-pk").first()
    assert whole is not None and whole.agent_id == ""
    data = b"".join(lead.get(url(team.id, f"export/{whole.pk}/")).streaming_content)
    kinds = [json.loads(x).get("kind") for x in gzip.decompress(data).splitlines()]
    assert kinds.count("memory") == 2


def test_the_page_reads_its_exports_in_a_fixed_number_of_queries(team, lead):
    """Whether each listed export can still be downloaded is read with the list, not once per
    export."""
    JobRun.objects.create(team=team, kind="export", trigger="admin", status="succeeded")
    lead.get(url(team.id))  # the session and the user, read once
    with CaptureQueriesContext(connection) as one:
        lead.get(url(team.id))
    for _ in range(5):
        JobRun.objects.create(team=team, kind="export", trigger="admin", status="succeeded")
    with CaptureQueriesContext(connection) as six:
        page = lead.get(url(team.id))
    assert len(page.context["exports"]) == 6
    assert len(six) == len(one)


def test_another_teams_agent_cannot_be_exported_and_other_jobs_are_no_download(
    team, other_team, lead, django_capture_on_commit_callbacks
):
    AgentFactory(team=other_team, agent_id="spy")
    refused = lead.post(url(team.id, "export/"), {"agent": "spy"})
    assert refused.status_code == 400
    assert not JobRun.objects.filter(kind="export").exists()
    compress = JobRun.objects.create(team=team, kind="compress", trigger="api", status="succeeded")
    assert lead.get(url(team.id, f"export/{compress.pk}/")).status_code == 404
    queued = JobRun.objects.create(team=team, kind="export", trigger="api", status="queued")
    assert lead.get(url(team.id, f"export/{queued.pk}/")).status_code == 404


def test_a_viewer_sees_the_page_but_cannot_import_export_or_download(
    team, lead, viewer, django_capture_on_commit_callbacks
):
    page = viewer.get(url(team.id))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="import-form"' not in body and 'id="export-form"' not in body
    assert "Only a lead of the team can import" in body
    assert upload(viewer, team.id, json.dumps(EXPORT).encode(), source="zep").status_code == 403
    assert viewer.post(url(team.id, "export/"), {"agent": ""}).status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        lead.post(url(team.id, "export/"), {"agent": ""})
    job = JobRun.objects.get(team=team, kind="export")
    assert viewer.get(url(team.id, f"export/{job.pk}/")).status_code == 403
    assert not Memory.objects.filter(team=team).exists()


def test_anonymous_is_sent_to_login(team):
    response = Client().post(url(team.id, "import/"), {"file": io.BytesIO(b"{}")})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
