"""Long-term, team and working memory endpoints. Thin: validate, call, render."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
from django.conf import settings
from django.core import signing
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import AgentResource, require_agent
from core.api import EnvelopeResponse, validated_body
from core.errors import DomainError, NotFound, ValidationFailed
from core.openapi import api_operation
from core.serializers import (
    FutureDateTimeField,
    JSONObjectField,
    QueryInt,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from core.validators import AGENT_ID, AGENT_ID_MESSAGE
from tenants.apis import principal_of
from tenants.idempotency import IdempotencyKey, Replayed, idempotency_key, idempotent
from tenants.models import Team
from tenants.services import agent_registered
from tenants.usage import KIND_WRITE, usage_record

from . import presenters, purge, selectors, services, tiers
from .filters import FilterError, parse_filters, with_run_id
from .models import (
    Memory,
    MemoryScope,
    MemoryTier,
    ProcedureChange,
    ProcedureStatus,
    ProfileSource,
    RemovedBy,
    RevisionAction,
    SharePermission,
)
from .profile import MAX_FIELDS_PER_WRITE, VALUE_MAX_CHARS, WELL_KNOWN_KEYS
from .retrieval import search
from .selectors import DELETE, READ, WRITE
from .services import Actor
from .working import get_working_store

RECENT_LIMIT = QueryInt("limit", default=20, minimum=1, maximum=100)
WORKING_LIMIT = QueryInt("limit", default=50, minimum=1, maximum=1000)


def _content_field(**kwargs: Any) -> StrictCharField:
    return StrictCharField(
        max_length=settings.MEMORY_MAX_CONTENT_CHARS, trim_whitespace=False, **kwargs
    )


def _validate_content(value: str) -> str:
    if not value.strip():
        raise serializers.ValidationError("Must not be empty.")
    return value


class MemoryFieldsSerializer(serializers.Serializer):
    """The fields a memory and its trash snapshot share."""

    id = serializers.IntegerField()
    team_id = serializers.CharField()
    agent_id = serializers.CharField(allow_null=True)
    scope = serializers.ChoiceField(choices=MemoryScope.values)
    content = serializers.CharField()
    importance = serializers.FloatField()
    category = serializers.CharField()
    metadata = serializers.DictField()
    pinned = serializers.BooleanField()


class MemoryOutputSerializer(MemoryFieldsSerializer):
    """Documentation of the memory object (rendered by presenters.memory_body)."""

    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    last_accessed = serializers.DateTimeField(allow_null=True)
    access_count = serializers.IntegerField()
    tier = serializers.ChoiceField(
        choices=MemoryTier.choices,
        help_text="hot / warm in search; cold only with include_cold (docs/lifecycle.md, Tiers)",
    )
    superseded_by = serializers.IntegerField(
        required=False, help_text="only on a memory replaced by a newer one"
    )
    run_id = serializers.CharField(
        required=False, help_text="only on a memory written with a run (session) id"
    )
    expires_at = serializers.DateTimeField(
        required=False, help_text="only on a memory given an expiry: when it stops being true"
    )
    score = serializers.FloatField(
        required=False, help_text="search only: 0..1, see docs/search.md"
    )
    dedup_skipped = serializers.BooleanField(required=False)
    dedup_score = serializers.FloatField(required=False)
    entities = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="search with include_entities only: the graph entities read from the memory",
    )


class _CreateBase(serializers.Serializer):
    content = _content_field(validators=[_validate_content])
    importance = StrictFloatField(required=False, default=0.5, min_value=0.0, max_value=1.0)
    metadata = JSONObjectField(required=False, default=dict, null_values=True)
    enable_dedup = StrictBooleanField(required=False, default=True)
    dedup_threshold = StrictFloatField(required=False, default=0.85, min_value=0.0, max_value=1.0)
    category = StrictCharField(required=False, default="general", max_length=64)
    pinned = StrictBooleanField(required=False, default=False)
    run_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        validators=[AGENT_ID],
        help_text="the agent's session; search and list can filter on it",
    )
    expires_at = FutureDateTimeField(
        required=False,
        default=None,
        allow_null=True,
        help_text="when the memory stops being true (ISO 8601, in the future; without an "
        "offset, UTC): out of search and listings from then on, then to the trash",
    )


class PersonalCreateInputSerializer(_CreateBase):
    agent_id = StrictCharField(validators=[AGENT_ID])


class TeamCreateInputSerializer(_CreateBase):
    agent_id = StrictCharField(required=False, default="", validators=[AGENT_ID], allow_blank=True)


class _SearchBase(serializers.Serializer):
    query = StrictCharField(
        required=False, default="", allow_blank=True, max_length=4000, trim_whitespace=False
    )
    limit = StrictIntegerField(required=False, default=10, min_value=1, max_value=50)
    min_score = StrictFloatField(required=False, default=0.3, min_value=0.0, max_value=1.0)
    max_chars_per_memory = StrictIntegerField(required=False, default=0, min_value=0)
    max_total_chars = StrictIntegerField(required=False, default=0, min_value=0)
    mode = serializers.ChoiceField(
        choices=["hybrid", "vector", "keyword"], required=False, default="hybrid"
    )
    filters = JSONObjectField(required=False, default=dict, null_values=True)
    run_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        validators=[AGENT_ID],
        help_text="only memories written in this run (session)",
    )
    include_entities = StrictBooleanField(required=False, default=False)
    # Cold memories (memories.tiers) are out of everyday search; a cold one returned here
    # becomes hot again.
    include_cold = StrictBooleanField(required=False, default=False)

    def validate_filters(self, value: dict[str, Any]) -> dict[str, Any]:
        # Legacy keys and operators ($eq … $lte, $and / $or): memories/filters.py.
        try:
            return parse_filters(value)
        except FilterError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["filters"] = with_run_id(attrs.get("filters") or {}, attrs.get("run_id", ""))
        return attrs


class PersonalSearchInputSerializer(_SearchBase):
    agent_id = StrictCharField(validators=[AGENT_ID])
    include_shared = StrictBooleanField(required=False, default=False)
    include_team = StrictBooleanField(required=False, default=False)
    # The agent's profile fields the query is about, first in the answer (search.profile_search).
    include_profile = StrictBooleanField(required=False, default=False)


class TeamSearchInputSerializer(_SearchBase):
    agent_id = StrictCharField(required=False, default="", validators=[AGENT_ID], allow_blank=True)


class UpdateInputSerializer(serializers.Serializer):
    content = _content_field(required=False, validators=[_validate_content])
    importance = StrictFloatField(required=False, min_value=0.0, max_value=1.0)
    metadata = JSONObjectField(required=False, null_values=True)
    category = StrictCharField(required=False, max_length=64)
    pinned = StrictBooleanField(required=False)
    expires_at = FutureDateTimeField(
        required=False, allow_null=True, help_text="a new expiry; null: never expires"
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                "Give at least one of content, importance, metadata, category, pinned, expires_at."
            )
        return attrs


class ShareInputSerializer(serializers.Serializer):
    agent_ids = serializers.ListField(
        child=StrictCharField(validators=[AGENT_ID]), min_length=1, max_length=100
    )
    permission = serializers.ChoiceField(
        choices=SharePermission.values, required=False, default=SharePermission.READ
    )


class ShareSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    permission = serializers.ChoiceField(choices=SharePermission.values)


class SharesOutputSerializer(serializers.Serializer):
    memory_id = serializers.IntegerField()
    shares = ShareSerializer(many=True)


class UnshareInputSerializer(serializers.Serializer):
    agent_ids = serializers.ListField(
        child=StrictCharField(validators=[AGENT_ID]), required=False, max_length=100
    )


IDEMPOTENCY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    str,
    location=OpenApiParameter.HEADER,
    description="a retry with the same key and body within IDEMPOTENCY_TTL_HOURS (24 h) gets "
    "the first answer again (header `Idempotent-Replayed: true`) and writes nothing; the same "
    "key with another body is a 409",
)


def request_idempotency_key(request: Request, endpoint: str) -> IdempotencyKey | None:
    """The request's `Idempotency-Key` for `endpoint`, fingerprinted by its raw body."""
    return idempotency_key(
        request.headers.get("Idempotency-Key"), endpoint=endpoint, body=request.body
    )


def replayed_response(replayed: Replayed) -> Response:
    """The first answer to a request sent again with its Idempotency-Key."""
    return Response(
        replayed.body, status=replayed.status_code, headers={"Idempotent-Replayed": "true"}
    )


def _create(
    request: Request, scope: str, input_serializer: type[serializers.Serializer]
) -> Response:
    principal = principal_of(request)
    data = validated_body(request, input_serializer)
    agent_id = _writer(principal.agent_id, scope, data.get("agent_id", ""))
    team = principal.team
    try:
        status, body = create_validated(
            team=team,
            scope=scope,
            agent_id=agent_id,
            data=data,
            key=request_idempotency_key(request, f"memories/{scope}"),
        )
    except Replayed as replayed:
        return replayed_response(replayed)
    return Response(body, status=status)


def create_validated(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    data: dict[str, Any],
    key: IdempotencyKey | None = None,
) -> tuple[int, dict[str, Any]]:
    """One write of a validated create body (Personal/TeamCreateInputSerializer) for
    `agent_id`, counted in the usage: (201 and the memory, or 200 and the known one with
    `dedup_skipped`). With `key`, run once: a request sent again raises Replayed with the first
    answer, and is not counted again. The MCP tool writes through here too."""

    def write(vector: np.ndarray) -> tuple[int, dict[str, Any]]:
        memory, hit = write_validated(
            team=team, scope=scope, agent_id=agent_id, data=data, vector=vector
        )
        return (200 if hit is not None else 201), _written_body(memory, hit)

    answered = idempotent(
        team=team,
        key=key,
        prepare=lambda: services.memory_write_embed(
            team=team,
            scope=scope,
            agent_id=agent_id,
            content=data["content"],
            enable_dedup=data["enable_dedup"],
        ),
        answer=write,
    )
    usage_record(team=team, agent_id=agent_id, kind=KIND_WRITE)
    return answered


# The create body's fields that memory_create takes as they are.
CREATE_FIELDS = (
    "content",
    "importance",
    "category",
    "metadata",
    "enable_dedup",
    "dedup_threshold",
    "pinned",
    "run_id",
    "expires_at",
)


def write_validated(
    *,
    team: Team,
    scope: str,
    agent_id: str,
    data: dict[str, Any],
    vector: np.ndarray | None = None,
) -> tuple[Memory, Any]:
    """memory_create for a validated create body (Personal/TeamCreateInputSerializer).
    `vector`: the content's embedding, when already made."""
    fields = {name: data[name] for name in CREATE_FIELDS}
    return services.memory_create(
        team=team, scope=scope, agent_id=agent_id, vector=vector, **fields
    )


def _writer(acting_agent: str | None, scope: str, agent_id: str) -> str:
    """The agent a write is recorded for; raises when an agent-scoped key may not write it."""
    if scope == MemoryScope.PERSONAL:
        require_agent(AgentResource.PERSONAL_MEMORIES, acting_agent=acting_agent, agent_id=agent_id)
    elif acting_agent is not None:
        # An agent-scoped key writes team memories as itself.
        if agent_id and agent_id != acting_agent:
            require_agent(
                AgentResource.PERSONAL_MEMORIES, acting_agent=acting_agent, agent_id=agent_id
            )
        agent_id = acting_agent
    return agent_id


def _written_body(memory: Memory, hit: Any) -> dict[str, Any]:
    body = presenters.memory_body(memory)
    if hit is not None:
        body.update(dedup_skipped=True, dedup_score=round(hit.score, 4))
    return body


# The search answers' envelope field next to `data` (docs/search.md, "Recall timeout").
PARTIAL_ENVELOPE = {
    "partial": {
        "type": "boolean",
        "enum": [True],
        "description": "present when the team's recall timeout cut the search short: the "
        "results are what was ready in time",
    }
}


def search_results(results: search.SearchResults, body: list[dict[str, Any]]) -> Response:
    """A search's answer: `body` in `data`, `"partial": true` next to it when cut short (a
    partial answer is a success, never an error)."""
    return EnvelopeResponse(body, envelope={"partial": True} if results.partial else {})


def search_query(
    *, team: Team, scope: str, agent_id: str, data: dict[str, Any]
) -> search.SearchQuery:
    """The SearchQuery a validated search body (Personal/TeamSearchInputSerializer) asks for,
    bounded by the team's recall timeout; the MCP tool builds its query here too."""
    return search.SearchQuery(
        team=team,
        scope=scope,
        agent_id=agent_id,
        text=data["query"],
        limit=data["limit"],
        min_score=data["min_score"],
        max_chars_per_memory=data["max_chars_per_memory"],
        max_total_chars=data["max_total_chars"],
        mode=data["mode"],
        filters=data["filters"],
        include_shared=data.get("include_shared", False),
        include_team=data.get("include_team", False),
        include_cold=data.get("include_cold", False),
        timeout_ms=search.recall_timeout_ms(team),
    )


def _search(
    request: Request, scope: str, input_serializer: type[serializers.Serializer]
) -> Response:
    principal = principal_of(request)
    data = validated_body(request, input_serializer)
    agent_id = data.get("agent_id", "")
    if scope == MemoryScope.PERSONAL:
        require_agent(
            AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
        )
    query = search_query(team=principal.team, scope=scope, agent_id=agent_id, data=data)
    hits = services.memory_recall(
        query=query, acting_agent=principal.agent_id, include_entities=data["include_entities"]
    )
    body = [presenters.search_hit_body(hit) for hit in hits]
    if data.get("include_profile") and query.text.strip():
        found = search.profile_search(
            team=principal.team, agent_id=agent_id, text=query.text, min_score=query.min_score
        )
        body = [presenters.profile_hit_body(h.field, h.score) for h in found] + body
    return search_results(hits, body)


def _recent(request: Request, scope: str, agent_id: str) -> Response:
    principal = principal_of(request)
    if scope == MemoryScope.PERSONAL:
        check_agent_id(agent_id)
        require_agent(
            AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
        )
    limit = RECENT_LIMIT.parse(request.query_params)
    hits = services.memory_recall(
        query=search.SearchQuery(team=principal.team, scope=scope, agent_id=agent_id, limit=limit),
        count_usage=False,
    )
    return Response([presenters.search_hit_body(hit) for hit in hits])


def check_agent_id(agent_id: str, *, field: str = "agent_id") -> None:
    try:
        AGENT_ID(agent_id)
    except Exception:
        raise ValidationFailed({field: [AGENT_ID_MESSAGE]}, f"{field}: invalid") from None


def _update(request: Request, scope: str, memory_id: int) -> Response:
    principal = principal_of(request)
    data = validated_body(request, UpdateInputSerializer)
    memory = selectors.memory_get(team=principal.team, memory_id=memory_id, scope=scope)
    selectors.check_memory_access(memory=memory, acting_agent=principal.agent_id, action=WRITE)
    memory = services.memory_update(memory=memory, actor=Actor.for_key(principal.api_key), **data)
    return Response(presenters.memory_body(memory))


def _delete(request: Request, scope: str, memory_id: int) -> Response:
    principal = principal_of(request)
    skip_trash = _purge_param(request)
    memory = selectors.memory_get(team=principal.team, memory_id=memory_id, scope=scope)
    selectors.check_memory_access(memory=memory, acting_agent=principal.agent_id, action=DELETE)
    if skip_trash:
        services.memory_delete(memory=memory)
    else:
        trashed = purge.memories_trash(
            team=principal.team,
            memories=[memory],
            removed_by="api",
            reason=f"deleted through the API by {Actor.for_key(principal.api_key).label}",
        )
        if not trashed:  # another request removed it after it was read: as a moment later
            raise NotFound("memory")
    return Response(None)


PURGE_PARAM = OpenApiParameter(
    "purge",
    bool,
    description="true: erase at once instead of moving the memory to the trash (default false)",
)


def _purge_param(request: Request) -> bool:
    value = request.query_params.get("purge", "")
    if value.lower() in ("", "false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise ValidationFailed({"purge": ["Must be true or false."]}, "purge: invalid")


DELETE_DESCRIPTION = (
    "The memory goes to the trash (`GET /memories/trash`), restorable with the same id for "
    "TRASH_RETENTION_DAYS days; `?purge=true` erases it at once instead."
)


class _MemoryCreateApi(APIView):
    # POST of a memory of `scope`, the body read by `input_serializer`; the OpenAPI operation is
    # made from those. (Comments, not a docstring: drf-spectacular would give a docstring to
    # every subclass as its operation's description.)
    scope: ClassVar[MemoryScope]
    input_serializer: ClassVar[type[serializers.Serializer]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        operation = api_operation(
            request=cls.input_serializer,
            response=MemoryOutputSerializer,
            statuses=(201, 200),
            errors=(403, 409),
            parameters=[IDEMPOTENCY_PARAMETER],
            summary=f"Write a {cls.scope.value} memory (201; a duplicate: 200 + dedup_skipped)",
        )
        extend_schema_view(post=operation)(cls)

    def post(self, request: Request) -> Response:
        return _create(request, self.scope, self.input_serializer)


MAX_BATCH = 100


class BatchInputSerializer(serializers.Serializer):
    items = serializers.ListField(
        child=serializers.JSONField(),
        min_length=1,
        max_length=MAX_BATCH,
        help_text="create bodies, as for one write (at most 100)",
    )
    atomic = StrictBooleanField(
        required=False, default=False, help_text="all or nothing: any refused item writes none"
    )


class BatchResultSerializer(serializers.Serializer):
    status = serializers.IntegerField(help_text="201 written, 200 duplicate, 400/403 refused")
    memory = MemoryOutputSerializer(required=False)
    dedup_skipped = serializers.BooleanField(required=False)
    error = serializers.CharField(required=False)
    details = serializers.DictField(required=False)


class BatchOutputSerializer(serializers.Serializer):
    results = BatchResultSerializer(many=True, help_text="in the order of the items")


class _MemoryBatchApi(APIView):
    # POST of up to 100 memories of `scope` in one request, documented like _MemoryCreateApi.
    scope: ClassVar[MemoryScope]
    input_serializer: ClassVar[type[serializers.Serializer]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        operation = api_operation(
            request=BatchInputSerializer,
            response=BatchOutputSerializer,
            errors=(409,),
            parameters=[IDEMPOTENCY_PARAMETER],
            summary=f"Write up to {MAX_BATCH} {cls.scope.value} memories in one request",
            description="One embedding call for the batch; each item is deduplicated against "
            "what is stored and against the batch's earlier items. Results come in input order. "
            "Without `atomic` a refused item (400 / 403) is reported and the others are written; "
            "with `atomic: true` any refused item makes the request a 400 naming the items, and "
            "nothing is written.",
        )
        extend_schema_view(post=operation)(cls)

    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, BatchInputSerializer)
        results: list[dict[str, Any] | None] = []
        items: list[services.BatchItem] = []
        refused: dict[str, list[str]] = {}
        for index, raw in enumerate(data["items"]):
            try:
                if not isinstance(raw, dict):
                    raise ValidationFailed({"item": ["must be an object"]}, "item: an object")
                fields = self.input_serializer(data=raw)
                if not fields.is_valid():
                    raise ValidationFailed(fields.errors, "invalid item")
                item = dict(fields.validated_data)
                item["agent_id"] = _writer(principal.agent_id, self.scope, item.get("agent_id", ""))
                items.append(services.BatchItem(**item))
                results.append(None)  # filled in once written
            except DomainError as exc:
                for field, errors in (exc.details or {"": [exc.message]}).items():
                    name = f"items[{index}]" + (f".{field}" if field else "")
                    refused[name] = (
                        [str(e) for e in errors] if isinstance(errors, list) else [str(errors)]
                    )
                results.append(
                    {"status": exc.status, "error": exc.message, "details": exc.details or {}}
                )
        if refused and data["atomic"]:
            raise ValidationFailed(refused, "atomic batch: some items were refused, none written")
        team, scope = principal.team, self.scope

        def write(vectors: np.ndarray) -> tuple[int, dict[str, Any]]:
            written = services.memories_create_batch(
                team=team, scope=scope, items=items, atomic=data["atomic"], vectors=vectors
            )
            done = iter(written)
            for index, slot in enumerate(results):
                if slot is None:
                    memory, hit = next(done)
                    results[index] = {
                        "status": 200 if hit is not None else 201,
                        "memory": _written_body(memory, hit),
                        **({"dedup_skipped": True} if hit is not None else {}),
                    }
            return 200, {"results": results}

        try:
            _, body = idempotent(
                team=team,
                key=request_idempotency_key(request, f"memories/{scope}/batch"),
                prepare=lambda: services.batch_write_prepare(team=team, scope=scope, items=items),
                answer=write,
            )
        except Replayed as replayed:
            return replayed_response(replayed)
        for accepted in items:
            usage_record(team=team, agent_id=accepted.agent_id, kind=KIND_WRITE)
        return Response(body)


class PersonalBatchApi(_MemoryBatchApi):
    scope = MemoryScope.PERSONAL
    input_serializer = PersonalCreateInputSerializer


class TeamBatchApi(_MemoryBatchApi):
    scope = MemoryScope.TEAM
    input_serializer = TeamCreateInputSerializer


class BatchDeleteInputSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=MAX_BATCH,
        help_text="the memories to delete, each listed once (at most 100)",
    )
    purge = StrictBooleanField(
        required=False,
        default=False,
        help_text="true: erase them at once instead of moving them to the trash",
    )

    def validate_ids(self, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise serializers.ValidationError("An id is listed more than once.")
        return value


class BatchDeleteResultSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.IntegerField(
        help_text="200 removed, 403 not the key's to delete, 404 no such memory in this scope"
    )
    error = serializers.CharField(required=False)


class BatchDeleteOutputSerializer(serializers.Serializer):
    results = BatchDeleteResultSerializer(many=True, help_text="in the order of the ids")
    removed = serializers.IntegerField(help_text="how many were removed (the 200s)")


class _MemoryBatchDeleteApi(APIView):
    # POST of up to 100 ids of `scope` to delete, each as its own DELETE would.
    scope: ClassVar[MemoryScope]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        operation = api_operation(
            request=BatchDeleteInputSerializer,
            response=BatchDeleteOutputSerializer,
            parameters=[IDEMPOTENCY_PARAMETER],
            summary=f"Delete up to {MAX_BATCH} {cls.scope.value} memories in one request",
            description="Each id is deleted as its own DELETE would be: to the trash, "
            "restorable, or erased at once with `purge: true`. Results come in the order of the "
            "ids; an id that is not a memory of this scope of the key's team is a 404 there, "
            "one an agent-scoped key may not delete a 403, and the others are still removed.",
        )
        extend_schema_view(post=operation)(cls)

    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, BatchDeleteInputSerializer)
        try:
            body = batch_delete_validated(
                team=principal.team,
                scope=self.scope,
                acting_agent=principal.agent_id,
                data=data,
                reason=f"deleted through the API by {Actor.for_key(principal.api_key).label}",
                key=request_idempotency_key(request, f"memories/{self.scope}/batch/delete"),
            )
        except Replayed as replayed:
            return replayed_response(replayed)
        return Response(body)


def batch_delete_validated(
    *,
    team: Team,
    scope: MemoryScope | None,
    acting_agent: str | None,
    data: dict[str, Any],
    reason: str,
    key: IdempotencyKey | None = None,
) -> dict[str, Any]:
    """A validated batch delete (BatchDeleteInputSerializer) of the team's `scope` (None: either,
    as MCP's memory_forget_many) -> `{"results": [...], "removed": n}`. Each id is removed as its
    own DELETE would be; the refused ones (404, 403) are reported and the others removed. With
    `key`, run once: the removals and the answer commit together (tenants.idempotency), and a
    request sent again raises Replayed with that answer."""

    def answer(_: None) -> tuple[int, dict[str, Any]]:
        return 200, _batch_delete(team, scope, acting_agent, data, reason)

    return idempotent(team=team, key=key, prepare=lambda: None, answer=answer)[1]


def _batch_delete(
    team: Team,
    scope: MemoryScope | None,
    acting_agent: str | None,
    data: dict[str, Any],
    reason: str,
) -> dict[str, Any]:
    ids: list[int] = data["ids"]
    found = selectors.memories_of_scope(team=team, scope=scope, memory_ids=ids)
    refused: dict[int, DomainError] = {}
    allowed: list[Memory] = []
    for memory_id in ids:
        memory = found.get(memory_id)
        try:
            if memory is None:
                raise NotFound("memory")
            selectors.check_memory_access(memory=memory, acting_agent=acting_agent, action=DELETE)
        except DomainError as exc:
            refused[memory_id] = exc
            continue
        allowed.append(memory)
    removed = set(
        purge.memories_remove(team=team, memories=allowed, erase=data["purge"], reason=reason)
    )
    results: list[dict[str, Any]] = []
    for memory_id in ids:
        if memory_id in removed:
            results.append({"id": memory_id, "status": 200})
            continue
        # Refused, or removed by another request after it was read: as a moment later.
        error = refused.get(memory_id) or NotFound("memory")
        results.append({"id": memory_id, "status": error.status, "error": error.message})
    return {"results": results, "removed": len(removed)}


class BatchUpdateItemSerializer(UpdateInputSerializer):
    id = StrictIntegerField(min_value=1, max_value=2**63 - 1)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        super().validate({k: v for k, v in attrs.items() if k != "id"})
        return attrs


class BatchUpdateInputSerializer(serializers.Serializer):
    items = serializers.ListField(
        child=serializers.JSONField(),
        min_length=1,
        max_length=MAX_BATCH,
        help_text='updates, each `{"id", …}` with the fields of one PUT (at most 100)',
    )


class BatchUpdateResultSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="null when the item had no valid id")
    status = serializers.IntegerField(
        help_text="200 updated, 400 refused item, 403 not the key's to change, 404 no such memory"
    )
    memory = MemoryOutputSerializer(required=False)
    error = serializers.CharField(required=False)
    details = serializers.DictField(required=False)


class BatchUpdateOutputSerializer(serializers.Serializer):
    results = BatchUpdateResultSerializer(many=True, help_text="in the order of the items")
    updated = serializers.IntegerField(help_text="how many were updated (the 200s)")


def _refusal(memory_id: int | None, exc: DomainError) -> dict[str, Any]:
    return {
        "id": memory_id,
        "status": exc.status,
        "error": exc.message,
        **({"details": exc.details} if exc.details else {}),
    }


class _MemoryBatchUpdateApi(APIView):
    # POST of up to 100 updates of `scope`, each as its own PUT would.
    scope: ClassVar[MemoryScope]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        operation = api_operation(
            request=BatchUpdateInputSerializer,
            response=BatchUpdateOutputSerializer,
            parameters=[IDEMPOTENCY_PARAMETER],
            summary=f"Update up to {MAX_BATCH} {cls.scope.value} memories in one request",
            description="Each item is applied as its own PUT would be (a revision each, new text "
            "re-embedded, the new texts in one embedding call). Results come in the order of "
            "the items; a refused item (400, 403, 404) is reported and the others are applied.",
        )
        extend_schema_view(post=operation)(cls)

    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, BatchUpdateInputSerializer)
        try:
            body = batch_update_validated(
                team=principal.team,
                scope=self.scope,
                acting_agent=principal.agent_id,
                items=data["items"],
                actor=Actor.for_key(principal.api_key),
                key=request_idempotency_key(request, f"memories/{self.scope}/batch/update"),
            )
        except Replayed as replayed:
            return replayed_response(replayed)
        return Response(body)


# A batch update checked: a result for each refused item (None for the others), and for each
# accepted one (its index, the memory, the fields to change).
_UpdatePlan = tuple[list[dict[str, Any] | None], list[tuple[int, Memory, dict[str, Any]]]]


def batch_update_validated(
    *,
    team: Team,
    scope: MemoryScope | None,
    acting_agent: str | None,
    items: list[Any],
    actor: Actor,
    key: IdempotencyKey | None = None,
) -> dict[str, Any]:
    """A batch update's items (each still raw JSON) of the team's `scope` (None: either, as
    MCP's memory_update_many) -> `{"results": [...], "updated": n}`. Each item is checked with
    BatchUpdateItemSerializer and applied as its own PUT would be; a refused one (400, 403, 404)
    is reported and the others applied. An id listed twice refuses them all (ValidationFailed).
    With `key`, run once: the updates and the answer commit together (tenants.idempotency), and
    a request sent again raises Replayed with that answer."""

    def prepare() -> _UpdatePlan:
        results, updates = _batch_update_plan(team, scope, acting_agent, items)
        services.memories_update_prepare(updates=[(m, f) for _, m, f in updates])
        return results, updates

    def answer(plan: _UpdatePlan) -> tuple[int, dict[str, Any]]:
        results, updates = plan
        # Applied in id order, as every path that locks several memories takes them: under a
        # key they are all locked until the answer commits.
        updates = sorted(updates, key=lambda u: u[1].pk)
        outcomes = services.memories_update_each(
            updates=[(m, f) for _, m, f in updates], actor=actor
        )
        for (index, _, _), outcome in zip(updates, outcomes, strict=True):
            results[index] = (
                _refusal(_id_of(items[index]), outcome)
                if isinstance(outcome, DomainError)
                else {"id": outcome.pk, "status": 200, "memory": presenters.memory_body(outcome)}
            )
        updated = sum(1 for r in results if r is not None and r["status"] == 200)
        return 200, {"results": results, "updated": updated}

    return idempotent(team=team, key=key, prepare=prepare, answer=answer)[1]


def _id_of(raw: Any) -> int | None:
    """An item's id, when it gave one that is an integer."""
    raw_id = raw.get("id") if isinstance(raw, dict) else None
    return raw_id if type(raw_id) is int else None


def _batch_update_plan(
    team: Team, scope: MemoryScope | None, acting_agent: str | None, items: list[Any]
) -> _UpdatePlan:
    """The items checked: a result for each refused one (None for the others) and, for each
    accepted one, `(its index, the memory, the fields to change)`."""
    parsed: list[dict[str, Any] | DomainError] = []
    given: list[int | None] = []  # each item's id, when it is one
    for raw in items:
        given.append(_id_of(raw))
        if not isinstance(raw, dict):
            parsed.append(ValidationFailed({"item": ["must be an object"]}, "item: an object"))
            continue
        checked = BatchUpdateItemSerializer(data=raw)
        parsed.append(
            dict(checked.validated_data)
            if checked.is_valid()
            else ValidationFailed(checked.errors, "invalid item")
        )
    seen: dict[int, int] = {}
    for index, item in enumerate(parsed):
        if isinstance(item, dict) and seen.setdefault(item["id"], index) != index:
            raise ValidationFailed(
                {f"items[{index}].id": ["This id is listed more than once."]},
                "an id is listed more than once",
            )
    found = selectors.memories_of_scope(team=team, scope=scope, memory_ids=list(seen))
    results: list[dict[str, Any] | None] = []
    updates: list[tuple[int, Memory, dict[str, Any]]] = []
    for index, (memory_id, item) in enumerate(zip(given, parsed, strict=True)):
        try:
            if isinstance(item, DomainError):
                raise item
            memory = found.get(item["id"])
            if memory is None:
                raise NotFound("memory")
            selectors.check_memory_access(memory=memory, acting_agent=acting_agent, action=WRITE)
        except DomainError as exc:
            results.append(_refusal(memory_id, exc))
            continue
        fields = {k: v for k, v in item.items() if k != "id"}
        updates.append((index, memory, fields))
        results.append(None)  # filled in once applied
    return results, updates


class PersonalBatchUpdateApi(_MemoryBatchUpdateApi):
    scope = MemoryScope.PERSONAL


class TeamBatchUpdateApi(_MemoryBatchUpdateApi):
    scope = MemoryScope.TEAM


class PersonalBatchDeleteApi(_MemoryBatchDeleteApi):
    scope = MemoryScope.PERSONAL


class TeamBatchDeleteApi(_MemoryBatchDeleteApi):
    scope = MemoryScope.TEAM


class _MemoryDetailApi(APIView):
    # PUT and DELETE of one memory of `scope`, documented like _MemoryCreateApi.
    scope: ClassVar[MemoryScope]
    update_summary: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        extend_schema_view(
            put=api_operation(
                request=UpdateInputSerializer,
                response=MemoryOutputSerializer,
                errors=(403, 404),
                summary=cls.update_summary,
            ),
            delete=api_operation(
                parameters=[PURGE_PARAM],
                errors=(403, 404),
                summary=f"Delete a {cls.scope.value} memory (to the trash; ?purge=true: at once)",
                description=DELETE_DESCRIPTION,
            ),
        )(cls)

    def put(self, request: Request, memory_id: int) -> Response:
        return _update(request, self.scope, memory_id)

    def delete(self, request: Request, memory_id: int) -> Response:
        return _delete(request, self.scope, memory_id)


class PersonalCreateApi(_MemoryCreateApi):
    scope = MemoryScope.PERSONAL
    input_serializer = PersonalCreateInputSerializer


class ProfileHitSerializer(serializers.Serializer):
    """Documentation of a profile field in a search answer (presenters.profile_hit_body)."""

    kind = serializers.CharField(help_text='"profile" (memories have no `kind`)')
    id = serializers.IntegerField(allow_null=True, help_text="always null: not a memory")
    team_id = serializers.CharField()
    agent_id = serializers.CharField()
    scope = serializers.CharField(help_text='"profile"')
    key = serializers.CharField()
    value = serializers.CharField()
    content = serializers.CharField(help_text='"key: value"')
    # A field named "source" (the stubs see Field.source).
    source = serializers.CharField(help_text="who set it: api, extraction, ingest…")  # type: ignore[assignment]
    updated_at = serializers.DateTimeField()
    score = serializers.FloatField()


class PersonalSearchApi(APIView):
    @api_operation(
        request=PersonalSearchInputSerializer,
        response=PolymorphicProxySerializer(
            component_name="PersonalSearchResult",
            serializers=[MemoryOutputSerializer, ProfileHitSerializer],
            resource_type_field_name=None,
            many=True,
        ),
        errors=(403,),
        envelope=PARTIAL_ENVELOPE,
        summary="Hybrid search of an agent's personal memories",
    )
    def post(self, request: Request) -> Response:
        return _search(request, MemoryScope.PERSONAL, PersonalSearchInputSerializer)


class PersonalRecentApi(APIView):
    @api_operation(
        parameters=[RECENT_LIMIT.parameter],
        response=MemoryOutputSerializer(many=True),
        errors=(403,),
        summary="Newest personal memories",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        return _recent(request, MemoryScope.PERSONAL, agent_id)


class PersonalDetailApi(_MemoryDetailApi):
    scope = MemoryScope.PERSONAL
    update_summary = "Update a personal memory (content change re-embeds)"


class PersonalShareApi(APIView):
    @api_operation(
        request=ShareInputSerializer,
        response=SharesOutputSerializer,
        errors=(403, 404),
        summary="Share a personal memory with other agents of the team",
    )
    def post(self, request: Request, memory_id: int) -> Response:
        data = validated_body(request, ShareInputSerializer)
        memory = _owned_personal_memory(request, memory_id)
        services.memory_share(
            memory=memory, agent_ids=data["agent_ids"], permission=data["permission"]
        )
        return Response(presenters.shares_body(memory, selectors.memory_shares(memory=memory)))

    @api_operation(
        response=SharesOutputSerializer,
        errors=(400, 403, 404),
        summary="Remove shares (all, or of the given agents)",
        description='An optional JSON body `{"agent_ids": [...]}` removes only those agents\' '
        "shares; without one, all. A v1 signature does not cover the body of a DELETE; v2 does.",
    )
    def delete(self, request: Request, memory_id: int) -> Response:
        data = validated_body(request, UnshareInputSerializer)
        memory = _owned_personal_memory(request, memory_id)
        services.memory_unshare(memory=memory, agent_ids=data.get("agent_ids"))
        return Response(presenters.shares_body(memory, selectors.memory_shares(memory=memory)))


def _owned_personal_memory(request: Request, memory_id: int) -> Memory:
    """A personal memory the caller may share: only its owner (or a team-wide key) decides."""
    principal = principal_of(request)
    memory = selectors.memory_get(
        team=principal.team, memory_id=memory_id, scope=MemoryScope.PERSONAL
    )
    selectors.check_memory_access(memory=memory, acting_agent=principal.agent_id, action=DELETE)
    return memory


class TeamCreateApi(_MemoryCreateApi):
    scope = MemoryScope.TEAM
    input_serializer = TeamCreateInputSerializer


class TeamSearchApi(APIView):
    @api_operation(
        request=TeamSearchInputSerializer,
        response=MemoryOutputSerializer(many=True),
        envelope=PARTIAL_ENVELOPE,
        summary="Hybrid search of the team's memories",
    )
    def post(self, request: Request) -> Response:
        return _search(request, MemoryScope.TEAM, TeamSearchInputSerializer)


class TeamRecentApi(APIView):
    @api_operation(
        parameters=[RECENT_LIMIT.parameter],
        response=MemoryOutputSerializer(many=True),
        summary="Newest team memories",
    )
    def get(self, request: Request) -> Response:
        return _recent(request, MemoryScope.TEAM, "")


class TeamDetailApi(_MemoryDetailApi):
    scope = MemoryScope.TEAM
    update_summary = "Update a team memory"


# --- trash ------------------------------------------------------------------------------------

TRASH_PAGE = QueryInt("page", default=1, minimum=1, maximum=10**6)
TRASH_PAGE_SIZE = QueryInt("page_size", default=20, minimum=1, maximum=100)


class TrashedMemoryOutputSerializer(MemoryFieldsSerializer):
    id = serializers.IntegerField(help_text="the memory's id, which a restore gives back")
    created_at = serializers.DateTimeField(allow_null=True)
    removed_at = serializers.DateTimeField()
    removed_by = serializers.ChoiceField(choices=RemovedBy.values)
    reason = serializers.CharField()
    expires_at = serializers.DateTimeField(help_text="erased for good at this time")


class TrashPageSerializer(serializers.Serializer):
    items = TrashedMemoryOutputSerializer(many=True)
    total = serializers.IntegerField()
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()


class TrashListApi(APIView):
    @api_operation(
        parameters=[
            OpenApiParameter("agent_id", str, description="only this agent's memories"),
            TRASH_PAGE.parameter,
            TRASH_PAGE_SIZE.parameter,
        ],
        response=TrashPageSerializer,
        errors=(403,),
        summary="Memories removed within TRASH_RETENTION_DAYS, newest first",
        description="Every removal of a long-term memory lands here (DELETE without ?purge, "
        "cleanup, auto-run, the console), with `removed_at`, `removed_by` and `reason`. An "
        "agent-scoped key sees its own agent's personal memories and the team-scope ones. Team "
        "and agent deletion are final and leave nothing here.",
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        agent_id = request.query_params.get("agent_id", "")
        if agent_id:
            check_agent_id(agent_id)
            require_agent(
                AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
            )
        page = TRASH_PAGE.parse(request.query_params)
        page_size = TRASH_PAGE_SIZE.parse(request.query_params)
        qs = purge.trash_visible(
            team=principal.team, acting_agent=principal.agent_id, agent_id=agent_id
        ).defer("embedding", "revisions", "shares")
        start = (page - 1) * page_size
        return Response(
            {
                "items": [presenters.trashed_body(i) for i in qs[start : start + page_size]],
                "total": qs.count(),
                "page": page,
                "page_size": page_size,
            }
        )


class TrashDetailApi(APIView):
    @api_operation(
        errors=(404,),
        summary="Erase a trashed memory now (an erasure request)",
        description="Gone at once and for good: its content, embedding, shares, revisions and "
        "saved graph links. Another team's id, or one past its retention, answers 404.",
    )
    def delete(self, request: Request, memory_id: int) -> Response:
        principal = principal_of(request)
        purge.trash_erase(team=principal.team, memory_id=memory_id, acting_agent=principal.agent_id)
        return Response(None)


class TrashRestoreApi(APIView):
    @api_operation(
        response=MemoryOutputSerializer,
        errors=(404, 409),
        summary="Put a trashed memory back (same id, content, embedding, shares, revisions)",
        description="404 once its retention passed, or for an unknown / another team's id. 409 "
        "`CONFLICT` when a live memory of its scope says the same (same content hash), its id "
        "is taken, or its agent is gone.",
    )
    def post(self, request: Request, memory_id: int) -> Response:
        principal = principal_of(request)
        purge.trash_restore_one(
            team=principal.team, memory_id=memory_id, acting_agent=principal.agent_id
        )
        memory = selectors.memory_get(team=principal.team, memory_id=memory_id)
        return Response(presenters.memory_body(memory))


# --- reading: one memory, its history, every memory page by page ---------------------------

LIST_PAGE_SIZE = QueryInt("page_size", default=50, minimum=1, maximum=200)
_CURSOR_SALT = "memories.list.cursor"


class MemoryDetailOutputSerializer(MemoryOutputSerializer):
    """Documentation of `GET /memories/<id>` (presenters.memory_detail_body)."""

    superseded_by = serializers.IntegerField(  # type: ignore[assignment]
        allow_null=True, help_text="the newer memory that replaced this one, or null"
    )
    # A field named "source" (the stubs see Field.source).
    source = serializers.CharField(  # type: ignore[assignment]
        allow_null=True, help_text="metadata.source (compression, extraction…), or null"
    )


class RevisionOutputSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    by = serializers.CharField(help_text='who: "key mk_…", "user alice", "system"')
    change = serializers.ChoiceField(choices=RevisionAction.choices)
    before = serializers.DictField()
    after = serializers.DictField()


class HistoryOutputSerializer(serializers.Serializer):
    revisions = RevisionOutputSerializer(many=True, help_text="oldest first")
    supersedes = serializers.ListField(
        child=serializers.IntegerField(), help_text="ids of the memories this one replaced"
    )
    superseded_by = serializers.IntegerField(allow_null=True)


class MemoryPageSerializer(serializers.Serializer):
    items = MemoryOutputSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True, help_text="null on the last page")


def _readable(request: Request, memory_id: int) -> Memory:
    """A memory of the key's team that the key may read: another team's id is 404 like a missing
    one; another agent's unshared personal memory is 403 for an agent-scoped key."""
    principal = principal_of(request)
    memory = selectors.memory_get(team=principal.team, memory_id=memory_id)
    selectors.check_memory_access(memory=memory, acting_agent=principal.agent_id, action=READ)
    return memory


class MemoryReadApi(APIView):
    @api_operation(
        response=MemoryDetailOutputSerializer,
        errors=(403, 404),
        summary="One memory, personal or team, by id",
        description="With `pinned`, `superseded_by` (null when current) and `source`. Reading "
        "does not count as a recall, but a cold memory read by id becomes hot again (its "
        "`last_accessed` is set, so the tiering keeps it hot).",
    )
    def get(self, request: Request, memory_id: int) -> Response:
        memory = _readable(request, memory_id)
        if memory.tier == MemoryTier.COLD:
            tiers.memories_promote(team=memory.team, memory_ids=[memory.pk])
            memory.refresh_from_db()
        return Response(presenters.memory_detail_body(memory))


class MemoryHistoryApi(APIView):
    @api_operation(
        response=HistoryOutputSerializer,
        errors=(403, 404),
        summary="What changed in a memory, oldest first, and what it replaced",
    )
    def get(self, request: Request, memory_id: int) -> Response:
        memory = _readable(request, memory_id)
        return Response(presenters.memory_history_body(selectors.memory_history(memory=memory)))


class MemoryListApi(APIView):
    @api_operation(
        parameters=[
            OpenApiParameter(
                "scope", str, enum=["personal", "team"], description="only this scope"
            ),
            OpenApiParameter("agent_id", str, description="only this agent's personal memories"),
            OpenApiParameter("cursor", str, description="next_cursor of the previous page"),
            OpenApiParameter("run_id", str, description="only memories written in this run"),
            OpenApiParameter(
                "filters",
                str,
                description='a JSON filter as in search, e.g. {"importance": {"$gte": 0.7}}',
            ),
            LIST_PAGE_SIZE.parameter,
        ],
        response=MemoryPageSerializer,
        errors=(403,),
        operation_id="memories_list",
        summary="Every memory the key may read, newest written first, page by page",
        description="A cursor stays valid while memories are added: nothing is skipped or "
        "repeated. Replaced (superseded) memories are left out. An agent-scoped key sees its "
        "own personal memories and the team's.",
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        params = request.query_params
        scope = params.get("scope", "")
        if scope not in ("", MemoryScope.PERSONAL, MemoryScope.TEAM):
            raise ValidationFailed({"scope": ["personal or team"]}, "scope: personal or team")
        agent_id = params.get("agent_id", "")
        if agent_id:
            check_agent_id(agent_id)
            require_agent(
                AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
            )
        before = _cursor_id(params.get("cursor", ""))
        filters = _list_filters(params.get("filters", ""), params.get("run_id", ""))
        items, next_before = selectors.memory_page(
            team=principal.team,
            acting_agent=principal.agent_id,
            scope=scope or None,
            agent_id=agent_id,
            before_id=before,
            page_size=LIST_PAGE_SIZE.parse(params),
            filters=filters,
        )
        cursor = (
            signing.dumps({"before": next_before}, salt=_CURSOR_SALT)
            if next_before is not None
            else None
        )
        return Response(
            {"items": [presenters.memory_body(m) for m in items], "next_cursor": cursor}
        )


def _list_filters(raw: str, run_id: str) -> dict[str, Any]:
    """The list's `filters` (JSON in the query string) and `run_id`, checked like search's."""
    filters: dict[str, Any] = {}
    if raw:
        try:
            filters = parse_filters(json.loads(raw))
        except json.JSONDecodeError:
            raise ValidationFailed({"filters": ["not JSON"]}, "filters: not JSON") from None
        except FilterError as exc:
            raise ValidationFailed({"filters": [str(exc)]}, f"filters: {exc}") from None
    if run_id:
        check_agent_id(run_id, field="run_id")
    return with_run_id(filters, run_id)


def _cursor_id(cursor: str) -> int | None:
    """The opaque cursor (signed, so a made-up one is refused rather than misread)."""
    if not cursor:
        return None
    try:
        before = signing.loads(cursor, salt=_CURSOR_SALT)["before"]
    except (signing.BadSignature, KeyError, TypeError):
        raise ValidationFailed(
            {"cursor": ["not a cursor this API gave"]}, "cursor: invalid"
        ) from None
    if not isinstance(before, int) or before < 1:
        raise ValidationFailed({"cursor": ["not a cursor this API gave"]}, "cursor: invalid")
    return before


# --- working memory ---------------------------------------------------------------------------


class WorkingItemFieldsSerializer(serializers.Serializer):
    # What a working-memory item is wherever it is now: in working memory (below) or in the
    # archive (lifecycle's sources). No docstring: drf-spectacular would describe every
    # subclass with it.
    id = serializers.CharField()
    agent_id = serializers.CharField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField()


class WorkingItemSerializer(WorkingItemFieldsSerializer):
    expires_at = serializers.DateTimeField()
    run_id = serializers.CharField(
        required=False, help_text="the session, when the write named one"
    )


class WorkingClearedSerializer(serializers.Serializer):
    cleared = serializers.IntegerField(help_text="items removed")


class WorkingCreateInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    content = _content_field(validators=[_validate_content])
    ttl = StrictIntegerField(required=False, default=259200, min_value=1, max_value=30 * 24 * 3600)
    run_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        validators=[AGENT_ID],
        help_text="the agent's session: the automatic pipeline warms up again for each new one",
    )


class WorkingCreateApi(APIView):
    @api_operation(
        request=WorkingCreateInputSerializer,
        response=WorkingItemSerializer,
        statuses=(201,),
        errors=(403,),
        summary="Add a working-memory item",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, WorkingCreateInputSerializer)
        require_agent(
            AgentResource.PERSONAL_MEMORIES,
            acting_agent=principal.agent_id,
            agent_id=data["agent_id"],
        )
        with agent_registered(team=principal.team, agent_id=data["agent_id"]):
            item = get_working_store().add(
                team_id=principal.team.id,
                agent_id=data["agent_id"],
                content=data["content"],
                ttl_seconds=data["ttl"],
                run_id=data["run_id"],
            )
        usage_record(team=principal.team, agent_id=data["agent_id"], kind=KIND_WRITE)
        from .working.events import working_memory_written

        working_memory_written.send(
            sender=WorkingCreateApi,
            team=principal.team,
            agent_id=data["agent_id"],
            run_id=data["run_id"],
        )
        return Response(presenters.working_item_body(item), status=201)


class WorkingAgentApi(APIView):
    @api_operation(
        parameters=[WORKING_LIMIT.parameter],
        response=WorkingItemSerializer(many=True),
        errors=(403,),
        summary="An agent's working memory, oldest first",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        check_agent_id(agent_id)
        require_agent(
            AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
        )
        limit = WORKING_LIMIT.parse(request.query_params)
        items = get_working_store().list(team_id=principal.team.id, agent_id=agent_id, limit=limit)
        return Response([presenters.working_item_body(i) for i in items])

    @api_operation(
        response=WorkingClearedSerializer,
        errors=(400, 403),
        summary="Clear an agent's working memory",
    )
    def delete(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        check_agent_id(agent_id)
        require_agent(
            AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
        )
        cleared = get_working_store().clear(team_id=principal.team.id, agent_id=agent_id)
        return Response({"cleared": cleared})


# --- episodic memory ---------------------------------------------------------------------------

OUTCOMES = ("success", "failure")


class EpisodeInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    task = _content_field(validators=[_validate_content], help_text="what was to be done")
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    steps = serializers.ListField(
        child=StrictCharField(max_length=2000), required=False, default=list, max_length=50
    )
    lesson = StrictCharField(
        required=False, default="", allow_blank=True, max_length=4000, trim_whitespace=False
    )
    importance = StrictFloatField(required=False, default=0.5, min_value=0.0, max_value=1.0)
    run_id = StrictCharField(required=False, default="", allow_blank=True, validators=[AGENT_ID])


class EpisodeOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="the personal memory holding the episode")
    agent_id = serializers.CharField()
    task = serializers.CharField()
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    steps = serializers.ListField(child=serializers.CharField())
    lesson = serializers.CharField()
    importance = serializers.FloatField()
    created_at = serializers.DateTimeField()
    run_id = serializers.CharField(required=False)
    score = serializers.FloatField(required=False, help_text="search only")


class EpisodeSearchInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    task = StrictCharField(max_length=4000, help_text="the task at hand")
    outcome = serializers.ChoiceField(choices=OUTCOMES, required=False)
    limit = StrictIntegerField(required=False, default=5, min_value=1, max_value=50)
    min_score = StrictFloatField(required=False, default=0.3, min_value=0.0, max_value=1.0)


def episode_search_query(*, team: Team, data: dict[str, Any]) -> search.SearchQuery:
    """The search a validated EpisodeSearchInputSerializer body asks for: the agent's episodes
    only (of that outcome when given); the MCP tool builds its query here too."""
    filters: dict[str, Any] = {"category": services.EPISODE_CATEGORY}
    if data.get("outcome"):
        filters["metadata.outcome"] = data["outcome"]
    return search.SearchQuery(
        team=team,
        scope=MemoryScope.PERSONAL,
        agent_id=data["agent_id"],
        text=data["task"],
        limit=data["limit"],
        min_score=data["min_score"],
        filters=parse_filters(filters),
        timeout_ms=search.recall_timeout_ms(team),
    )


def _own_agent(request: Request, agent_id: str) -> Team:
    principal = principal_of(request)
    require_agent(
        AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
    )
    return principal.team


class EpisodeCreateApi(APIView):
    """A past case (a task, how it went, the steps, the lesson) to be found again by the task."""

    @api_operation(
        request=EpisodeInputSerializer,
        response=EpisodeOutputSerializer,
        statuses=(201,),
        errors=(403,),
        summary="Record an episode: a task, its outcome, steps and lesson",
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, EpisodeInputSerializer)
        team = _own_agent(request, data["agent_id"])
        memory = services.episode_create(team=team, **data)
        usage_record(team=team, agent_id=data["agent_id"], kind=KIND_WRITE)
        return Response(presenters.episode_body(memory), status=201)


class EpisodeSearchApi(APIView):
    @api_operation(
        request=EpisodeSearchInputSerializer,
        response=EpisodeOutputSerializer(many=True),
        errors=(403,),
        envelope=PARTIAL_ENVELOPE,
        summary="Episodes of tasks like this one (few-shot examples), best first",
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, EpisodeSearchInputSerializer)
        team = _own_agent(request, data["agent_id"])
        hits = services.memory_recall(
            query=episode_search_query(team=team, data=data),
            acting_agent=principal_of(request).agent_id,
        )
        return search_results(
            hits, [presenters.episode_body(h.memory, score=h.score) for h in hits]
        )


# --- procedural memory -------------------------------------------------------------------------


class ProcedureInputSerializer(serializers.Serializer):
    rule = StrictCharField(max_length=2000, help_text="what the agent is to do, in its words")


class ProcedureUpdateSerializer(serializers.Serializer):
    rule = StrictCharField(required=False, max_length=2000)
    status = serializers.ChoiceField(
        choices=ProcedureStatus.values,
        required=False,
        help_text="active accepts a proposal, rejected refuses it",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("Give rule or status.")
        return attrs


class ProcedureOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent_id = serializers.CharField()
    rule = serializers.CharField()
    status = serializers.ChoiceField(choices=ProcedureStatus.values)
    # A field named like Field.source: fine for DRF (declared fields leave the class), not
    # for the stubs.
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="agent, team, lifecycle or console"
    )
    evidence = serializers.ListField(
        child=serializers.IntegerField(), help_text="a proposal: the memories it repeats"
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ProcedureDeletedSerializer(serializers.Serializer):
    deleted = serializers.IntegerField(help_text="the id removed")


class ProcedureListOutputSerializer(serializers.Serializer):
    procedures = ProcedureOutputSerializer(many=True)


def procedure_source(acting_agent: str | None) -> str:
    """Who added a rule: its agent (an agent-scoped key or token) or the team."""
    return "agent" if acting_agent is not None else "team"


class ProcedureListApi(APIView):
    """The agent's own rules: it reads them before acting and edits them itself."""

    @api_operation(
        parameters=[
            OpenApiParameter(
                "status", str, enum=ProcedureStatus.values, description="only these (default all)"
            )
        ],
        response=ProcedureListOutputSerializer,
        errors=(400, 403),
        summary="An agent's rules (procedural memory) and the proposals waiting for it",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        check_agent_id(agent_id)
        team = _own_agent(request, agent_id)
        status = request.query_params.get("status", "")
        if status and status not in ProcedureStatus.values:
            raise ValidationFailed(
                {"status": [f"one of {', '.join(ProcedureStatus.values)}"]}, "status: invalid"
            )
        rows = selectors.procedure_list(team=team, agent_id=agent_id, status=status or None)
        return Response({"procedures": [presenters.procedure_body(p) for p in rows]})

    @api_operation(
        request=ProcedureInputSerializer,
        response=ProcedureOutputSerializer,
        statuses=(201, 200),
        errors=(400, 403),
        summary="Add a rule the agent follows from now on (200: the agent's rule of that text)",
    )
    def post(self, request: Request, agent_id: str) -> Response:
        check_agent_id(agent_id)
        team = _own_agent(request, agent_id)
        data = validated_body(request, ProcedureInputSerializer)
        procedure, created = services.procedure_add(
            team=team,
            agent_id=agent_id,
            rule=data["rule"],
            source=procedure_source(principal_of(request).agent_id),
            actor=Actor.for_key(principal_of(request).api_key),
        )
        return Response(presenters.procedure_body(procedure), status=201 if created else 200)


class ProcedureDetailApi(APIView):
    @api_operation(
        request=ProcedureUpdateSerializer,
        response=ProcedureOutputSerializer,
        errors=(400, 403, 404, 409),
        summary="Edit a rule, or accept / reject a proposed one",
        description="409 `CONFLICT` when another rule of the agent already says the new text "
        "(compared as an add compares it); the message and `details.rule` name that rule's id.",
    )
    def put(self, request: Request, agent_id: str, procedure_id: int) -> Response:
        check_agent_id(agent_id)
        team = _own_agent(request, agent_id)
        data = validated_body(request, ProcedureUpdateSerializer)
        procedure = selectors.procedure_get(team=team, agent_id=agent_id, procedure_id=procedure_id)
        procedure = services.procedure_update(
            procedure=procedure, actor=Actor.for_key(principal_of(request).api_key), **data
        )
        return Response(presenters.procedure_body(procedure))

    @api_operation(
        response=ProcedureDeletedSerializer,
        errors=(400, 403, 404),
        summary="Remove a rule",
    )
    def delete(self, request: Request, agent_id: str, procedure_id: int) -> Response:
        check_agent_id(agent_id)
        team = _own_agent(request, agent_id)
        procedure = selectors.procedure_get(team=team, agent_id=agent_id, procedure_id=procedure_id)
        services.procedure_delete(
            procedure=procedure, actor=Actor.for_key(principal_of(request).api_key)
        )
        return Response({"deleted": procedure_id})


class ProcedureRestoreApi(APIView):
    @api_operation(
        response=ProcedureOutputSerializer,
        statuses=(201,),
        errors=(400, 403, 404, 409),
        summary="Bring back a removed rule, with its id and the last text and status it had",
        description="The rule's history (`GET /procedures/<agent_id>/history`) holds its last "
        "text. 404 when the agent never had that rule (or it was removed before the history was "
        "kept); 409 `CONFLICT` when it is not removed, or when another rule of the agent now "
        "says its text (`details.rule` names that rule); 400 when the agent holds the most rules "
        "it may. Its source becomes who restores it; a proposal's evidence is not kept.",
    )
    def post(self, request: Request, agent_id: str, procedure_id: int) -> Response:
        check_agent_id(agent_id)
        team = _own_agent(request, agent_id)
        principal = principal_of(request)
        procedure = services.procedure_restore(
            team=team,
            agent_id=agent_id,
            procedure_id=procedure_id,
            source=procedure_source(principal.agent_id),
            actor=Actor.for_key(principal.api_key),
        )
        return Response(presenters.procedure_body(procedure), status=201)


PROCEDURE_HISTORY_LIMIT = QueryInt("limit", default=50, minimum=1, maximum=500)
PROCEDURE_HISTORY_RULE = QueryInt(
    "procedure_id",
    default=0,
    minimum=0,
    maximum=2**63 - 1,
    description="one rule's changes, a removed rule's too (0: every rule's)",
)


class ProcedureRevisionOutputSerializer(serializers.Serializer):
    procedure_id = serializers.IntegerField()
    change = serializers.ChoiceField(choices=ProcedureChange.values)
    rule = serializers.CharField(help_text="its text after the change (removed: the text it had)")
    rule_before = serializers.CharField(allow_null=True, help_text="reworded: the text it had")
    status = serializers.ChoiceField(choices=ProcedureStatus.values)
    status_before = serializers.ChoiceField(
        choices=ProcedureStatus.values, allow_null=True, help_text="decided: the status it had"
    )
    by = serializers.CharField(help_text='who: "key mk_…", "user alice", "lifecycle", …')
    at = serializers.DateTimeField()


class ProcedureHistoryOutputSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    revisions = ProcedureRevisionOutputSerializer(many=True, help_text="newest first")


class ProcedureHistoryApi(APIView):
    @api_operation(
        parameters=[PROCEDURE_HISTORY_LIMIT.parameter, PROCEDURE_HISTORY_RULE.parameter],
        response=ProcedureHistoryOutputSerializer,
        errors=(400, 403),
        summary="Who added, reworded, decided, removed or restored the agent's rules, newest first",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        check_agent_id(agent_id)
        team = _own_agent(request, agent_id)
        procedure_id = PROCEDURE_HISTORY_RULE.parse(request.query_params)
        revisions = selectors.procedure_history(
            team=team,
            agent_id=agent_id,
            limit=PROCEDURE_HISTORY_LIMIT.parse(request.query_params),
            procedure_id=procedure_id or None,
        )
        return Response(
            {
                "agent_id": agent_id,
                "revisions": [presenters.procedure_revision_body(r) for r in revisions],
            }
        )


# --- the agent profile --------------------------------------------------------------------------

PROFILE_HISTORY_LIMIT = QueryInt("limit", default=50, minimum=1, maximum=500)


class ProfileFieldOutputSerializer(serializers.Serializer):
    value = serializers.CharField()
    updated_at = serializers.DateTimeField()
    # A field named "source" (the stubs see Field.source).
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=ProfileSource.values, help_text="api, console, extraction or ingest"
    )
    source_memory_id = serializers.IntegerField(
        allow_null=True, help_text="the memory an extracted or ingested value was read from"
    )


class ProfileOutputSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    # A field named "fields" (the metaclass moves it aside; the stubs see Serializer.fields).
    fields = serializers.DictField(  # type: ignore[assignment]
        child=ProfileFieldOutputSerializer(), help_text="by key"
    )


class ProfileSetOutputSerializer(ProfileOutputSerializer):
    changed = serializers.ListField(
        child=serializers.CharField(), help_text="the keys whose value this request changed"
    )


class ProfileSetInputSerializer(serializers.Serializer):
    fields = JSONObjectField(  # type: ignore[assignment]  # as ProfileOutputSerializer's
        help_text=f"key -> value (a string of at most {VALUE_MAX_CHARS} characters); the keys "
        "not named are left as they are"
    )

    def validate_fields(self, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise serializers.ValidationError("Give at least one key.")
        if len(value) > MAX_FIELDS_PER_WRITE:
            raise serializers.ValidationError(f"At most {MAX_FIELDS_PER_WRITE} keys a request.")
        return value


class ProfileRevisionOutputSerializer(serializers.Serializer):
    key = serializers.CharField()
    before = serializers.CharField(allow_null=True, help_text="null: the key was new")
    after = serializers.CharField(allow_null=True, help_text="null: the key was deleted")
    source = serializers.ChoiceField(choices=ProfileSource.values)  # type: ignore[assignment]
    source_memory_id = serializers.IntegerField(allow_null=True)
    by = serializers.CharField(help_text='who: "key mk_…", "user alice", "lifecycle"')
    at = serializers.DateTimeField()


class ProfileHistoryOutputSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    revisions = ProfileRevisionOutputSerializer(many=True, help_text="newest first")


def _profile_agent(request: Request, agent_id: str) -> str:
    """The path's agent, checked: well formed, and one the key may act for (403 otherwise)."""
    check_agent_id(agent_id)
    require_agent(
        AgentResource.PROFILE, acting_agent=principal_of(request).agent_id, agent_id=agent_id
    )
    return agent_id


class ProfileApi(APIView):
    @api_operation(
        response=ProfileOutputSerializer,
        errors=(400, 403),
        summary="An agent's profile: its exactly-known fields, by key",
        description="Kept apart from the memories (docs/lifecycle.md, Profile). An agent without "
        "a profile — or of another team — answers `fields: {}`.",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        agent_id = _profile_agent(request, agent_id)
        fields = selectors.profile_fields(team=principal.team, agent_id=agent_id)
        return Response(presenters.profile_body(agent_id, fields))

    @api_operation(
        request=ProfileSetInputSerializer,
        response=ProfileSetOutputSerializer,
        errors=(400, 403),
        summary="Set profile fields (the keys given are overwritten, the others kept)",
        description="A revision is recorded per changed key; a value equal to the stored one "
        "changes nothing. Keys: `^[a-z][a-z0-9_]{0,63}$` (well-known: "
        + ", ".join(WELL_KNOWN_KEYS)
        + "); `timezone` must be an IANA zone or a UTC offset. A bad key or value is a 400 "
        "naming `fields.<key>`. A value set here is never overwritten by extraction or ingest.",
    )
    def put(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        agent_id = _profile_agent(request, agent_id)
        data = validated_body(request, ProfileSetInputSerializer)
        changes = services.profile_set(
            team=principal.team,
            agent_id=agent_id,
            fields=data["fields"],
            actor=Actor.for_key(principal.api_key),
        )
        fields = selectors.profile_fields(team=principal.team, agent_id=agent_id)
        return Response(presenters.profile_body(agent_id, fields, changed=[c.key for c in changes]))


class ProfileFieldApi(APIView):
    @api_operation(
        errors=(400, 403, 404),
        summary="Delete one profile field (its history stays)",
        description="404 when the agent has no such key (or is another team's).",
    )
    def delete(self, request: Request, agent_id: str, key: str) -> Response:
        principal = principal_of(request)
        agent_id = _profile_agent(request, agent_id)
        services.profile_field_delete(
            team=principal.team, agent_id=agent_id, key=key, actor=Actor.for_key(principal.api_key)
        )
        return Response(None)


class ProfileHistoryApi(APIView):
    @api_operation(
        parameters=[PROFILE_HISTORY_LIMIT.parameter],
        response=ProfileHistoryOutputSerializer,
        errors=(400, 403),
        summary="What changed in an agent's profile, newest first",
    )
    def get(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        agent_id = _profile_agent(request, agent_id)
        revisions = selectors.profile_history(
            team=principal.team,
            agent_id=agent_id,
            limit=PROFILE_HISTORY_LIMIT.parse(request.query_params),
        )
        return Response(
            {
                "agent_id": agent_id,
                "revisions": [presenters.profile_revision_body(r) for r in revisions],
            }
        )
