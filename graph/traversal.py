"""`GET /graph`: the whole team graph, or a bounded subgraph around seed entities.

Traversal is an iterative, batched breadth-first search: each depth level costs two queries
(the relations touching the whole frontier, then the new entities in one `IN`), never one query
per node. With the seed lookup, one scan of the last level's outgoing relations (for the edges
between two last-level nodes) and the access-count UPDATE, a subgraph of depth d costs at most
2d + 4 queries whatever its size, with the final fetch of the chosen relations by primary key
(pinned in tests/test_graph_api.py).

Query shapes matter more than their number (measured, docs/graph.md): every query selects by
primary key or by one of the source/target indexes, never `source IN (…) AND target IN (…)`
(SQLite probes every pair: 500 × 500 index lookups) and never next to `team_id = ?` (SQLite
without ANALYZE statistics then walks the team's whole index). The team is checked on every row
in Python instead. Scans read three columns of a relation (id, source, target); only the
relations returned are read whole, as plain rows; entities are read without their vectors.

Caps: at most `max_nodes` entities and `max_edges` relations are returned; when a cap cuts the
answer, `"truncated": true`. The relations returned are every relation among the returned
entities (the induced subgraph), so an edge between two neighbours of a seed is drawn too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.db.models import CharField, Q, QuerySet
from django.db.models.functions import Cast

from tenants.models import Team

from .models import Entity, Relation
from .selectors import (
    ENTITY_ROW_FIELDS,
    RELATION_ROW_FIELDS,
    EntityRow,
    RelationRow,
    entities_visible,
    entity_row,
    visible_q,
)

DEFAULT_MAX_NODES = 500
DEFAULT_MAX_EDGES = 2000
# Upper bounds a caller may ask for. They also bound every `IN (...)` list the traversal sends
# (a frontier is at most max_nodes ids, a relation scan at most max_nodes + max_edges rows).
MAX_NODES_LIMIT = 5000
MAX_EDGES_LIMIT = 10000
MAX_DEPTH = 3


Row = dict[str, Any]


@dataclass
class Subgraph:
    """Plain rows, not models (rendered by presenters.subgraph_body); ids are canonical strings."""

    entities: list[EntityRow]
    relations: list[RelationRow]  # oldest first
    truncated: bool

    @property
    def entity_ids(self) -> list[str]:
        return [e["id"] for e in self.entities]

    def mark_accessed(self, when: datetime) -> None:
        """Shows the access the caller just recorded (services.entities_touch) in the answer."""
        for e in self.entities:
            e["access_count"] += 1
            e["last_accessed_at"] = when


def _entity_rows(qs: QuerySet[Entity], limit: int | None = None) -> list[EntityRow]:
    # Plain rows, not model instances, and never the vector: a 500-node answer is mostly
    # conversion work (measured: a third of the time went to building models).
    return cast(list[EntityRow], _rows(qs, ENTITY_ROW_FIELDS, limit))


def _relation_rows(qs: QuerySet[Relation], limit: int | None = None) -> list[RelationRow]:
    return cast(list[RelationRow], _rows(qs, RELATION_ROW_FIELDS, limit))


# Ids inside the traversal are strings in the canonical dashed form (str(uuid)), read as text
# from the database: a traversal reads thousands of ids, and building a uuid.UUID for each was
# half the time of a 500-node subgraph (measured, docs/graph.md). The database's text form is
# 32 hex digits (SQLite, MySQL) or already dashed (a native uuid column: MariaDB >= 10.7,
# PostgreSQL); `_canon` makes both the same.
Pair = tuple[str, str, str]  # (relation id, source id, target id)
_TEXT = CharField()
_UUID_COLUMNS = ("id", "source_id", "target_id")


def _canon(value: str) -> str:
    if len(value) == 36:
        return value.lower()
    v = value.lower()
    return f"{v[:8]}-{v[8:12]}-{v[12:16]}-{v[16:20]}-{v[20:]}"


def _pairs(qs: QuerySet[Relation], limit: int) -> list[Pair]:
    # Three columns, not the row: a scan may read thousands of a hub's relations of which few
    # are returned, and every column read costs a conversion.
    rows = qs.annotate(
        _id=Cast("id", _TEXT), _source=Cast("source_id", _TEXT), _target=Cast("target_id", _TEXT)
    ).values_list("_id", "_source", "_target")[:limit]
    return [(_canon(a), _canon(b), _canon(c)) for a, b, c in rows]


def _rows(qs: QuerySet[Any], fields: tuple[str, ...], limit: int | None = None) -> list[Row]:
    """`.values(*fields)` with the uuid columns read as text and given back canonical."""
    casts = {f"_{f}": Cast(f, _TEXT) for f in fields if f in _UUID_COLUMNS}
    plain = [f for f in fields if f not in _UUID_COLUMNS]
    values = qs.annotate(**casts).values(*plain, *casts)
    out: list[Row] = []
    for row in values if limit is None else values[:limit]:
        for name in casts:
            row[name[1:]] = _canon(row.pop(name))
        out.append(row)
    return out


def _finish_edges(
    team: Team, pairs: dict[str, Pair], nodes: set[str], max_edges: int
) -> tuple[list[RelationRow], bool]:
    """The relations between two nodes (the first `max_edges` found, and whether that cut
    any), oldest first: one query by primary key."""
    inside = [pk for pk, source, target in pairs.values() if source in nodes and target in nodes]
    if not inside:
        return [], False
    cut = len(inside) > max_edges
    rows = [
        r
        for r in _relation_rows(Relation.objects.filter(pk__in=inside[:max_edges]))
        if r["team_id"] == team.id
    ]
    rows.sort(key=lambda r: (r["created_at"], r["id"]))
    return rows, cut


def graph_whole(
    *,
    team: Team,
    acting_agent: str | None,
    agent_id: str | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_edges: int = DEFAULT_MAX_EDGES,
) -> Subgraph:
    """The team's graph (or one agent's part of it): most used entities first when capped."""
    qs = entities_visible(team=team, acting_agent=acting_agent, agent_id=agent_id)
    nodes = _entity_rows(qs.order_by("-access_count", "-created_at", "id"), max_nodes + 1)
    truncated = len(nodes) > max_nodes
    nodes = nodes[:max_nodes]
    if truncated:
        # The relations among the chosen nodes: their outgoing relations (source index), the
        # targets checked here.
        scan_limit = max_nodes + max_edges
        ids: list[Any] = [e["id"] for e in nodes]  # canonical id strings; the lookup accepts them
        found = _pairs(Relation.objects.filter(source_id__in=ids), scan_limit + 1)
        relations, cut = _finish_edges(team, {p[0]: p for p in found}, set(ids), max_edges)
        cut = cut or len(found) > scan_limit
    else:
        # Every visible entity is a node, so the relations are those whose two ends are
        # visible: the team's relation index (all of them are wanted) and joins.
        rel_qs: QuerySet[Relation] = Relation.objects.filter(team=team).filter(
            visible_q(acting_agent, "source__"), visible_q(acting_agent, "target__")
        )
        if agent_id:
            rel_qs = rel_qs.filter(source__agent_id=agent_id, target__agent_id=agent_id)
        rows = _relation_rows(rel_qs.order_by("created_at", "id"), max_edges + 1)
        relations = rows[:max_edges]
        cut = len(rows) > max_edges
    return Subgraph(nodes, relations, truncated or cut)


def graph_subgraph(
    *,
    team: Team,
    seeds: list[Entity],
    max_depth: int = 1,
    acting_agent: str | None = None,
    agent_id: str | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_edges: int = DEFAULT_MAX_EDGES,
) -> Subgraph:
    """Entities within `max_depth` hops of the seeds (either direction), and their relations.

    The seeds are entities of `team` the caller may see (selectors.entities_get). Hops only go
    through entities the caller may see and, with `agent_id`, through that agent's entities.
    """
    nodes: dict[str, EntityRow] = {}
    for seed in seeds:
        nodes.setdefault(str(seed.pk), entity_row(seed))
    truncated = len(nodes) > max_nodes
    if truncated:
        nodes = dict(list(nodes.items())[:max_nodes])
    frontier = list(nodes)
    unscanned: list[str] = []  # the last level added: its relations not yet read
    edges: dict[str, Pair] = {}
    filtered = acting_agent is not None or bool(agent_id)
    scan_limit = max_nodes + max_edges
    for _depth in range(max_depth):
        if not frontier:
            break
        # Every relation touching the frontier, both directions, in one query (an OR of the
        # source and target indexes). Unordered: the database never sorts a hub's relations.
        pairs = _pairs(
            Relation.objects.filter(Q(source_id__in=frontier) | Q(target_id__in=frontier)),
            scan_limit + 1,
        )
        unscanned = []
        if len(pairs) > scan_limit:
            truncated = True
            pairs = pairs[:scan_limit]
        in_frontier = set(frontier)
        new_ids: dict[str, None] = {}  # ordered set: deterministic truncation
        # (The team of these relations is that of the frontier: relations never join teams.
        # Still, every entity reached is checked against the team below, and every returned
        # relation in _finish_edges.)
        for pk, source_id, target_id in pairs:
            edges[pk] = (pk, source_id, target_id)
            if source_id in in_frontier and target_id not in nodes:
                new_ids[target_id] = None
            if target_id in in_frontier and source_id not in nodes:
                new_ids[source_id] = None
        if not new_ids:
            break
        room = max_nodes - len(nodes)
        wanted = list(new_ids)
        if not filtered and len(wanted) > room:
            # Every neighbour is visible: no need to fetch more rows than there is room for.
            truncated = True
            wanted = wanted[:room]
        if not wanted:
            break
        qs = Entity.objects.filter(pk__in=wanted).filter(visible_q(acting_agent))
        if agent_id:
            qs = qs.filter(agent_id=agent_id)
        if room <= 0:
            # Full already: only whether a visible entity lies beyond the cap matters.
            truncated = truncated or any(
                t == team.id for t in qs.values_list("team_id", flat=True)[:50]
            )
            break
        found = {e["id"]: e for e in _entity_rows(qs) if e["team_id"] == team.id}
        level = [found[pk] for pk in wanted if pk in found]
        if len(level) > room:
            truncated = True
            level = level[:room]
        for row in level:
            nodes[row["id"]] = row
        frontier = unscanned = [row["id"] for row in level]
    if unscanned:
        # Relations between two entities of the last level were not read yet: they start at
        # one of them (every other relation among the nodes touches an earlier level).
        last: list[Any] = unscanned  # canonical id strings; the lookup accepts them
        pairs = _pairs(Relation.objects.filter(source_id__in=last), scan_limit + 1)
        truncated = truncated or len(pairs) > scan_limit
        edges.update((p[0], p) for p in pairs[:scan_limit])
    relations, cut = _finish_edges(team, edges, set(nodes), max_edges)
    return Subgraph(list(nodes.values()), relations, truncated or cut)
