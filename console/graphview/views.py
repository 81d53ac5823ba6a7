"""Console views for the graph area. Thin: validate the form, call the selectors, render.

The page draws the graph in the browser (Cytoscape.js, vendored under static/console/vendor)
from two session-authenticated, team-scoped JSON endpoints: `data/` (the graph) and
`entity/<id>/` (the side panel).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse

from console import access
from core.errors import Forbidden, NotFound
from core.validators import AGENT_ID_RE
from graph import selectors as graph_selectors
from graph import traversal
from tenants.models import Team

from . import selectors

# The console draws in the browser: a lower ceiling than the API's MAX_NODES_LIMIT keeps the
# page responsive; the API's defaults are the console's defaults.
CONSOLE_MAX_NODES = 2000
CONSOLE_MAX_EDGES = 5000
MAX_QUERY_CHARS = 1000


class GraphForm(forms.Form):
    agent = forms.CharField(
        required=False, max_length=64, validators=[RegexValidator(AGENT_ID_RE, "Not an agent id.")]
    )
    q = forms.CharField(required=False, max_length=MAX_QUERY_CHARS, label="Search entities")
    entity = forms.UUIDField(required=False)
    depth = forms.IntegerField(
        required=False, min_value=1, max_value=traversal.MAX_DEPTH, initial=1
    )
    max_nodes = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=CONSOLE_MAX_NODES,
        initial=traversal.DEFAULT_MAX_NODES,
    )
    max_edges = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=CONSOLE_MAX_EDGES,
        initial=traversal.DEFAULT_MAX_EDGES,
    )

    def query(self) -> selectors.GraphQuery:
        d = self.cleaned_data
        return selectors.GraphQuery(
            agent=d.get("agent") or "",
            q=(d.get("q") or "").strip(),
            entity=str(d["entity"]) if d.get("entity") else "",
            depth=d.get("depth") or 1,
            max_nodes=d.get("max_nodes") or traversal.DEFAULT_MAX_NODES,
            max_edges=d.get("max_edges") or traversal.DEFAULT_MAX_EDGES,
        )


def _form(request: HttpRequest) -> GraphForm:
    form = GraphForm(request.GET)
    form.is_valid()
    return form


@access.console_view()
def index(request: HttpRequest, team: Team) -> HttpResponse:
    form = _form(request)
    config: dict[str, Any] = {
        "dataUrl": reverse("console:graph-data", kwargs={"team_id": team.id}),
        "entityUrl": reverse(
            "console:graph-entity",
            kwargs={"team_id": team.id, "entity_id": "00000000-0000-0000-0000-000000000000"},
        ),
        "memoryUrl": reverse("console:memories", kwargs={"team_id": team.id}) + "0/",
        "pageUrl": reverse("console:graph", kwargs={"team_id": team.id}),
        "query": request.GET.urlencode() if form.is_valid() else "",
        "agent": form.cleaned_data.get("agent", "") if form.is_valid() else "",
    }
    context = {
        "team": team,
        "area": "graph",
        "form": form,
        "agents": graph_selectors.graph_agent_ids(team=team),
        "config": config,
        "caps": {"nodes": CONSOLE_MAX_NODES, "edges": CONSOLE_MAX_EDGES},
    }
    return render(request, "console/graphview/index.html", context)


def _error(status: int, message: str, details: dict[str, Any] | None = None) -> JsonResponse:
    return JsonResponse({"error": message, "details": details or {}}, status=status)


@access.console_view()
def data(request: HttpRequest, team: Team) -> HttpResponse:
    form = _form(request)
    if not form.is_valid():
        return _error(400, "invalid input", form.errors.get_json_data())
    try:
        body = selectors.console_graph(team=team, query=form.query())
    except NotFound:
        raise Http404("No such entity.") from None
    except Forbidden:
        return _error(403, "this entity belongs to another agent")
    return JsonResponse(body)


@access.console_view()
def entity(request: HttpRequest, team: Team, entity_id: str) -> HttpResponse:
    form = _form(request)
    agent = form.cleaned_data.get("agent", "") if form.is_valid() else ""
    try:
        body = selectors.console_entity(team=team, entity_id=entity_id, agent=agent)
    except NotFound:
        raise Http404("No such entity.") from None
    except Forbidden:
        return _error(403, "this entity belongs to another agent")
    return JsonResponse(body)
