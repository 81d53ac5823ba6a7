"""Console URLs for the lifecycle area (mounted under /review/<team_id>/lifecycle/)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("", views.index, name="lifecycle"),
    path("run/<str:kind>/", views.run_now, name="lifecycle-run"),
    path("jobs/", views.job_log, name="lifecycle-jobs"),
    path("jobs/<int:job_id>/", views.job_detail, name="lifecycle-job"),
    path("personas/", views.persona_list, name="lifecycle-personas"),
    path("personas/<str:persona_id>/", views.persona_detail, name="lifecycle-persona"),
    path("scenarios/<str:scenario_id>/", views.scenario_detail, name="lifecycle-scenario"),
    path("memories/<int:memory_id>/sources/", views.memory_sources, name="lifecycle-sources"),
    path("procedures/", views.procedure_list, name="lifecycle-procedures"),
    path("profiles/", views.profile_list, name="lifecycle-profiles"),
    path(
        "procedures/<int:procedure_id>/decide/",
        views.procedure_decide,
        name="lifecycle-procedure-decide",
    ),
    path(
        "procedures/<int:procedure_id>/history/",
        views.procedure_history,
        name="lifecycle-procedure-history",
    ),
    path(
        "procedures/<int:procedure_id>/restore/",
        views.procedure_restore,
        name="lifecycle-procedure-restore",
    ),
    path(
        "procedures/<int:procedure_id>/edit/",
        views.procedure_edit,
        name="lifecycle-procedure-edit",
    ),
    # Not `item_id`: the trash pages name their (integer) items so.
    path("archive/<str:archive_item_id>/", views.archive_item, name="lifecycle-archive-item"),
]
