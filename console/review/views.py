"""Console views for the review area. Thin: parse the form, call services/selectors, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import access
from tenants.models import Team


@access.console_view()
def index(request: HttpRequest, team: Team) -> HttpResponse:
    # Placeholder until the area is built.
    return render(request, "console/placeholder.html", {"team": team, "area": "memories"})
