"""Console URL map, mounted at /review/. Every team page lives under /review/<team_id>/."""

from __future__ import annotations

from django.urls import include, path

from . import views

app_name = "console"

urlpatterns = [
    path("", views.index, name="index"),
    path("<str:team_id>/", views.team_home, name="team-home"),
    path("<str:team_id>/dashboard/", include("console.dashboard.urls")),
    path("<str:team_id>/memories/", include("console.review.urls")),
    path("<str:team_id>/purge/", include("console.purge.urls")),
    path("<str:team_id>/lifecycle/", include("console.lifecycle.urls")),
    path("<str:team_id>/graph/", include("console.graphview.urls")),
    path("<str:team_id>/keys/", include("console.keys.urls")),
    path("<str:team_id>/transfer/", include("console.transfer.urls")),
]
