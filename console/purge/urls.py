"""Console URLs for the purge area (mounted under /review/<team_id>/purge/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="purge"),
    path("confirm/", views.confirm, name="purge-confirm"),
    path("trash/", views.trash, name="purge-trash"),
    path("trash/<int:item_id>/", views.trash_item, name="purge-trash-item"),
    path("trash/<int:item_id>/restore/", views.restore_item, name="purge-restore-item"),
    path("runs/<int:run_id>/restore/", views.restore_run, name="purge-restore-run"),
]
