"""Two upserts of one team, or of one agent, at once, each in its own server process on one
MariaDB database, each sending a different optional field: both fields must hold.

The order is forced: a third process holds the row, the first request queues on it, then the
second; releasing the holder lets them go in that order (InnoDB grants a row's lock in the order
it was asked for)."""

from __future__ import annotations

import pytest
from django.db import connection

from memoryplatform.client import MemoryClient

from .livestack import live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]


def test_two_team_upserts_of_different_fields_at_once_both_hold(tmp_path):
    """Each request wrote every column as it had read it: the second undid the first's
    description, and would as well undo the admin's "require signature v2" set meanwhile."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        team = a.get_team("xproc")
        queued_in_order(
            stack,
            ("tenants.models", "Team", "xproc"),
            lambda: a.upsert_team("xproc", team["name"], description="The platform team."),
            lambda: b.upsert_team("xproc", team["name"], config={"region": "eu"}),
        )
        after = a.get_team("xproc")
        assert (after["description"], after["config"]) == ("The platform team.", {"region": "eu"})


def test_two_agent_upserts_of_different_fields_at_once_both_hold(tmp_path):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        a.upsert_agent("coder", "Coder")
        pk = stack_python(
            stack,
            "import json\nfrom tenants.models import Agent\n"
            "print(json.dumps(Agent.objects.get(agent_id='coder').pk))",
        )
        queued_in_order(
            stack,
            ("tenants.models", "Agent", pk),
            lambda: a.upsert_agent("coder", "Coder", role="reviews migrations"),
            lambda: b.upsert_agent("coder", "Coder", config={"model": "small"}),
        )
        (agent,) = [x for x in a.list_agents("xproc") if x["id"] == "coder"]
        assert (agent["role"], agent["config"]) == ("reviews migrations", {"model": "small"})


def test_an_agent_upsert_queued_behind_its_delete_registers_it_again(tmp_path):
    """An upsert that found the agent, then waited for its row while a DELETE removed it, was a
    404 for a PUT that a moment later would have created the agent. Now it creates it."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        a.upsert_agent("coder", "Coder", role="writes code")
        pk = stack_python(
            stack,
            "import json\nfrom tenants.models import Agent\n"
            "print(json.dumps(Agent.objects.get(agent_id='coder').pk))",
        )
        _, upserted = queued_in_order(
            stack,
            ("tenants.models", "Agent", pk),
            lambda: a.delete_agent("xproc", "coder"),
            lambda: b.upsert_agent("coder", "Coder", role="reviews migrations"),
        )
        assert upserted["role"] == "reviews migrations"
        (agent,) = [x for x in a.list_agents("xproc") if x["id"] == "coder"]
        assert (agent["role"], agent["config"]) == ("reviews migrations", {})


ROTATE = """
import json
from tenants.models import ApiKey
from tenants.services import api_key_rotate
key = ApiKey.objects.get(key_id={key_id!r})
print(json.dumps(api_key_rotate(api_key=key, grace_seconds=3600).secret))
"""


def test_two_rotations_at_once_leave_every_secret_in_its_grace(tmp_path):
    """Two leads rotate the same key at the same moment (console, command): they run one after
    the other on the key's locked row. The agents on the original secret and on the first
    rotation's both keep working through the grace; before, the second rotation ended the
    original at once."""
    with live_stack(tmp_path, servers=1) as stack:
        pk = stack_python(
            stack,
            "import json\nfrom tenants.models import ApiKey\n"
            f"print(json.dumps(ApiKey.objects.get(key_id={stack.api_key!r}).pk))",
        )
        rotate = ROTATE.format(key_id=stack.api_key)
        first, second = queued_in_order(
            stack,
            ("tenants.models", "ApiKey", pk),
            lambda: stack_python(stack, rotate),
            lambda: stack_python(stack, rotate),
        )
        assert len({stack.secret, first, second}) == 3
        for secret in (stack.secret, first, second):
            client = MemoryClient(stack.api_key, secret, base_url=stack.urls[0], timeout=60)
            assert client.get_team("xproc")["id"] == "xproc"  # raises on a 401
