"""Console URLs for the lifecycle area (mounted under /review/<team_id>/lifecycle/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="lifecycle"),
]
