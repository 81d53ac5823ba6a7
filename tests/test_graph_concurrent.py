"""A graph request that read an entity, then waited for its row while a DELETE of the entity
committed, each in its own server process on one MariaDB database. It answers what it would have
a moment later (404: the entity is gone), never a 500, and writes nothing. These paths do not
lock the entity before they read it; the API's envelope maps the vanished row (the ORM's
DoesNotExist, the foreign key's refusal) instead.

The order is forced: a third process holds the entity's row, the DELETE queues on it first, then
the other request; releasing the holder lets the DELETE go first (InnoDB grants a row's lock in
the order it was asked for)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from memoryplatform.client import MemoryAPIError, MemoryClient

from .livestack import live_stack, queued_in_order, row_held, stack_python, wait_for_lock_waits

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "mysql", reason="row locks across processes: MariaDB only"
    ),
]

COUNTS = """
import json
from graph.models import Entity, Relation
print(json.dumps([Entity.objects.count(), Relation.objects.count()]))
"""


@pytest.mark.parametrize("late", ["update", "relate"])
def test_a_graph_request_queued_behind_an_entity_delete_answers_404(tmp_path, late):
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        gone, kept = (
            a.request("POST", "/graph/entities", {"name": name, "entity_type": "concept"})
            for name in ("risk limits", "leverage")
        )

        def request() -> Any:
            try:
                if late == "update":
                    return b.request(
                        "PUT", f"/graph/entities/{gone['id']}", {"description": "capped at 3x"}
                    )
                return b.request(
                    "POST",
                    "/graph/relations",
                    {
                        "source_entity_id": kept["id"],
                        "target_entity_id": gone["id"],
                        "relation_type": "related_to",
                    },
                )
            except MemoryAPIError as e:
                return e.status, e.code

        with ThreadPoolExecutor(2) as pool:
            with row_held(stack, "graph.models", "Entity", gone["id"]):
                deleted = pool.submit(a.request, "DELETE", f"/graph/entities/{gone['id']}")
                wait_for_lock_waits(stack, 1)
                queued = pool.submit(request)
                wait_for_lock_waits(stack, 2, unless=queued)
            deleted.result(timeout=60)
            assert queued.result(timeout=60) == (404, "NOT_FOUND")
        assert stack_python(stack, COUNTS) == [1, 0]


# An entity's name, description and whether its stored embedding is that of its own text.
ENTITY = """
import json
import numpy as np
from graph.models import Entity
from graph.services import embedding_text
from memories.retrieval.embeddings import embed_passages
e = Entity.objects.get(pk={pk!r})
own = embed_passages([embedding_text(e.name, e.description)])[0]
print(json.dumps([e.name, e.description, float(np.frombuffer(e.embedding, np.float32) @ own)]))
"""


@pytest.mark.parametrize("rename_first", [True, False], ids=["rename first", "describe first"])
def test_a_rename_and_a_description_edit_at_once_both_hold(tmp_path, rename_first):
    """Each PUT wrote back the field it left out as it had read it: the description edit undid a
    rename that committed while it waited (and the rename kept the vector of the old
    description). Now both hold, and the embedding is that of the final text."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        entity = a.request(
            "POST",
            "/graph/entities",
            {"name": "risk limits", "entity_type": "concept", "description": "capped at 3x"},
        )
        path = f"/graph/entities/{entity['id']}"
        rename = lambda: a.request("PUT", path, {"name": "leverage policy"})  # noqa: E731
        describe = lambda: b.request("PUT", path, {"description": "raised to 5x in May"})  # noqa: E731
        first, second = (rename, describe) if rename_first else (describe, rename)
        queued_in_order(stack, ("graph.models", "Entity", entity["id"]), first, second)
        name, description, cosine = stack_python(stack, ENTITY.format(pk=entity["id"]))
        assert (name, description) == ("leverage policy", "raised to 5x in May")
        assert cosine > 0.99


# Three agents' names for one exchange, linked to one identity labelled with alice's.
IDENTITY = """
import json
from datetime import timedelta
from django.utils import timezone
from graph.identity import link_team
from graph.models import Entity, EntityIdentity
from tenants.models import Team
team = Team.objects.get()
for age, agent_id in enumerate(["alice", "bob", "carol"]):
    Entity.objects.filter(agent_id=agent_id).update(
        created_at=timezone.now() - timedelta(seconds=10 - age)
    )
link_team(team=team)
identity = EntityIdentity.objects.get()
EntityIdentity.objects.filter(pk=identity.pk).update(name="Binance Inc.")
print(json.dumps(str(identity.pk)))
"""

LABEL = """
import json
from graph.models import EntityIdentity
print(json.dumps([
    [i.name, sorted(i.members.values_list("agent_id", flat=True))]
    for i in EntityIdentity.objects.all()
]))
"""


def test_two_members_agents_deleted_at_once_leave_the_identity_labelled_by_the_last(tmp_path):
    """Each deletion labels the identity again from the members it has left, under the
    identity's lock: the second, queued behind the first, sees bob's name go with bob too."""
    with live_stack(tmp_path, servers=2) as stack:
        a, b = (
            MemoryClient(stack.api_key, stack.secret, base_url=u, timeout=120) for u in stack.urls
        )
        for agent_id, name in [("alice", "Binance Inc."), ("bob", "binance"), ("carol", "Binance")]:
            a.request(
                "POST",
                "/graph/entities",
                {"name": name, "entity_type": "organization", "agent_id": agent_id},
            )
        identity = stack_python(stack, IDENTITY)
        team = stack.team_id
        queued_in_order(
            stack,
            ("graph.models", "EntityIdentity", identity),
            lambda: a.delete_agent(team, "alice"),
            lambda: b.delete_agent(team, "bob"),
        )
        # carol's name, the one member left (`link_team_entities` prunes it).
        assert stack_python(stack, LABEL) == [["Binance", ["carol"]]]


LINK = """
import json
from graph.identity import link_team
from tenants.models import Team
print(json.dumps(link_team(team=Team.objects.get()).linked))
"""

MEMBERS = """
import json
from graph.models import Entity
print(json.dumps(sorted(
    [e.agent_id, e.name, e.identity.name if e.identity else None]
    for e in Entity.objects.select_related("identity")
)))
"""


def test_a_rename_committed_while_the_linker_waits_keeps_the_entity_unlinked(tmp_path):
    """The linker matched bob's `binance` with alice's `Binance` by the names it read, then
    queued on the rows while bob renamed his entity to `Kraken`. It linked them all the same:
    `Kraken` joined Binance's identity, on the team's views, until a later rename or deletion.
    It now re-reads the names under the rows' locks and links only what still matches."""
    with live_stack(tmp_path, servers=1) as stack:
        (url,) = stack.urls
        client = MemoryClient(stack.api_key, stack.secret, base_url=url, timeout=120)
        _alice, bob = (
            client.request(
                "POST",
                "/graph/entities",
                {"name": name, "entity_type": "organization", "agent_id": agent_id},
            )
            for agent_id, name in [("alice", "Binance"), ("bob", "binance")]
        )
        renamed, linked = queued_in_order(
            stack,
            ("graph.models", "Entity", bob["id"]),
            lambda: client.request("PUT", f"/graph/entities/{bob['id']}", {"name": "Kraken"}),
            lambda: stack_python(stack, LINK),
        )
        assert (renamed["name"], linked) == ("Kraken", 0)
        assert stack_python(stack, MEMBERS) == [
            ["alice", "Binance", None],
            ["bob", "Kraken", None],
        ]
        # Nothing else changed: with the same names, the linker links them as before.
        client.request("PUT", f"/graph/entities/{bob['id']}", {"name": "Binance"})
        assert stack_python(stack, LINK) == 2
        assert stack_python(stack, MEMBERS) == [
            ["alice", "Binance", "Binance"],
            ["bob", "Binance", "Binance"],
        ]
