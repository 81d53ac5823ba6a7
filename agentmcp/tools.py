"""What each MCP tool does, for one principal (docs/mcp.md).

Thin, like a REST view: validate with the REST endpoint's own input serializer (same limits, same
messages), check access with the same policy (`core.access`, `check_memory_access`), call the
same service or selector, render with the same function. Synchronous (the Django ORM);
`agentmcp.server` runs them off the event loop. Errors are the services' `DomainError`s (and
DRF validation errors), which `agentmcp.server` turns into MCP tool errors carrying the code.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Q
from rest_framework import serializers

from core.access import AgentResource, require_agent
from core.dates import iso
from core.errors import NotFound, ValidationFailed
from graph import presenters as graph_presenters
from graph import services as graph_services
from graph import traversal
from graph.resolution import normalise_name
from graph.selectors import entities_visible, entity_get, parse_uuid
from lifecycle.apis import (
    ArchiveSearchInputSerializer,
    IngestInputSerializer,
    archive_search_validated,
    ingest_validated,
)
from lifecycle.presenters import persona_body
from lifecycle.selectors import persona_list
from lifecycle.services.ingest import MAX_MESSAGES
from memories import purge
from memories import selectors as memory_selectors
from memories import services as memory_services
from memories.apis import (
    BatchDeleteInputSerializer,
    BatchUpdateInputSerializer,
    EpisodeInputSerializer,
    EpisodeSearchInputSerializer,
    PersonalCreateInputSerializer,
    PersonalSearchInputSerializer,
    ProcedureInputSerializer,
    ProcedureUpdateSerializer,
    TeamCreateInputSerializer,
    TeamSearchInputSerializer,
    UpdateInputSerializer,
    WorkingCreateInputSerializer,
    batch_delete_validated,
    batch_update_validated,
    check_agent_id,
    create_validated,
    episode_search_query,
    procedure_source,
    search_query,
)
from memories.models import Memory, MemoryRevision, MemoryScope, RemovedBy
from memories.presenters import (
    episode_body,
    memory_body,
    procedure_body,
    profile_body,
    search_hit_body,
    working_item_body,
)
from memories.retrieval.search import SearchHit
from memories.selectors import DELETE, READ, WRITE
from memories.services import Actor
from memories.working import get_working_store
from memories.working.events import working_memory_written
from tenants.authentication import McpPrincipal
from tenants.idempotency import IdempotencyKey, Replayed
from tenants.services import agent_registered
from tenants.usage import KIND_WRITE, usage_record

HISTORY_LIMIT = 100
# Seeds a name may resolve to (one name, several entity types or agents).
MAX_NAME_SEEDS = 10
# As many messages as POST /memories/ingest takes.
MAX_INGEST_MESSAGES = MAX_MESSAGES


def _valid(serializer: serializers.Serializer) -> dict[str, Any]:
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# What memory_update's `expires_at` takes to remove an expiry.
NEVER = "never"


def _given(**values: Any) -> dict[str, Any]:
    """The arguments the caller gave: an omitted optional one is left to the serializer."""
    return {k: v for k, v in values.items() if v is not None}


def acting_agent_for(principal: McpPrincipal, agent_id: str | None, *, required: bool) -> str:
    """The agent a call acts for. An agent token acts for its own agent (naming another one is
    FORBIDDEN, as with an agent-scoped API key); a team-wide token names one in `agent_id`."""
    if principal.agent_id is not None:
        if agent_id:
            require_agent(
                AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
            )
        return principal.agent_id
    if required and not agent_id:
        raise ValidationFailed(
            {"agent_id": ["Required with a team-wide token."]},
            "agent_id: required with a team-wide token",
        )
    return agent_id or ""


def _memory(principal: McpPrincipal, memory_id: int, action: str) -> Memory:
    """A memory of the token's team the token may `action`: another team's id is NOT_FOUND like
    a missing one; another agent's unshared personal memory is FORBIDDEN (as over REST)."""
    memory = memory_selectors.memory_get(team=principal.team, memory_id=memory_id)
    memory_selectors.check_memory_access(
        memory=memory, acting_agent=principal.agent_id, action=action
    )
    return memory


def call_key(key: str | None, *, endpoint: str, arguments: dict[str, Any]) -> IdempotencyKey | None:
    """The `idempotency_key` a caller gave a writing tool, as REST's `Idempotency-Key` for the
    same `endpoint` (the same key space, so an erasure reaches the answers kept): fingerprinted
    by the tool's other arguments, as REST's by the raw body. None without one."""
    if key is None:
        return None
    body = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str).encode()
    try:
        return IdempotencyKey.of(endpoint=endpoint, key=key, body=body)
    except ValidationFailed as refused:  # named as the tool's argument, not REST's header
        rule = refused.message.removeprefix("Idempotency-Key: ")
        raise ValidationFailed({"idempotency_key": [rule]}, f"idempotency_key: {rule}") from None


def _hit(hit: SearchHit) -> dict[str, Any]:
    return search_hit_body(hit)


# --- long-term memories -------------------------------------------------------------------------


def memory_add(
    principal: McpPrincipal,
    *,
    content: str,
    scope: str = MemoryScope.PERSONAL,
    importance: float | None = None,
    category: str | None = None,
    metadata: dict[str, Any] | None = None,
    agent_id: str | None = None,
    expires_at: str | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """POST /memories/personal or /memories/team."""
    personal = scope == MemoryScope.PERSONAL
    agent = acting_agent_for(principal, agent_id, required=personal)
    fields = _given(
        content=content,
        importance=importance,
        category=category,
        metadata=metadata,
        expires_at=expires_at,
    )
    serializer = PersonalCreateInputSerializer if personal else TeamCreateInputSerializer
    data = _valid(serializer(data={**fields, "agent_id": agent}))
    key = call_key(idempotency_key, endpoint=f"memories/{scope}", arguments=data)
    try:
        _status, body = create_validated(
            team=principal.team, scope=scope, agent_id=agent, data=data, key=key
        )
    except Replayed as replayed:
        return dict(replayed.body)
    return body


def memory_search(
    principal: McpPrincipal,
    *,
    query: str,
    limit: int | None = None,
    min_score: float | None = None,
    include_team: bool = False,
    include_shared: bool = False,
    filters: dict[str, Any] | None = None,
    agent_id: str | None = None,
    include_cold: bool = False,
) -> dict[str, Any]:
    """POST /memories/personal/search for the acting agent (its personal memories, plus the
    team's with include_team); a team-wide token naming no agent searches the team memories
    (POST /memories/team/search)."""
    agent = acting_agent_for(principal, agent_id, required=False)
    fields = {
        **_given(query=query, limit=limit, min_score=min_score, filters=filters),
        "include_cold": include_cold,
    }
    if agent:
        scope = MemoryScope.PERSONAL
        data = _valid(
            PersonalSearchInputSerializer(
                data={
                    **fields,
                    "agent_id": agent,
                    "include_team": include_team,
                    "include_shared": include_shared,
                }
            )
        )
    else:
        scope = MemoryScope.TEAM
        data = _valid(TeamSearchInputSerializer(data=fields))
    hits = memory_services.memory_recall(
        query=search_query(team=principal.team, scope=scope, agent_id=agent, data=data),
        acting_agent=principal.agent_id,
    )
    body: dict[str, Any] = {"memories": [_hit(h) for h in hits]}
    if hits.partial:
        body["partial"] = True  # the team's recall timeout cut the search short
    return body


def memory_get(principal: McpPrincipal, *, memory_id: int) -> dict[str, Any]:
    return memory_body(_memory(principal, memory_id, READ))


def memory_update(
    principal: McpPrincipal,
    *,
    memory_id: int,
    content: str | None = None,
    importance: float | None = None,
    category: str | None = None,
    metadata: dict[str, Any] | None = None,
    pinned: bool | None = None,
    expires_at: str | None = None,
) -> dict[str, Any]:
    """PUT /memories/{scope}/{id}: a revision records what changed and by which token.
    `expires_at` "never" removes an expiry (REST's null: here None is "not given")."""
    given = _given(
        content=content,
        importance=importance,
        category=category,
        metadata=metadata,
        pinned=pinned,
        expires_at=expires_at,
    )
    if expires_at == NEVER:
        given["expires_at"] = None
    data = _valid(UpdateInputSerializer(data=given))
    memory = _memory(principal, memory_id, WRITE)
    memory = memory_services.memory_update(
        memory=memory, actor=Actor(label=principal.label), **data
    )
    return memory_body(memory)


def memory_forget(principal: McpPrincipal, *, memory_id: int) -> dict[str, Any]:
    """DELETE /memories/{scope}/{id} without purge: to the trash, restorable over REST."""
    memory = _memory(principal, memory_id, DELETE)
    trashed = purge.memories_trash(
        team=principal.team,
        memories=[memory],
        removed_by=RemovedBy.API,
        reason=f"forgotten through MCP by {principal.label}",
    )
    if not trashed:  # removed by another request after it was read
        raise NotFound("memory")
    return {"forgotten": memory_id, "trash": True}


def memory_update_many(
    principal: McpPrincipal, *, items: list[dict[str, Any]], idempotency_key: str | None = None
) -> dict[str, Any]:
    """POST /memories/{scope}/batch/update, either scope: each item as its own memory_update
    (REST's fields: `expires_at` null removes an expiry). A refused item is reported in its
    result and the others are applied."""
    data = _valid(BatchUpdateInputSerializer(data={"items": items}))
    try:
        return batch_update_validated(
            team=principal.team,
            scope=None,
            acting_agent=principal.agent_id,
            items=data["items"],
            actor=Actor(label=principal.label),
            key=call_key(idempotency_key, endpoint="memories/batch/update", arguments=data),
        )
    except Replayed as replayed:
        return dict(replayed.body)


def memory_forget_many(
    principal: McpPrincipal, *, memory_ids: list[int], idempotency_key: str | None = None
) -> dict[str, Any]:
    """POST /memories/{scope}/batch/delete without purge, either scope: each memory as its own
    memory_forget (to the trash); a refused id is reported and the others are forgotten."""
    data = _valid(BatchDeleteInputSerializer(data={"ids": memory_ids}))
    try:
        return batch_delete_validated(
            team=principal.team,
            scope=None,
            acting_agent=principal.agent_id,
            data=data,
            reason=f"forgotten through MCP by {principal.label}",
            key=call_key(idempotency_key, endpoint="memories/batch/delete", arguments=data),
        )
    except Replayed as replayed:
        return dict(replayed.body)


def _revision(r: MemoryRevision) -> dict[str, Any]:
    return {
        "id": r.pk,
        "action": r.action,
        "before": r.before,
        "after": r.after,
        "actor": r.actor,
        "created_at": iso(r.created_at),
    }


def memory_history(principal: McpPrincipal, *, memory_id: int) -> dict[str, Any]:
    """The memory as it is now and its revisions, newest first (what changed, before/after, by
    whom). A memory replaced by a newer one carries `superseded_by`."""
    memory = _memory(principal, memory_id, READ)
    revisions = memory_selectors.memory_revisions(team=principal.team, memory=memory)
    return {
        "memory": memory_body(memory),
        "revisions": [_revision(r) for r in revisions[:HISTORY_LIMIT]],
    }


# --- working memory -----------------------------------------------------------------------------


def _working_store_add(
    principal: McpPrincipal, agent: str, contents: list[str], ttl: int | None, run_id: str = ""
) -> list[dict[str, str]]:
    """POST /memories/working for each content, then one write signal (the lifecycle decides
    whether to compress on the count, so one signal after the batch is enough)."""
    items: list[dict[str, str]] = []
    # All validated before the first is stored: a bad message stores none of the batch.
    data_list = [
        _valid(
            WorkingCreateInputSerializer(
                data=_given(agent_id=agent, content=c, ttl=ttl, run_id=run_id)
            )
        )
        for c in contents
    ]
    store = get_working_store()
    with agent_registered(team=principal.team, agent_id=agent):
        for data in data_list:
            items.append(
                working_item_body(
                    store.add(
                        team_id=principal.team.id,
                        agent_id=agent,
                        content=data["content"],
                        ttl_seconds=data["ttl"],
                        run_id=data["run_id"],
                    )
                )
            )
            usage_record(team=principal.team, agent_id=agent, kind=KIND_WRITE)
    working_memory_written.send(
        sender=McpPrincipal, team=principal.team, agent_id=agent, run_id=run_id
    )
    return items


def working_add(
    principal: McpPrincipal,
    *,
    content: str,
    agent_id: str | None = None,
    ttl: int | None = None,
    run_id: str = "",
) -> dict[str, Any]:
    agent = acting_agent_for(principal, agent_id, required=True)
    return _working_store_add(principal, agent, [content], ttl, run_id)[0]


def working_list(
    principal: McpPrincipal, *, agent_id: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """GET /memories/working/{agent_id}: oldest first."""
    agent = acting_agent_for(principal, agent_id, required=True)
    items = get_working_store().list(team_id=principal.team.id, agent_id=agent, limit=limit)
    return {"items": [working_item_body(i) for i in items]}


def ingest_messages(
    principal: McpPrincipal,
    *,
    messages: list[dict[str, Any]],
    agent_id: str | None = None,
    run_id: str = "",
    infer: bool = True,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """POST /memories/ingest: the messages archived (L0), the facts of the user's messages each
    decided ADD / UPDATE / NOOP against the agent's memories → `{"archived", "facts"}`."""
    agent = acting_agent_for(principal, agent_id, required=True)
    data = _valid(
        IngestInputSerializer(
            data=_given(agent_id=agent, messages=messages, run_id=run_id, infer=infer)
        )
    )
    key = call_key(idempotency_key, endpoint="ingest", arguments=data)
    try:
        _status, body = ingest_validated(team=principal.team, agent_id=agent, data=data, key=key)
    except Replayed as replayed:
        return dict(replayed.body)
    return body


def archive_search(
    principal: McpPrincipal,
    *,
    query: str = "",
    agent_id: str | None = None,
    run_id: str = "",
    role: str | None = None,
    reason: str | None = None,
    since: str | None = None,
    until: str | None = None,
    cursor: str = "",
    page_size: int = 20,
) -> dict[str, Any]:
    """POST /lifecycle/archive/search: archived messages and working items, newest first →
    `{"items", "next_cursor"}`. An agent token searches its own agent's archive only."""
    data = _valid(
        ArchiveSearchInputSerializer(
            data=_given(
                query=query,
                agent_id=agent_id or None,
                run_id=run_id,
                role=role,
                reason=reason,
                since=since,
                until=until,
                cursor=cursor,
                page_size=page_size,
            )
        )
    )
    return archive_search_validated(team=principal.team, acting_agent=principal.agent_id, data=data)


# --- episodes and rules (procedural memory) -----------------------------------------------------


def episode_add(
    principal: McpPrincipal,
    *,
    task: str,
    outcome: str,
    steps: list[str] | None = None,
    lesson: str | None = None,
    importance: float | None = None,
    run_id: str | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """POST /episodes: a past case, found again by a similar task (every episode is kept)."""
    agent = acting_agent_for(principal, agent_id, required=True)
    fields = _given(
        task=task, outcome=outcome, steps=steps, lesson=lesson, importance=importance, run_id=run_id
    )
    data = _valid(EpisodeInputSerializer(data={**fields, "agent_id": agent}))
    memory = memory_services.episode_create(team=principal.team, **data)
    usage_record(team=principal.team, agent_id=agent, kind=KIND_WRITE)
    return episode_body(memory)


def episode_search(
    principal: McpPrincipal,
    *,
    task: str,
    outcome: str | None = None,
    limit: int | None = None,
    min_score: float | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """POST /episodes/search: the agent's episodes of similar tasks, best first."""
    agent = acting_agent_for(principal, agent_id, required=True)
    fields = _given(task=task, outcome=outcome, limit=limit, min_score=min_score)
    data = _valid(EpisodeSearchInputSerializer(data={**fields, "agent_id": agent}))
    hits = memory_services.memory_recall(
        query=episode_search_query(team=principal.team, data=data),
        acting_agent=principal.agent_id,
    )
    body: dict[str, Any] = {"episodes": [episode_body(h.memory, score=h.score) for h in hits]}
    if hits.partial:
        body["partial"] = True
    return body


def _rules_agent(principal: McpPrincipal, agent_id: str | None) -> str:
    """The agent whose rules a call reads or edits: its id checked as a path's would be (a
    team-wide token may name any id, and adding a rule registers the agent)."""
    agent = acting_agent_for(principal, agent_id, required=True)
    check_agent_id(agent)
    return agent


def procedure_list(
    principal: McpPrincipal, *, status: str | None = None, agent_id: str | None = None
) -> dict[str, Any]:
    """GET /procedures/{agent_id}?status=: the agent's rules, oldest first."""
    agent = _rules_agent(principal, agent_id)
    rows = memory_selectors.procedure_list(team=principal.team, agent_id=agent, status=status)
    return {"procedures": [procedure_body(p) for p in rows]}


def procedure_add(
    principal: McpPrincipal, *, rule: str, agent_id: str | None = None
) -> dict[str, Any]:
    """POST /procedures/{agent_id}: a new rule, or the agent's rule of the same text
    (`existing: true`, made active), never a second copy."""
    agent = _rules_agent(principal, agent_id)
    data = _valid(ProcedureInputSerializer(data={"rule": rule}))
    procedure, created = memory_services.procedure_add(
        team=principal.team,
        agent_id=agent,
        rule=data["rule"],
        source=procedure_source(principal.agent_id),
        actor=Actor(label=principal.label),
    )
    return {**procedure_body(procedure), **({} if created else {"existing": True})}


def procedure_update(
    principal: McpPrincipal,
    *,
    procedure_id: int,
    rule: str | None = None,
    status: str | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """PUT /procedures/{agent_id}/{id}: edits a rule's text, or accepts / rejects a proposal."""
    agent = _rules_agent(principal, agent_id)
    data = _valid(ProcedureUpdateSerializer(data=_given(rule=rule, status=status)))
    procedure = memory_selectors.procedure_get(
        team=principal.team, agent_id=agent, procedure_id=procedure_id
    )
    return procedure_body(
        memory_services.procedure_update(
            procedure=procedure, actor=Actor(label=principal.label), **data
        )
    )


def procedure_delete(
    principal: McpPrincipal, *, procedure_id: int, agent_id: str | None = None
) -> dict[str, Any]:
    """DELETE /procedures/{agent_id}/{id}."""
    agent = _rules_agent(principal, agent_id)
    procedure = memory_selectors.procedure_get(
        team=principal.team, agent_id=agent, procedure_id=procedure_id
    )
    memory_services.procedure_delete(procedure=procedure, actor=Actor(label=principal.label))
    return {"deleted": procedure_id}


def procedure_restore(
    principal: McpPrincipal, *, procedure_id: int, agent_id: str | None = None
) -> dict[str, Any]:
    """POST /procedures/{agent_id}/{id}/restore: a removed rule back, with its id."""
    agent = _rules_agent(principal, agent_id)
    return procedure_body(
        memory_services.procedure_restore(
            team=principal.team,
            agent_id=agent,
            procedure_id=procedure_id,
            source=procedure_source(principal.agent_id),
            actor=Actor(label=principal.label),
        )
    )


# --- persona and graph --------------------------------------------------------------------------


def persona_get(principal: McpPrincipal, *, agent_id: str | None = None) -> dict[str, Any]:
    """GET /lifecycle/persona/{agent_id}: the latest persona the lifecycle generated."""
    agent = acting_agent_for(principal, agent_id, required=True)
    persona = persona_list(team=principal.team, agent_id=agent).first()
    if persona is None:
        raise NotFound("persona")
    return persona_body(persona)


def profile_get(principal: McpPrincipal, *, agent_id: str | None = None) -> dict[str, Any]:
    """GET /profile/{agent_id}: the agent's profile fields by key ({} when it has none)."""
    agent = acting_agent_for(principal, agent_id, required=True)
    fields = memory_selectors.profile_fields(team=principal.team, agent_id=agent)
    return profile_body(agent, fields)


def graph_neighbors(
    principal: McpPrincipal, *, entity: str, depth: int = 1, max_nodes: int = 100
) -> dict[str, Any]:
    """GET /graph?entity_ids=…&max_depth=…: the entities within `depth` hops and their
    relations. `entity` is an entity id, or a name (matched as the graph resolves names: case,
    width and version suffixes ignored; every visible entity of that name is a seed)."""
    team, acting = principal.team, principal.agent_id
    if parse_uuid(entity) is not None:
        seeds = [entity_get(team=team, entity_id=entity, acting_agent=acting)]
    else:
        key = normalise_name(entity)
        seeds = list(
            entities_visible(team=team, acting_agent=acting)
            .filter(Q(normalized_name=key) | Q(name__iexact=entity.strip()))
            .defer("embedding")
            .order_by("-access_count", "created_at")[:MAX_NAME_SEEDS]
        )
        if not seeds:
            raise NotFound("entity")
    graph = traversal.graph_subgraph(
        team=team,
        seeds=seeds,
        max_depth=depth,
        acting_agent=acting,
        max_nodes=max_nodes,
        max_edges=traversal.DEFAULT_MAX_EDGES,
    )
    graph.mark_accessed(graph_services.entities_touch(entity_ids=graph.entity_ids))
    return {"seeds": [str(s.pk) for s in seeds], **graph_presenters.subgraph_body(graph)}
