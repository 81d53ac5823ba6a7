"""Deeply nested JSON bodies are a 400 VALIDATION_ERROR, never a 500 (MAX_JSON_DEPTH, default 20).

Bodies are built as text: a Python object nested 100,000 levels could not even be serialised.
What is accepted must also be storable everywhere it is copied to: MariaDB refuses JSON nested 32
levels or more, and a purged memory's revisions sit 3 levels deeper in the trash than in the body.
"""

from __future__ import annotations

import pytest

from memories.models import Memory, TrashedMemory

from ..helpers import error_code

# (path, JSON fields before the nested one, the field that takes a JSON object)
ENDPOINTS = [
    ("/memories/personal", '"agent_id": "nest", "content": "nesting probe", ', "metadata"),
    ("/memories/team", '"content": "nesting probe for the team", ', "metadata"),
    ("/graph/entities", '"name": "Nesting probe", "entity_type": "person", ', "properties"),
    ("/agents", '"agent_id": "nest2", "name": "Nesting probe", ', "config"),
]


def body(prefix: str, field: str, depth: int, kind: str = "object") -> bytes:
    """A body `depth` levels deep in total: the body object is level 1, `field` level 2, and
    `field` holds depth - 1 levels of objects ({"k": …}) or arrays ([…])."""
    inner = depth - 1
    opening, closing = ('{"k": ', "}") if kind == "object" else ("[", "]")
    nested = opening * (inner - 1) + ("{}" if kind == "object" else "[]") + closing * (inner - 1)
    return ("{" + prefix + f'"{field}": ' + nested + "}").encode()


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def test_the_body_helper_builds_the_depth_it_says():
    import json

    for depth in (2, 3, 20, 21, 33):
        for kind in ("object", "array"):
            assert _depth(json.loads(body('"a": 1, ', "m", depth, kind))) == depth


@pytest.mark.parametrize(("path", "prefix", "field"), ENDPOINTS)
def test_a_body_at_the_limit_is_accepted(api, path, prefix, field, settings):
    assert settings.MAX_JSON_DEPTH == 20
    r = api.post(path, raw=body(prefix, field, 20))
    assert r.status_code in (200, 201), r.content


@pytest.mark.parametrize(("path", "prefix", "field"), ENDPOINTS)
@pytest.mark.parametrize("kind", ["object", "array"])
@pytest.mark.parametrize("depth", [21, 33, 950, 100_000])
def test_a_deeper_body_is_a_validation_error(api, path, prefix, field, kind, depth):
    r = api.post(path, raw=body(prefix, field, depth, kind))
    assert r.status_code == 400, r.content[:300]
    assert error_code(r) == "VALIDATION_ERROR"
    assert "nested deeper than 20 levels" in r.json()["error"]
    assert not Memory.objects.filter(content__startswith="nesting probe").exists()


def test_an_update_with_deep_metadata_is_refused_and_changes_nothing(api):
    r = api.post("/memories/personal", {"agent_id": "nest", "content": "nesting probe"})
    memory_id = r.json()["data"]["id"]
    r = api.put(f"/memories/personal/{memory_id}", raw=body("", "metadata", 5000, "array"))
    assert r.status_code == 400 and error_code(r) == "VALIDATION_ERROR"
    assert Memory.objects.get(pk=memory_id).metadata == {}


def test_the_limit_is_a_setting(api, settings):
    settings.MAX_JSON_DEPTH = 4
    prefix, field = ENDPOINTS[0][1], ENDPOINTS[0][2]
    assert api.post("/memories/personal", raw=body(prefix, field, 4)).status_code == 201
    r = api.post("/memories/personal", raw=body(prefix, field, 5))
    assert r.status_code == 400 and "nested deeper than 4 levels" in r.json()["error"]


def test_metadata_at_the_limit_survives_revisions_and_the_trash(api, team, settings):
    """On MariaDB a deeper default failed here: the revision (one level more) or the trash
    (three more) would be refused by the database, a 500 or a purge that cannot be done."""
    from django.contrib.auth import get_user_model

    from memories.purge import PurgeCriteria, purge_confirm, purge_preview

    limit = settings.MAX_JSON_DEPTH
    prefix = '"agent_id": "deep", "content": "nesting probe at the limit", '
    r = api.post("/memories/personal", raw=body(prefix, "metadata", limit))
    assert r.status_code == 201, r.content[:300]
    memory_id = r.json()["data"]["id"]
    changed = body("", "metadata", limit).replace(b'"k"', b'"j"')  # a revision records both
    r = api.put(f"/memories/personal/{memory_id}", raw=changed)
    assert r.status_code == 200, r.content[:300]

    preview = purge_preview(
        team=team, criteria=PurgeCriteria(idle_days=0, importance_below=1.0, agent_id="deep")
    )
    assert [i.memory.pk for i in preview.items] == [memory_id]
    user = get_user_model().objects.create_user("purger", password="x" * 12)
    purge_confirm(team=team, token=preview.token, user=user)
    trashed = TrashedMemory.objects.get(memory_id=memory_id)
    assert trashed.revisions and not Memory.objects.filter(pk=memory_id).exists()
