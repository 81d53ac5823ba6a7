"""Console URLs for the review area (mounted under /review/<team_id>/memories/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="memories"),
    path("bulk/", views.bulk, name="memories-bulk"),
    path("<int:memory_id>/", views.detail, name="memory-detail"),
    path("<int:memory_id>/quick/", views.quick_edit, name="memory-quick"),
    path(
        "<int:memory_id>/revisions/<int:revision_id>/revert/",
        views.revert,
        name="memory-revert",
    ),
    path("<int:memory_id>/promote/", views.promote, name="memory-promote"),
    path("<int:memory_id>/share/", views.share, name="memory-share"),
    path("<int:memory_id>/unshare/", views.unshare, name="memory-unshare"),
]
