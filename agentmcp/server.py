"""The MCP server: the tool list (names, JSON Schemas, descriptions) over `agentmcp.tools`.

Built with the official SDK's `MCPServer` (mcp 2.x, formerly FastMCP): the JSON Schema of each
tool comes from its typed signature. Each tool is an async wrapper that runs the synchronous
tool body (Django ORM) through `sync_to_async(thread_sensitive=True)`: under the HTTP view
(`async_to_sync`) that is the request's own thread and database connection; under stdio, one
dedicated thread. No ORM call is ever made on the event loop.

Who is calling is set per request (HTTP: authenticated by the view before any MCP message is
read) or per process (stdio: the token is checked again on every call, so a revocation takes
effect at once) in `_credential`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Literal

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import ErrorCode
from tenants.authentication import McpPrincipal, mcp_token_authenticate
from tenants.ratelimit import check_rate_limit

from . import tools

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Persistent memory for this agent (and its team). Search before answering "
    "(memory_search), store durable facts the user tells you (memory_add), keep the running "
    "conversation in working memory (working_add / ingest_messages; the platform condenses it "
    "into long-term memories). Personal memories belong to one agent; team memories are shared. "
    "Follow your active rules (procedure_list; procedure_add when told to always do something) "
    "and look for past episodes of a task before starting it (episode_search; episode_add once "
    "done)."
)


class StdioToken(str):
    """A raw token (stdio): authenticated and rate-limited again on every tool call."""


# An McpPrincipal (HTTP, checked once per request by the view) or a StdioToken.
_credential: ContextVar[McpPrincipal | StdioToken | None] = ContextVar(
    "agentmcp_credential", default=None
)


@contextmanager
def credential(value: McpPrincipal | StdioToken) -> Iterator[None]:
    """Who calls the tools run inside this block (and the tasks it starts)."""
    token = _credential.set(value)
    try:
        yield
    finally:
        _credential.reset(token)


def _principal() -> McpPrincipal:
    value = _credential.get()
    if isinstance(value, McpPrincipal):
        return value
    if value is None:
        raise RuntimeError("no MCP credential set for this call")
    principal = mcp_token_authenticate(str(value))
    check_rate_limit(principal.mcp_token)
    return principal


def _call(fn: Callable[..., dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
    stdio = isinstance(_credential.get(), StdioToken)
    if stdio:
        # What request_started / request_finished do for an HTTP request: drop a connection
        # the database closed or that outlived CONN_MAX_AGE (a stdio session lasts hours).
        close_old_connections()
    try:
        return fn(_principal(), **kwargs)
    finally:
        if stdio:
            close_old_connections()


async def _run(fn: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    return await sync_to_async(_call, thread_sensitive=True)(fn, kwargs)


def error_result(code: ErrorCode | str, message: str, **extra: Any) -> CallToolResult:
    """An MCP tool error carrying the REST envelope ({ok, code, error[, details]}) both as text
    (what every client shows the model) and as structured content."""
    payload: dict[str, Any] = {"ok": False, "code": str(code), "error": message, **extra}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
        structured_content=payload,
        is_error=True,
    )


def _arguments_error(exc: ValidationError) -> CallToolResult:
    details: dict[str, list[str]] = {}
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "arguments"
        details.setdefault(field, []).append(err["msg"])
    field, messages = next(iter(details.items()))
    return error_result(ErrorCode.VALIDATION_ERROR, f"{field}: {messages[0]}", details=details)


class PlatformMCPServer(MCPServer):
    """MCPServer whose tool errors carry the platform's error code (core.errors.ErrorCode)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if cause is None:
                # The SDK's own refusal (an unknown tool).
                return error_result(ErrorCode.NOT_FOUND, str(exc))
            if isinstance(cause, ValidationError):
                return _arguments_error(cause)
            # Imported here: core.api must not be the first module to load DRF's views (DRF's
            # settings import core.api's renderer back), and this module loads with the URLs.
            from core.api import error_for_exception

            err = error_for_exception(cause)
            if err is None:
                logger.error("MCP tool %s failed", name, exc_info=cause)
                return error_result(ErrorCode.INTERNAL_ERROR, "internal error")
            return error_result(
                err.code, err.message, **({"details": err.details} if err.details else {})
            )


mcp = PlatformMCPServer(
    name="memoryplatform",
    title="Memory platform",
    instructions=INSTRUCTIONS,
    version="0.1.0",
    log_level="WARNING",
)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

AgentId = Annotated[
    str | None,
    Field(
        description="The agent to act for. Leave out with an agent token (it acts for its own "
        "agent); required with a team-wide token for personal memories, working memory and "
        "persona.",
        max_length=64,
    ),
]
MemoryId = Annotated[int, Field(description="The memory's id.", ge=1)]
Importance = Annotated[
    float | None, Field(description="0..1, default 0.5. Higher is kept longer.", ge=0, le=1)
]
Category = Annotated[str | None, Field(description='A label, default "general".', max_length=64)]
Metadata = Annotated[
    dict[str, Any] | None, Field(description="Any JSON object kept with the memory.")
]
ExpiresAt = Annotated[
    str | None,
    Field(
        description="When the memory stops being true (ISO 8601, e.g. 2027-01-31T18:00:00Z; "
        "without an offset, UTC): from then on it is not found, and it goes to the trash."
    ),
]
CallKey = Annotated[
    str | None,
    Field(
        description="Any string unique to this call (a UUID). Call again with the same key and "
        "arguments after a failure that left you without an answer: within 24 h the first "
        "answer comes back and nothing is written twice. The same key with other arguments is "
        "refused (CONFLICT).",
        min_length=1,
        max_length=200,
    ),
]


@mcp.tool(name="memory_add", annotations=WRITES)
async def memory_add(
    content: Annotated[str, Field(description="The fact to remember, in any language.")],
    scope: Annotated[
        Literal["personal", "team"],
        Field(description="personal: this agent's own memory; team: shared with the team."),
    ] = "personal",
    importance: Importance = None,
    category: Category = None,
    metadata: Metadata = None,
    agent_id: AgentId = None,
    expires_at: ExpiresAt = None,
    idempotency_key: CallKey = None,
) -> dict[str, Any]:
    """Store a long-term memory. A memory saying the same as an existing one is not stored
    twice: the existing one comes back with dedup_skipped=true."""
    return await _run(
        tools.memory_add,
        content=content,
        scope=scope,
        importance=importance,
        category=category,
        metadata=metadata,
        agent_id=agent_id,
        expires_at=expires_at,
        idempotency_key=idempotency_key,
    )


@mcp.tool(name="memory_search", annotations=READ_ONLY)
async def memory_search(
    query: Annotated[str, Field(description="What to look for (any language).")],
    limit: Annotated[int, Field(description="At most this many memories.", ge=1, le=50)] = 10,
    min_score: Annotated[
        float, Field(description="Drop results scoring below (0..1).", ge=0, le=1)
    ] = 0.3,
    include_team: Annotated[
        bool, Field(description="Also search the team's shared memories.")
    ] = False,
    include_shared: Annotated[
        bool, Field(description="Also search memories other agents shared with this one.")
    ] = False,
    filters: Annotated[
        dict[str, Any] | None,
        Field(
            description="Optional: category (string), metadata (object of scalar values that "
            "must match), created_after / created_before (ISO 8601)."
        ),
    ] = None,
    agent_id: AgentId = None,
    include_cold: Annotated[
        bool,
        Field(
            description="Also search cold memories (long idle, out of everyday search); one "
            "found this way is in use again."
        ),
    ] = False,
) -> dict[str, Any]:
    """Hybrid (semantic + keyword) search of the agent's personal memories, best first, each
    with a score 0..1. A team-wide token naming no agent searches the team memories."""
    return await _run(
        tools.memory_search,
        query=query,
        limit=limit,
        min_score=min_score,
        include_team=include_team,
        include_shared=include_shared,
        filters=filters,
        agent_id=agent_id,
        include_cold=include_cold,
    )


@mcp.tool(name="memory_get", annotations=READ_ONLY)
async def memory_get(memory_id: MemoryId) -> dict[str, Any]:
    """One memory by id."""
    return await _run(tools.memory_get, memory_id=memory_id)


@mcp.tool(name="memory_update", annotations=WRITES)
async def memory_update(
    memory_id: MemoryId,
    content: Annotated[str | None, Field(description="New text (re-embedded).")] = None,
    importance: Importance = None,
    category: Category = None,
    metadata: Annotated[
        dict[str, Any] | None, Field(description="Replaces the memory's metadata.")
    ] = None,
    pinned: Annotated[
        bool | None, Field(description="Pinned memories are never cleaned up.")
    ] = None,
    expires_at: Annotated[
        str | None,
        Field(
            description='A new expiry (ISO 8601, e.g. 2027-01-31T18:00:00Z), or "never" to '
            "remove the one it has."
        ),
    ] = None,
) -> dict[str, Any]:
    """Correct a memory; give at least one field. The change is kept in its history."""
    return await _run(
        tools.memory_update,
        memory_id=memory_id,
        content=content,
        importance=importance,
        category=category,
        metadata=metadata,
        pinned=pinned,
        expires_at=expires_at,
    )


@mcp.tool(
    name="memory_forget",
    annotations=DESTRUCTIVE,
)
async def memory_forget(memory_id: MemoryId) -> dict[str, Any]:
    """Forget a memory: it moves to the trash (restorable by an operator for the retention
    period), no longer found by search."""
    return await _run(tools.memory_forget, memory_id=memory_id)


class MemoryChange(BaseModel):
    """One item of memory_update_many: the memory's id and the fields to change."""

    model_config = ConfigDict(extra="forbid")

    memory_id: MemoryId
    content: Annotated[str | None, Field(description="New text (re-embedded).")] = None
    importance: Importance = None
    category: Category = None
    metadata: Annotated[
        dict[str, Any] | None, Field(description="Replaces the memory's metadata.")
    ] = None
    pinned: Annotated[bool | None, Field(description="Pinned memories are never cleaned up.")] = (
        None
    )
    expires_at: Annotated[
        str | None,
        Field(description="A new expiry (ISO 8601), or null to remove the one it has."),
    ] = None


@mcp.tool(name="memory_update_many", annotations=WRITES)
async def memory_update_many(
    items: Annotated[
        list[MemoryChange],
        Field(description="Up to 100 corrections, one per memory.", min_length=1, max_length=100),
    ],
    idempotency_key: CallKey = None,
) -> dict[str, Any]:
    """Correct several memories in one call, each as memory_update would (a revision each).
    Results come in the order given, each with a status: 200 (with the memory), 400 refused
    item, 403 not this token's to change, 404 no such memory; the others are still applied."""
    # Only the fields the caller gave: an explicit null expires_at removes an expiry.
    changes = [
        {
            ("id" if k == "memory_id" else k): v
            for k, v in item.model_dump(exclude_unset=True).items()
        }
        for item in items
    ]
    return await _run(tools.memory_update_many, items=changes, idempotency_key=idempotency_key)


@mcp.tool(name="memory_forget_many", annotations=DESTRUCTIVE)
async def memory_forget_many(
    memory_ids: Annotated[
        list[MemoryId],
        Field(description="Up to 100 memory ids, each listed once.", min_length=1, max_length=100),
    ],
    idempotency_key: CallKey = None,
) -> dict[str, Any]:
    """Forget several memories in one call, each as memory_forget would (to the trash).
    Results come in the order given, each with a status: 200 forgotten, 403 not this token's
    to forget, 404 no such memory; the others are still forgotten."""
    return await _run(
        tools.memory_forget_many, memory_ids=memory_ids, idempotency_key=idempotency_key
    )


@mcp.tool(name="memory_history", annotations=READ_ONLY)
async def memory_history(memory_id: MemoryId) -> dict[str, Any]:
    """A memory and its revisions, newest first: each change's before/after values and who
    made it. superseded_by names the memory that replaced it, if any."""
    return await _run(tools.memory_history, memory_id=memory_id)


TTL = Annotated[
    int | None,
    Field(description="Seconds to keep it, default 259200 (3 days).", ge=1, le=30 * 24 * 3600),
]


@mcp.tool(name="working_add", annotations=WRITES)
async def working_add(
    content: Annotated[str, Field(description="A note or turn of the current conversation.")],
    agent_id: AgentId = None,
    ttl: TTL = None,
    run_id: Annotated[
        str,
        Field(description="The session id: a new session's first notes are condensed sooner."),
    ] = "",
) -> dict[str, Any]:
    """Add to the agent's working memory (short-term, expires). The platform condenses working
    memory into long-term memories."""
    return await _run(tools.working_add, content=content, agent_id=agent_id, ttl=ttl, run_id=run_id)


@mcp.tool(name="working_list", annotations=READ_ONLY)
async def working_list(
    agent_id: AgentId = None,
    limit: Annotated[int, Field(description="At most this many items.", ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    """The agent's working memory, oldest first."""
    return await _run(tools.working_list, agent_id=agent_id, limit=limit)


@mcp.tool(name="ingest_messages", annotations=WRITES)
async def ingest_messages(
    messages: Annotated[
        list[dict[str, Any]],
        Field(
            description='Conversation turns in order, each {"role": "user"|"assistant"|"system"|'
            '"tool", "content": "…", "at"?: ISO 8601 time, "name"?: speaker}.',
            min_length=1,
            max_length=tools.MAX_INGEST_MESSAGES,
        ),
    ],
    agent_id: AgentId = None,
    run_id: Annotated[
        str, Field(description="The session id, kept on the messages and the memories made.")
    ] = "",
    infer: Annotated[
        bool, Field(description="false: archive the messages without extracting facts.")
    ] = True,
    idempotency_key: CallKey = None,
) -> dict[str, Any]:
    """Hand over a conversation: every message is archived, the facts in the user's messages
    are extracted and each is decided against the agent's memories: ADD (new), UPDATE (replaces
    an older memory, kept in its history) or NOOP (already known). Searchable at once."""
    return await _run(
        tools.ingest_messages,
        messages=messages,
        agent_id=agent_id,
        run_id=run_id,
        infer=infer,
        idempotency_key=idempotency_key,
    )


@mcp.tool(name="archive_search", annotations=READ_ONLY)
async def archive_search(
    query: Annotated[
        str,
        Field(
            description="Text the message must contain (case-insensitive; a text filter, not "
            "semantic search). Empty: every message.",
            max_length=500,
        ),
    ] = "",
    agent_id: Annotated[
        str | None,
        Field(description="Only this agent's archive (an agent token: always its own)."),
    ] = None,
    run_id: Annotated[str, Field(description="Only the messages of this session.")] = "",
    role: Annotated[
        Literal["user", "assistant", "system", "tool"] | None,
        Field(description="Only the messages of this role."),
    ] = None,
    reason: Annotated[
        Literal["ingested", "consumed", "evicted"] | None,
        Field(description="Why it was archived."),
    ] = None,
    since: Annotated[str | None, Field(description="ISO 8601: said at or after.")] = None,
    until: Annotated[str | None, Field(description="ISO 8601: said at or before.")] = None,
    cursor: Annotated[str, Field(description="next_cursor of the previous page.")] = "",
    page_size: Annotated[int, Field(description="Items per page.", ge=1, le=200)] = 20,
) -> dict[str, Any]:
    """Search the archive: every message handed over with ingest_messages, and the working
    memory the platform condensed, word for word, newest first."""
    return await _run(
        tools.archive_search,
        query=query,
        agent_id=agent_id,
        run_id=run_id,
        role=role,
        reason=reason,
        since=since,
        until=until,
        cursor=cursor,
        page_size=page_size,
    )


Outcome = Literal["success", "failure"]


@mcp.tool(name="episode_add", annotations=WRITES)
async def episode_add(
    task: Annotated[str, Field(description="What was to be done (what a later search matches).")],
    outcome: Annotated[Outcome, Field(description="How it went.")],
    steps: Annotated[
        list[str] | None, Field(description="What was done, in order (up to 50).", max_length=50)
    ] = None,
    lesson: Annotated[str | None, Field(description="What to do differently next time.")] = None,
    importance: Importance = None,
    run_id: Annotated[str | None, Field(description="The session it happened in.")] = None,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """Record an episode: a task the agent did, how it went, its steps and the lesson, to be
    found again by a similar task (episode_search). Every episode is kept."""
    return await _run(
        tools.episode_add,
        task=task,
        outcome=outcome,
        steps=steps,
        lesson=lesson,
        importance=importance,
        run_id=run_id,
        agent_id=agent_id,
    )


@mcp.tool(name="episode_search", annotations=READ_ONLY)
async def episode_search(
    task: Annotated[str, Field(description="The task at hand (any language).")],
    outcome: Annotated[Outcome | None, Field(description="Only episodes that went so.")] = None,
    limit: Annotated[int, Field(description="At most this many episodes.", ge=1, le=50)] = 5,
    min_score: Annotated[
        float, Field(description="Drop episodes scoring below (0..1).", ge=0, le=1)
    ] = 0.3,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """The agent's past episodes of tasks like this one, best first: examples of what worked
    and what failed before starting."""
    return await _run(
        tools.episode_search,
        task=task,
        outcome=outcome,
        limit=limit,
        min_score=min_score,
        agent_id=agent_id,
    )


ProcedureId = Annotated[int, Field(description="The rule's id.", ge=1)]
RuleText = Annotated[
    str, Field(description="What the agent is to do, in its words.", min_length=1, max_length=2000)
]


@mcp.tool(name="procedure_list", annotations=READ_ONLY)
async def procedure_list(
    status: Annotated[
        Literal["active", "proposed", "rejected"] | None,
        Field(description="Only these: active (follow them), proposed (waiting), rejected."),
    ] = None,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """The agent's rules (procedural memory), oldest first: read the active ones before
    acting. Proposed ones come from repeated feedback and are not followed until accepted."""
    return await _run(tools.procedure_list, status=status, agent_id=agent_id)


@mcp.tool(name="procedure_add", annotations=WRITES)
async def procedure_add(rule: RuleText, agent_id: AgentId = None) -> dict[str, Any]:
    """Add a rule the agent follows from now on. A rule it already has (same text, case and
    spacing aside) is not added twice: that rule comes back with existing=true, active. An
    agent holds at most 200 rules: remove one it no longer follows to add another."""
    return await _run(tools.procedure_add, rule=rule, agent_id=agent_id)


@mcp.tool(name="procedure_update", annotations=WRITES)
async def procedure_update(
    procedure_id: ProcedureId,
    rule: Annotated[
        str | None, Field(description="The new text.", min_length=1, max_length=2000)
    ] = None,
    status: Annotated[
        Literal["active", "rejected"] | None,
        Field(description="active accepts a proposed rule; rejected refuses it."),
    ] = None,
    agent_id: AgentId = None,
) -> dict[str, Any]:
    """Edit a rule's text, or accept / reject a proposed rule; give at least one field. A text
    another of the agent's rules already says is refused (CONFLICT, naming that rule)."""
    return await _run(
        tools.procedure_update,
        procedure_id=procedure_id,
        rule=rule,
        status=status,
        agent_id=agent_id,
    )


@mcp.tool(
    name="procedure_delete",
    annotations=DESTRUCTIVE,
)
async def procedure_delete(procedure_id: ProcedureId, agent_id: AgentId = None) -> dict[str, Any]:
    """Remove a rule the agent no longer follows (gone at once; procedure_restore brings it
    back from its history)."""
    return await _run(tools.procedure_delete, procedure_id=procedure_id, agent_id=agent_id)


@mcp.tool(name="procedure_restore", annotations=WRITES)
async def procedure_restore(procedure_id: ProcedureId, agent_id: AgentId = None) -> dict[str, Any]:
    """Bring back a rule removed by mistake: the same id, its last text and status."""
    return await _run(tools.procedure_restore, procedure_id=procedure_id, agent_id=agent_id)


@mcp.tool(name="persona_get", annotations=READ_ONLY)
async def persona_get(agent_id: AgentId = None) -> dict[str, Any]:
    """The agent's latest persona (preferences, habits, expertise, communication style,
    summary) as generated by the lifecycle; NOT_FOUND before one was generated."""
    return await _run(tools.persona_get, agent_id=agent_id)


@mcp.tool(name="profile_get", annotations=READ_ONLY)
async def profile_get(agent_id: AgentId = None) -> dict[str, Any]:
    """The agent's profile: exactly-known fields by key (occupation, location, timezone,
    language, tools, cloud_platform, …), each with its value, source and time. Read this for
    such facts rather than searching memories; {} fields when none are known yet."""
    return await _run(tools.profile_get, agent_id=agent_id)


@mcp.tool(name="graph_neighbors", annotations=READ_ONLY)
async def graph_neighbors(
    entity: Annotated[
        str, Field(description="An entity id, or an entity name.", min_length=1, max_length=255)
    ],
    depth: Annotated[int, Field(description="Hops to follow, 1..3.", ge=1, le=3)] = 1,
    max_nodes: Annotated[int, Field(description="At most this many entities.", ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """The knowledge-graph neighbourhood of an entity: the entities within `depth` hops and
    the relations between them (truncated=true when a cap cut the answer)."""
    return await _run(tools.graph_neighbors, entity=entity, depth=depth, max_nodes=max_nodes)
