"""Knowledge-graph endpoints (docs/graph.md). Thin: validate, check access, call a selector or
service, render. (`POST /lifecycle/extract-graph` is a lifecycle job: lifecycle.apis.)"""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import AgentResource, require_agent_filter
from core.api import upserted, validated_body
from core.errors import ValidationFailed
from core.openapi import api_operation
from core.serializers import (
    JSONObjectField,
    QueryInt,
    StrictCharField,
)
from core.validators import AGENT_ID
from tenants.apis import principal_of

from . import presenters, selectors, services, traversal
from .models import ENTITY_TYPES, RELATION_TYPES, Entity

MAX_SEEDS = 100
MAX_QUERY_CHARS = 1000
DESCRIPTION_MAX_CHARS = 10_000


class StrictUUIDField(serializers.UUIDField):
    """A UUID given as a string; DRF's own field also takes integers and coerces them."""

    default_error_messages = {"invalid": "Must be a valid UUID."}

    def to_internal_value(self, data: Any) -> uuid.UUID:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def _validate_name(value: str) -> None:
    if not value.strip():
        raise serializers.ValidationError("Must not be empty.")


# --- output documentation --------------------------------------------------------------------


class EntityOutputSerializer(serializers.Serializer):
    """Documentation of the entity object (rendered by presenters.entity_body)."""

    id = serializers.UUIDField()
    team_id = serializers.CharField()
    agent_id = serializers.CharField(allow_null=True, help_text="null = team-wide")
    name = serializers.CharField()
    entity_type = serializers.ChoiceField(choices=ENTITY_TYPES)
    description = serializers.CharField(allow_null=True)
    properties = serializers.DictField()
    source_memory_id = serializers.IntegerField(allow_null=True)
    access_count = serializers.IntegerField()
    last_accessed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    source_conversation_id = serializers.CharField(
        required=False,
        help_text="only when read from an ingested conversation: the source memory's run_id",
    )
    source_message_id = serializers.CharField(
        required=False,
        help_text="only when read from an ingested conversation: the archived message "
        "(GET /lifecycle/archive/<item_id>)",
    )
    identity_id = serializers.UUIDField(
        required=False,
        help_text="team-wide keys only, when linked: the team-level identity this entity shares "
        "with the same organisation, place, project, concept or skill in other agents' graphs",
    )
    score = serializers.FloatField(required=False, help_text="with q only: 0..1")


class RelationOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    team_id = serializers.CharField()
    source_entity_id = serializers.UUIDField()
    target_entity_id = serializers.UUIDField()
    relation_type = serializers.ChoiceField(choices=RELATION_TYPES)
    description = serializers.CharField(allow_null=True)
    properties = serializers.DictField()
    source_memory_id = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    source_conversation_id = serializers.CharField(
        required=False,
        help_text="only when read from an ingested conversation: the source memory's run_id",
    )
    source_message_id = serializers.CharField(
        required=False,
        help_text="only when read from an ingested conversation: the archived message "
        "(GET /lifecycle/archive/<item_id>)",
    )


def _page_of(name: str, item: serializers.Serializer) -> serializers.Serializer:
    return inline_serializer(
        name,
        {
            "items": serializers.ListField(child=item),
            "total": serializers.IntegerField(),
            "page": serializers.IntegerField(),
            "page_size": serializers.IntegerField(),
        },
    )


PAGE = QueryInt("page", default=1, minimum=1, maximum=10**6)
PAGE_SIZE = QueryInt("page_size", default=20, minimum=1, maximum=100)
PAGING = [PAGE.parameter, PAGE_SIZE.parameter]
MAX_DEPTH = QueryInt(
    "max_depth", default=1, minimum=1, maximum=traversal.MAX_DEPTH, description="with seeds"
)
MAX_NODES = QueryInt(
    "max_nodes",
    default=traversal.DEFAULT_MAX_NODES,
    minimum=1,
    maximum=traversal.MAX_NODES_LIMIT,
)
MAX_EDGES = QueryInt(
    "max_edges",
    default=traversal.DEFAULT_MAX_EDGES,
    minimum=1,
    maximum=traversal.MAX_EDGES_LIMIT,
)


# --- query parameters ------------------------------------------------------------------------


class Paging(TypedDict):
    page: int
    page_size: int


def _paging(request: Request) -> Paging:
    """?page and ?page_size, as the keyword arguments of the list selectors."""
    return Paging(
        page=PAGE.parse(request.query_params), page_size=PAGE_SIZE.parse(request.query_params)
    )


def _entity(request: Request, entity_id: str) -> Entity:
    """The entity of the key's team the key may see (404 otherwise: another team's too)."""
    principal = principal_of(request)
    return selectors.entity_get(
        team=principal.team, entity_id=entity_id, acting_agent=principal.agent_id
    )


def _choice_param(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if value not in choices:
        raise ValidationFailed(
            {name: [f"Must be one of: {', '.join(choices)}."]}, f"{name}: unknown value"
        )
    return value


def _agent_param(request: Request) -> str | None:
    value = request.query_params.get("agent_id")
    if value is None or value == "":
        return None
    try:
        AGENT_ID(value)
    except Exception:
        raise ValidationFailed(
            {"agent_id": ["Must match [A-Za-z0-9_.:@-]{1,64}."]}, "agent_id: invalid"
        ) from None
    require_agent_filter(
        AgentResource.ENTITIES, agent_id=value, acting_agent=principal_of(request).agent_id
    )
    return value


def _uuid_param(value: str, name: str) -> str:
    if selectors.parse_uuid(value) is None:
        raise ValidationFailed({name: ["Must be a valid UUID."]}, f"{name}: not a UUID")
    return value


# --- entities --------------------------------------------------------------------------------


class EntityCreateInputSerializer(serializers.Serializer):
    name = StrictCharField(max_length=255, validators=[_validate_name])
    entity_type = serializers.ChoiceField(choices=ENTITY_TYPES)
    description = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=DESCRIPTION_MAX_CHARS
    )
    properties = JSONObjectField(required=False, allow_null=True)
    agent_id = StrictCharField(required=False, allow_blank=True, default="", validators=[AGENT_ID])

    def validate_name(self, value: str) -> str:
        return value.strip()


class EntityUpdateInputSerializer(serializers.Serializer):
    name = StrictCharField(
        required=False, allow_null=True, max_length=255, validators=[_validate_name]
    )
    description = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=DESCRIPTION_MAX_CHARS
    )
    properties = JSONObjectField(required=False, allow_null=True)

    def validate_name(self, value: str | None) -> str | None:
        return value.strip() if value is not None else None


class EntityListCreateApi(APIView):
    @api_operation(
        parameters=[
            OpenApiParameter("agent_id", str, description="only this agent's entities"),
            OpenApiParameter("entity_type", str, enum=list(ENTITY_TYPES)),
            OpenApiParameter("q", str, description="semantic + name search, best first"),
            *PAGING,
        ],
        errors=(403,),
        response=_page_of("EntityPage", EntityOutputSerializer()),
        operation_id="graph_entities_list",
        summary="List entities (newest first, or best match for q)",
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        agent_id = _agent_param(request)
        entity_type = _choice_param(request, "entity_type", ENTITY_TYPES)
        q = request.query_params.get("q") or ""
        if len(q) > MAX_QUERY_CHARS:
            raise ValidationFailed({"q": [f"At most {MAX_QUERY_CHARS} characters."]}, "q: too long")
        entities = selectors.entity_list(
            team=principal.team,
            acting_agent=principal.agent_id,
            agent_id=agent_id,
            entity_type=entity_type,
            q=q,
            **_paging(request),
        )
        team_view = principal.agent_id is None
        return Response(
            presenters.page_body(
                entities, lambda e: presenters.scored_entity_body(e, with_identity=team_view)
            )
        )

    @api_operation(
        request=EntityCreateInputSerializer,
        response=EntityOutputSerializer,
        statuses=(201, 200),
        errors=(403,),
        summary="Create an entity, or merge into the same (name, entity_type) of its scope (200)",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, EntityCreateInputSerializer)
        require_agent_filter(
            AgentResource.ENTITIES, agent_id=data["agent_id"], acting_agent=principal.agent_id
        )
        entity, created = services.entity_create_or_merge(
            team=principal.team,
            name=data["name"],
            entity_type=data["entity_type"],
            agent_id=data["agent_id"],
            description=data.get("description") or "",
            properties=data.get("properties") or {},
        )
        return upserted(
            presenters.entity_body(entity, with_identity=principal.agent_id is None),
            created=created,
        )


class EntityDetailApi(APIView):
    @api_operation(
        errors=(403, 404),
        response=inline_serializer(
            "EntityDetail",
            {
                "entity": EntityOutputSerializer(),
                "outgoing_relations": RelationOutputSerializer(many=True),
                "incoming_relations": RelationOutputSerializer(many=True),
            },
        ),
        summary="An entity with its outgoing and incoming relations",
    )
    def get(self, request: Request, entity_id: str) -> Response:
        principal = principal_of(request)
        entity = _entity(request, entity_id)
        services.entities_touch(entity_ids=[entity.pk])
        entity.refresh_from_db(fields=["access_count", "last_accessed_at"])
        detail = selectors.entity_detail(entity=entity, acting_agent=principal.agent_id)
        return Response(
            presenters.entity_detail_body(detail, with_identity=principal.agent_id is None)
        )

    @api_operation(
        request=EntityUpdateInputSerializer,
        response=EntityOutputSerializer,
        errors=(403, 404, 409),
        summary="Update an entity (null/omitted = unchanged; properties merged)",
    )
    def put(self, request: Request, entity_id: str) -> Response:
        data = validated_body(request, EntityUpdateInputSerializer)
        entity = _entity(request, entity_id)
        entity = services.entity_update(
            entity=entity,
            name=data.get("name"),
            description=data.get("description"),
            properties=data.get("properties"),
        )
        team_view = principal_of(request).agent_id is None
        return Response(presenters.entity_body(entity, with_identity=team_view))

    @api_operation(
        errors=(403, 404),
        response=inline_serializer(
            "EntityDeleted",
            {"deleted": serializers.UUIDField(), "relations_deleted": serializers.IntegerField()},
        ),
        summary="Delete an entity and its relations",
    )
    def delete(self, request: Request, entity_id: str) -> Response:
        entity = _entity(request, entity_id)
        deleted_id = str(entity.pk)
        relations = services.entity_delete(entity=entity)
        return Response({"deleted": deleted_id, "relations_deleted": relations})


# --- relations -------------------------------------------------------------------------------


class RelationCreateInputSerializer(serializers.Serializer):
    source_entity_id = StrictUUIDField()
    target_entity_id = StrictUUIDField()
    relation_type = serializers.ChoiceField(choices=RELATION_TYPES)
    description = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=DESCRIPTION_MAX_CHARS
    )
    properties = JSONObjectField(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["source_entity_id"] == attrs["target_entity_id"]:
            raise serializers.ValidationError(
                {"target_entity_id": ["Must differ from source_entity_id."]}
            )
        return attrs


class RelationListCreateApi(APIView):
    @api_operation(
        errors=(403, 404),
        parameters=[
            OpenApiParameter("entity_id", str, description="relations at either end"),
            OpenApiParameter("relation_type", str, enum=list(RELATION_TYPES)),
            *PAGING,
        ],
        response=_page_of("RelationPage", RelationOutputSerializer()),
        operation_id="graph_relations_list",
        summary="List relations, newest first",
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        entity = None
        entity_id = request.query_params.get("entity_id")
        if entity_id:
            entity = _entity(request, _uuid_param(entity_id, "entity_id"))
        relation_type = _choice_param(request, "relation_type", RELATION_TYPES)
        relations = selectors.relation_list(
            team=principal.team,
            acting_agent=principal.agent_id,
            entity=entity,
            relation_type=relation_type,
            **_paging(request),
        )
        return Response(presenters.page_body(relations, presenters.relation_body))

    @api_operation(
        request=RelationCreateInputSerializer,
        response=RelationOutputSerializer,
        statuses=(201, 200),
        errors=(403, 404),
        summary="Create a relation (an existing one is returned unchanged, 200)",
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, RelationCreateInputSerializer)
        # Both ends are looked up in the caller's team: another team's id is a 404, so a
        # relation can never join two teams.
        source = _entity(request, str(data["source_entity_id"]))
        target = _entity(request, str(data["target_entity_id"]))
        relation, created = services.relation_create(
            source=source,
            target=target,
            relation_type=data["relation_type"],
            description=data.get("description") or "",
            properties=data.get("properties") or {},
        )
        return upserted(presenters.relation_body(relation), created=created)


class RelationDetailApi(APIView):
    @api_operation(
        errors=(403, 404),
        response=inline_serializer("RelationDeleted", {"deleted": serializers.UUIDField()}),
        summary="Delete a relation",
    )
    def delete(self, request: Request, relation_id: str) -> Response:
        principal = principal_of(request)
        relation = selectors.relation_get(
            team=principal.team, relation_id=relation_id, acting_agent=principal.agent_id
        )
        deleted_id = str(relation.pk)
        services.relation_delete(relation=relation)
        return Response({"deleted": deleted_id})


# --- the graph -------------------------------------------------------------------------------


def _seed_ids(request: Request) -> list[str]:
    raw: list[str] = []
    for value in request.query_params.getlist("entity_ids"):
        # Repeated parameters or one comma-separated list: both are common.
        raw.extend(v.strip() for v in value.split(",") if v.strip())
    if len(raw) > MAX_SEEDS:
        raise ValidationFailed(
            {"entity_ids": [f"At most {MAX_SEEDS} seed entities."]}, "entity_ids: too many"
        )
    return [_uuid_param(v, "entity_ids") for v in dict.fromkeys(raw)]


class GraphApi(APIView):
    @api_operation(
        parameters=[
            OpenApiParameter("entity_ids", str, many=True, description="seed entities"),
            MAX_DEPTH.parameter,
            OpenApiParameter("agent_id", str, description="only this agent's entities"),
            MAX_NODES.parameter,
            MAX_EDGES.parameter,
        ],
        errors=(403, 404),
        response=inline_serializer(
            "Graph",
            {
                "entities": EntityOutputSerializer(many=True),
                "relations": RelationOutputSerializer(many=True),
                "truncated": serializers.BooleanField(),
            },
        ),
        summary="The whole graph, or a bounded subgraph around seed entities",
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        params = request.query_params
        max_depth = MAX_DEPTH.parse(params)
        max_nodes = MAX_NODES.parse(params)
        max_edges = MAX_EDGES.parse(params)
        agent_id = _agent_param(request)
        seed_ids = _seed_ids(request)
        if seed_ids:
            seeds = selectors.entities_get(
                team=principal.team, entity_ids=seed_ids, acting_agent=principal.agent_id
            )
            graph = traversal.graph_subgraph(
                team=principal.team,
                seeds=seeds,
                max_depth=max_depth,
                acting_agent=principal.agent_id,
                agent_id=agent_id,
                max_nodes=max_nodes,
                max_edges=max_edges,
            )
        else:
            graph = traversal.graph_whole(
                team=principal.team,
                acting_agent=principal.agent_id,
                agent_id=agent_id,
                max_nodes=max_nodes,
                max_edges=max_edges,
            )
        # Rendering the graph is a recall of its entities (as search is of memories).
        graph.mark_accessed(services.entities_touch(entity_ids=graph.entity_ids))
        return Response(presenters.subgraph_body(graph, with_identity=principal.agent_id is None))
