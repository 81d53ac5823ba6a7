"""Console entry pages: the list of the user's teams and a team's home."""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from tenants.models import Team

from . import access


def index(request: HttpRequest) -> HttpResponse:
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return redirect_to_login(request.get_full_path(), "/admin/login/")
    teams = access.visible_teams(request)
    if len(teams) == 1:
        return redirect("console:team-home", team_id=teams[0].id)
    return render(request, "console/index.html", {"teams": teams})


@access.console_view()
def team_home(request: HttpRequest, team: Team) -> HttpResponse:
    return redirect("console:dashboard", team_id=team.id)
