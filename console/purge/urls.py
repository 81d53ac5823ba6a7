"""Console URLs for the purge area (mounted under /review/<team_id>/purge/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="purge"),
]
