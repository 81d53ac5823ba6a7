"""Console URLs for the graphview area (mounted under /review/<team_id>/graph/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="graph"),
    path("data/", views.data, name="graph-data"),
    path("entity/<str:entity_id>/", views.entity, name="graph-entity"),
]
