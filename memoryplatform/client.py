"""Python clients for the memory platform API. `MemoryClient` needs only `requests`, not Django;
`AsyncMemoryClient` (the same methods, awaited) needs `httpx` (or its fork `httpx2`).

    from memoryplatform.client import MemoryClient, MemoryAPIError
    client = MemoryClient(api_key, secret, base_url="http://127.0.0.1:8000")
    client.write_memory("assistant", "用户偏好简洁回复", importance=0.8)
    for m in client.search("assistant", "沟通偏好"):
        print(m["score"], m["content"])

    async with AsyncMemoryClient(api_key, secret, base_url="http://127.0.0.1:8000") as client:
        await client.write_memory("assistant", "用户偏好简洁回复", importance=0.8)
        hits = await client.search("assistant", "沟通偏好")

Every method returns the envelope's `data`, typed: the bodies are the `TypedDict`s below (`Memory`,
`SearchHit`, `MemoryPage`, `Job`…), plain dicts at run time, so `m["content"]` works and a type
checker knows what `client.get_memory(1)` or `await client.get_memory(1)` holds. Errors raise
`MemoryAPIError` (with `.code`, `.status` and `.details`) when the server answers `ok: false`. Bodies are serialised once with
`json.dumps(..., ensure_ascii=True)` and those exact bytes are both signed and sent, which is
what the server verifies (docs/authentication.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import json
import secrets
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    NotRequired,
    ParamSpec,
    Self,
    TypedDict,
    TypeVar,
    final,
    overload,
)
from urllib.parse import quote, urlencode

import requests

__all__ = [
    "Agent",
    "AsyncMemoryClient",
    "AutoRunAction",
    "AutoRunResult",
    "BatchDeleteItem",
    "BatchDeleteResult",
    "BatchItemResult",
    "BatchResult",
    "BatchUpdateItem",
    "BatchUpdateResult",
    "CleanupCandidate",
    "CleanupResult",
    "CompressResult",
    "Consolidated",
    "ConsolidationItem",
    "EntityRef",
    "Episode",
    "ExtractFactsResult",
    "ExtractedFact",
    "GeneratedPersona",
    "Health",
    "ImportResult",
    "IngestFact",
    "IngestMessage",
    "IngestResult",
    "Job",
    "JobAccepted",
    "Memory",
    "MemoryAPIError",
    "MemoryClient",
    "MemoryDetail",
    "MemoryHistory",
    "MemoryPage",
    "Persona",
    "PipelineConfig",
    "Procedure",
    "ProcedureList",
    "Profile",
    "ProfileField",
    "ProfileHistory",
    "ProfileRevision",
    "ProfileSetResult",
    "Proposals",
    "Revision",
    "Scenario",
    "ScenariosResult",
    "SearchHit",
    "Stats",
    "Team",
    "TrashPage",
    "TrashedMemory",
    "WorkingCleared",
    "WorkingItem",
    "sign",
]


def sign(secret: str, timestamp: int | str, body: bytes = b"") -> str:
    """v1 signature: hex HMAC-SHA256 over str(timestamp) + body (empty for GET/DELETE)."""
    return hmac.new(secret.encode(), str(timestamp).encode() + body, hashlib.sha256).hexdigest()


def sign_v2(
    secret: str, timestamp: int | str, nonce: str, method: str, full_path: str, body: bytes = b""
) -> str:
    """v2 signature: also covers method, path with query string and a single-use nonce, and the
    body whatever the method (a DELETE with a body signs it)."""
    head = f"v2\n{timestamp}\n{nonce}\n{method.upper()}\n{full_path}\n".encode()
    return hmac.new(secret.encode(), head + body, hashlib.sha256).hexdigest()


class MemoryAPIError(Exception):
    """The server said `ok: false` (or did not answer with the envelope)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.request_id = request_id


# --- the bodies the server answers ------------------------------------------------------------
# What `data` holds, endpoint by endpoint, as the server's presenters build it (memories,
# lifecycle and graph `presenters.py`, tenants' output serializers; the OpenAPI schema documents
# the same). TypedDicts: the values stay the plain dicts `json` gives, so nothing changes at run
# time; only a type checker sees the keys. Timestamps are ISO 8601 strings. A key that only
# some answers carry is NotRequired; a key always present but possibly null is `X | None`.

Scope = Literal["personal", "team"]
# Hot and warm memories are in everyday search; cold ones only with `include_cold=True`.
Tier = Literal["hot", "warm", "cold"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "abandoned"]


class Health(TypedDict):
    status: str


class Stats(TypedDict):
    personal_memories: int
    team_memories: int
    agents: int
    working_memories: int | None  # null when the working store is down
    working_evicted_to_archive: int
    scenarios: int
    personas: int
    entities: int
    relations: int
    redis_ok: bool | None  # null in embedded mode (no Redis configured)
    embedding_ok: bool
    working_store: Literal["redis", "database"]
    working_memory_backend: Literal["redis", "database"]  # the earlier name of working_store
    embedding_model: str
    llm: str


class Team(TypedDict):
    id: str
    name: str
    description: str
    config: dict[str, Any]
    created_at: str
    updated_at: str


class Agent(TypedDict):
    id: str
    team_id: str
    name: str
    role: str
    config: dict[str, Any]
    created_at: str
    updated_at: str


class Memory(TypedDict):
    """The memory object (`memories.presenters.memory_body`): what a write, an update, a restore,
    a listing or a recent read answers."""

    id: int
    team_id: str
    agent_id: str | None  # null for a team memory written without an agent
    scope: Scope
    content: str
    importance: float
    category: str
    metadata: dict[str, Any]
    pinned: bool
    created_at: str
    updated_at: str
    last_accessed: str | None
    access_count: int
    tier: Tier
    # Only on a memory replaced by a newer one (null from get_memory while it is current).
    superseded_by: NotRequired[int | None]
    # The session (run) that wrote it, on memories written with a run_id.
    run_id: NotRequired[str]
    # When it stops being true, on memories written or updated with an `expires_at`.
    expires_at: NotRequired[str]
    # A write that matched a stored memory answers that memory with these two.
    dedup_skipped: NotRequired[bool]
    dedup_score: NotRequired[float]


class EntityRef(TypedDict):
    """A graph entity attached to a search hit (`include_entities=True`)."""

    id: str
    name: str
    entity_type: str
    description: str | None


class SearchHit(Memory):
    """A search result: the memory (its content cut to the character budgets) and its score."""

    score: float  # 0..1, docs/search.md
    entities: NotRequired[list[EntityRef]]  # with include_entities only


class MemoryDetail(Memory):
    """`get_memory`: `superseded_by` is always there (null while current), and `source`."""

    source: str | None  # metadata.source: compression, extraction…; null when written directly


class MemoryPage(TypedDict):
    items: list[Memory]
    next_cursor: str | None  # null on the last page


class Revision(TypedDict):
    at: str
    by: str  # "key mk_…", "user alice", "system"
    change: Literal["update", "revert", "supersede", "promote"]
    before: dict[str, Any]
    after: dict[str, Any]


class MemoryHistory(TypedDict):
    revisions: list[Revision]  # oldest first
    supersedes: list[int]
    superseded_by: int | None


class BatchItemResult(TypedDict):
    status: int  # 201 written, 200 duplicate, 400 / 403 refused
    memory: NotRequired[Memory]  # written or duplicate
    dedup_skipped: NotRequired[bool]
    error: NotRequired[str]  # refused
    details: NotRequired[dict[str, Any]]  # refused


class BatchResult(TypedDict):
    results: list[BatchItemResult]  # in the order of the items


class BatchDeleteItem(TypedDict):
    id: int
    status: int  # 200 removed, 403 not the key's to delete, 404 no such memory in this scope
    error: NotRequired[str]


class BatchDeleteResult(TypedDict):
    results: list[BatchDeleteItem]  # in the order of the ids
    removed: int


class BatchUpdateItem(TypedDict):
    id: int | None  # None when the item had no valid id
    status: int  # 200 updated, 400 refused, 403 not the key's to change, 404 no such memory
    memory: NotRequired[Memory]  # updated
    error: NotRequired[str]
    details: NotRequired[dict[str, Any]]


class BatchUpdateResult(TypedDict):
    results: list[BatchUpdateItem]  # in the order of the items
    updated: int


class TrashedMemory(TypedDict):
    id: int
    team_id: str
    agent_id: str | None
    scope: Scope
    content: str
    importance: float
    category: str
    metadata: dict[str, Any]
    pinned: bool
    created_at: str | None
    removed_at: str
    removed_by: str  # api, cleanup, auto, beat, command, console
    reason: str
    expires_at: str  # erased for good at this time


class TrashPage(TypedDict):
    items: list[TrashedMemory]
    total: int
    page: int
    page_size: int


class WorkingItem(TypedDict):
    id: str
    agent_id: str
    content: str
    created_at: str
    expires_at: str
    run_id: NotRequired[str]


class WorkingCleared(TypedDict):
    cleared: int


class CompressResult(TypedDict):
    compressed: int  # working items consumed
    remaining: int
    total_before: int
    target_count: int
    summary: str | None  # null when there was nothing to compress
    memory_ids: list[int]
    busy_job_id: NotRequired[int]  # another compress of this agent was running


class ExtractedFact(TypedDict):
    id: int
    content: str
    importance: float
    category: str


class ExtractFactsResult(TypedDict):
    facts: list[ExtractedFact]
    count: int
    duplicates: int
    superseded: int
    analyzed: NotRequired[int]  # absent when there were no working items
    busy_job_id: NotRequired[int]


class Scenario(TypedDict):
    id: str
    name: str
    summary: str
    memory_ids: list[int]
    created_at: str


class ScenariosResult(TypedDict):
    scenarios: list[Scenario]
    count: int


class Persona(TypedDict):
    id: str
    agent_id: str
    preferences: list[str]
    habits: list[str]
    expertise: list[str]
    communication_style: str
    summary: str
    memory_ids: list[int]
    scenario_ids: list[str]
    created_at: str


class GeneratedPersona(TypedDict):
    persona: Persona


class CleanupCandidate(Memory):
    reason: str
    action: Literal["cold", "trash", "wait"]  # this cleanup's step on the ladder


class CleanupResult(TypedDict):
    cleaned: int  # 0 on a dry run
    remaining: int
    trashed: NotRequired[list[int]]  # not on a dry run: the ids moved to the trash
    cooled: NotRequired[list[int]]  # not on a dry run: the ids moved to the cold tier
    dry_run: NotRequired[bool]  # dry runs only (true), with the three below
    would_clean: NotRequired[int]  # to the trash
    would_cool: NotRequired[int]
    candidates: NotRequired[list[CleanupCandidate]]


class PipelineConfig(TypedDict):
    team_id: str
    compress_every_n: int
    compress_target_count: int
    cleanup_idle_days: int
    cleanup_min_importance: float
    enabled: bool
    warmup_max_memories: int
    warmup_compress_every_n: int
    extract_graph: bool
    warmup_doubling: bool
    idle_extract_seconds: int
    scenario_min_interval_seconds: int
    persona_every_n: int
    excluded_agents: list[str]
    max_memories_per_run: int  # 0 = unlimited
    consolidate_min_fragments: int  # 0 = never
    recall_timeout_ms: int  # 0 = no limit
    configured: bool  # false: the defaults, never saved


class AutoRunAction(TypedDict):
    """One action of an auto-run: `action` and that operation's result fields."""

    action: Literal["compress", "cleanup"]
    agent_id: NotRequired[str]  # compress only
    compressed: NotRequired[int]
    remaining: NotRequired[int]
    total_before: NotRequired[int]
    target_count: NotRequired[int]
    summary: NotRequired[str | None]
    memory_ids: NotRequired[list[int]]
    busy_job_id: NotRequired[int]
    cleaned: NotRequired[int]
    trashed: NotRequired[list[int]]


class AutoRunResult(TypedDict):
    results: list[AutoRunAction]  # empty when the pipeline is disabled


class Episode(TypedDict):
    """A past case (`POST /episodes`): the task, how it went, its steps and lesson."""

    id: int
    agent_id: str
    task: str
    outcome: Literal["success", "failure"]
    steps: list[str]
    lesson: str
    importance: float
    created_at: str
    run_id: NotRequired[str]
    score: NotRequired[float]  # episodes_search only


class Procedure(TypedDict):
    """A rule of an agent (`/procedures/<agent_id>`); `proposed` ones wait to be accepted."""

    id: int
    agent_id: str
    rule: str
    status: Literal["active", "proposed", "rejected"]
    source: str
    evidence: list[int]
    created_at: str
    updated_at: str


class ProcedureList(TypedDict):
    procedures: list[Procedure]


class ConsolidationItem(TypedDict):
    memory: Memory  # the stable fact written
    fragments: list[int]  # the memories it stands for, now superseded by it


class Consolidated(TypedDict):
    consolidated: list[ConsolidationItem]
    count: int
    examined: int


class Proposals(TypedDict):
    proposals: list[Procedure]
    count: int
    examined: int


class Job(TypedDict):
    """`GET /jobs/<id>` (`lifecycle.presenters.job_body`)."""

    id: int
    kind: str  # ingest, export, compress, extract-facts, ...
    status: JobStatus
    agent_id: str | None
    trigger: str  # api, auto, beat, admin, command
    created_at: str
    started_at: str | None
    finished_at: str | None
    counts: dict[str, Any]  # the scalar fields of the result
    result: dict[str, Any] | None  # once succeeded: what the queuing endpoint answers
    error: str | None
    retry_of: int | None  # the abandoned job this one retries
    run_id: str | None  # the session: an ingest's run, or the run that triggered a compress


# final: `"job_id" in answer` tells the two answers of ingest apart for a type checker too.
@final
class JobAccepted(TypedDict):
    """An asynchronous request's answer: poll the job (`wait_for_job`)."""

    job_id: int


class ImportResult(TypedDict):
    """`POST /import`: records written and skipped, by kind (memory, revision, share, archive,
    scenario, persona, entity, relation, mention), and the memories re-embedded."""

    imported: dict[str, int]
    skipped: dict[str, int]
    reembedded: int


class IngestFact(TypedDict):
    decision: Literal["ADD", "UPDATE", "NOOP"]
    memory: Memory
    supersedes: NotRequired[int]  # UPDATE: the memory this one replaced


class IngestMessage(TypedDict):
    """One message of a conversation to ingest (what `ingest` sends; any mapping will do)."""

    role: Literal["user", "assistant", "system", "tool"]
    content: str
    at: NotRequired[str]  # when it was said, ISO 8601
    name: NotRequired[str]  # the speaker


@final
class IngestResult(TypedDict):
    archived: int  # messages archived
    facts: list[IngestFact]
    profile: NotRequired[dict[str, str]]  # only when it changed profile fields: key -> value
    facts_over_run_limit: NotRequired[int]  # facts not written: the run was at its limit


class ProfileField(TypedDict):
    value: str
    updated_at: str
    source: Literal["api", "console", "extraction", "ingest"]
    source_memory_id: int | None  # the memory an extracted or ingested value was read from


class Profile(TypedDict):
    agent_id: str
    fields: dict[str, ProfileField]


class ProfileSetResult(Profile):
    changed: list[str]  # the keys whose value the request changed


class ProfileRevision(TypedDict):
    key: str
    before: str | None  # None: the key was new
    after: str | None  # None: the key was deleted
    source: Literal["api", "console", "extraction", "ingest"]
    source_memory_id: int | None
    by: str
    at: str


class ProfileHistory(TypedDict):
    agent_id: str
    revisions: list[ProfileRevision]  # newest first


# --- one definition of each endpoint for both clients -----------------------------------------
# An endpoint method does not perform its request: it describes it as a `_Call[T]`, T being the
# type of the data it answers (or, for one that takes several requests such as `wait_for_job`, is
# a generator that yields `_Call`s and `_Sleep`s, is sent each call's data back and returns its
# result: a `_Flow[T]`). The `@_endpoint` / `@_flow` decorator turns the method into a
# descriptor that, read from a client, runs the description with that client's transport:
# blocking for `MemoryClient`, a coroutine for `AsyncMemoryClient`. Its `__get__` overloads
# tell a type checker the same thing from the one definition: `MemoryClient().get_memory` is
# `(memory_id: int) -> MemoryDetail`, `AsyncMemoryClient().get_memory` is
# `(memory_id: int) -> Coroutine[..., MemoryDetail]`, parameters kept (ParamSpec). Python has no
# higher-kinded types to say "Result[T] where Result is the client's", so the choice between T
# and an awaitable of T is made per client class here, once, rather than in ~50 signatures
# written twice. tests/typecheck/check_client_types.py holds the checks (`mypy .` runs it).

T = TypeVar("T")
P = ParamSpec("P")


class _Call(Generic[T]):
    """One request an endpoint asks for, answering data of type T. (A plain class, not a
    dataclass: this module also works loaded from its file alone, outside sys.modules.)"""

    __slots__ = (
        "binary",
        "body",
        "content_type",
        "headers",
        "keyed",
        "method",
        "params",
        "path",
        "raw",
        "resend",
        "signed",
    )

    def __init__(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        signed: bool = True,  # False: /health, no authentication
        *,
        raw: bytes | None = None,  # a gzip body sent as it is (import)
        binary: bool = False,  # sent and answered as bytes (request_bytes: import, download)
        resend: bool | None = None,  # safe to send again when no answer came (default: GET)
        keyed: bool = False,  # the endpoint honours Idempotency-Key (a write sent again with it)
        content_type: str = "application/gzip",  # of a `raw` body
    ) -> None:
        self.method, self.path, self.body = method, path, body
        self.params, self.headers, self.signed = params, headers, signed
        self.raw, self.binary, self.content_type = raw, binary, content_type
        self.resend = method in ("GET", "HEAD") if resend is None else resend
        self.keyed = keyed


class _Sleep:
    """A pause a flow asks for (time.sleep or asyncio.sleep, by client)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


_Flow = Generator[_Call[Any] | _Sleep, Any, T]


class _Endpoint(Generic[P, T]):
    def __init__(self, plan: Callable[..., _Call[T] | _Flow[T]]) -> None:
        self._plan = plan
        self.__name__ = plan.__name__
        self.__qualname__ = plan.__qualname__
        self.__doc__ = plan.__doc__
        # What help() and inspect show of a client's method: no `self`, and the data it answers.
        sig = inspect.signature(plan)
        answer = sig.return_annotation
        if isinstance(answer, str) and answer.startswith(("_Call[", "_Flow[")):
            answer = answer[len("_Call[") : -1]
        self._signature = sig.replace(
            parameters=list(sig.parameters.values())[1:], return_annotation=answer
        )

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: MemoryClient, owner: type[Any] | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, client: AsyncMemoryClient, owner: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, client: _Endpoints, owner: type[Any] | None = None) -> Callable[P, Any]: ...
    def __get__(self, client: _Endpoints | None, owner: type[Any] | None = None) -> Any:
        if client is None:
            return self
        plan = self._plan

        def call(*args: Any, **kwargs: Any) -> Any:
            return client._drive(plan(client, *args, **kwargs))

        call.__name__ = self.__name__
        call.__qualname__ = self.__qualname__
        call.__doc__ = self.__doc__
        call.__signature__ = self._signature  # type: ignore[attr-defined]
        return call

    def __call__(self, client: _Endpoints, /, *args: Any, **kwargs: Any) -> Any:
        """Read from the class, `MemoryClient.search(client, …)` still works."""
        return self.__get__(client)(*args, **kwargs)


def _endpoint(build: Callable[Concatenate[Any, P], _Call[T]]) -> _Endpoint[P, T]:
    """An endpoint of one request."""
    return _Endpoint(build)


def _flow(build: Callable[Concatenate[Any, P], _Flow[T]]) -> _Endpoint[P, T]:
    """An endpoint of several requests (a generator, see above)."""
    return _Endpoint(build)


def _get(path: str, params: dict[str, Any] | None = None) -> _Call[Any]:
    return _Call("GET", path, params=params)


def _post(
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    *,
    resend: bool = False,
) -> _Call[Any]:
    return _Call("POST", path, body if body is not None else {}, headers=headers, resend=resend)


def _keyed_post(path: str, body: dict[str, Any], idempotency_key: str | None) -> _Call[Any]:
    """A write the server runs once per `Idempotency-Key`: sent again, with the same key, when
    no answer came. Without a key of the caller's, the client makes one per call when it
    re-sends (MemoryClient `retries`)."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
    return _Call("POST", path, body, headers=headers, resend=True, keyed=True)


# Proxy answers that mean "no node answered": the request may be sent again when that is safe.
RESEND_STATUSES = frozenset({502, 503, 504})


def _resend_delay(attempt: int) -> float:
    """Seconds before re-send number `attempt` (0-based): 0.25, 0.5, 1 … capped at 2, with
    jitter so that the clients of a dead node do not all come back at once."""
    return min(2.0, 0.25 * 2.0**attempt) * (0.5 + secrets.randbelow(1000) / 1000)


def _no_answer(exc: BaseException) -> bool:
    """A proxy's 502/503/504 page (not the API's own envelope: an API 503 such as
    SEARCH_UNAVAILABLE is an answer, for the caller to act on)."""
    return (
        isinstance(exc, MemoryAPIError)
        and exc.status in RESEND_STATUSES
        and exc.code == "BAD_RESPONSE"
    )


def _put(path: str, body: dict[str, Any]) -> _Call[Any]:
    return _Call("PUT", path, body)


def _delete(path: str, params: dict[str, Any] | None = None) -> _Call[Any]:
    return _Call("DELETE", path, params=params)


def _job_call(job_id: int) -> _Call[Job]:
    return _get(f"/jobs/{int(job_id)}")


JOB_FINAL_STATUSES = frozenset({"succeeded", "failed", "abandoned"})


class _Endpoints:
    """Every endpoint, once, for both clients: each method describes its request (see above) and
    the client it is read from runs it — `MemoryClient` answers the envelope's data,
    `AsyncMemoryClient` an awaitable of it."""

    api_key: str
    secret: str
    base_url: str
    signature_version: int
    retries: int
    resends: int  # how many requests this client sent again (bench/load.py reports them)

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        raise NotImplementedError

    def _fetch_unsigned(self, path: str) -> Any:
        raise NotImplementedError

    def _drive(self, plan: _Call[Any] | _Flow[Any]) -> Any:
        """Runs an endpoint's description with this client's transport."""
        raise NotImplementedError

    def _keyed(self, call: _Call[Any]) -> _Call[Any]:
        """`call` with an Idempotency-Key of its own when it may be re-sent without one."""
        if not (call.keyed and self.retries > 0):
            return call
        if call.headers and "Idempotency-Key" in call.headers:
            return call
        headers = {**(call.headers or {}), "Idempotency-Key": secrets.token_urlsafe(18)}
        return _Call[Any](
            call.method, call.path, call.body, call.params, headers, resend=True, keyed=True
        )

    def _resendable(self, call: _Call[Any], attempt: int) -> bool:
        """Whether `call`, which got no answer (or a proxy's 502/503/504), is sent again: only
        when that cannot do anything twice (a read, a search, a write under its Idempotency-Key)
        and re-sends are left. A keyed write has its key by then (`_keyed`, when retries > 0)."""
        if attempt >= self.retries or not call.resend:
            return False
        self.resends += 1
        return True

    def _send(self, call: _Call[Any]) -> Any:
        if not call.signed:
            return self._fetch_unsigned(call.path)
        if call.binary:
            return self.request_bytes(
                call.method, call.path, call.raw, call.params, content_type=call.content_type
            )
        return self.request(call.method, call.path, call.body, call.params, headers=call.headers)

    def request_bytes(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/gzip",
    ) -> Any:
        """Like `request`, but sends `raw` bytes as the body (signed as they are) and returns a
        non-JSON answer (a download) as bytes; a JSON answer is unwrapped as usual."""
        raise NotImplementedError

    def _prepare(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        params: dict[str, Any] | None,
        extra_headers: dict[str, str] | None = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[str, str, bytes, dict[str, str]]:
        """(method, url, the exact body bytes, headers): the body is serialised once (or given
        as `raw` bytes) and those bytes are both signed and sent. `extra_headers` (e.g.
        Idempotency-Key) are sent as they are, unsigned; they cannot replace the authentication
        headers."""
        method = method.upper()
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        full_path = path + (f"?{query}" if query else "")
        if raw is None:
            raw = (
                b""
                if body is None or method in ("GET", "DELETE")
                else json.dumps(body, ensure_ascii=True).encode()
            )
        ts = str(int(time.time()))
        headers = {**(extra_headers or {}), "X-API-Key": self.api_key, "X-Timestamp": ts}
        if self.signature_version == 2:
            nonce = secrets.token_urlsafe(18)
            headers.update(
                {
                    "X-Signature-Version": "2",
                    "X-Nonce": nonce,
                    "X-Signature": sign_v2(self.secret, ts, nonce, method, full_path, raw),
                }
            )
        else:
            headers["X-Signature"] = sign(self.secret, ts, raw)
        if raw:
            headers["Content-Type"] = content_type
        return method, self.base_url + full_path, raw, headers

    @staticmethod
    def _unwrap(status: int, headers: Any, text: str) -> Any:
        rid = headers.get("X-Request-ID")
        try:
            payload = json.loads(text)
        except ValueError:
            raise MemoryAPIError(
                status, "BAD_RESPONSE", f"not a JSON answer: {text[:200]!r}", request_id=rid
            ) from None
        if not isinstance(payload, dict) or "ok" not in payload:
            raise MemoryAPIError(status, "BAD_RESPONSE", "answer without envelope", request_id=rid)
        if not payload["ok"]:
            raise MemoryAPIError(
                status,
                str(payload.get("code", "UNKNOWN")),
                str(payload.get("error", "")),
                payload.get("details"),
                request_id=rid,
            )
        return payload.get("data")

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("POST", path, body if body is not None else {})

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    # --- system and tenancy ------------------------------------------------------------------

    @_endpoint
    def health(self) -> _Call[Health]:
        return _Call("GET", "/health", signed=False)

    @_endpoint
    def get_stats(self) -> _Call[Stats]:
        return _get("/stats")

    @_endpoint
    def upsert_team(
        self,
        team_id: str,
        name: str,
        description: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> _Call[Team]:
        body: dict[str, Any] = {"team_id": team_id, "name": name}
        if description is not None:
            body["description"] = description
        if config is not None:
            body["config"] = config
        return _post("/teams", body)

    @_endpoint
    def get_team(self, team_id: str) -> _Call[Team]:
        return _get(f"/teams/{quote(team_id, safe='')}")

    @_endpoint
    def delete_team(self, team_id: str) -> _Call[None]:
        return _delete(f"/teams/{quote(team_id, safe='')}")

    @_endpoint
    def upsert_agent(
        self,
        agent_id: str,
        name: str,
        role: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> _Call[Agent]:
        body: dict[str, Any] = {"agent_id": agent_id, "name": name}
        if role is not None:
            body["role"] = role
        if config is not None:
            body["config"] = config
        return _post("/agents", body)

    @_endpoint
    def get_agent(self, team_id: str, agent_id: str) -> _Call[Agent]:
        return _get(f"/agents/{quote(team_id, safe='')}/{quote(agent_id, safe='')}")

    @_endpoint
    def list_agents(self, team_id: str) -> _Call[list[Agent]]:
        return _get(f"/agents/{quote(team_id, safe='')}")

    @_endpoint
    def delete_agent(self, team_id: str, agent_id: str) -> _Call[None]:
        return _delete(f"/agents/{quote(team_id, safe='')}/{quote(agent_id, safe='')}")

    # --- long-term memory (the original client's method names) ----------------------------

    @_endpoint
    def write_memory(
        self,
        /,
        agent_id: str,
        content: str,
        importance: float = 0.5,
        *,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> _Call[Memory]:
        """`idempotency_key`: the write is stored once per key (the client makes one per call
        when it may re-send, see `retries`)."""
        return _keyed_post(
            "/memories/personal",
            {"agent_id": agent_id, "content": content, "importance": importance, **extra},
            idempotency_key,
        )

    @_endpoint
    def search(
        self,
        /,
        agent_id: str,
        query: str,
        limit: int = 10,
        min_score: float = 0.3,
        max_chars_per_memory: int = 0,
        max_total_chars: int = 0,
        run_id: str | None = None,
        **extra: Any,
    ) -> _Call[list[SearchHit]]:
        """`run_id`: only memories written by that run (session)."""
        body: dict[str, Any] = {
            "agent_id": agent_id,
            "query": query,
            "limit": limit,
            "min_score": min_score,
            **extra,
        }
        if max_chars_per_memory:
            body["max_chars_per_memory"] = max_chars_per_memory
        if max_total_chars:
            body["max_total_chars"] = max_total_chars
        if run_id is not None:
            body["run_id"] = run_id
        return _post("/memories/personal/search", body, resend=True)

    @_endpoint
    def get_recent(self, agent_id: str, limit: int = 10) -> _Call[list[Memory]]:
        return _get(
            f"/memories/personal/recent/{quote(agent_id, safe='')}", params={"limit": limit}
        )

    @_endpoint
    def update_memory(self, /, memory_id: int, **fields: Any) -> _Call[Memory]:
        return _put(f"/memories/personal/{int(memory_id)}", fields)

    @_endpoint
    def delete_memory(self, memory_id: int, purge: bool = False) -> _Call[None]:
        """To the trash (restorable); purge=True erases it at once."""
        return _delete(
            f"/memories/personal/{int(memory_id)}", params={"purge": "true"} if purge else None
        )

    @_endpoint
    def delete_team_memory(self, memory_id: int, purge: bool = False) -> _Call[None]:
        return _delete(
            f"/memories/team/{int(memory_id)}", params={"purge": "true"} if purge else None
        )

    @_endpoint
    def update_memories(
        self, items: list[dict[str, Any]], idempotency_key: str | None = None
    ) -> _Call[BatchUpdateResult]:
        """Up to 100 personal memories changed in one request, each item `{"id", …}` with the
        fields of update_memory: `{"results": [...], "updated": n}`. Run once per
        `idempotency_key` (one is made per call when the client may re-send, see `retries`)."""
        return _keyed_post("/memories/personal/batch/update", {"items": items}, idempotency_key)

    @_endpoint
    def update_team_memories(
        self, items: list[dict[str, Any]], idempotency_key: str | None = None
    ) -> _Call[BatchUpdateResult]:
        return _keyed_post("/memories/team/batch/update", {"items": items}, idempotency_key)

    @_endpoint
    def delete_memories(
        self, memory_ids: list[int], purge: bool = False, idempotency_key: str | None = None
    ) -> _Call[BatchDeleteResult]:
        """Up to 100 personal memories in one request, each as delete_memory would: to the
        trash, or erased at once with purge=True. `{"results": [...], "removed": n}`. Run once
        per `idempotency_key`, as update_memories."""
        return _keyed_post(
            "/memories/personal/batch/delete",
            {"ids": [int(i) for i in memory_ids], "purge": purge},
            idempotency_key,
        )

    @_endpoint
    def delete_team_memories(
        self, memory_ids: list[int], purge: bool = False, idempotency_key: str | None = None
    ) -> _Call[BatchDeleteResult]:
        return _keyed_post(
            "/memories/team/batch/delete",
            {"ids": [int(i) for i in memory_ids], "purge": purge},
            idempotency_key,
        )

    # --- trash: removed memories, restorable for TRASH_RETENTION_DAYS ----------------------------

    @_endpoint
    def write_memories(
        self, items: list[dict[str, Any]], atomic: bool = False, idempotency_key: str | None = None
    ) -> _Call[BatchResult]:
        """Up to 100 personal memories (create bodies) in one request: `{"results": [...]}`."""
        return _keyed_post(
            "/memories/personal/batch", {"items": items, "atomic": atomic}, idempotency_key
        )

    @_endpoint
    def write_team_memories(
        self, items: list[dict[str, Any]], atomic: bool = False, idempotency_key: str | None = None
    ) -> _Call[BatchResult]:
        return _keyed_post(
            "/memories/team/batch", {"items": items, "atomic": atomic}, idempotency_key
        )

    @_endpoint
    def get_memory(self, memory_id: int) -> _Call[MemoryDetail]:
        """One memory (personal or team) by id, with `superseded_by` and `source`."""
        return _get(f"/memories/{int(memory_id)}")

    @_endpoint
    def memory_history(self, memory_id: int) -> _Call[MemoryHistory]:
        """`{"revisions", "supersedes", "superseded_by"}`, revisions oldest first."""
        return _get(f"/memories/{int(memory_id)}/history")

    @_endpoint
    def list_memories(
        self,
        scope: str | None = None,
        agent_id: str | None = None,
        cursor: str | None = None,
        page_size: int = 50,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> _Call[MemoryPage]:
        """One page, newest first: `{"items", "next_cursor"}` (see iter_memories); `run_id`:
        only memories written by that run (session); `filters`: search's filter operators."""
        return _get(
            "/memories",
            params={
                "scope": scope,
                "agent_id": agent_id,
                "cursor": cursor,
                "page_size": page_size,
                "run_id": run_id,
                "filters": json.dumps(filters, separators=(",", ":")) if filters else None,
            },
        )

    @_endpoint
    def list_trash(
        self, agent_id: str | None = None, page: int = 1, page_size: int = 20
    ) -> _Call[TrashPage]:
        return _get(
            "/memories/trash", params={"agent_id": agent_id, "page": page, "page_size": page_size}
        )

    @_endpoint
    def restore_memory(self, memory_id: int) -> _Call[Memory]:
        return _post(f"/memories/trash/{int(memory_id)}/restore")

    @_endpoint
    def erase_memory(self, memory_id: int) -> _Call[None]:
        """Erases a trashed memory now (an erasure request)."""
        return _delete(f"/memories/trash/{int(memory_id)}")

    @_endpoint
    def write_team_memory(
        self,
        /,
        content: str,
        importance: float = 0.5,
        *,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> _Call[Memory]:
        return _keyed_post(
            "/memories/team",
            {"content": content, "importance": importance, **extra},
            idempotency_key,
        )

    @_endpoint
    def search_team(
        self,
        /,
        query: str,
        limit: int = 10,
        min_score: float = 0.3,
        run_id: str | None = None,
        **extra: Any,
    ) -> _Call[list[SearchHit]]:
        body: dict[str, Any] = {"query": query, "limit": limit, "min_score": min_score, **extra}
        if run_id is not None:
            body["run_id"] = run_id
        return _post("/memories/team/search", body, resend=True)

    @_endpoint
    def get_team_recent(self, limit: int = 10) -> _Call[list[Memory]]:
        return _get("/memories/team/recent", params={"limit": limit})

    @_endpoint
    def ingest(
        self,
        agent_id: str,
        messages: Sequence[Mapping[str, Any]],
        run_id: str | None = None,
        infer: bool = True,
        async_: bool = False,
        idempotency_key: str | None = None,
        fact_roles: Sequence[str] | None = None,
    ) -> _Call[IngestResult | JobAccepted]:
        """A conversation's messages (`IngestMessage`: role, content, at?, name?): archived,
        and (`infer`) the facts in the messages of `fact_roles` (the server's default: the
        user's) added, updated or found known. With `async_=True` the server answers
        `{"job_id"}` at once (wait with `wait_for_job`; the job's `result` is the IngestResult).
        `idempotency_key` is sent as the `Idempotency-Key` header: a retry with the same key and
        body gets the first answer and writes nothing (without one, the client makes one per
        call when it may re-send, see `retries`)."""
        body: dict[str, Any] = {"agent_id": agent_id, "messages": [dict(m) for m in messages]}
        if run_id is not None:
            body["run_id"] = run_id
        body["infer"] = infer
        body["async"] = async_
        if fact_roles is not None:
            body["fact_roles"] = list(fact_roles)
        return _keyed_post("/memories/ingest", body, idempotency_key)

    # --- the agent profile (exact fields by key, apart from the memories) --------------------

    @_endpoint
    def get_profile(self, agent_id: str) -> _Call[Profile]:
        return _get(f"/profile/{quote(agent_id, safe='')}")

    @_endpoint
    def set_profile(self, agent_id: str, fields: Mapping[str, str]) -> _Call[ProfileSetResult]:
        """Overwrites the keys given (the others stay); one revision per changed key."""
        return _put(f"/profile/{quote(agent_id, safe='')}", {"fields": dict(fields)})

    @_endpoint
    def delete_profile_field(self, agent_id: str, key: str) -> _Call[None]:
        return _delete(f"/profile/{quote(agent_id, safe='')}/{quote(key, safe='')}")

    @_endpoint
    def profile_history(self, agent_id: str, limit: int = 50) -> _Call[ProfileHistory]:
        return _get(f"/profile/{quote(agent_id, safe='')}/history", params={"limit": limit})

    # --- working memory -----------------------------------------------------------------------

    @_endpoint
    def write_working(
        self, agent_id: str, content: str, ttl: int | None = None, run_id: str = ""
    ) -> _Call[WorkingItem]:
        body: dict[str, Any] = {"agent_id": agent_id, "content": content}
        if ttl is not None:
            body["ttl"] = ttl
        if run_id:
            body["run_id"] = run_id
        return _post("/memories/working", body)

    @_endpoint
    def get_working(self, agent_id: str, limit: int = 50) -> _Call[list[WorkingItem]]:
        return _get(f"/memories/working/{quote(agent_id, safe='')}", params={"limit": limit})

    @_endpoint
    def clear_working(self, agent_id: str) -> _Call[WorkingCleared]:
        return _delete(f"/memories/working/{quote(agent_id, safe='')}")

    # --- lifecycle (the original client's method names) -------------------------------------

    @_endpoint
    def compress(self, agent_id: str, target_count: int = 5) -> _Call[CompressResult]:
        return _post("/lifecycle/compress", {"agent_id": agent_id, "target_count": target_count})

    @_endpoint
    def cleanup(
        self, /, max_age_days: int = 90, min_importance: float = 0.2, **extra: Any
    ) -> _Call[CleanupResult]:
        return _post(
            "/lifecycle/cleanup",
            {"max_age_days": max_age_days, "min_importance": min_importance, **extra},
        )

    @_endpoint
    def extract_facts(
        self, agent_id: str, max_memories: int = 20, delete_after: bool = False
    ) -> _Call[ExtractFactsResult]:
        return _post(
            "/lifecycle/extract-facts",
            {"agent_id": agent_id, "max_memories": max_memories, "delete_after": delete_after},
        )

    @_endpoint
    def aggregate_scenarios(self, agent_id: str, max_memories: int = 50) -> _Call[ScenariosResult]:
        return _post(
            "/lifecycle/aggregate-scenes", {"agent_id": agent_id, "max_memories": max_memories}
        )

    @_endpoint
    def get_scenarios(self, agent_id: str) -> _Call[list[Scenario]]:
        return _get(f"/lifecycle/scenarios/{quote(agent_id, safe='')}")

    @_endpoint
    def generate_persona(self, agent_id: str, max_items: int = 30) -> _Call[GeneratedPersona]:
        return _post("/lifecycle/generate-persona", {"agent_id": agent_id, "max_items": max_items})

    @_endpoint
    def get_persona(self, agent_id: str) -> _Call[Persona]:
        return _get(f"/lifecycle/persona/{quote(agent_id, safe='')}")

    @_endpoint
    def set_pipeline_config(self, /, **kwargs: Any) -> _Call[PipelineConfig]:
        return _post("/lifecycle/auto-config", kwargs)

    @_endpoint
    def get_pipeline_config(self) -> _Call[PipelineConfig]:
        return _get("/lifecycle/auto-config")

    @_endpoint
    def auto_run(self) -> _Call[AutoRunResult]:
        return _post("/lifecycle/auto-run", {})

    # --- episodic and procedural memory --------------------------------------------------------

    @_endpoint
    def record_episode(
        self,
        agent_id: str,
        task: str,
        outcome: Literal["success", "failure"],
        steps: list[str] | None = None,
        lesson: str = "",
        importance: float = 0.5,
        run_id: str | None = None,
    ) -> _Call[Episode]:
        """Keeps a past case, to be found again by a similar task (`search_episodes`)."""
        body: dict[str, Any] = {
            "agent_id": agent_id,
            "task": task,
            "outcome": outcome,
            "steps": steps or [],
            "lesson": lesson,
            "importance": importance,
        }
        if run_id:
            body["run_id"] = run_id
        return _post("/episodes", body)

    @_endpoint
    def search_episodes(
        self,
        agent_id: str,
        task: str,
        outcome: Literal["success", "failure"] | None = None,
        limit: int = 5,
        min_score: float = 0.3,
    ) -> _Call[list[Episode]]:
        """Episodes of tasks like `task`, best first (few-shot examples)."""
        body: dict[str, Any] = {
            "agent_id": agent_id,
            "task": task,
            "limit": limit,
            "min_score": min_score,
        }
        if outcome:
            body["outcome"] = outcome
        return _post("/episodes/search", body)

    @_endpoint
    def list_procedures(self, agent_id: str, status: str | None = None) -> _Call[ProcedureList]:
        """The agent's rules, oldest first; `status="proposed"`: the proposals waiting."""
        return _get(f"/procedures/{quote(agent_id, safe='')}", params={"status": status})

    @_endpoint
    def add_procedure(self, agent_id: str, rule: str) -> _Call[Procedure]:
        """The new rule, active; or the agent's rule of the same text (case and spacing aside),
        made active if it was proposed or rejected: adding a rule twice keeps one. A new rule
        past the agent's 200 is refused (`MemoryAPIError`, 400 `VALIDATION_ERROR`)."""
        return _post(f"/procedures/{quote(agent_id, safe='')}", {"rule": rule})

    @_endpoint
    def update_procedure(
        self,
        agent_id: str,
        procedure_id: int,
        rule: str | None = None,
        status: Literal["active", "proposed", "rejected"] | None = None,
    ) -> _Call[Procedure]:
        """Edits a rule, or accepts (`status="active"`) / rejects a proposal. A new text that
        another rule of the agent already says is refused (`MemoryAPIError`, 409 `CONFLICT`)."""
        body = {k: v for k, v in (("rule", rule), ("status", status)) if v is not None}
        return _put(f"/procedures/{quote(agent_id, safe='')}/{int(procedure_id)}", body)

    @_endpoint
    def procedure_history(
        self, agent_id: str, procedure_id: int | None = None, limit: int | None = None
    ) -> _Call[dict[str, Any]]:
        """Who added, reworded, accepted, rejected, removed or restored the agent's rules (or one rule's,
        a removed one's too), newest first: `{"agent_id", "revisions"}`."""
        params = {"procedure_id": procedure_id, "limit": limit}
        return _Call("GET", f"/procedures/{quote(agent_id, safe='')}/history", params=params)

    @_endpoint
    def delete_procedure(self, agent_id: str, procedure_id: int) -> _Call[dict[str, int]]:
        return _delete(f"/procedures/{quote(agent_id, safe='')}/{int(procedure_id)}")

    @_endpoint
    def restore_procedure(self, agent_id: str, procedure_id: int) -> _Call[Procedure]:
        """A removed rule back, with its id and the last text and status its history kept.
        `MemoryAPIError` 404 when the agent never had it, 409 `CONFLICT` when it is not removed
        or another rule of the agent says its text now."""
        return _post(f"/procedures/{quote(agent_id, safe='')}/{int(procedure_id)}/restore")

    @_endpoint
    def consolidate(
        self, agent_id: str, min_fragments: int = 3, max_memories: int = 200
    ) -> _Call[Consolidated]:
        """Fragments about one thing become one fact; the fragments are superseded, kept."""
        return _post(
            "/lifecycle/consolidate",
            {"agent_id": agent_id, "min_fragments": min_fragments, "max_memories": max_memories},
        )

    @_endpoint
    def propose_procedures(self, agent_id: str, min_repeats: int = 3) -> _Call[Proposals]:
        """Rules proposed from feedback the agent's memories repeat (never applied until
        accepted with update_procedure(..., status="active"))."""
        return _post(
            "/lifecycle/propose-procedures", {"agent_id": agent_id, "min_repeats": min_repeats}
        )

    # --- jobs: what an asynchronous request (ingest with async_, export) queued ----------------

    @_endpoint
    def get_job(self, job_id: int) -> _Call[Job]:
        return _job_call(job_id)

    @_flow
    def wait_for_job(self, job_id: int, timeout: float = 60, interval: float = 0.5) -> _Flow[Job]:
        """Polls the job until it is final (succeeded, failed or abandoned) and returns it;
        TimeoutError after `timeout` seconds. An abandoned job is retried by the server as a
        new job (`retry_of` names the abandoned one)."""
        deadline = time.monotonic() + timeout
        while True:
            job: Job = yield _job_call(job_id)
            if job["status"] in JOB_FINAL_STATUSES:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout} s")
            yield _Sleep(min(interval, left))

    # --- export and import (docs/export.md) ---------------------------------------------------

    @_endpoint
    def export(self, agent_id: str | None = None) -> _Call[JobAccepted]:
        """Starts an export (the whole team without agent_id): `{"job_id"}`; wait_for_job, then
        download_export."""
        return _post("/export", {"agent_id": agent_id} if agent_id else {})

    @_endpoint
    def download_export(self, job_id: int) -> _Call[bytes]:
        """The bundle of a succeeded export job, as bytes (gzip of JSON Lines)."""
        return _Call("GET", f"/export/{int(job_id)}", binary=True)

    @_endpoint
    def import_bundle(self, data: bytes, on_conflict: str = "skip") -> _Call[ImportResult]:
        """Imports a bundle into the key's team: `{"imported", "skipped", "reembedded"}`."""
        return _Call("POST", "/import", params={"on_conflict": on_conflict}, raw=data, binary=True)

    @_endpoint
    def import_mem0(
        self,
        listing: bytes | dict[str, Any] | list[dict[str, Any]],
        agent_from: Literal["user_id", "agent_id"] = "user_id",
        default_agent: str | None = None,
        on_conflict: str = "skip",
    ) -> _Call[ImportResult]:
        """Imports mem0's memories (what its `get_all()` returned, or that JSON's bytes) into the
        key's team: each a personal memory of the agent its `agent_from` key names
        (`default_agent` for one without), embedded by this server; one already here is met, not
        written twice. A memory carrying its mem0 `history` (what `history(id)` returned) keeps
        each UPDATE as a revision; the graph's `relations` become the agent's entities and
        relations. `{"imported", "skipped", "reembedded"}`."""
        data = listing if isinstance(listing, bytes) else json.dumps(listing).encode("utf-8")
        params = {
            "from": "mem0",
            "agent_from": agent_from,
            "default_agent": default_agent,
            "on_conflict": on_conflict,
        }
        return _Call(
            "POST", "/import", params=params, raw=data, binary=True, content_type="application/json"
        )

    @_endpoint
    def import_letta(
        self,
        agent_file: bytes | dict[str, Any],
        agent_id: str | None = None,
        on_conflict: str = "skip",
    ) -> _Call[ImportResult]:
        """Imports a Letta agent file (`.af`: its bytes, or the parsed JSON) into the key's team:
        each line of the agents' core-memory blocks a pinned memory (team memories for a block
        agents share), their conversations the agents' archive; `agent_id` renames a file's
        only agent (its Letta name otherwise). `{"imported", "skipped", "reembedded"}`."""
        data = agent_file if isinstance(agent_file, bytes) else json.dumps(agent_file).encode()
        params = {"from": "letta", "agent_id": agent_id, "on_conflict": on_conflict}
        return _Call(
            "POST", "/import", params=params, raw=data, binary=True, content_type="application/json"
        )

    @_endpoint
    def import_zep(
        self,
        export: bytes | dict[str, Any],
        agent_id: str | None = None,
        on_conflict: str = "skip",
    ) -> _Call[ImportResult]:
        """Imports a Zep user's memory (`{"user_id", "nodes", "edges", "threads"}`: what Zep's
        SDK listed, or that JSON's bytes) into the key's team: each edge's fact a memory of the
        agent the user is (`agent_id`, else its Zep user_id; the team's for a shared graph's
        `graph_id`), expired where Zep marks it no longer true; nodes and edges still true the
        agent's entities and relations; the threads' messages its archive.
        `{"imported", "skipped", "reembedded"}`."""
        # default=str: the SDK's models dumped without mode="json" hold datetimes.
        data = export if isinstance(export, bytes) else json.dumps(export, default=str).encode()
        params = {"from": "zep", "agent_id": agent_id, "on_conflict": on_conflict}
        return _Call(
            "POST", "/import", params=params, raw=data, binary=True, content_type="application/json"
        )


class MemoryClient(_Endpoints):
    """The blocking client (requests, one keep-alive session)."""

    def __init__(
        self,
        api_key: str,
        secret: str,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 30.0,
        signature_version: int = 1,
        session: requests.Session | None = None,
        retries: int = 2,
    ) -> None:
        """`retries`: how many times a request that got no answer (connection refused or
        reset, a proxy's 502/503/504) is sent again, signed anew, when that is safe: reads,
        searches, and writes under an Idempotency-Key (made per call). 0 never re-sends."""
        self.api_key = api_key
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.signature_version = signature_version
        self.retries = retries
        self.resends = 0
        # One keep-alive session: no TCP handshake per call.
        self.session = session or requests.Session()

    def _send(self, call: _Call[Any]) -> Any:
        call = self._keyed(call)
        attempt = 0
        while True:
            try:
                return super()._send(call)
            except (requests.ConnectionError, MemoryAPIError) as exc:
                if not (
                    isinstance(exc, requests.ConnectionError) or _no_answer(exc)
                ) or not self._resendable(call, attempt):
                    raise
            time.sleep(_resend_delay(attempt))
            attempt += 1

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        method, url, raw, headers = self._prepare(method, path, body, params, headers)
        response = self.session.request(
            method, url, data=raw or None, headers=headers, timeout=self.timeout
        )
        return self._unwrap(response.status_code, response.headers, response.text)

    def _fetch_unsigned(self, path: str) -> Any:
        response = self.session.get(self.base_url + path, timeout=self.timeout)
        return self._unwrap(response.status_code, response.headers, response.text)

    def _drive(self, plan: _Call[Any] | _Flow[Any]) -> Any:
        if isinstance(plan, _Call):
            return self._send(plan)
        answer = None
        try:
            while True:
                step = plan.send(answer)
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    answer = None
                else:
                    answer = self._send(step)
        except StopIteration as done:
            return done.value

    def request_bytes(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/gzip",
    ) -> Any:
        method, url, body, headers = self._prepare(
            method, path, None, params, raw=raw or b"", content_type=content_type
        )
        response = self.session.request(
            method, url, data=body or None, headers=headers, timeout=self.timeout
        )
        if response.ok and not _is_json(response.headers):
            return response.content
        return self._unwrap(response.status_code, response.headers, response.text)

    def iter_memories(
        self,
        scope: str | None = None,
        agent_id: str | None = None,
        page_size: int = 100,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> Iterator[Memory]:
        """Every memory the key may read, newest first, fetching page after page."""
        cursor = None
        while True:
            page = self.list_memories(
                scope, agent_id, cursor=cursor, page_size=page_size, run_id=run_id, filters=filters
            )
            yield from page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return


class AsyncMemoryClient(_Endpoints):
    """The same methods as `MemoryClient`, awaited (httpx, one keep-alive connection pool):

    async with AsyncMemoryClient(key, secret, base_url=url) as client:
        hits = await client.search("assistant", "沟通偏好")
    """

    def __init__(
        self,
        api_key: str,
        secret: str,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 30.0,
        signature_version: int = 1,
        client: Any = None,
        retries: int = 2,
    ) -> None:
        """`retries`: as for MemoryClient."""
        self.api_key = api_key
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.signature_version = signature_version
        self.retries = retries
        self.resends = 0
        self.client = client or _httpx().AsyncClient(timeout=timeout)

    async def _send(self, call: _Call[Any]) -> Any:
        call = self._keyed(call)
        httpx = _httpx()
        # No answer: the connection failed or closed before a response (not a read timeout).
        no_answer = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectTimeout)
        attempt = 0
        while True:
            try:
                return await super()._send(call)
            except (*no_answer, MemoryAPIError) as exc:
                if not (isinstance(exc, no_answer) or _no_answer(exc)) or not self._resendable(
                    call, attempt
                ):
                    raise
            await asyncio.sleep(_resend_delay(attempt))
            attempt += 1

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        method, url, raw, headers = self._prepare(method, path, body, params, headers)
        response = await self.client.request(
            method, url, content=raw or None, headers=headers, timeout=self.timeout
        )
        return self._unwrap(response.status_code, response.headers, response.text)

    async def _fetch_unsigned(self, path: str) -> Any:
        response = await self.client.get(self.base_url + path, timeout=self.timeout)
        return self._unwrap(response.status_code, response.headers, response.text)

    async def _drive(self, plan: _Call[Any] | _Flow[Any]) -> Any:
        if isinstance(plan, _Call):
            return await self._send(plan)
        answer = None
        try:
            while True:
                step = plan.send(answer)
                if isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                    answer = None
                else:
                    answer = await self._send(step)
        except StopIteration as done:
            return done.value

    async def request_bytes(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/gzip",
    ) -> Any:
        method, url, body, headers = self._prepare(
            method, path, None, params, raw=raw or b"", content_type=content_type
        )
        response = await self.client.request(
            method, url, content=body or None, headers=headers, timeout=self.timeout
        )
        if response.is_success and not _is_json(response.headers):
            return response.content
        return self._unwrap(response.status_code, response.headers, response.text)

    async def iter_memories(
        self,
        scope: str | None = None,
        agent_id: str | None = None,
        page_size: int = 100,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> AsyncIterator[Memory]:
        """Every memory the key may read, newest first: `async for memory in …`."""
        cursor = None
        while True:
            page = await self.list_memories(
                scope, agent_id, cursor=cursor, page_size=page_size, run_id=run_id, filters=filters
            )
            for item in page["items"]:
                yield item
            cursor = page["next_cursor"]
            if not cursor:
                return

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _is_json(headers: Any) -> bool:
    return str(headers.get("Content-Type", "")).startswith("application/json")


def _httpx() -> Any:
    """httpx, or its maintained fork httpx2 (what the OpenAI SDK installs); imported only by the
    async client, so the blocking one still needs nothing but requests."""
    try:
        import httpx2

        return httpx2
    except ImportError:
        import httpx

        return httpx
