"""Two updates of a team's pipeline config at once, each in its own server process on one MariaDB
database, each sending one field: both fields must hold, and two first saves make one config.

The order is forced: a third process holds the config's row (or, before the first save, the
team's row, which inserting the config reads through its foreign key), the first request queues
on it, then the second; releasing the holder lets them go in that order (InnoDB grants a row's
lock in the order it was asked for)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryAPIError, MemoryClient

from .livestack import live_stack, queued_in_order, stack_python

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]


@pytest.mark.parametrize("saved_before", [True, False], ids=["update", "first save"])
def test_two_updates_of_different_fields_at_once_both_hold(tmp_path, saved_before):
    """Each request wrote back every field as it had read it: turning the pipeline off was undone
    by a concurrent change of the idle days. Two first saves: the second was a duplicate-key
    500."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        team = stack_python(
            stack,
            "import json\nfrom tenants.models import Team\nprint(json.dumps(Team.objects.get().pk))",
        )
        if saved_before:
            a.set_pipeline_config(enabled=True, cleanup_idle_days=30)
            held = ("lifecycle.models", "PipelineConfig", team)
        else:
            held = ("tenants.models", "Team", team)

        def send(client: MemoryClient, **fields: Any) -> Any:
            try:
                return client.set_pipeline_config(**fields)
            except MemoryAPIError as e:
                return e.status, e.code

        answers = queued_in_order(
            stack,
            held,
            lambda: send(a, enabled=False),
            lambda: send(b, cleanup_idle_days=7),
        )
        assert all(isinstance(x, dict) for x in answers), answers
        assert (answers[0]["enabled"], answers[1]["cleanup_idle_days"]) == (False, 7)
        config = a.get_pipeline_config()
        assert (config["enabled"], config["cleanup_idle_days"]) == (False, 7)
