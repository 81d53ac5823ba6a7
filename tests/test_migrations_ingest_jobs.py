"""Upgrading lets ingest jobs that no longer run go of the messages they were given (the job keeps
how many); a job that may still run keeps them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from lifecycle.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("lifecycle", "0017_exact_item_ids")]
GIVEN = [{"role": "user", "content": "My leverage limit is 3x.", "at": None, "name": ""}] * 2


def test_finished_ingest_jobs_keep_how_many_messages_not_them():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    team = old.get_model("tenants", "Team").objects.create(id="team_m", name="m")
    jobs = old.get_model("lifecycle", "JobRun").objects
    made = {
        (kind, status): jobs.create(
            team=team,
            kind=kind,
            trigger="api",
            status=status,
            params={"messages": GIVEN, "run_id": "s1"} if kind == "ingest" else {"x": 1},
        ).pk
        for kind, status in [
            ("ingest", "succeeded"),
            ("ingest", "failed"),
            ("ingest", "abandoned"),
            ("ingest", "queued"),
            ("ingest", "running"),
            ("compress", "succeeded"),
        ]
    }
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    params = {key: JobRun.objects.get(pk=pk).params for key, pk in made.items()}
    for status in ("succeeded", "failed", "abandoned"):
        assert params[("ingest", status)] == {"messages": 2, "run_id": "s1"}
    for status in ("queued", "running"):
        assert params[("ingest", status)] == {"messages": GIVEN, "run_id": "s1"}
    assert params[("compress", "succeeded")] == {"x": 1}
