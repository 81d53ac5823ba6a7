"""Console URLs for the import & export area (mounted under /review/<team_id>/transfer/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="transfer"),
    path("import/", views.import_file, name="transfer-import"),
    path("export/", views.export_start, name="transfer-export"),
    path("export/<int:job_id>/", views.export_download, name="transfer-download"),
]
