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

A memory may also carry its mem0 history (`"history"`: what `Memory.history(id)` returned for it):
each UPDATE in it becomes a revision of the memory, with the texts before and after, its time and
who made it, so the console and `GET /memories/<id>/history` show how the memory came to say
what it says.

A listing of mem0's graph memory (`get_all()` then also returns `"relations"`: `source`,
`relationship`, `target`) brings its relations: each node becomes an entity of the agent the
listing is of, each edge a relation between two of them (see `_graph`).
"""

from __future__ import annotations

import io
import json
import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from core.dates import until_moment
from core.errors import DomainError, ErrorCode
from core.validators import AGENT_ID_RE
from graph.extraction import relation_type_named
from graph.models import EntityType, RelationType
from graph.services import name_key

from .bundle import bundle_header, bundle_lines_write

# What an import reads: this server's bundle, or another service's listing converted into one.
SOURCES = ("bundle", "mem0", "letta", "zep")
# The mem0 keys a memory may be given to an agent by.
AGENT_KEYS = ("user_id", "agent_id")
# The keys of a mem0 item read into columns; the rest of the item goes to metadata.
_READ = {
    *("id", "memory", "hash", "created_at", "updated_at", "run_id", "metadata", "score"),
    "history",
}
_CATEGORY_MAX = 64
# The events of a mem0 history. An UPDATE changed the memory's text: it becomes a revision. ADD is
# the memory's creation (its own created_at), NONE a write that changed nothing, and a DELETE
# cannot precede a memory mem0 still lists: they add nothing. Any other is refused rather than
# dropped unread.
_HISTORY_EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")
_ACTOR_MAX = 200
_NAME_MAX = 255  # an entity's name


def invalid(where: str, message: str) -> DomainError:
    """The 400 of a listing or file another service wrote, naming where in it."""
    return DomainError(ErrorCode.VALIDATION_ERROR, f"{where}: {message}")


def as_bundle(
    data: bytes,
    *,
    source: str = "bundle",
    agent_from: str = "user_id",
    default_agent: str = "",
    agent_id: str = "",
) -> bytes:
    """What an import of `data` reads: a bundle as it is, another service's listing converted
    (`agent_from`, `default_agent`: mem0's; `agent_id`: a Letta file's or a Zep user's agent
    here)."""
    if source not in SOURCES:
        raise invalid("from", f"must be one of {', '.join(SOURCES)}")
    if source == "bundle":
        return data
    if source == "letta":
        # Imported here: that module reuses this one's checks.
        from .convert_letta import letta_bundle

        return letta_bundle(data, agent_id=agent_id)
    if source == "zep":
        from .convert_zep import zep_bundle

        return zep_bundle(data, agent_id=agent_id)
    items, relations = mem0_listing(data)
    return mem0_bundle(
        items, agent_from=agent_from, default_agent=default_agent, relations=relations
    )


def mem0_listing(data: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The memories of a mem0 listing: `{"results": [...]}` (get_all / search), a bare list (the
    older output), or JSON Lines of memory objects; and its graph's relations (`"relations"`
    beside `"results"`, with the graph store on)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid("body", "not UTF-8 text") from exc
    try:
        parsed: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            parsed = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise invalid("body", "neither JSON nor JSON Lines") from exc
    relations: Any = []
    if isinstance(parsed, dict):
        relations = parsed.get("relations") or []
        parsed = parsed.get("results", parsed.get("memories"))
    if not isinstance(parsed, list):
        raise invalid("body", 'expected a list of memories, or an object with "results"')
    for n, item in enumerate(parsed):
        if not isinstance(item, dict):
            raise invalid(f"memory {n}", "not an object")
    if not isinstance(relations, list):
        raise invalid("relations", "expected a list of relations")
    for n, relation in enumerate(relations):
        if not isinstance(relation, dict):
            raise invalid(f"relation {n}", "not an object")
    return parsed, relations


def mem0_bundle(
    items: list[dict[str, Any]],
    *,
    agent_from: str,
    default_agent: str = "",
    relations: list[dict[str, Any]] | None = None,
) -> bytes:
    """A bundle of `items` (mem0 memories), each a personal memory of the agent its `agent_from`
    key names (`default_agent` when it has none), and of the graph's `relations`. A 400 naming
    the item for one without text or whose agent id this server cannot take."""
    if agent_from not in AGENT_KEYS:
        raise invalid("agent_from", f"must be one of {', '.join(AGENT_KEYS)}")
    if default_agent and not re.fullmatch(AGENT_ID_RE, default_agent):
        raise invalid("default_agent", "not a valid agent id")
    records = [_memory(n, item, agent_from, default_agent) for n, item in enumerate(items)]
    revisions: list[dict[str, Any]] = []
    for n, item in enumerate(items):
        revisions.extend(_history(n, item, first_id=len(revisions) + 1))
    agents = {r["agent_id"] for r in records}
    entities, edges = _graph(relations or [], agent_from, agents, default_agent)
    return converted_bundle(
        {"memory": records, "revision": revisions, "entity": entities, "relation": edges}
    )


def converted_bundle(records: dict[str, list[dict[str, Any]]]) -> bytes:
    """The bundle of another service's records, by kind, in the order the import reads them."""
    # No vectors (an empty model): the import embeds every text with its own model.
    header = bundle_header(
        team_id=None,
        agent_id=None,
        exported_at=None,
        model="",
        dim=0,
        counts={kind: len(rows) for kind, rows in records.items()},
    )
    out = io.BytesIO()
    bundle_lines_write(out, [header, *(row for rows in records.values() for row in rows)])
    return out.getvalue()


def _memory(n: int, item: dict[str, Any], agent_from: str, default_agent: str) -> dict[str, Any]:
    where = f"memory {n}"
    content = item.get("memory")
    if not isinstance(content, str) or not content.strip():
        raise invalid(where, '"memory" (its text) is required')
    # The import checks these too, but names the bundle's line: here they name the memory.
    if len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise invalid(where, f"its text is over {settings.MEMORY_MAX_CONTENT_CHARS} characters")
    agent_id = item.get(agent_from) or default_agent
    if not agent_id:
        raise invalid(where, f"no {agent_from}, and no default agent given")
    if not isinstance(agent_id, str) or not re.fullmatch(AGENT_ID_RE, agent_id):
        raise invalid(where, f"{agent_from} {agent_id!r} is not a valid agent id here")
    given = item.get("metadata")
    metadata: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
    # The scoping ids other than the agent's, and anything else the item carries.
    readable, expires_at = _expiry(item.get("expiration_date"))
    read = {*_READ, agent_from, *(("expiration_date",) if readable else ())}
    metadata.update({k: v for k, v in item.items() if k not in read})
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
        if value is not None:
            record[stamp] = _stamp(where, stamp, value)
    if "updated_at" not in record and "created_at" in record:
        record["updated_at"] = record["created_at"]
    if expires_at is not None:
        record["expires_at"] = expires_at
    return record


def _expiry(value: Any) -> tuple[bool, str | None]:
    """Whether mem0's `expiration_date` could be read, and the memory's `expires_at` it gives
    (None: never). mem0's is a plain date, in UTC and inclusive (a memory expiring 2030-01-31 is
    found all that day), so it ends at the next midnight UTC (core.dates.until_moment); a full
    date-time is taken as it is, UTC without an offset. mem0 reads a date it cannot parse as
    "not expired": so does the import, and the value stays in `metadata.expiration_date`, where
    it was before expiry existed here."""
    if value is None:
        return True, None
    moment = until_moment(value) if isinstance(value, str) else None
    if moment is None:
        return False, None
    return True, moment.isoformat()


def json_document(data: bytes, *, not_json: str = "not JSON") -> Any:
    """`data` read as one JSON document; a 400 naming the body when it is not (`not_json`: what
    to say then)."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise invalid("body", "not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise invalid("body", not_json) from exc


def checked_datetime(where: str, name: str, value: Any) -> datetime:
    """`value` read as an ISO 8601 date-time (a 400 naming it otherwise)."""
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise invalid(where, f"{name} {value!r} is not an ISO 8601 date-time")
    return parsed


def _stamp(where: str, name: str, value: Any) -> str:
    """`value` as given, once checked to be an ISO 8601 date-time."""
    checked_datetime(where, name, value)
    return str(value)


def _history(n: int, item: dict[str, Any], *, first_id: int) -> list[dict[str, Any]]:
    """The revisions of memory `n` (the bundle's memory n + 1) its mem0 history gives: one per
    UPDATE, in the history's order (mem0 lists it oldest first). The field names of mem0's
    history table and of its older one (`prev_value`, `new_value`, `timestamp`) are both read."""
    given = item.get("history")
    if given is None:
        return []
    where = f"memory {n}"
    if not isinstance(given, list):
        raise invalid(where, '"history" must be a list (what mem0\'s history(id) returned)')
    out: list[dict[str, Any]] = []
    for k, entry in enumerate(given):
        at = f"{where}, history entry {k}"
        if not isinstance(entry, dict):
            raise invalid(at, "not an object")
        event = entry.get("event")
        if not isinstance(event, str) or event.upper() not in _HISTORY_EVENTS:
            raise invalid(at, f"event {event!r} is not one of {', '.join(_HISTORY_EVENTS)}")
        if event.upper() != "UPDATE":
            continue
        before = entry.get("old_memory", entry.get("prev_value"))
        after = entry.get("new_memory", entry.get("new_value"))
        if not isinstance(before, str) or not isinstance(after, str):
            raise invalid(at, "an UPDATE needs its old_memory and new_memory texts")
        who = [str(entry[key]) for key in ("actor_id", "role") if entry.get(key)]
        record: dict[str, Any] = {
            "kind": "revision",
            "id": first_id + len(out),
            "memory": n + 1,
            "action": "update",
            "before": {"content": before},
            "after": {"content": after},
            "actor": " ".join(["mem0", *who])[:_ACTOR_MAX],
        }
        # When the change was made: mem0 stamps an UPDATE's row with the memory's creation time
        # and the update's own (`updated_at`); its older table had one `timestamp`.
        for stamp in ("updated_at", "timestamp", "created_at"):
            if entry.get(stamp) is not None:
                record["created_at"] = _stamp(at, stamp, entry[stamp])
                break
        out.append(record)
    return out


def _graph(
    relations: list[dict[str, Any]], agent_from: str, agents: set[str], default_agent: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The entities and relations of mem0's graph edges (`source`, `relationship`, `target`;
    `destination` in its search output), as a personal graph of one agent: the edge's own
    `agent_from` id, else the one agent the listing's memories name (mem0 lists one user's graph
    per call), else `default_agent`.

    mem0 returns no node types and its relationships are free text, where this server has closed
    sets: a node is an entity of type `custom` (`person` when it is the agent itself, mem0's "I"),
    an edge whose relationship says one of this server's types (as the graph reads an LLM's:
    `works_for` is `works_at`, `likes` `prefers`) has it, any other becomes `related_to` with the
    relationship as its description. Nothing is dropped: every edge keeps
    what mem0 called it in `properties.mem0_relationships`, and two edges between the same nodes
    that end as one type here are one relation holding both names."""
    entities: dict[tuple[str, str], dict[str, Any]] = {}
    edges: dict[tuple[str, str, str], dict[str, Any]] = {}
    for n, given in enumerate(relations):
        where = f"relation {n}"
        agent_id = given.get(agent_from)
        if agent_id is None:
            if len(agents) > 1:
                raise invalid(
                    where,
                    f"no {agent_from}, and the listing's memories are of several agents "
                    "(import one user's listing at a time, or give each relation its "
                    f"{agent_from})",
                )
            agent_id = next(iter(agents), None) or default_agent
        if not agent_id:
            raise invalid(where, f"no {agent_from}, and no memory or default agent to take it from")
        if not isinstance(agent_id, str) or not re.fullmatch(AGENT_ID_RE, agent_id):
            raise invalid(where, f"{agent_from} {agent_id!r} is not a valid agent id here")
        relationship = given.get("relationship")
        if not isinstance(relationship, str) or not relationship.strip():
            raise invalid(where, '"relationship" is required')
        ends = []
        for key in ("source", "target"):
            name = given.get(key, given.get("destination") if key == "target" else None)
            if not isinstance(name, str) or not name.strip():
                raise invalid(where, f'"{key}" (a node\'s name) is required')
            if len(name) > _NAME_MAX:
                raise invalid(where, f"{key} is over {_NAME_MAX} characters")
            # Names that differ only in case or width are one entity here (graph.services.
            # same_name, which the import meets entities by): one node, its first name, the
            # others kept in properties, so edges ending on either variant merge as they will.
            entity = entities.get((agent_id, name_key(name)))
            if entity is None:
                entity = entities[(agent_id, name_key(name))] = {
                    "kind": "entity",
                    "id": f"e{len(entities) + 1}",
                    "agent_id": agent_id,
                    "name": name,
                    "entity_type": EntityType.CUSTOM,
                    "properties": {"source": "mem0"},
                }
            elif name != entity["name"]:
                variants = entity["properties"].setdefault("mem0_names", [entity["name"]])
                if name not in variants:
                    variants.append(name)
            if name_key(name) == name_key(agent_id):
                entity["entity_type"] = EntityType.PERSON  # the agent itself, mem0's "I"
            ends.append(entity["id"])
        said = relationship.strip()
        relation_type = relation_type_named(said) or RelationType.RELATED_TO
        edge = edges.get((ends[0], ends[1], relation_type))
        if edge is None:
            edge = edges[(ends[0], ends[1], relation_type)] = {
                "kind": "relation",
                "id": f"r{len(edges) + 1}",
                "source": ends[0],
                "target": ends[1],
                "relation_type": relation_type,
                "description": "",
                "properties": {"source": "mem0", "mem0_relationships": []},
            }
        names = edge["properties"]["mem0_relationships"]
        if said not in names:
            names.append(said)
        # What mem0 called it, where this server's type does not say it already.
        edge["description"] = "; ".join(
            x for x in names if x.lower().replace(" ", "_") != relation_type
        )
    return list(entities.values()), list(edges.values())
