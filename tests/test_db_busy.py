"""The database busy or gone answers the API's envelope, 503 with Retry-After, never a 500: a row
held by another process past DB_LOCK_WAIT_SECONDS (MariaDB's lock wait, SQLite's busy timeout),
and a database that cannot be reached."""

from __future__ import annotations

import os
import time

import pytest
import requests
from django.db import connection

from memoryplatform.client import MemoryAPIError, MemoryClient

from .livestack import free_port, live_stack, row_held, stack_python, start_server, wait_until_up

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_write_that_waits_past_the_lock_wait_is_a_503_and_changes_nothing(tmp_path):
    with live_stack(tmp_path, servers=1, extra_env={"DB_LOCK_WAIT_SECONDS": "1"}) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=60)
        memory = client.write_memory("coder", "Deploys happen on Fridays at 5pm.")
        with (
            row_held(stack, "memories.models", "Memory", memory["id"]),
            pytest.raises(MemoryAPIError) as busy,
        ):
            client.update_memory(memory["id"], content="Deploys happen on Mondays at 9am.")
        assert (busy.value.status, busy.value.code) == (503, "SERVICE_UNAVAILABLE")
        assert "retry" in str(busy.value)
        kept = stack_python(
            stack,
            "import json\nfrom memories.models import Memory, MemoryRevision\n"
            f"m = Memory.objects.get(pk={memory['id']})\n"
            "print(json.dumps([m.content, MemoryRevision.objects.filter(memory=m).count()]))",
        )
        assert kept[0] == "Deploys happen on Fridays at 5pm."
        # Once the row is free, the same request goes through.
        client.update_memory(memory["id"], content="Deploys happen on Mondays at 9am.")
        assert client.get_memory(memory["id"])["content"] == "Deploys happen on Mondays at 9am."


def test_the_busy_answer_comes_after_the_setting_with_retry_after(tmp_path):
    with live_stack(tmp_path, servers=1, extra_env={"DB_LOCK_WAIT_SECONDS": "1"}) as stack:
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0], timeout=60)
        memory = client.write_memory("coder", "The user drinks green tea.")
        answers: list[requests.Response] = []
        client.session.hooks["response"].append(lambda r, *args, **kwargs: answers.append(r))
        with row_held(stack, "memories.models", "Memory", memory["id"]):
            started = time.monotonic()
            with pytest.raises(MemoryAPIError):
                client.delete_memory(memory["id"])
            waited = time.monotonic() - started
        # The lock wait is the setting's, not MariaDB's 50 s default.
        assert waited < 15, waited
        assert answers[-1].status_code == 503 and answers[-1].headers["Retry-After"] == "1"
        assert client.get_memory(memory["id"])["content"] == "The user drinks green tea."


def test_a_database_that_cannot_be_reached_is_a_503(tmp_path):
    if connection.vendor == "mysql":
        url = f"mysql://root@127.0.0.1:{free_port()}/nowhere"  # nothing listens there
    else:
        url = f"sqlite:///{tmp_path}/no/such/dir/db.sqlite3"
    server, base = start_server(
        {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
            "DATABASE_URL": url,
            "DATA_DIR": str(tmp_path),
            "DEBUG": "0",
        }
    )
    try:
        wait_until_up([base], healthy=False)
        client = MemoryClient("mk_000000000000000000000000", "s" * 43, base_url=base, timeout=30)
        with pytest.raises(MemoryAPIError) as down:
            client.search("coder", "anything")
        assert (down.value.status, down.value.code) == (503, "SERVICE_UNAVAILABLE")
        assert "database unavailable" in str(down.value)
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_a_write_refused_for_a_row_removed_meanwhile_maps_to_409_not_500(team):
    """The envelope's net for a path that does not lock what it refers to: the database's own
    foreign-key refusal (a share of a memory id that no longer exists) is a 409 CONFLICT, a
    vanished row a 404 (read, or saved over), anything else stays a 500."""
    from django.db import DatabaseError, IntegrityError, transaction
    from rest_framework import views  # noqa: F401  (first, as a request does: see below)

    # core.api is the renderer DRF's settings load when rest_framework.views is imported: imported
    # on its own first, it would import itself through them, half-initialised.
    from core.api import error_for_exception
    from memories.models import Memory, MemoryShare, Procedure

    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        MemoryShare.objects.create(team=team, memory_id=987654, agent_id="a", permission="read")
    mapped = error_for_exception(refused.value)
    assert mapped is not None and (mapped.status, mapped.code) == (409, "CONFLICT")
    gone = error_for_exception(Memory.DoesNotExist("Memory matching query does not exist."))
    assert gone is not None and (gone.status, gone.code) == (404, "NOT_FOUND")
    assert error_for_exception(IntegrityError(1048, "Column 'team_id' cannot be null")) is None
    # An instance saved after its row was deleted: Django's own refusal, a 404 too.
    rule = Procedure.objects.create(team=team, agent_id="a", rule="r", source="agent")
    Procedure.objects.filter(pk=rule.pk).delete()
    with pytest.raises(DatabaseError) as missed:
        rule.save(update_fields=["rule"])
    mapped = error_for_exception(missed.value)
    assert mapped is not None and (mapped.status, mapped.code) == (404, "NOT_FOUND")
    assert error_for_exception(DatabaseError("something else")) is None
