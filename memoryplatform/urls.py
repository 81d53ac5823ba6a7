"""URL map. API paths have no trailing slash (the original API's); admin keeps Django's."""

from __future__ import annotations

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views import View
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

# Every API endpoint: (route, class-based view, URL name); `reverse()` uses the names.
API_ROUTES: tuple[tuple[str, type[View], str], ...] = (
    ("health", views.HealthApi, "health"),
    ("health/ready", views.ReadyApi, "health-ready"),
    ("stats", views.StatsApi, "stats"),
    ("teams", tenant_apis.TeamUpsertApi, "team-upsert"),
    ("teams/<str:team_id>", tenant_apis.TeamDetailApi, "team-detail"),
    ("agents", tenant_apis.AgentUpsertApi, "agent-upsert"),
    ("agents/<str:team_id>", tenant_apis.AgentListApi, "agent-list"),
    ("agents/<str:team_id>/<str:agent_id>", tenant_apis.AgentDetailApi, "agent-detail"),
    ("memories/personal", memory_apis.PersonalCreateApi, "personal-create"),
    ("memories/personal/search", memory_apis.PersonalSearchApi, "personal-search"),
    ("memories/personal/recent/<str:agent_id>", memory_apis.PersonalRecentApi, "personal-recent"),
    ("memories/personal/<int:memory_id>", memory_apis.PersonalDetailApi, "personal-detail"),
    ("memories/personal/<int:memory_id>/share", memory_apis.PersonalShareApi, "personal-share"),
    ("memories/team", memory_apis.TeamCreateApi, "team-memory-create"),
    ("memories/team/search", memory_apis.TeamSearchApi, "team-memory-search"),
    ("memories/team/recent", memory_apis.TeamRecentApi, "team-memory-recent"),
    ("memories/team/<int:memory_id>", memory_apis.TeamDetailApi, "team-memory-detail"),
    ("memories", memory_apis.MemoryListApi, "memory-list"),
    ("memories/personal/batch", memory_apis.PersonalBatchApi, "personal-batch"),
    ("memories/personal/batch/delete", memory_apis.PersonalBatchDeleteApi, "personal-batch-delete"),
    ("memories/personal/batch/update", memory_apis.PersonalBatchUpdateApi, "personal-batch-update"),
    ("memories/ingest", lifecycle_apis.IngestApi, "memory-ingest"),
    ("memories/team/batch", memory_apis.TeamBatchApi, "team-batch"),
    ("memories/team/batch/delete", memory_apis.TeamBatchDeleteApi, "team-batch-delete"),
    ("memories/team/batch/update", memory_apis.TeamBatchUpdateApi, "team-batch-update"),
    ("memories/<int:memory_id>", memory_apis.MemoryReadApi, "memory-read"),
    ("memories/<int:memory_id>/history", memory_apis.MemoryHistoryApi, "memory-history"),
    ("memories/trash", memory_apis.TrashListApi, "trash-list"),
    ("memories/trash/<int:memory_id>", memory_apis.TrashDetailApi, "trash-detail"),
    ("memories/trash/<int:memory_id>/restore", memory_apis.TrashRestoreApi, "trash-restore"),
    ("memories/working", memory_apis.WorkingCreateApi, "working-create"),
    ("episodes", memory_apis.EpisodeCreateApi, "episode-create"),
    ("episodes/search", memory_apis.EpisodeSearchApi, "episode-search"),
    ("procedures/<str:agent_id>", memory_apis.ProcedureListApi, "procedure-list"),
    ("procedures/<str:agent_id>/history", memory_apis.ProcedureHistoryApi, "procedure-history"),
    (
        "procedures/<str:agent_id>/<int:procedure_id>",
        memory_apis.ProcedureDetailApi,
        "procedure-detail",
    ),
    (
        "procedures/<str:agent_id>/<int:procedure_id>/restore",
        memory_apis.ProcedureRestoreApi,
        "procedure-restore",
    ),
    ("memories/working/<str:agent_id>", memory_apis.WorkingAgentApi, "working-agent"),
    ("profile/<str:agent_id>", memory_apis.ProfileApi, "profile"),
    ("profile/<str:agent_id>/history", memory_apis.ProfileHistoryApi, "profile-history"),
    ("profile/<str:agent_id>/<str:key>", memory_apis.ProfileFieldApi, "profile-field"),
    ("lifecycle/compress", lifecycle_apis.CompressApi, "lifecycle-compress"),
    ("lifecycle/cleanup", lifecycle_apis.CleanupApi, "lifecycle-cleanup"),
    ("lifecycle/extract-facts", lifecycle_apis.ExtractFactsApi, "lifecycle-extract-facts"),
    ("lifecycle/aggregate-scenes", lifecycle_apis.AggregateApi, "lifecycle-aggregate"),
    # The Markdown exports before the `<str:key>` routes, which would match "a1.md" too.
    (
        "lifecycle/scenarios/<str:agent_id>.md",
        lifecycle_apis.ScenariosMarkdownApi,
        "lifecycle-scenarios-markdown",
    ),
    ("lifecycle/scenarios/<str:key>", lifecycle_apis.ScenariosApi, "lifecycle-scenarios"),
    ("lifecycle/generate-persona", lifecycle_apis.GeneratePersonaApi, "lifecycle-persona-generate"),
    (
        "lifecycle/persona/<str:agent_id>.md",
        lifecycle_apis.PersonaMarkdownApi,
        "lifecycle-persona-markdown",
    ),
    ("lifecycle/persona/<str:key>", lifecycle_apis.PersonaApi, "lifecycle-persona"),
    ("lifecycle/auto-config", lifecycle_apis.AutoConfigApi, "lifecycle-auto-config"),
    ("lifecycle/auto-run", lifecycle_apis.AutoRunApi, "lifecycle-auto-run"),
    ("lifecycle/sources/<int:memory_id>", lifecycle_apis.SourcesApi, "lifecycle-sources"),
    # Before the item route: "search" is no item id (those are uuid4 hex).
    ("lifecycle/archive/search", lifecycle_apis.ArchiveSearchApi, "lifecycle-archive-search"),
    ("lifecycle/archive/<str:item_id>", lifecycle_apis.ArchiveItemApi, "lifecycle-archive-item"),
    ("graph", graph_apis.GraphApi, "graph"),
    ("graph/entities", graph_apis.EntityListCreateApi, "graph-entities"),
    ("graph/entities/<str:entity_id>", graph_apis.EntityDetailApi, "graph-entity-detail"),
    ("graph/relations", graph_apis.RelationListCreateApi, "graph-relations"),
    ("graph/relations/<str:relation_id>", graph_apis.RelationDetailApi, "graph-relation-detail"),
    ("lifecycle/extract-graph", lifecycle_apis.ExtractGraphApi, "lifecycle-extract-graph"),
    ("jobs/<int:job_id>", lifecycle_apis.JobApi, "job-detail"),
    ("lifecycle/consolidate", lifecycle_apis.ConsolidateApi, "lifecycle-consolidate"),
    (
        "lifecycle/propose-procedures",
        lifecycle_apis.ProposeProceduresApi,
        "lifecycle-propose-procedures",
    ),
    ("export", lifecycle_apis.ExportApi, "export"),
    ("export/<int:job_id>", lifecycle_apis.ExportDownloadApi, "export-download"),
    ("import", lifecycle_apis.ImportApi, "import"),
)

admin.site.site_header = "Memory platform admin"
admin.site.site_title = "Memory platform admin"
admin.site.index_title = "Teams, members and API keys"

urlpatterns = [
    *(path(route, view.as_view(), name=name) for route, view, name in API_ROUTES),
    # Public, or staff only (404 for anyone else), by API_DOCS_PUBLIC (docs/security.md).
    path("api/schema/", views.api_docs_gate(SpectacularAPIView.as_view()), name="schema"),
    path(
        "api/docs/",
        views.api_docs_gate(SpectacularSwaggerView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("", views.landing, name="landing"),
    path("metrics", views.metrics, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url=static("console/favicon.svg"), permanent=True)),
    path("mcp", mcp_endpoint, name="mcp"),
    path("admin", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("review/", include("console.urls")),
    # Anything else outside the HTML areas is an API 404 in the envelope, whatever DEBUG says.
    re_path(r"^(?!admin/|static/|review/).*$", views.not_found, name="not-found"),
]
