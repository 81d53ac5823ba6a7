"""Console views for the lifecycle area. Thin: parse the form, call services/selectors, render.

Pipeline config: saved through `pipeline.config_update` after the API's own serializer
validated it. Run now: queued with `pipeline.run_later` (trigger "admin"), the same dispatch the
API and the workers use, recorded as a JobRun. Drill-down: persona -> scenarios (as the persona
saw them) -> memories -> archived working-memory sources, and back from an archived item to the
memories derived from it, all read through lifecycle selectors filtered by the team, so another
team's ids answer 404.
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console import access
from core.errors import DomainError, NotFound
from lifecycle import presenters, selectors
from lifecycle.models import JobRun, JobStatus
from lifecycle.services import pipeline
from memories import selectors as memory_selectors
from memories import services as memory_services
from memories.models import Memory, ProcedureStatus
from tenants import selectors as tenant_selectors
from tenants.models import Team

from .forms import (
    OPERATIONS,
    OPERATIONS_BY_KIND,
    JobFilterForm,
    PipelineConfigForm,
    RuleEditForm,
    RunForm,
)

JOBS_PER_PAGE = 50
PERSONAS_PER_PAGE = 30
RULES_PER_PAGE = 50
# Rules removed last, listed under the rules (each with its history, its last text included).
RULES_REMOVED_SHOWN = 20

T = TypeVar("T")


def _page(
    request: HttpRequest, template: str, context: dict[str, Any], *, status: int = 200
) -> HttpResponse:
    """console/lifecycle/<template>.html, in the lifecycle area of the navigation."""
    context = {"area": "lifecycle", **context}
    return render(request, f"console/lifecycle/{template}.html", context, status=status)


def _found(obj: T | None, what: str) -> T:
    """The object a selector found for this team; 404 when it found none."""
    if obj is None:
        raise Http404(f"No such {what}.")
    return obj


def _agent_ids(team: Team) -> list[str]:
    return list(tenant_selectors.agent_list(team=team).values_list("agent_id", flat=True))


def _run_forms(team: Team, agent_ids: list[str], failed: RunForm | None = None) -> list[RunForm]:
    forms = []
    for op in OPERATIONS:
        if failed is not None and failed.operation.kind == op.kind:
            forms.append(failed)
        else:
            forms.append(RunForm(operation=op, agent_ids=agent_ids, prefix=op.kind))
    return forms


def _index_page(
    request: HttpRequest,
    team: Team,
    *,
    config_form: PipelineConfigForm | None = None,
    failed_run: RunForm | None = None,
    status: int = 200,
) -> HttpResponse:
    config = pipeline.config_get(team=team)
    if config_form is None:
        config_form = PipelineConfigForm(initial=presenters.config_body(config))
    agent_ids = _agent_ids(team)
    context: dict[str, Any] = {
        "config": config,
        "configured": pipeline.config_is_saved(config),
        "config_form": config_form,
        "run_forms": _run_forms(team, agent_ids, failed_run),
        "agent_ids": agent_ids,
        "recent_jobs": selectors.job_list(team=team)[:10],
    }
    return _page(request, "index", context, status=status)


@access.console_view()
def index(request: HttpRequest, team: Team) -> HttpResponse:
    """The pipeline config form (lead saves), the run-now buttons and the latest jobs."""
    if request.method == "POST":
        form = PipelineConfigForm(request.POST)
        if not form.is_valid():
            return _index_page(request, team, config_form=form, status=400)
        was_saved = pipeline.config_is_saved(pipeline.config_get(team=team))
        pipeline.config_update(team=team, **form.validated)
        if was_saved:
            messages.success(request, "Pipeline configuration saved.")
        else:
            messages.success(
                request, "Pipeline configuration saved: automation is now on for this team."
            )
        return redirect("console:lifecycle", team_id=team.id)
    return _index_page(request, team)


@require_POST
@access.console_view(lead=True)
def run_now(request: HttpRequest, team: Team, kind: str) -> HttpResponse:
    """Queues one operation as a job (trigger "admin") and sends the lead to the job log."""
    operation = OPERATIONS_BY_KIND.get(kind)
    if operation is None:
        raise Http404("No such operation.")
    form = RunForm(request.POST, operation=operation, agent_ids=_agent_ids(team), prefix=kind)
    if not form.is_valid():
        return _index_page(request, team, failed_run=form, status=400)
    agent_id, params = form.job_args()
    job = pipeline.run_later(
        team=team, kind=kind, trigger="admin", agent_id=agent_id, params=params
    )
    what = operation.title.lower() + (" (dry run)" if params.get("dry_run") else "")
    messages.success(
        request,
        f"Job #{job.pk} ({what}{' for ' + agent_id if agent_id else ''}) started; "
        "its status is below.",
    )
    return redirect("console:lifecycle-jobs", team_id=team.id)


@access.console_view()
def job_log(request: HttpRequest, team: Team) -> HttpResponse:
    form = JobFilterForm(request.GET or None, agent_ids=selectors.job_agent_ids(team=team))
    jobs = selectors.job_list(team=team, **form.filters())
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        # While a job on this page is queued or running, the page reloads itself.
        "refresh_seconds": 3 if any(_active(j) for j in page.object_list) else 0,
    }
    return _page(request, "jobs", context)


def _active(job: JobRun) -> bool:
    return job.status in (JobStatus.QUEUED, JobStatus.RUNNING)


@access.console_view()
def job_detail(request: HttpRequest, team: Team, job_id: int) -> HttpResponse:
    job = _found(selectors.job_get(team=team, job_id=job_id), "job")
    context = {
        "job": job,
        "outputs": selectors.job_outputs(team=team, job=job),
        "refresh_seconds": 3 if _active(job) else 0,
    }
    return _page(request, "job", context)


@access.console_view()
def persona_list(request: HttpRequest, team: Team) -> HttpResponse:
    agent_id = request.GET.get("agent", "")
    personas = selectors.persona_list(team=team, agent_id=agent_id)
    page = Paginator(personas, PERSONAS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "query": urlencode({"agent": agent_id}) if agent_id else "",
        "agent": agent_id,
        "agent_ids": _agent_ids(team),
    }
    return _page(request, "personas", context)


@access.console_view()
def persona_detail(request: HttpRequest, team: Team, persona_id: str) -> HttpResponse:
    persona = _found(selectors.persona_get(team=team, persona_id=persona_id), "persona")
    context = {
        "persona": persona,
        "scenarios": selectors.persona_scenarios(team=team, persona=persona),
        "memories": selectors.memories_in_order(team=team, memory_ids=persona.memory_ids),
    }
    return _page(request, "persona", context)


@access.console_view()
def scenario_detail(request: HttpRequest, team: Team, scenario_id: str) -> HttpResponse:
    persona = None
    if request.GET.get("persona"):
        persona = _found(
            selectors.persona_get(team=team, persona_id=request.GET["persona"]), "persona"
        )
    scenario = _found(
        selectors.scenario_view(team=team, scenario_id=scenario_id, persona=persona), "scenario"
    )
    context = {
        "persona": persona,
        "scenario": scenario,
        "memories": selectors.memories_in_order(team=team, memory_ids=scenario.memory_ids),
    }
    return _page(request, "scenario", context)


@access.console_view()
def memory_sources(request: HttpRequest, team: Team, memory_id: int) -> HttpResponse:
    """The archived working-memory items a memory was derived from (GET /lifecycle/sources)."""
    memory = get_object_or_404(Memory, team=team, pk=memory_id)
    # Where the lead came from, for the way back; ids that are not the team's are just ignored.
    persona = selectors.persona_get(team=team, persona_id=request.GET.get("persona", ""))
    scenario = None
    if request.GET.get("scenario"):
        scenario = selectors.scenario_view(
            team=team, scenario_id=request.GET["scenario"], persona=persona
        )
    context = {
        "memory": memory,
        "persona": persona,
        "scenario": scenario,
        "item_ids": selectors.memory_source_item_ids(memory=memory),
        "sources": list(selectors.working_sources(team=team, memory=memory)),
        "supersedes": list(memory.supersedes.filter(team=team).order_by("pk")),
    }
    return _page(request, "sources", context)


@access.console_view()
def procedure_list(request: HttpRequest, team: Team) -> HttpResponse:
    """Every agent's rules (procedural memory), the proposals waiting for a decision first; by
    page, as a team of many agents holds up to MAX_RULES_PER_AGENT each."""
    status = request.GET.get("status", "")
    if status not in ("", *ProcedureStatus.values):
        status = ""
    agent_id = request.GET.get("agent", "")
    rows = memory_selectors.procedures_of_team(
        team=team, status=status or None, agent_id=agent_id or None
    )
    page = Paginator(rows, RULES_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "query": query.urlencode(),
        "here": request.get_full_path(),
        "status": status,
        "statuses": ProcedureStatus.values,
        "agent": agent_id,
        "agent_ids": _agent_ids(team),
        "removed": memory_selectors.procedures_removed(
            team=team, agent_id=agent_id or None, limit=RULES_REMOVED_SHOWN
        ),
    }
    return _page(request, "procedures", context)


@access.console_view()
def procedure_history(request: HttpRequest, team: Team, procedure_id: int) -> HttpResponse:
    """Who added, reworded, decided on or removed one rule, newest first; a removed rule's
    history ends with the text it had (GET /procedures/<agent>/history?procedure_id=). A rule
    written before the history was kept, or imported without it, has none yet: its page says
    so."""
    revisions = memory_selectors.procedure_revisions_of_team(team=team, procedure_id=procedure_id)
    rule = memory_selectors.procedure_of_team(team=team, procedure_id=procedure_id)
    if not revisions and rule is None:
        raise Http404("No such rule.")
    context = {
        "procedure_id": procedure_id,
        "agent_id": rule.agent_id if rule is not None else revisions[0].agent_id,
        "revisions": revisions,
        "rule": rule,
    }
    return _page(request, "procedure_history", context)


def _back_to_rules(request: HttpRequest, team: Team) -> HttpResponseRedirect:
    """Back to the rules page the form was posted from (its filters and page), never off-site."""
    rules = reverse("console:lifecycle-procedures", kwargs={"team_id": team.id})
    nxt = request.POST.get("next", "")
    return HttpResponseRedirect(nxt if nxt.startswith(rules) else rules)


# A lead's decision on a rule: accept a proposal, reject it, or stop following an active rule.
DECISIONS = {"accept": ProcedureStatus.ACTIVE, "reject": ProcedureStatus.REJECTED}


@require_POST
@access.console_view(lead=True)
def procedure_decide(request: HttpRequest, team: Team, procedure_id: int) -> HttpResponse:
    procedure = _found(
        memory_selectors.procedure_of_team(team=team, procedure_id=procedure_id), "rule"
    )
    decision = request.POST.get("decision", "")
    if decision not in DECISIONS:
        messages.error(request, "Choose accept or reject.")
        return _back_to_rules(request, team)
    try:
        memory_services.procedure_update(
            procedure=procedure,
            actor=memory_services.Actor.for_user(request.user),
            status=DECISIONS[decision],
        )
    except NotFound:
        messages.error(
            request,
            f"Rule #{procedure.pk} was removed by another request meanwhile; nothing was decided.",
        )
        return _back_to_rules(request, team)
    messages.success(
        request,
        f"Rule #{procedure.pk} of {procedure.agent_id} "
        + ("accepted: the agent follows it now." if decision == "accept" else "rejected."),
    )
    return _back_to_rules(request, team)


@require_POST
@access.console_view(lead=True)
def procedure_edit(request: HttpRequest, team: Team, procedure_id: int) -> HttpResponse:
    """A lead corrects a rule's wording; its status, source and evidence stay (the edit the
    agent itself makes through PUT /procedures)."""
    procedure = _found(
        memory_selectors.procedure_of_team(team=team, procedure_id=procedure_id), "rule"
    )
    form = RuleEditForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Rule #{procedure.pk} unchanged: {form.errors['rule'][0]}")
        return _back_to_rules(request, team)
    try:
        memory_services.procedure_update(
            procedure=procedure,
            actor=memory_services.Actor.for_user(request.user),
            rule=form.cleaned_data["rule"],
        )
    except NotFound:
        messages.error(
            request,
            f"Rule #{procedure.pk} was removed by another request meanwhile; nothing was changed.",
        )
        return _back_to_rules(request, team)
    except memory_services.RuleExists as same:
        messages.error(
            request,
            f"Rule #{procedure.pk} unchanged: {procedure.agent_id} already has that rule "
            f"(#{same.other_id}).",
        )
        return _back_to_rules(request, team)
    messages.success(request, f"Rule #{procedure.pk} of {procedure.agent_id} corrected.")
    return _back_to_rules(request, team)


@require_POST
@access.console_view(lead=True)
def procedure_restore(request: HttpRequest, team: Team, procedure_id: int) -> HttpResponse:
    """A lead brings back a removed rule (POST /procedures/<agent>/<id>/restore), from the
    "Removed lately" list or the rule's history; back to where the form was posted from."""
    revisions = memory_selectors.procedure_revisions_of_team(team=team, procedure_id=procedure_id)
    if not revisions:
        raise Http404("No such rule.")
    agent_id = revisions[0].agent_id
    try:
        memory_services.procedure_restore(
            team=team,
            agent_id=agent_id,
            procedure_id=procedure_id,
            source="console",
            actor=memory_services.Actor.for_user(request.user),
        )
    except memory_services.RuleExists as same:
        messages.error(
            request,
            f"Rule #{procedure_id} not restored: {agent_id} already has that rule "
            f"(#{same.other_id}).",
        )
    except DomainError as refused:
        # A full agent names the limit in its details; "not removed" is the message itself.
        reason = next(iter(refused.details.values()))[0] if refused.details else refused.message
        messages.error(request, f"Rule #{procedure_id} not restored: {reason}")
    else:
        messages.success(request, f"Rule #{procedure_id} of {agent_id} restored.")
    history = reverse(
        "console:lifecycle-procedure-history",
        kwargs={"team_id": team.id, "procedure_id": procedure_id},
    )
    if request.POST.get("next", "") == history:
        return HttpResponseRedirect(history)
    return _back_to_rules(request, team)


@access.console_view()
def archive_item(request: HttpRequest, team: Team, archive_item_id: str) -> HttpResponse:
    """An archived item (L0) and the memories derived from it (GET /lifecycle/archive/<id>)."""
    item = _found(selectors.archive_item_get(team=team, item_id=archive_item_id), "archived item")
    context = {
        "item": item,
        "derived": selectors.archive_derived_memories(team=team, item=item),
        "scan_window_hours": int(selectors.ARCHIVE_DERIVED_WINDOW.total_seconds() // 3600),
        "scan_limit": selectors.ARCHIVE_DERIVED_SCAN,
    }
    return _page(request, "archive_item", context)


PROFILE_HISTORY_SHOWN = 20


@access.console_view()
def profile_list(request: HttpRequest, team: Team) -> HttpResponse:
    """What the platform knows for certain about each agent's user (the profile: exact fields
    written by the API or read from facts), and, for one agent, the latest changes."""
    agent_id = request.GET.get("agent", "")
    agent_ids = _agent_ids(team)
    if agent_id not in agent_ids:
        agent_id = ""
    context = {
        "fields": memory_selectors.profiles_of_team(team=team, agent_id=agent_id),
        "agent": agent_id,
        "agent_ids": agent_ids,
        "history": memory_selectors.profile_history(
            team=team, agent_id=agent_id, limit=PROFILE_HISTORY_SHOWN
        )
        if agent_id
        else [],
    }
    return _page(request, "profiles", context)
