"""Teams and agents endpoints. Thin: validate, call a service or selector, render."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import require_team_wide
from core.api import upserted, validated_body
from core.errors import Forbidden
from core.openapi import api_operation
from core.serializers import JSONObjectField, StrictCharField
from core.validators import AGENT_ID, TEAM_ID_RE

from . import selectors, services
from .authentication import ApiPrincipal
from .models import Agent, Team


def principal_of(request: Request) -> ApiPrincipal:
    principal = request.user
    assert isinstance(principal, ApiPrincipal)
    return principal


class TeamOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    config = serializers.DictField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class AgentOutputSerializer(serializers.Serializer):
    id = serializers.CharField(source="agent_id")
    team_id = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField()
    config = serializers.DictField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def team_data(team: Team) -> dict[str, Any]:
    return TeamOutputSerializer(team).data  # type: ignore[return-value]


def agent_data(agent: Agent) -> dict[str, Any]:
    return AgentOutputSerializer(agent).data  # type: ignore[return-value]


class TeamUpsertApi(APIView):
    class TeamUpsertInputSerializer(serializers.Serializer):
        team_id = StrictCharField(
            validators=[RegexValidator(TEAM_ID_RE, "Must match [A-Za-z0-9_-]{1,64}.")]
        )
        name = StrictCharField(max_length=200)
        description = StrictCharField(required=False, allow_blank=True, max_length=10_000)
        config = JSONObjectField(required=False)

    InputSerializer = TeamUpsertInputSerializer

    @api_operation(
        request=InputSerializer,
        response=TeamOutputSerializer,
        statuses=(201, 200),
        errors=(403,),
        summary="Create (201) or update (200) the key's team",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, self.InputSerializer)
        selectors.team_check_same(team=principal.team, team_id=data["team_id"])
        require_team_wide(acting_agent=principal.agent_id)
        team, created = services.team_upsert(
            team_id=principal.team.id,
            name=data["name"],
            description=data.get("description"),
            config=data.get("config"),
        )
        return upserted(team_data(team), created=created)


class TeamDetailApi(APIView):
    @api_operation(response=TeamOutputSerializer, errors=(403,), summary="Get the key's team")
    def get(self, request: Request, team_id: str) -> Response:
        team = selectors.team_check_same(team=principal_of(request).team, team_id=team_id)
        return Response(team_data(team))

    @api_operation(
        errors=(403,),
        summary="Delete the key's team and all its data",
        description="Final: nothing goes to the memory trash and the team's trash is emptied; "
        "it cannot be undone.",
    )
    def delete(self, request: Request, team_id: str) -> Response:
        principal = principal_of(request)
        team = selectors.team_check_same(team=principal.team, team_id=team_id)
        require_team_wide(acting_agent=principal.agent_id)
        services.team_delete(team=team)
        return Response(None)


class AgentUpsertApi(APIView):
    class AgentUpsertInputSerializer(serializers.Serializer):
        agent_id = StrictCharField(validators=[AGENT_ID])
        name = StrictCharField(max_length=200)
        role = StrictCharField(required=False, allow_blank=True, max_length=200)
        config = JSONObjectField(required=False)

    InputSerializer = AgentUpsertInputSerializer

    @api_operation(
        request=InputSerializer,
        response=AgentOutputSerializer,
        statuses=(201, 200),
        errors=(403,),
        summary="Create (201) or update (200) an agent",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, self.InputSerializer)
        agent_id = data["agent_id"]
        if principal.agent_id is not None and principal.agent_id != agent_id:
            raise Forbidden("an agent-scoped key can only change its own agent")
        agent, created = services.agent_upsert(
            team=principal.team,
            agent_id=agent_id,
            name=data["name"],
            role=data.get("role"),
            config=data.get("config"),
        )
        return upserted(agent_data(agent), created=created)


class AgentListApi(APIView):
    @api_operation(
        response=AgentOutputSerializer(many=True),
        errors=(403,),
        summary="List the team's agents",
        operation_id="agents_list",
    )
    def get(self, request: Request, team_id: str) -> Response:
        team = selectors.team_check_same(team=principal_of(request).team, team_id=team_id)
        return Response([agent_data(a) for a in selectors.agent_list(team=team)])


class AgentDetailApi(APIView):
    @api_operation(response=AgentOutputSerializer, errors=(403, 404), summary="Get an agent")
    def get(self, request: Request, team_id: str, agent_id: str) -> Response:
        team = selectors.team_check_same(team=principal_of(request).team, team_id=team_id)
        return Response(agent_data(selectors.agent_get(team=team, agent_id=agent_id)))

    @api_operation(
        errors=(403, 404),
        summary="Delete an agent and its personal and working memories",
        description="Final: its personal memories skip the trash and those already in the trash "
        "are erased; it cannot be undone. Team memories it wrote stay.",
    )
    def delete(self, request: Request, team_id: str, agent_id: str) -> Response:
        principal = principal_of(request)
        team = selectors.team_check_same(team=principal.team, team_id=team_id)
        if principal.agent_id is not None and principal.agent_id != agent_id:
            raise Forbidden("an agent-scoped key can only delete its own agent")
        services.agent_delete(team=team, agent_id=agent_id)
        return Response(None)
