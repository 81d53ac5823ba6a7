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


def _migrated_to(targets):
    """The database migrated back to `targets`: the models as they were there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _migrated_to_latest():
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_records_move_with_their_table():
    old = _migrated_to(BEFORE)
    team = old.get_model("tenants", "Team").objects.create(id="team_m", name="m")
    old.get_model("lifecycle", "IdempotentRequest").objects.create(
        team=team, endpoint="ingest", key="k-1", request_hash="h" * 64, status_code=202, body={}
    )
    _migrated_to(AFTER)
    _migrated_to_latest()
    row = IdempotentRequest.objects.get(team_id="team_m", key="k-1")
    assert (row.endpoint, row.status_code) == ("ingest", 202)
    assert IdempotentRequest._meta.db_table in connection.introspection.table_names()
    assert "lifecycle_idempotentrequest" not in connection.introspection.table_names()


def test_cold_consolidated_fragments_get_their_reason_on_upgrade():
    before = [("memories", "0015_memory_hash_index_order")]
    old = _migrated_to(before)
    team = old.get_model("tenants", "Team").objects.create(id="team_c", name="c")
    Memory = old.get_model("memories", "Memory")

    def memory(content, **fields):
        return Memory.objects.create(
            team=team,
            scope="personal",
            agent_id="a",
            content=content,
            content_hash=content,
            **fields,
        ).pk

    fragment = memory("fragment", tier="cold", metadata={"consolidated_into": 9})
    idle = memory("idle", tier="cold", metadata={})
    hot = memory("hot", metadata={"consolidated_into": 9})  # asked for since: hot, no reason
    _migrated_to_latest()
    from memories.models import Memory as Current

    reasons = dict(Current.objects.filter(team_id="team_c").values_list("pk", "cold_reason"))
    assert reasons == {fragment: "consolidated", idle: "", hot: ""}


def test_hashes_are_made_again_where_case_carries_meaning():
    """Before, "the same content" folded every word's case, so a key written "x7QZ" had the hash
    of one written "x7Qz": a write of the other was skipped as the same content."""
    import hashlib
    import unicodedata

    from memories.retrieval.text import content_hash

    def folded(text):
        return hashlib.sha256(
            " ".join(unicodedata.normalize("NFKC", text).casefold().split()).encode()
        ).hexdigest()

    before = [("memories", "0016_cold_reason")]
    old = _migrated_to(before)
    team = old.get_model("tenants", "Team").objects.create(id="team_h", name="h")
    Memory = old.get_model("memories", "Memory")
    texts = ["The API key ends in x7QZ", "The Berlin office moved"]
    ids = [
        Memory.objects.create(
            team=team, scope="personal", agent_id="a", content=t, content_hash=folded(t)
        ).pk
        for t in texts
    ]
    assert folded(texts[0]) == folded("The API key ends in x7Qz")
    _migrated_to_latest()
    from memories.models import Memory as Current

    hashes = dict(Current.objects.filter(team_id="team_h").values_list("pk", "content_hash"))
    assert hashes[ids[0]] == content_hash(texts[0]) != content_hash("The API key ends in x7Qz")
    assert hashes[ids[1]] == folded(texts[1]) == content_hash(texts[1])  # unchanged


def test_agent_ids_become_exact_and_a_case_variant_gets_its_own_agent_on_upgrade():
    """On MariaDB the agent id columns folded case: a personal memory written as "Bob" went to
    the agent "bob". After the upgrade "Bob" is an agent of its own (registered, so it is listed
    and can be deleted); an agent deleted on purpose is not brought back."""
    before = [
        ("lifecycle", "0014_idempotentrequest_to_tenants"),
        ("memories", "0017_content_hash_keeps_meaningful_case"),
        ("graph", "0004_team_identity"),
        ("tenants", "0007_apikey_earlier_secrets"),
    ]
    old = _migrated_to(before)
    team = old.get_model("tenants", "Team").objects.create(id="team_x", name="x")
    old.get_model("tenants", "Agent").objects.create(team=team, agent_id="bob", name="bob")
    Memory = old.get_model("memories", "Memory")
    for agent, content in [("bob", "lower"), ("Bob", "upper"), ("carol", "deleted agent's")]:
        Memory.objects.create(
            team=team, scope="personal", agent_id=agent, content=content, content_hash=content
        )
    _migrated_to_latest()
    from memories.models import Memory as Current
    from tenants.models import Agent

    assert list(
        Current.objects.filter(team_id="team_x", agent_id="bob").values_list("content", flat=True)
    ) == ["lower"]
    agents = set(Agent.objects.filter(team_id="team_x").values_list("agent_id", flat=True))
    # Elsewhere the columns always compared exactly: no write could have gone astray.
    assert agents == ({"bob", "Bob"} if connection.vendor == "mysql" else {"bob"})


def test_every_exact_column_has_a_binary_collation_on_mysql():
    """Agent ids and the keys holding them (scope locks, the index change log, job keys): the
    index for "alice" must not replay a change logged for "Alice". Idempotency-Key values, run
    ids, memory categories and working-memory item ids too."""
    from django.apps import apps

    from core.fields import ExactCharField

    columns = {
        (model._meta.db_table, field.column)
        for model in apps.get_models()
        for field in model._meta.local_fields
        if isinstance(field, ExactCharField)
    }
    assert len(columns) == 27
    if connection.vendor != "mysql":
        pytest.skip("SQLite compares text exactly unless a column says otherwise")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE()"
        )
        collation = {(t, c): name for t, c, name in cursor.fetchall()}
    assert {col: collation[col] for col in columns} == dict.fromkeys(columns, "utf8mb4_bin")
