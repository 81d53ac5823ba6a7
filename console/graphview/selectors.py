"""What the console's graph view reads: the same traversal, search and caps as `GET /graph` and
`GET /graph/entities?q=` (graph/apis.py), for a team or as one agent sees it.

"As an agent sees it" is the API's rule for an agent-scoped key (graph.selectors.visible_q): the
agent's own entities and the team-wide ones. A reviewer's look is not an agent's recall, so
unlike the API these reads never bump the entities' access counts (which rank the whole graph
and feed lifecycle decisions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph import presenters as graph_presenters
from graph import selectors as graph_selectors
from graph import traversal
from graph.models import Entity
from tenants.models import Team

SEARCH_MATCHES = 10


@dataclass(frozen=True)
class GraphQuery:
    agent: str = ""  # "" = the whole team
    q: str = ""  # centre on the best match of this search
    entity: str = ""  # centre on this entity (wins over q)
    depth: int = 1
    max_nodes: int = traversal.DEFAULT_MAX_NODES
    max_edges: int = traversal.DEFAULT_MAX_EDGES


def console_graph(*, team: Team, query: GraphQuery) -> dict[str, Any]:
    """The graph to draw: entities, relations, `truncated`, the caps, the centre and matches.

    Raises graph's NotFound for an entity id that is not the team's (another team's included)
    and Forbidden for one the chosen agent may not see.
    """
    acting_agent = query.agent or None
    matches: list[dict[str, Any]] = []
    seeds: list[Entity] = []
    centre: str | None = None
    if query.entity:
        seeds = graph_selectors.entities_get(
            team=team, entity_ids=[query.entity], acting_agent=acting_agent
        )
    elif query.q.strip():
        page = graph_selectors.entity_list(
            team=team, acting_agent=acting_agent, q=query.q, page_size=SEARCH_MATCHES
        )
        matches = [
            {
                "id": str(e.entity.pk),
                "name": e.entity.name,
                "entity_type": e.entity.entity_type,
                "score": None if e.score is None else round(float(e.score), 4),
            }
            for e in page.items
        ]
        if matches:
            seeds = graph_selectors.entities_get(
                team=team, entity_ids=[matches[0]["id"]], acting_agent=acting_agent
            )
    if seeds:
        centre = str(seeds[0].pk)
        graph = traversal.graph_subgraph(
            team=team,
            seeds=seeds,
            max_depth=query.depth,
            acting_agent=acting_agent,
            max_nodes=query.max_nodes,
            max_edges=query.max_edges,
        )
    elif query.q.strip():
        graph = traversal.Subgraph([], [], False)  # nothing matched: nothing to draw
    else:
        graph = traversal.graph_whole(
            team=team,
            acting_agent=acting_agent,
            max_nodes=query.max_nodes,
            max_edges=query.max_edges,
        )
    # The team's view groups the entities of different agents that are one thing (their
    # team-level identity); a view as one agent sees it stays that agent's view.
    team_view = not query.agent
    body = graph_presenters.subgraph_body(graph, with_identity=team_view)
    groups = (
        graph_selectors.identity_groups(team=team, entities=graph.entities) if team_view else []
    )
    body.update(
        {
            "identities": [
                {"id": g.id, "name": g.name, "entity_type": g.entity_type, "members": g.members}
                for g in groups
            ],
            "centre": centre,
            "matches": matches,
            "agent": query.agent or None,
            "caps": {"max_nodes": query.max_nodes, "max_edges": query.max_edges},
        }
    )
    return body


def console_entity(*, team: Team, entity_id: str, agent: str = "") -> dict[str, Any]:
    """One entity for the side panel: relations both ways (with the other end's name) and the
    memories it was read from. NotFound for another team's id, Forbidden as in console_graph."""
    acting_agent = agent or None
    entity = graph_selectors.entity_get(team=team, entity_id=entity_id, acting_agent=acting_agent)
    detail = graph_selectors.entity_console_detail(
        team=team, entity=entity, acting_agent=acting_agent
    )
    body = graph_presenters.entity_console_body(detail, with_identity=not agent)
    if not agent:
        # Team view: the same thing in the other agents' graphs (graph.identity).
        body["same_as"] = [
            {
                "id": str(e.pk),
                "name": e.name,
                "entity_type": e.entity_type,
                "agent_id": e.agent_id or None,
            }
            for e in graph_selectors.identity_members(team=team, entity=entity)
        ]
    return body
