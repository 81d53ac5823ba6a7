"""Console views for moving memories in and out: import a file (a bundle, or mem0's, Letta's or
Zep's export) and export the team or one agent as a bundle. Thin: parse the form, call the same
services as POST /import and POST /export, render.

An import writes all or nothing, as the API's does: a bad file changes nothing and its error,
naming what in it is wrong, is shown beside the form. It runs in the request, as POST /import
does. An export is a job (trigger "admin"), listed here with its download once it succeeded.
Both need a lead; a bundle holds every memory it covers, so its download does too.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console import access
from core.errors import DomainError
from lifecycle import presenters, selectors
from lifecycle.models import JobKind, JobStatus
from lifecycle.services import pipeline
from lifecycle.services.bundle import bundle_filename, bundle_import
from lifecycle.services.convert import as_bundle
from memories.services import Actor
from tenants.models import Team

from .forms import ExportForm, ImportForm

# Exports listed on the page: the newest.
EXPORTS_SHOWN = 20


def _page(
    request: HttpRequest,
    team: Team,
    *,
    import_form: ImportForm | None = None,
    export_form: ExportForm | None = None,
    result: dict[str, object] | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "area": "transfer",
        "import_form": import_form or ImportForm(),
        "export_form": export_form or ExportForm(team=team),
        "exports": selectors.export_list(team=team, limit=EXPORTS_SHOWN),
        "result": result,
    }
    return render(request, "console/transfer/index.html", context, status=status)


@access.console_view()
def index(request: HttpRequest, team: Team) -> HttpResponse:
    """The import form, the export form and the team's recent exports."""
    return _page(request, team)


@never_cache
@require_POST
@access.console_view(lead=True)
def import_file(request: HttpRequest, team: Team) -> HttpResponse:
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return _page(request, team, import_form=form, status=400)
    data = form.cleaned_data
    try:
        bundle = as_bundle(
            data["file"].read(),
            source=data["source"],
            agent_from=data["agent_from"],
            default_agent=data["default_agent"] or "",
            agent_id=data["agent_id"] or "",
        )
        result = bundle_import(
            team=team,
            data=bundle,
            on_conflict=data["on_conflict"],
            actor=Actor.for_user(request.user),
        )
    except DomainError as exc:
        # What in the file is wrong (a line, a memory, an edge): nothing was written.
        form.add_error("file", exc.message)
        return _page(request, team, import_form=form, status=400)
    rows = [
        (kind, n, result.skipped.get(kind, 0))
        for kind, n in result.imported.items()
        if n or result.skipped.get(kind, 0)
    ]
    shown = {"name": data["file"].name, "rows": rows, "reembedded": result.reembedded}
    return _page(request, team, result=shown)


@require_POST
@access.console_view(lead=True)
def export_start(request: HttpRequest, team: Team) -> HttpResponse:
    form = ExportForm(request.POST, team=team)
    if not form.is_valid():
        return _page(request, team, export_form=form, status=400)
    agent = form.cleaned_data.get("agent")
    pipeline.run_later(
        team=team,
        kind=JobKind.EXPORT,
        trigger="admin",
        agent_id=agent.agent_id if agent else "",
        params={},
    )
    return redirect("console:transfer", team_id=team.id)


@access.console_view(lead=True)
@require_GET
def export_download(request: HttpRequest, team: Team, job_id: int) -> StreamingHttpResponse:
    """The bundle of one of the team's exports; any other job, another team's or one not (or no
    longer) downloadable is a 404."""
    job = selectors.job_get(team=team, job_id=job_id)
    if job is None or job.kind != JobKind.EXPORT or job.status != JobStatus.SUCCEEDED:
        raise Http404("No such export.")
    if not selectors.export_ready(job=job):
        raise Http404("This export was removed after EXPORT_RETENTION_HOURS.")
    name = bundle_filename(team=team, agent_id=job.agent_id or None, job_id=job.pk)
    return presenters.export_download(job=job, name=name)
