"""Console URLs for the keys area (mounted under /review/<team_id>/keys/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="keys"),
    path("issue/", views.issue, name="keys-issue"),
    path("<str:key_id>/rotate/", views.rotate, name="keys-rotate"),
    path("<str:key_id>/revoke/", views.revoke, name="keys-revoke"),
    path("mcp/issue/", views.mcp_issue, name="keys-mcp-issue"),
    path("mcp/<str:token_id>/revoke/", views.mcp_revoke, name="keys-mcp-revoke"),
]
