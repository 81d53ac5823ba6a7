"""Console URLs for the review area (mounted under /review/<team_id>/memories/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="memories"),
]
