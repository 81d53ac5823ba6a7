"""Upgrading keeps the idempotency records: the table moves from lifecycle to tenants with its
rows (a retry sent across the upgrade is still replayed)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tenants.models import IdempotentRequest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("tenants", "0005_mcp_token"), ("lifecycle", "0013_recall_timeout")]
AFTER = [("tenants", "0006_idempotentrequest"), ("lifecycle", "0014_idempotentrequest_to_tenants")]


def test_the_records_move_with_their_table():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    team = old.get_model("tenants", "Team").objects.create(id="team_m", name="m")
    old.get_model("lifecycle", "IdempotentRequest").objects.create(
        team=team, endpoint="ingest", key="k-1", request_hash="h" * 64, status_code=202, body={}
    )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    row = IdempotentRequest.objects.get(team_id="team_m", key="k-1")
    assert (row.endpoint, row.status_code) == ("ingest", 202)
    assert IdempotentRequest._meta.db_table in connection.introspection.table_names()
    assert "lifecycle_idempotentrequest" not in connection.introspection.table_names()
