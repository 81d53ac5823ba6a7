"""A Zep user's memory, as a bundle (docs/export.md, "Moving from Zep").

Zep keeps what it learnt of a user as a graph: nodes (entities: `uuid`, `name`, `labels`,
`summary`, `attributes`) and edges between them, each edge one fact in words (`fact`), with the
relation's name (`WORKS_AT`, upper snake case), its ends (`source_node_uuid`,
`target_node_uuid`) and the times it held (`valid_at`, `invalid_at`: when it became and stopped
being true; `expired_at`: when Zep found it superseded). Its threads (sessions before) hold the
conversation the graph was read from. The SDK lists each (a user's nodes and edges, a thread's
messages, the graph's episodes); the document read here is those lists together, for one user
(or one shared graph):

    {"user_id": "alice", "nodes": [...], "edges": [...],
     "threads": [{"thread_id": "t1", "messages": [...]}]}

* each edge's fact becomes a memory of the user's agent here (of the team, for a shared graph's
  `graph_id`): Zep answered with these facts, so they are what a search must return. A fact Zep
  marks as no longer true (`invalid_at`, else `expired_at`) expires then here: one already past
  is imported, out of search at once, and goes to the trash at the next hourly pass, as any
  expired memory does; every time Zep gave stays in the memory's metadata;
* each node becomes an entity of the same agent (Zep's current API also names an edge's nodes
  on the edge: a document of edges alone draws them from there), and each edge still true a
  relation between them, pointing at its fact's memory, which mentions both ends: the console and
  the graph API show the same graph Zep had;
* the conversation goes to the agent's archive as ingested messages, the user's and the
  assistant's (system and tool messages are the application's runtime, not what was said), with
  the thread's id as their run; so do the episodes no thread of the document holds (data added to
  the graph directly).

Graphiti, Zep's open-source core, gives the same nodes, edges and episodes, partitioned by
`group_id`: its group is read as a shared graph.

The import then does the rest as for any bundle: embeds every text with this server's model
(Zep's embeddings are not read), meets what is already here (the same agent and text; the same
entity, relation or message) instead of writing it twice, all or nothing.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from core.dates import in_utc
from core.validators import AGENT_ID_RE
from graph.extraction import entity_type_named, relation_type_named
from graph.models import EntityType, RelationType
from graph.services import name_key

from .convert import checked_datetime, converted_bundle, invalid, json_document

_NAME_MAX = 255  # an entity's name
_SPEAKER_MAX = 64  # an archive item's speaker name
# What an edge carries that is read into the memory's columns, or not kept: its embedding and a
# search's scores are Zep's own, not the fact's.
_EDGE_READ = {"fact", "created_at", "fact_embedding", "score", "relevance"}
_NODE_READ = {
    "uuid",
    "name",
    "labels",
    "summary",
    "created_at",
    "name_embedding",
    "score",
    "relevance",
}
# The message roles that are someone speaking (Zep's role, `role_type` in its v2 API).
_SPOKEN = ("user", "assistant")


def zep_bundle(data: bytes, *, agent_id: str = "") -> bytes:
    """A bundle of a Zep user's (or shared graph's) memory. `agent_id`: the agent here the user
    is (its Zep `user_id` otherwise, which must be a valid agent id); a document with a
    `graph_id` and neither is the team's."""
    document = _document(data)
    owner = _owner(document, agent_id)
    nodes = _objects("nodes", document.get("nodes"))
    edges = _objects("edges", document.get("edges"))
    now = datetime.now(UTC)

    graph = _Graph(owner)
    for n, node in enumerate(nodes):
        graph.entity(f"node {n}", node)
    memories: dict[str, dict[str, Any]] = {}  # by text: a fact in several edges is one memory
    relations: dict[tuple[str, str, str], dict[str, Any]] = {}
    mentions: set[tuple[str, int]] = set()
    for n, edge in enumerate(edges):
        where = f"edge {n}"
        fact = _fact(where, edge, owner, memory_id=len(memories) + 1)
        record = memories.setdefault(fact["content"], fact)
        if record is not fact:
            _said_again(record, fact)
        named = graph.ends(where, edge, nodes_given=bool(nodes))
        if named is None:
            continue  # facts alone: no graph to draw them in
        for entity in named:
            mentions.add((entity["id"], record["id"]))
        fact["metadata"]["zep_source_node"] = named[0]["name"]
        fact["metadata"]["zep_target_node"] = named[1]["name"]
        ended = fact.get("expires_at")  # this edge's own end, not its memory's
        if ended is not None and datetime.fromisoformat(ended) <= now:
            continue  # no longer true: its fact is kept (expired), the graph shows what holds
        _relation(relations, edge, record, named[0]["id"], named[1]["id"])
    archive = _archive(document, owner)
    return converted_bundle(
        {
            # In the bundle's order (bundle.KINDS): a record refers only to kinds before it.
            "memory": list(memories.values()),
            "archive": archive,
            "entity": list(graph.entities.values()),
            "relation": list(relations.values()),
            "mention": [
                {"kind": "mention", "id": f"m{k + 1}", "entity": entity, "memory": memory}
                for k, (entity, memory) in enumerate(sorted(mentions))
            ],
        }
    )


def _document(data: bytes) -> dict[str, Any]:
    parsed = json_document(data)
    if not isinstance(parsed, dict):
        raise invalid(
            "body",
            'expected a JSON object: {"user_id": ..., "nodes": [...], "edges": [...], '
            '"threads": [...]}',
        )
    if not any(key in parsed for key in ("nodes", "edges", "threads", "messages", "episodes")):
        raise invalid(
            "body", 'not a Zep export: no "nodes", "edges", "threads", "messages" or "episodes"'
        )
    return parsed


def _owner(document: dict[str, Any], agent_id: str) -> str:
    """The agent here the document's memory is of; "" for a shared graph's (the team's)."""
    if agent_id:
        if not re.fullmatch(AGENT_ID_RE, agent_id):
            raise invalid("agent_id", "not a valid agent id")
        return agent_id
    user_id = document.get("user_id")
    if user_id is None:
        if document.get("graph_id") is not None or document.get("group_id") is not None:
            return ""  # a graph of no user (a Graphiti group): the team's
        raise invalid(
            "body",
            'no "user_id" (or "graph_id" / "group_id" for a shared graph), and no agent_id given',
        )
    if not isinstance(user_id, str) or not re.fullmatch(AGENT_ID_RE, user_id):
        raise invalid(
            "user_id",
            f"{user_id!r} is not a valid agent id here: give the id it should have (agent_id)",
        )
    return user_id


def _objects(where: str, value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(where, "expected a list")
    for n, item in enumerate(value):
        if not isinstance(item, dict):
            raise invalid(f"{where.rstrip('s')} {n}", "not an object")
    return value


@dataclass
class _Graph:
    """The entities of a document's nodes, by name and type, and each node's entity by its uuid.
    Nodes of one name (case and width aside, as everywhere in the graph) and one type here are
    one entity: the first name met, the others and every uuid kept in its properties."""

    owner: str
    entities: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    by_uuid: dict[str, dict[str, Any]] = field(default_factory=dict)

    def entity(self, where: str, node: dict[str, Any]) -> dict[str, Any]:
        """The entity of a node, added to the graph."""
        uuid, name = node.get("uuid"), node.get("name")
        if not isinstance(uuid, str) or not uuid:
            raise invalid(where, '"uuid" is required')
        if not isinstance(name, str) or not name.strip():
            raise invalid(where, '"name" is required')
        if len(name) > _NAME_MAX:
            raise invalid(where, f"its name is over {_NAME_MAX} characters")
        labels = node.get("labels") or []
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise invalid(where, '"labels" must be a list of names')
        # The first of its labels that says one of this server's types, as the graph reads an
        # LLM's ("User", "Company", "Topic"); every node carries "Entity" too, which says none.
        # A node with none is a `custom` entity, its labels kept in its properties.
        entity_type = next(
            (named for named in map(entity_type_named, labels) if named), EntityType.CUSTOM
        )
        summary = node.get("summary")
        if summary is not None and not isinstance(summary, str):
            raise invalid(where, '"summary" must be text')
        key = (name_key(name), str(entity_type))
        entity = self.entities.get(key)
        if entity is None:
            properties: dict[str, Any] = {
                k: v for k, v in node.items() if k not in _NODE_READ and v is not None
            }
            properties.update({"source": "zep", "zep_uuids": [], "zep_labels": labels})
            entity = self.entities[key] = {
                "kind": "entity",
                "id": f"e{len(self.entities) + 1}",
                "agent_id": self.owner,
                "name": name,
                "entity_type": entity_type,
                "description": summary or "",
                "properties": properties,
            }
            if node.get("created_at") is not None:
                entity["created_at"] = _time(where, "created_at", node["created_at"])
        else:
            if name != entity["name"]:
                variants = entity["properties"].setdefault("zep_names", [entity["name"]])
                if name not in variants:
                    variants.append(name)
            if summary and summary not in entity["description"]:
                entity["description"] = "\n".join(x for x in (entity["description"], summary) if x)
        if uuid not in entity["properties"]["zep_uuids"]:
            entity["properties"]["zep_uuids"].append(uuid)
        self.by_uuid[uuid] = entity
        return entity

    def ends(
        self, where: str, edge: dict[str, Any], *, nodes_given: bool
    ) -> list[dict[str, Any]] | None:
        """The entities an edge joins: the document's nodes of its ends' uuids, else the nodes
        its ends' names and labels describe (Zep's current API writes them on the edge). None
        for an edge of neither in a document without nodes (facts alone); a 400 when the
        document has nodes."""
        out = []
        for end in ("source", "target"):
            uuid, name = edge.get(f"{end}_node_uuid"), edge.get(f"{end}_node_name")
            if isinstance(uuid, str) and uuid in self.by_uuid:
                out.append(self.by_uuid[uuid])
            elif isinstance(uuid, str) and uuid and isinstance(name, str) and name.strip():
                node = {"uuid": uuid, "name": name, "labels": edge.get(f"{end}_node_labels")}
                out.append(self.entity(where, node))
            elif nodes_given:
                raise invalid(
                    where,
                    f"{end}_node_uuid {uuid!r} is no node of the document (list every page of "
                    "the user's nodes)",
                )
            else:
                return None
        return out


def _fact(where: str, edge: dict[str, Any], owner: str, *, memory_id: int) -> dict[str, Any]:
    """The memory of an edge: its fact, its times, and what else Zep said of it in metadata."""
    fact = edge.get("fact")
    if not isinstance(fact, str) or not fact.strip():
        raise invalid(where, '"fact" (its text) is required')
    if len(fact) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise invalid(where, f"its fact is over {settings.MEMORY_MAX_CONTENT_CHARS} characters")
    metadata: dict[str, Any] = {
        f"zep_{k}" if k in ("uuid", "name") else k: v
        for k, v in edge.items()
        if k not in _EDGE_READ and v is not None
    }
    metadata["source"] = "zep"
    record: dict[str, Any] = {
        "kind": "memory",
        "id": memory_id,
        "scope": "personal" if owner else "team",
        "agent_id": owner,
        "content": fact.strip(),
        "category": "general",
        "metadata": metadata,
    }
    if edge.get("created_at") is not None:
        record["created_at"] = record["updated_at"] = _time(where, "created_at", edge["created_at"])
    ends = [_time(where, k, edge[k]) for k in ("invalid_at", "expired_at") if edge.get(k)]
    if edge.get("valid_at") is not None:
        _time(where, "valid_at", edge["valid_at"])  # checked; kept as given, in metadata
    if ends:
        # When the fact stopped being true; when Zep superseded it, for an edge it gave no
        # such time. A past one: imported expired, restorable from the trash.
        record["expires_at"] = ends[0]
    return record


def _said_again(record: dict[str, Any], again: dict[str, Any]) -> None:
    """A fact Zep holds in several edges (said again after it had stopped being true, or
    between other nodes) is one memory here, as the import would meet it: true as long as the
    longest of them (never expiring when one does not), the other edges kept in its metadata."""
    ends = [r.get("expires_at") for r in (record, again)]
    if None in ends:
        record.pop("expires_at", None)
    else:
        record["expires_at"] = max(ends, key=lambda end: datetime.fromisoformat(str(end)))
    record["metadata"].setdefault("zep_repeats", []).append(again["metadata"])


def _relation(
    relations: dict[tuple[str, str, str], dict[str, Any]],
    edge: dict[str, Any],
    memory: dict[str, Any],
    source: str,
    target: str,
) -> None:
    """The relation an edge still true draws between its ends' entities. Zep names relations
    freely (`WORKS_AT`, `LIKES`); a name that says one of this server's types, as the graph
    reads an LLM's (`WORKS_FOR` is `works_at`, `LIKES` `prefers`), is that type, any other is
    `related_to`. Edges between the same entities that end as one type here are one relation,
    its description their facts."""
    said = edge.get("name")
    said = said.strip() if isinstance(said, str) and said.strip() else "RELATES_TO"
    relation_type = relation_type_named(said) or RelationType.RELATED_TO
    relation = relations.get((source, target, relation_type))
    if relation is None:
        relation = relations[(source, target, relation_type)] = {
            "kind": "relation",
            "id": f"r{len(relations) + 1}",
            "source": source,
            "target": target,
            "relation_type": relation_type,
            "description": "",
            "source_memory": memory["id"],
            "properties": {"source": "zep", "zep_names": [], "zep_uuids": []},
        }
    properties = relation["properties"]
    if said not in properties["zep_names"]:
        properties["zep_names"].append(said)
    if isinstance(edge.get("uuid"), str):
        properties["zep_uuids"].append(edge["uuid"])
    facts = [x for x in relation["description"].split("\n") if x]
    if memory["content"] not in facts:
        relation["description"] = "\n".join([*facts, memory["content"]])


def _archive(document: dict[str, Any], owner: str) -> list[dict[str, Any]]:
    """The user's and the assistant's messages of every thread, the thread's id as their run,
    then the episodes no thread of the document holds, as ingested archive items of the agent."""
    threads = _objects("threads", document.get("threads"))
    if document.get("messages") is not None:
        threads = [*threads, {"messages": document["messages"]}]
    out: list[dict[str, Any]] = []
    for t, thread in enumerate(threads):
        messages = _objects(f"thread {t}: messages", thread.get("messages"))
        if messages and not owner:
            raise invalid(f"thread {t}", "a shared graph's document has no agent to archive to")
        # The application's id of the thread (a session's, in Zep's v2 API), else Zep's own.
        run = next((thread[k] for k in ("thread_id", "session_id", "uuid") if thread.get(k)), None)
        for n, message in enumerate(messages):
            where = f"thread {t}, message {n}"
            # Zep's v2 API called the role `role_type` and the speaker's name `role`.
            v2 = "role_type" in message
            role = message.get("role_type" if v2 else "role")
            if not isinstance(role, str) or role.lower() not in _SPOKEN:
                continue
            name = message.get("role" if v2 else "name")
            _said(out, where, message, owner, role=role.lower(), name=name, run=run)
    episodes = _objects("episodes", document.get("episodes"))
    if episodes and not owner:
        raise invalid(
            "episodes",
            "a shared graph's document has no agent to archive them to (give agent_id, or "
            "leave them out)",
        )
    for n, episode in enumerate(episodes):
        if threads and episode.get("thread_uuid"):
            continue  # a thread's message: read from its thread
        role = episode.get("role")
        if isinstance(role, str) and role and role.lower() not in _SPOKEN:
            continue  # a system or tool message: the application's runtime
        _said(
            out,
            f"episode {n}",
            episode,
            owner,
            role=role.lower() if isinstance(role, str) else "",
            name=episode.get("role_name"),
            run=None,
        )
    return out


def _said(
    out: list[dict[str, Any]],
    where: str,
    said: dict[str, Any],
    owner: str,
    *,
    role: str,
    name: Any,
    run: Any,
) -> None:
    """A message or episode as an ingested archive item of the agent (none for an empty one)."""
    content = said.get("content")
    if not isinstance(content, str):
        raise invalid(where, '"content" must be text')
    if not content.strip():
        return
    # When it was said: its reference time where one was given (a conversation added to Zep
    # after it happened; Graphiti's `valid_at`), else when Zep received it.
    stamp = next((k for k in ("reference_time", "valid_at") if said.get(k)), "created_at")
    when = _time(where, stamp, said.get(stamp))
    digest = hashlib.sha256("\0".join((owner, role, when, content.strip())).encode()).hexdigest()
    record: dict[str, Any] = {
        "kind": "archive",
        "id": len(out) + 1,
        "agent_id": owner,
        "item_id": f"zep-{digest[:28]}",
        "content": content.strip(),
        "item_created_at": when,
        "reason": "ingested",
        "role": role,
    }
    if isinstance(name, str) and 0 < len(name) <= _SPEAKER_MAX:
        record["name"] = name
    if isinstance(run, str) and re.fullmatch(AGENT_ID_RE, run):
        record["run_id"] = run
    out.append(record)


def _time(where: str, name: str, value: Any) -> str:
    """An ISO 8601 date-time of the document, with its offset (UTC when Zep wrote none); a 400
    naming it for one the databases cannot store, rather than one naming the bundle's line."""
    parsed = checked_datetime(where, name, value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    utc = in_utc(parsed)
    if utc is None or utc.year < 1000:
        raise invalid(where, f"{name} {value!r} is out of range (years 1000 to 9999 in UTC)")
    return parsed.isoformat()
