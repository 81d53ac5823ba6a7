"""URL map. API paths have no trailing slash (the original API's); admin keeps Django's."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agentmcp.views import mcp_endpoint
from graph import apis as graph_apis
from lifecycle import apis as lifecycle_apis
from memories import apis as memory_apis
from tenants import apis as tenant_apis

from . import views

handler400 = "core.api.handler400"
handler403 = "core.api.handler403"
handler404 = "core.api.handler404"
handler500 = "core.api.handler500"

urlpatterns = [
    path("health", views.HealthApi.as_view(), name="health"),
    path("health/ready", views.ReadyApi.as_view(), name="health-ready"),
    path("stats", views.StatsApi.as_view(), name="stats"),
    path("teams", tenant_apis.TeamUpsertApi.as_view(), name="team-upsert"),
    path("teams/<str:team_id>", tenant_apis.TeamDetailApi.as_view(), name="team-detail"),
    path("agents", tenant_apis.AgentUpsertApi.as_view(), name="agent-upsert"),
    path("agents/<str:team_id>", tenant_apis.AgentListApi.as_view(), name="agent-list"),
    path(
        "agents/<str:team_id>/<str:agent_id>",
        tenant_apis.AgentDetailApi.as_view(),
        name="agent-detail",
    ),
    path("memories/personal", memory_apis.PersonalCreateApi.as_view(), name="personal-create"),
    path(
        "memories/personal/search", memory_apis.PersonalSearchApi.as_view(), name="personal-search"
    ),
    path(
        "memories/personal/recent/<str:agent_id>",
        memory_apis.PersonalRecentApi.as_view(),
        name="personal-recent",
    ),
    path(
        "memories/personal/<int:memory_id>",
        memory_apis.PersonalDetailApi.as_view(),
        name="personal-detail",
    ),
    path(
        "memories/personal/<int:memory_id>/share",
        memory_apis.PersonalShareApi.as_view(),
        name="personal-share",
    ),
    path("memories/team", memory_apis.TeamCreateApi.as_view(), name="team-memory-create"),
    path("memories/team/search", memory_apis.TeamSearchApi.as_view(), name="team-memory-search"),
    path("memories/team/recent", memory_apis.TeamRecentApi.as_view(), name="team-memory-recent"),
    path(
        "memories/team/<int:memory_id>",
        memory_apis.TeamDetailApi.as_view(),
        name="team-memory-detail",
    ),
    path("memories/trash", memory_apis.TrashListApi.as_view(), name="trash-list"),
    path(
        "memories/trash/<int:memory_id>",
        memory_apis.TrashDetailApi.as_view(),
        name="trash-detail",
    ),
    path(
        "memories/trash/<int:memory_id>/restore",
        memory_apis.TrashRestoreApi.as_view(),
        name="trash-restore",
    ),
    path("memories/working", memory_apis.WorkingCreateApi.as_view(), name="working-create"),
    path(
        "memories/working/<str:agent_id>",
        memory_apis.WorkingAgentApi.as_view(),
        name="working-agent",
    ),
    path("lifecycle/compress", lifecycle_apis.CompressApi.as_view(), name="lifecycle-compress"),
    path("lifecycle/cleanup", lifecycle_apis.CleanupApi.as_view(), name="lifecycle-cleanup"),
    path(
        "lifecycle/extract-facts",
        lifecycle_apis.ExtractFactsApi.as_view(),
        name="lifecycle-extract-facts",
    ),
    path(
        "lifecycle/aggregate-scenes",
        lifecycle_apis.AggregateApi.as_view(),
        name="lifecycle-aggregate",
    ),
    path(
        "lifecycle/scenarios/<str:key>",
        lifecycle_apis.ScenariosApi.as_view(),
        name="lifecycle-scenarios",
    ),
    path(
        "lifecycle/generate-persona",
        lifecycle_apis.GeneratePersonaApi.as_view(),
        name="lifecycle-persona-generate",
    ),
    path(
        "lifecycle/persona/<str:key>", lifecycle_apis.PersonaApi.as_view(), name="lifecycle-persona"
    ),
    path(
        "lifecycle/auto-config",
        lifecycle_apis.AutoConfigApi.as_view(),
        name="lifecycle-auto-config",
    ),
    path("lifecycle/auto-run", lifecycle_apis.AutoRunApi.as_view(), name="lifecycle-auto-run"),
    path(
        "lifecycle/sources/<int:memory_id>",
        lifecycle_apis.SourcesApi.as_view(),
        name="lifecycle-sources",
    ),
    path("graph", graph_apis.GraphApi.as_view(), name="graph"),
    path("graph/entities", graph_apis.EntityListCreateApi.as_view(), name="graph-entities"),
    path(
        "graph/entities/<str:entity_id>",
        graph_apis.EntityDetailApi.as_view(),
        name="graph-entity-detail",
    ),
    path("graph/relations", graph_apis.RelationListCreateApi.as_view(), name="graph-relations"),
    path(
        "graph/relations/<str:relation_id>",
        graph_apis.RelationDetailApi.as_view(),
        name="graph-relation-detail",
    ),
    path(
        "lifecycle/extract-graph",
        lifecycle_apis.ExtractGraphApi.as_view(),
        name="lifecycle-extract-graph",
    ),
    # Public, or staff only (404 for anyone else), by API_DOCS_PUBLIC (docs/security.md).
    path("api/schema/", views.api_docs_gate(SpectacularAPIView.as_view()), name="schema"),
    path(
        "api/docs/",
        views.api_docs_gate(SpectacularSwaggerView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("mcp", mcp_endpoint, name="mcp"),
    path("admin", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("review/", include("console.urls")),
    # Anything else outside the HTML areas is an API 404 in the envelope, whatever DEBUG says.
    re_path(r"^(?!admin/|static/|review/).*$", views.not_found),
]
