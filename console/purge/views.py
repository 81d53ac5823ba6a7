"""Console views for the purge area. Thin: parse the form, call memories.purge, render.

GET / with the criteria renders a preview (changes nothing, viewers too); POST confirm/ (lead)
purges exactly the previewed set or shows what changed and a new preview; the trash lists what
was purged and restores it (POST, lead).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from console import access
from core.errors import DomainError
from memories import purge
from memories.models import PurgeRun, PurgeStatus, TrashedMemory
from tenants.models import Team

from .forms import ConfirmForm, PurgeCriteriaForm, TrashFilterForm

TRASH_PAGE_SIZE = 100


def _history(team: Team) -> list[dict[str, Any]]:
    return [
        {"run": run, "criteria": purge.PurgeCriteria.from_dict(run.criteria).describe()}
        for run in purge.purge_runs(team=team)
    ]


def _page(
    request: HttpRequest,
    team: Team,
    form: PurgeCriteriaForm,
    preview: purge.PurgePreview | None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "area": "purge",
        "team": team,
        "form": form,
        "preview": preview,
        "confirm_form": ConfirmForm(initial={"token": preview.token})
        if preview and preview.token
        else None,
        "history": _history(team),
        "max_items": purge.MAX_PURGE_ITEMS,
        "retention_days": settings.TRASH_RETENTION_DAYS,
    }
    return render(request, "console/purge/index.html", context, status=status)


@access.console_view()
@require_GET
def index(request: HttpRequest, team: Team) -> HttpResponse:
    # Beat does not run in the embedded mode: empty this team's expired trash when the page opens.
    purge.trash_empty_expired(team=team)
    if "preview" not in request.GET:
        return _page(request, team, PurgeCriteriaForm(team=team), None)
    form = PurgeCriteriaForm(request.GET, team=team)
    if not form.is_valid():
        return _page(request, team, form, None, status=400)
    return _page(request, team, form, purge.purge_preview(team=team, criteria=form.criteria()))


def _changes_text(changes: dict[str, list[int]]) -> str:
    def ids(values: list[int]) -> str:
        shown = ", ".join(f"#{v}" for v in values[:20])
        return shown + (f" and {len(values) - 20} more" if len(values) > 20 else "")

    parts = []
    if changes.get("added"):
        parts.append(f"{len(changes['added'])} new match(es) ({ids(changes['added'])})")
    if changes.get("removed"):
        parts.append(
            f"{len(changes['removed'])} no longer match, were pinned or deleted "
            f"({ids(changes['removed'])})"
        )
    if changes.get("modified"):
        parts.append(f"{len(changes['modified'])} changed or accessed ({ids(changes['modified'])})")
    return "; ".join(parts) or "more memories than one purge may remove now match"


@access.console_view(lead=True)
@require_POST
def confirm(request: HttpRequest, team: Team) -> HttpResponse:
    form = ConfirmForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Missing preview: preview the purge first.")
        return redirect("console:purge", team_id=team.id)
    try:
        outcome = purge.purge_confirm(
            team=team, token=form.cleaned_data["token"], user=request.user
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("console:purge", team_id=team.id)
    if outcome.run.status == PurgeStatus.CHANGED:
        messages.warning(
            request,
            "Nothing was purged: the set changed since your preview — "
            f"{_changes_text(outcome.changes)}. Check the new preview below and confirm again.",
        )
        assert outcome.preview is not None
        criteria = outcome.preview.criteria
        form_again = PurgeCriteriaForm(
            {
                "agent": criteria.agent_id,
                "idle_days": criteria.idle_days,
                "importance_below": criteria.importance_below,
                "scopes": list(criteria.scopes),
            },
            team=team,
        )
        form_again.is_valid()
        return _page(request, team, form_again, outcome.preview, status=409)
    n = outcome.run.count
    messages.success(
        request,
        f"Moved {n} memor{'y' if n == 1 else 'ies'} to the trash (purge run #{outcome.run.pk}); "
        f"restorable for {settings.TRASH_RETENTION_DAYS} days.",
    )
    return redirect(f"{reverse('console:purge-trash', args=[team.id])}?run={outcome.run.pk}")


@access.console_view()
@require_GET
def trash(request: HttpRequest, team: Team) -> HttpResponse:
    purge.trash_empty_expired(team=team)
    filters = TrashFilterForm(request.GET)
    run = None
    agent_id = ""
    if filters.is_valid():
        if filters.cleaned_data["run"]:
            run = get_object_or_404(PurgeRun, team=team, pk=filters.cleaned_data["run"])
        agent_id = filters.cleaned_data["agent"] or ""
    page = Paginator(
        purge.trash_list(team=team, purge_run=run, agent_id=agent_id), TRASH_PAGE_SIZE
    ).get_page(request.GET.get("page"))
    context = {
        "area": "purge",
        "team": team,
        "filters": filters,
        "run": run,
        "run_criteria": purge.PurgeCriteria.from_dict(run.criteria).describe() if run else "",
        "agent_id": agent_id,
        "agents": purge.trash_agents(team=team),
        "page": page,
        "runs": purge.purge_runs(team=team),
    }
    return render(request, "console/purge/trash.html", context)


@access.console_view()
@require_GET
def trash_item(request: HttpRequest, team: Team, item_id: int) -> HttpResponse:
    item = get_object_or_404(TrashedMemory, team=team, pk=item_id)
    return render(
        request, "console/purge/trash_item.html", {"area": "purge", "team": team, "item": item}
    )


def _report(request: HttpRequest, result: purge.RestoreResult) -> None:
    if result.restored:
        ids = ", ".join(f"#{m}" for m in result.restored[:30])
        n = len(result.restored)
        messages.success(request, f"Restored {n} memor{'y' if n == 1 else 'ies'} ({ids}).")
    for text in result.problems:
        messages.warning(request, text)
    for text in result.notes:
        messages.info(request, text)
    if not result.restored and not result.problems:
        messages.info(request, "Nothing left to restore.")


def _back(team: Team, request: HttpRequest) -> HttpResponse:
    url = reverse("console:purge-trash", args=[team.id])
    run = request.POST.get("run", "")
    return redirect(f"{url}?run={run}" if run.isdigit() else url)


@access.console_view(lead=True)
@require_POST
def restore_item(request: HttpRequest, team: Team, item_id: int) -> HttpResponse:
    item = get_object_or_404(TrashedMemory, team=team, pk=item_id)
    _report(request, purge.trash_restore(team=team, items=[item]))
    return _back(team, request)


@access.console_view(lead=True)
@require_POST
def restore_run(request: HttpRequest, team: Team, run_id: int) -> HttpResponse:
    run = get_object_or_404(PurgeRun, team=team, pk=run_id)
    items = list(TrashedMemory.objects.filter(team=team, purge_run=run).order_by("memory_id"))
    _report(request, purge.trash_restore(team=team, items=items))
    return _back(team, request)
