"""Half of a surrogate pair escaped alone ("\\ud800") is a 400 naming the field, never a 500.

JSON lets a string escape one; Python decodes it into a str no UTF-8 encoder takes, so the database
driver failed on it wherever a field did not refuse it itself: a metadata key on MariaDB, a
profile value on both databases were 500s. The REST parser and the MCP tools now refuse it for
every field, and nothing is written. A whole pair (an emoji escaped as two halves) is text."""

from __future__ import annotations

import json

import pytest

from memories.models import Memory, ProfileField
from tenants.models import Agent

from ..helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

LONE = "\\ud800"  # as it appears in the body's text: a JSON escape, not a character

# (method, path, body text with {s} where the lone half goes, the field the answer names)
CASES = [
    ("POST", "/memories/personal", '{"agent_id": "a", "content": "x {s}"}', "content"),
    (
        "POST",
        "/memories/personal",
        '{"agent_id": "a", "content": "x", "metadata": {"k{s}": 1}}',
        "metadata",
    ),
    (
        "POST",
        "/memories/personal",
        '{"agent_id": "a", "content": "x", "metadata": {"k": ["{s}"]}}',
        "metadata.k.0",
    ),
    (
        "POST",
        "/memories/team/batch",
        '{"items": [{"content": "x", "metadata": {"k": "{s}"}}]}',
        "items.0.metadata.k",
    ),
    ("PUT", "/profile/a", '{"fields": {"occupation": "nurse {s}"}}', "fields.occupation"),
    (
        "POST",
        "/memories/personal/search",
        '{"agent_id": "a", "query": "x", "filters": {"metadata.k": "{s}"}}',
        "filters.metadata.k",
    ),
    (
        "POST",
        "/graph/entities",
        '{"name": "Ann", "entity_type": "person", "properties": {"{s}": 1}}',
        "properties",
    ),
    ("POST", "/agents", '{"agent_id": "b", "name": "B", "config": {"tone": "{s}"}}', "config.tone"),
]


@pytest.mark.parametrize("method, path, text, field", CASES)
def test_a_lone_surrogate_is_a_400_naming_the_field_and_nothing_is_written(
    api, method, path, text, field
):
    r = api.call(method, path, raw=text.replace("{s}", LONE).encode())
    assert r.status_code == 400, r.content
    assert error_code(r) == "VALIDATION_ERROR"
    assert list(r.json()["details"]) == [field]
    assert not Memory.objects.exists() and not ProfileField.objects.exists()
    assert not Agent.objects.filter(agent_id="b").exists()


def test_a_whole_pair_escaped_in_two_halves_is_text(api):
    raw = (
        '{"agent_id": "a", "content": "launch \\ud83d\\ude80", "metadata": {"k\\ud83d\\ude80": 1}}'
    )
    r = api.call("POST", "/memories/personal", raw=raw.encode())
    assert r.status_code == 201, r.content
    memory = ok_data(r)
    assert memory["content"] == "launch 🚀" and memory["metadata"] == {"k🚀": 1}
    assert json.loads(raw)["content"] == Memory.objects.get().content
