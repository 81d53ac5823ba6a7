"""Lifecycle endpoints (API.md §6). Thin: validate, check the agent, run the service as a job."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memories.selectors import READ, check_memory_access, check_scope_access, iso, memory_get
from memoryplatform.errors import NotFound
from memoryplatform.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from tenants.apis import principal_of, require_team_wide_key
from tenants.models import AGENT_ID_RE
from tenants.services import agent_ensure

from .models import Persona, Scenario
from .selectors import working_sources
from .services import operations, pipeline

AGENT_ID = RegexValidator(AGENT_ID_RE, "Must match [A-Za-z0-9_.:@-]{1,64}.")
ANY = inline_serializer("LifecycleResult", {"result": serializers.DictField()})


def _agent(request: Request, agent_id: str) -> str:
    principal = principal_of(request)
    check_scope_access(acting_agent=principal.agent_id, agent_id=agent_id)
    return agent_id


def _run(request: Request, kind: str, agent_id: str, params: dict[str, Any]) -> Response:
    team = principal_of(request).team
    if agent_id:
        agent_ensure(team=team, agent_id=agent_id)
    return Response(
        pipeline.run(team=team, kind=kind, trigger="api", agent_id=agent_id, params=params)
    )


class CompressInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    target_count = StrictIntegerField(required=False, default=5, min_value=1, max_value=50)


class CompressApi(APIView):
    @extend_schema(
        request=CompressInputSerializer,
        responses=ANY,
        summary="Compress working memory into long-term memories",
    )
    def post(self, request: Request) -> Response:
        s = CompressInputSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        agent_id = _agent(request, s.validated_data["agent_id"])
        return _run(
            request, "compress", agent_id, {"target_count": s.validated_data["target_count"]}
        )


class CleanupInputSerializer(serializers.Serializer):
    max_age_days = StrictIntegerField(required=False, default=90, min_value=0, max_value=36500)
    min_importance = StrictFloatField(required=False, default=0.2, min_value=0.0, max_value=1.0)
    agent_id = StrictCharField(required=False, default="", allow_blank=True, validators=[AGENT_ID])
    dry_run = StrictBooleanField(required=False, default=False)


class CleanupApi(APIView):
    @extend_schema(
        request=CleanupInputSerializer,
        responses=ANY,
        summary="Forget memories that are unimportant and idle (dry_run lists them)",
    )
    def post(self, request: Request) -> Response:
        s = CleanupInputSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        data = s.validated_data
        principal = principal_of(request)
        if data["agent_id"]:
            _agent(request, data["agent_id"])
        elif principal.agent_id is not None:
            require_team_wide_key(principal)  # an agent key may only clean its own memories
        params = {
            "max_age_days": data["max_age_days"],
            "min_importance": data["min_importance"],
            "dry_run": data["dry_run"],
        }
        if data["dry_run"]:
            result, _, _ = operations.cleanup(
                team=principal.team, agent_id=data["agent_id"] or None, **params
            )
            return Response(result)
        return _run(request, "cleanup", data["agent_id"], params)


class ExtractFactsInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    max_memories = StrictIntegerField(required=False, default=20, min_value=1, max_value=200)
    delete_after = StrictBooleanField(required=False, default=False)


class ExtractFactsApi(APIView):
    @extend_schema(
        request=ExtractFactsInputSerializer,
        responses=ANY,
        summary="Extract atomic facts from working memory",
    )
    def post(self, request: Request) -> Response:
        s = ExtractFactsInputSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        agent_id = _agent(request, s.validated_data["agent_id"])
        return _run(
            request,
            "extract-facts",
            agent_id,
            {
                "max_memories": s.validated_data["max_memories"],
                "delete_after": s.validated_data["delete_after"],
            },
        )


class AggregateInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    max_memories = StrictIntegerField(required=False, default=50, min_value=1, max_value=500)


class AggregateApi(APIView):
    @extend_schema(
        request=AggregateInputSerializer, responses=ANY, summary="Group memories into scenarios"
    )
    def post(self, request: Request) -> Response:
        s = AggregateInputSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        agent_id = _agent(request, s.validated_data["agent_id"])
        return _run(
            request,
            "aggregate-scenes",
            agent_id,
            {"max_memories": s.validated_data["max_memories"]},
        )


class ScenariosApi(APIView):
    """GET by agent id, DELETE by scenario id: the same path in seed 000 §4.7."""

    @extend_schema(responses=ANY, summary="An agent's scenarios, newest first")
    def get(self, request: Request, key: str) -> Response:
        agent_id = _agent(request, key)
        team = principal_of(request).team
        rows = Scenario.objects.filter(team=team, agent_id=agent_id).order_by("-created_at")
        return Response([operations._scenario_dict(s) for s in rows])

    @extend_schema(responses=ANY, summary="Delete a scenario")
    def delete(self, request: Request, key: str) -> Response:
        team = principal_of(request).team
        scenario = Scenario.objects.filter(team=team, pk=key).first()
        if scenario is None:
            raise NotFound("scenario")
        _agent(request, scenario.agent_id)
        scenario.delete()
        return Response({"deleted": key})


class PersonaInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    max_items = StrictIntegerField(required=False, default=30, min_value=1, max_value=500)


class GeneratePersonaApi(APIView):
    @extend_schema(
        request=PersonaInputSerializer,
        responses=ANY,
        summary="Build a persona from memories and scenarios",
    )
    def post(self, request: Request) -> Response:
        s = PersonaInputSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        agent_id = _agent(request, s.validated_data["agent_id"])
        return _run(
            request, "generate-persona", agent_id, {"max_items": s.validated_data["max_items"]}
        )


class PersonaApi(APIView):
    """GET by agent id (latest persona), DELETE by persona id: the same path in seed 000 §4.7."""

    @extend_schema(responses=ANY, summary="The agent's latest persona")
    def get(self, request: Request, key: str) -> Response:
        agent_id = _agent(request, key)
        team = principal_of(request).team
        persona = (
            Persona.objects.filter(team=team, agent_id=agent_id).order_by("-created_at").first()
        )
        if persona is None:
            raise NotFound("persona")
        return Response(operations.persona_dict(persona))

    @extend_schema(responses=ANY, summary="Delete a persona")
    def delete(self, request: Request, key: str) -> Response:
        team = principal_of(request).team
        persona = Persona.objects.filter(team=team, pk=key).first()
        if persona is None:
            raise NotFound("persona")
        _agent(request, persona.agent_id)
        persona.delete()
        return Response({"deleted": key})


class AutoConfigInputSerializer(serializers.Serializer):
    compress_every_n = StrictIntegerField(required=False, min_value=0, max_value=10000)
    compress_target_count = StrictIntegerField(required=False, min_value=1, max_value=50)
    cleanup_idle_days = StrictIntegerField(required=False, min_value=0, max_value=36500)
    cleanup_min_importance = StrictFloatField(required=False, min_value=0.0, max_value=1.0)
    enabled = StrictBooleanField(required=False)
    warmup_max_memories = StrictIntegerField(required=False, min_value=0, max_value=10000)
    warmup_compress_every_n = StrictIntegerField(required=False, min_value=0, max_value=10000)
    extract_graph = StrictBooleanField(required=False)


class AutoConfigApi(APIView):
    @extend_schema(responses=ANY, summary="The team's pipeline configuration")
    def get(self, request: Request) -> Response:
        return Response(pipeline.config_dict(pipeline.config_get(team=principal_of(request).team)))

    @extend_schema(
        request=AutoConfigInputSerializer,
        responses=ANY,
        summary="Update the pipeline configuration",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_team_wide_key(principal)
        s = AutoConfigInputSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        config = pipeline.config_update(team=principal.team, **s.validated_data)
        return Response(pipeline.config_dict(config))


class AutoRunApi(APIView):
    @extend_schema(
        responses=ANY, summary="Run now every action the team's pipeline config calls for"
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_team_wide_key(principal)
        return Response({"results": pipeline.auto_run(team=principal.team, trigger="api")})


class SourcesApi(APIView):
    """Traceability through the API: the working-memory items (L0) a derived memory was made from."""

    @extend_schema(
        responses=ANY, summary="The archived working-memory items a memory was derived from"
    )
    def get(self, request: Request, memory_id: int) -> Response:
        principal = principal_of(request)
        memory = memory_get(team=principal.team, memory_id=memory_id)
        check_memory_access(memory=memory, acting_agent=principal.agent_id, action=READ)
        archived = working_sources(team=principal.team, memory=memory)
        return Response(
            {
                "memory_id": memory.pk,
                "source": (memory.metadata or {}).get("source"),
                "job_id": (memory.metadata or {}).get("job_id"),
                "supersedes": list(memory.supersedes.values_list("pk", flat=True)),
                "source_items": [
                    {
                        "id": a.item_id,
                        "agent_id": a.agent_id,
                        "content": a.content,
                        "created_at": iso(a.item_created_at),
                        "archived_at": iso(a.archived_at),
                    }
                    for a in archived
                ],
            }
        )
