"""Project-level endpoints that span apps: health, readiness and stats (API.md §4.5)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.apis import principal_of

from . import api, health, stats


class HealthApi(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(
        auth=[],
        responses=inline_serializer("Health", {"status": serializers.CharField()}),
        summary="Liveness (no authentication)",
    )
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadyApi(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @extend_schema(
        auth=[],
        responses=inline_serializer(
            "Ready", {"status": serializers.CharField(), "checks": serializers.DictField()}
        ),
        summary="Readiness: database, Redis, broker, embedding model (no authentication)",
    )
    def get(self, request: Request) -> Response:
        checks = health.readiness()
        failed = sorted(name for name, check in checks.items() if not check.ok)
        body = {
            "status": "ok" if not failed else "unavailable",
            "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in checks.items()},
        }
        if failed:
            payload = {
                "ok": False,
                "error": f"not ready: {', '.join(failed)} failing",
                "code": "SERVICE_UNAVAILABLE",
                "details": {name: [checks[name].detail] for name in failed},
                "data": body,
            }
            response = Response(payload, status=503)
            response.exception = True
            return response
        return Response(body)


class StatsApi(APIView):
    @extend_schema(
        responses=inline_serializer(
            "Stats",
            {
                "personal_memories": serializers.IntegerField(),
                "team_memories": serializers.IntegerField(),
                "agents": serializers.IntegerField(),
                "redis_ok": serializers.BooleanField(),
                "embedding_ok": serializers.BooleanField(),
            },
        ),
        summary="Counts for the key's team and the health of its dependencies",
    )
    def get(self, request: Request) -> Response:
        return Response(stats.team_stats(team=principal_of(request).team))


@csrf_exempt
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
    return api.handler404(request)
