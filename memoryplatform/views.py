"""Project-level endpoints that span apps: health, readiness and stats."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import api
from core import metrics as core_metrics
from core.errors import ErrorCode
from core.openapi import api_operation
from tenants.apis import principal_of

from . import health, stats


class HealthApi(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @api_operation(
        public=True,
        response=inline_serializer("Health", {"status": serializers.CharField()}),
        summary="Liveness (no authentication)",
    )
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadyApi(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    @api_operation(
        public=True,
        errors=(503,),
        response=inline_serializer(
            "Ready", {"status": serializers.CharField(), "checks": serializers.DictField()}
        ),
        summary="Readiness: database, Redis, broker, embedding model (no authentication)",
    )
    def get(self, request: Request) -> Response:
        checks = health.readiness()
        failed = sorted(name for name, check in checks.items() if not check.ok)
        # Error texts and versions only for operators (health.may_see_details); anyone else
        # learns which parts fail, not how.
        detailed = health.may_see_details(request)
        body = {
            "status": "ok" if not failed else "unavailable",
            "checks": {
                name: {"ok": c.ok, "detail": c.detail} if detailed else {"ok": c.ok}
                for name, c in checks.items()
            },
        }
        if failed:
            payload = {
                "ok": False,
                "error": f"not ready: {', '.join(failed)} failing",
                "code": ErrorCode.SERVICE_UNAVAILABLE,
                "details": {
                    name: [checks[name].detail if detailed else "failing"] for name in failed
                },
                "data": body,
            }
            response = Response(payload, status=503)
            response.exception = True
            return response
        return Response(body)


class StatsApi(APIView):
    @api_operation(
        response=inline_serializer(
            "Stats",
            {
                "personal_memories": serializers.IntegerField(),
                "team_memories": serializers.IntegerField(),
                "agents": serializers.IntegerField(),
                "working_memories": serializers.IntegerField(
                    allow_null=True, help_text="null when the working store is down"
                ),
                "working_evicted_to_archive": serializers.IntegerField(
                    help_text="working items moved to the archive by the per-agent cap"
                ),
                "scenarios": serializers.IntegerField(),
                "personas": serializers.IntegerField(),
                "entities": serializers.IntegerField(),
                "relations": serializers.IntegerField(),
                "redis_ok": serializers.BooleanField(
                    allow_null=True, help_text="null in embedded mode (no Redis configured)"
                ),
                "embedding_ok": serializers.BooleanField(),
                "working_store": serializers.ChoiceField(
                    choices=["redis", "database"], help_text="where working memory lives"
                ),
                "working_memory_backend": serializers.ChoiceField(
                    choices=["redis", "database"], help_text="the earlier name of working_store"
                ),
                "embedding_model": serializers.CharField(),
                "llm": serializers.CharField(),
            },
        ),
        summary="Counts for the key's team and the health of its dependencies",
    )
    def get(self, request: Request) -> Response:
        return Response(stats.team_stats(team=principal_of(request).team))


@csrf_exempt
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
    return api.handler404(request)


def metrics(request: HttpRequest) -> HttpResponse:
    """`GET /metrics` in Prometheus text format, for METRICS_ALLOWED_IPS or a METRICS_TOKEN
    bearer; anyone else gets the API's 404, as if there were no such page."""
    if request.method not in ("GET", "HEAD") or not health.may_scrape_metrics(request):
        return api.handler404(request)
    body, content_type = core_metrics.exposition()
    return HttpResponse(body, content_type=content_type)


def landing(request: HttpRequest) -> HttpResponse:
    """`GET /`: where a person who opens the server's address can go (the console, the admin,
    the API docs when they are visible to this visitor, health); the admin's "View site" too."""
    user = getattr(request, "user", None)
    docs_visible = settings.API_DOCS_PUBLIC or bool(user and user.is_active and user.is_staff)
    return render(request, "landing.html", {"docs_visible": docs_visible})


def api_docs_gate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`/api/schema/` and `/api/docs/` for everyone, or (API_DOCS_PUBLIC=False, the production
    default) only for staff logged into the admin: anyone else gets the API's 404, as if there
    were no such page, so the map of the API is not handed to strangers."""

    @wraps(view)
    def gated(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.API_DOCS_PUBLIC:
            user = getattr(request, "user", None)
            if user is None or not (user.is_active and user.is_staff):
                return api.handler404(request)
        return view(request, *args, **kwargs)

    return gated
