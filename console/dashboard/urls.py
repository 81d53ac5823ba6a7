"""Console URLs for the dashboard area (mounted under /review/<team_id>/dashboard/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="dashboard"),
]
