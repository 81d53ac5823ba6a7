"""Memories from another memory service, as a bundle (docs/export.md) the import writes.

mem0 (the open-source `Memory.get_all()` / `search()` and the platform's `get_all`) lists its
memories as objects with `memory` (the text), `id`, `hash`, `created_at`, `updated_at`, the ids it
was scoped by (`user_id`, `agent_id`, `run_id`, `actor_id`, `role`) and `metadata` (the
platform adds `categories`). Each becomes one personal memory of the agent named by its
`user_id` (or `agent_id`, as the caller chooses), keeping its text, times, run and metadata, and
noting where it came from (`metadata.source = "mem0"`, `metadata.mem0_id`). The import then
does the rest as for any bundle: it embeds the texts with this server's model, checks every
record against the API's limits, meets a memory already here (the same agent and text) instead
of writing it twice — so converting and importing the same listing again adds nothing — and
writes all or nothing.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from core.errors import DomainError, ErrorCode
from core.validators import AGENT_ID_RE

from .bundle import bundle_header, bundle_lines_write

# What an import reads: this server's bundle, or another service's listing converted into one.
SOURCES = ("bundle", "mem0")
# The mem0 keys a memory may be given to an agent by.
AGENT_KEYS = ("user_id", "agent_id")
# The keys of a mem0 item read into columns; the rest of the item goes to metadata.
_READ = {"id", "memory", "hash", "created_at", "updated_at", "run_id", "metadata", "score"}
_CATEGORY_MAX = 64


def _invalid(where: str, message: str) -> DomainError:
    return DomainError(ErrorCode.VALIDATION_ERROR, f"{where}: {message}")


def as_bundle(
    data: bytes, *, source: str = "bundle", agent_from: str = "user_id", default_agent: str = ""
) -> bytes:
    """What an import of `data` reads: a bundle as it is, another service's listing converted."""
    if source not in SOURCES:
        raise _invalid("from", f"must be one of {', '.join(SOURCES)}")
    if source == "bundle":
        return data
    return mem0_bundle(mem0_items(data), agent_from=agent_from, default_agent=default_agent)


def mem0_items(data: bytes) -> list[dict[str, Any]]:
    """The memories of a mem0 listing: `{"results": [...]}` (get_all / search), a bare list (the
    older output), or JSON Lines of memory objects."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid("body", "not UTF-8 text") from exc
    try:
        parsed: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            parsed = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise _invalid("body", "neither JSON nor JSON Lines") from exc
    if isinstance(parsed, dict):
        parsed = parsed.get("results", parsed.get("memories"))
    if not isinstance(parsed, list):
        raise _invalid("body", 'expected a list of memories, or an object with "results"')
    for n, item in enumerate(parsed):
        if not isinstance(item, dict):
            raise _invalid(f"memory {n}", "not an object")
    return parsed


def mem0_bundle(items: list[dict[str, Any]], *, agent_from: str, default_agent: str = "") -> bytes:
    """A bundle of `items` (mem0 memories), each a personal memory of the agent its `agent_from`
    key names (`default_agent` when it has none). A 400 naming the item for one without text or
    whose agent id this server cannot take."""
    if agent_from not in AGENT_KEYS:
        raise _invalid("agent_from", f"must be one of {', '.join(AGENT_KEYS)}")
    if default_agent and not re.fullmatch(AGENT_ID_RE, default_agent):
        raise _invalid("default_agent", "not a valid agent id")
    records = [_memory(n, item, agent_from, default_agent) for n, item in enumerate(items)]
    # No vectors (an empty model): the import embeds every text with its own model.
    header = bundle_header(
        team_id=None,
        agent_id=None,
        exported_at=None,
        model="",
        dim=0,
        counts={"memory": len(records)},
    )
    out = io.BytesIO()
    bundle_lines_write(out, [header, *records])
    return out.getvalue()


def _memory(n: int, item: dict[str, Any], agent_from: str, default_agent: str) -> dict[str, Any]:
    where = f"memory {n}"
    content = item.get("memory")
    if not isinstance(content, str) or not content.strip():
        raise _invalid(where, '"memory" (its text) is required')
    # The import checks these too, but names the bundle's line: here they name the memory.
    if len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise _invalid(where, f"its text is over {settings.MEMORY_MAX_CONTENT_CHARS} characters")
    agent_id = item.get(agent_from) or default_agent
    if not agent_id:
        raise _invalid(where, f"no {agent_from}, and no default agent given")
    if not isinstance(agent_id, str) or not re.fullmatch(AGENT_ID_RE, agent_id):
        raise _invalid(where, f"{agent_from} {agent_id!r} is not a valid agent id here")
    given = item.get("metadata")
    metadata: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
    # The scoping ids other than the agent's, and anything else the item carries.
    metadata.update({k: v for k, v in item.items() if k not in _READ and k != agent_from})
    metadata.update({"source": "mem0", "mem0_id": item.get("id")})
    categories = item.get("categories")
    category = "general"
    if isinstance(categories, list) and categories and isinstance(categories[0], str):
        category = categories[0][:_CATEGORY_MAX] or category
    record: dict[str, Any] = {
        "kind": "memory",
        "id": n + 1,
        "scope": "personal",
        "agent_id": agent_id,
        "content": content,
        "category": category,
        "metadata": metadata,
    }
    run_id = item.get("run_id")
    if isinstance(run_id, str) and re.fullmatch(AGENT_ID_RE, run_id):
        record["run_id"] = run_id
    elif run_id is not None:
        # A run id this server's column cannot take (a space, over 64 characters) is not lost:
        # it stays where the other ids not read into columns are.
        metadata["run_id"] = run_id
    for stamp in ("created_at", "updated_at"):
        value = item.get(stamp)
        if value is None:
            continue
        try:
            parsed = parse_datetime(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise _invalid(where, f"{stamp} {value!r} is not an ISO 8601 date-time")
        record[stamp] = value
    if "updated_at" not in record and "created_at" in record:
        record["updated_at"] = record["created_at"]
    return record
