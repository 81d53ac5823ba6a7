"""URL map. API paths have no trailing slash (seed 000); admin keeps Django's."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from tenants import apis as tenant_apis

from . import views

handler400 = "memoryplatform.api.handler400"
handler403 = "memoryplatform.api.handler403"
handler404 = "memoryplatform.api.handler404"
handler500 = "memoryplatform.api.handler500"

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
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("admin", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    # Anything else outside the HTML areas is an API 404 in the envelope, whatever DEBUG says.
    re_path(r"^(?!admin/|static/|review/).*$", views.not_found),
]
