"""Console views for the review area. Thin: parse the form, call services/selectors, render.

Every memory is fetched with `team=team` (another team's id is a 404 exactly like a missing one),
every change goes through memories.services with the logged-in user as the actor, and every POST
is refused to viewers by access.console_view (403).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console import access
from core.errors import DomainError, NotFound
from memories import purge, selectors, services
from memories.models import Memory, MemoryRevision, MemoryScope
from memories.retrieval import search
from memories.services import KEEP, Actor
from tenants import selectors as tenant_selectors
from tenants.models import Team

from . import diffs
from .forms import BulkForm, CorrectionForm, FilterForm, QuickEditForm, ShareForm, UnshareForm

PAGE_SIZE = 50
SEARCH_LIMIT = 200
DEFAULT_MIN_SCORE = 0.3  # the API's default: "related at all"


def _team_agents(team: Team) -> list[str]:
    return list(tenant_selectors.agent_list(team=team).values_list("agent_id", flat=True))


def _back(request: HttpRequest, team: Team, memory: Memory | None = None) -> HttpResponseRedirect:
    """Back to where the form was posted from (the list with its filters), never off-site."""
    nxt = request.POST.get("next", "")
    if nxt.startswith(reverse("console:memories", kwargs={"team_id": team.id})):
        return HttpResponseRedirect(nxt)
    if memory is not None:
        return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)
    return redirect("console:memories", team_id=team.id)


def _gone(request: HttpRequest, team: Team, memory_id: int) -> HttpResponseRedirect:
    """The memory this page showed was removed by another request (an agent's DELETE, a cleanup)
    before the change reached it: nothing was changed, say so on the list (its own page is a
    404 now)."""
    messages.error(
        request,
        f"Memory #{memory_id} was removed by another request meanwhile; nothing was changed. "
        "If it went to the trash, it can be restored from there.",
    )
    return redirect("console:memories", team_id=team.id)


def _errors(request: HttpRequest, form: Any) -> None:
    for name, errs in form.errors.items():
        label = "" if name == "__all__" else f"{name}: "
        messages.error(request, f"{label}{' '.join(errs)}")


@access.console_view()
@require_safe
def index(request: HttpRequest, team: Team) -> HttpResponse:
    facets = selectors.memory_review_facets(team=team)
    form = FilterForm(request.GET, facets=facets)
    rows: list[tuple[Memory, float | None]] = []
    page: Page[Any] | None = None
    searching = False
    if form.is_valid():
        filters = form.selector_kwargs()
        qs = selectors.memory_review_queryset(team=team, **filters)
        query = form.cleaned_data["q"].strip()
        if query:
            searching = True
            try:
                scored = search.memory_review_search(
                    team=team,
                    query=query,
                    agent_id=filters["agent_id"],
                    scope=filters["scope"],
                    limit=SEARCH_LIMIT,
                    min_score=form.cleaned_data["min_score"]
                    if form.cleaned_data["min_score"] is not None
                    else DEFAULT_MIN_SCORE,
                )
            except DomainError as exc:
                # The embedding model is down: say so; the filtered list still works without q.
                messages.error(request, f"Search is unavailable: {exc.message}")
                scored = []
            found = qs.in_bulk([mid for mid, _ in scored])
            page = Paginator(
                [(found[mid], score) for mid, score in scored if mid in found], PAGE_SIZE
            ).get_page(request.GET.get("page"))
            rows = list(page.object_list)
        else:
            plain = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
            page, rows = plain, [(m, None) for m in plain.object_list]
    params = request.GET.copy()
    params.pop("page", None)
    return render(
        request,
        "console/review/list.html",
        {
            "area": "memories",
            "form": form,
            "rows": rows,
            "page": page,
            "searching": searching,
            "querystring": params.urlencode(),
            "bulk_form": BulkForm(agents=_team_agents(team)),
            "here": request.get_full_path(),
        },
    )


@access.console_view(lead=True)
@require_POST
def quick_edit(request: HttpRequest, team: Team, memory_id: int) -> HttpResponse:
    memory = get_object_or_404(Memory, team=team, pk=memory_id)
    form = QuickEditForm(request.POST)
    if not form.is_valid():
        _errors(request, form)
        return _back(request, team, memory)
    try:
        services.memory_update(
            memory=memory,
            actor=Actor.for_user(request.user),
            importance=form.cleaned_data["importance"],
            pinned=form.cleaned_data["pinned"],
        )
    except NotFound:
        return _gone(request, team, memory.pk)
    messages.success(request, f"Memory #{memory.pk} updated.")
    return _back(request, team, memory)


@access.console_view(lead=True)
@require_POST
def bulk(request: HttpRequest, team: Team) -> HttpResponse:
    form = BulkForm(request.POST, agents=_team_agents(team))
    if not form.is_valid():
        _errors(request, form)
        return _back(request, team)
    d = form.cleaned_data
    # The services filter the ids by team: another team's id in the selection is never touched.
    ids, action, actor = d["ids"], d["action"], Actor.for_user(request.user)
    if action == "delete":
        result = purge.memories_bulk_delete(team=team, memory_ids=ids, actor=actor)
        text = f"Deleted {result.done} memories."
        if result.skipped:
            text += f" Skipped {result.skipped} pinned (protected) memories."
        if result.done:
            text += " They stay restorable in the trash."
        if result.gone:
            text += (
                f" Left {result.gone} as they were: removed or pinned by another request meanwhile."
            )
    elif action in ("pin", "unpin"):
        result = services.memories_bulk_correct(
            team=team, memory_ids=ids, actor=actor, pinned=action == "pin"
        )
        text = f"{'Pinned' if action == 'pin' else 'Unpinned'} {result.done} memories."
    elif action == "importance":
        result = services.memories_bulk_correct(
            team=team, memory_ids=ids, actor=actor, importance=d["importance"]
        )
        text = f"Set importance {d['importance']:g} on {result.done} memories."
    else:
        result = services.memories_bulk_share(
            team=team, memory_ids=ids, agent_ids=d["agents"], permission=d["permission"]
        )
        text = f"Shared {result.done} memories with {', '.join(d['agents'])} ({d['permission']})."
        if result.skipped:
            text += (
                f" Skipped {result.skipped} (team memories are already shared with every agent;"
                " a memory is never shared with its owner)."
            )
    if action != "delete" and result.gone:
        text += f" {result.gone} were removed by another request meanwhile and left out."
    messages.success(request, text)
    return _back(request, team)


@access.console_view()
@require_http_methods(["GET", "HEAD", "POST"])
def detail(request: HttpRequest, team: Team, memory_id: int) -> HttpResponse:
    memory = get_object_or_404(Memory.objects.defer("embedding"), team=team, pk=memory_id)
    if request.method == "POST":
        form = CorrectionForm(request.POST, current_expiry=memory.expires_at)
        if form.is_valid():
            d = form.cleaned_data
            before = selectors.memory_revision_last_id(memory=memory)
            try:
                services.memory_update(
                    memory=memory,
                    actor=Actor.for_user(request.user),
                    content=d["content"],
                    importance=d["importance"],
                    category=d["category"],
                    pinned=d["pinned"],
                    # A form without the field (an older page) leaves the expiry; blank: never.
                    expires_at=d["expires_at"] if "expires_at" in request.POST else KEEP,
                )
            except NotFound:
                return _gone(request, team, memory.pk)
            except DomainError as exc:
                # Nothing was written (the embedding comes first); the form keeps the input.
                form.add_error(None, _message(exc))
                return render(
                    request, "console/review/detail.html", _detail_context(team, memory, form)
                )
            if selectors.memory_revision_last_id(memory=memory) != before:
                messages.success(request, "Saved: the change is recorded in the history below.")
            else:
                messages.info(request, "Nothing changed.")
            return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)
    else:
        form = CorrectionForm(
            initial={
                "content": memory.content,
                "importance": memory.importance,
                "category": memory.category,
                "pinned": memory.pinned,
                "expires_at": memory.expires_at,
            },
            current_expiry=memory.expires_at,
        )
    return render(request, "console/review/detail.html", _detail_context(team, memory, form))


def _detail_context(team: Team, memory: Memory, form: CorrectionForm) -> dict[str, Any]:
    revisions = list(selectors.memory_revisions(team=team, memory=memory))
    shares = list(memory.shares.filter(team=team).order_by("agent_id"))
    # Granting again to an agent that holds a grant changes its permission.
    grantable = [a for a in _team_agents(team) if a != memory.agent_id]
    metadata = memory.metadata or {}
    return {
        "area": "memories",
        "memory": memory,
        "form": form,
        "revisions": [
            (r, diffs.revision_changes(r), services.revision_revertable(revision=r))
            for r in revisions
        ],
        "shares": shares,
        "share_form": ShareForm(agents=grantable) if grantable else None,
        "promotions": list(memory.promotions.filter(team=team).order_by("id")),
        "promoted_from": memory.promoted_from if memory.promoted_from_id else None,
        "supersedes": list(memory.supersedes.filter(team=team).order_by("id")),
        "source": metadata.get("source") or selectors.SOURCE_API,
        "source_items": metadata.get("source_items")
        if isinstance(metadata.get("source_items"), list)
        else [],
        # Only an int is a job id a URL can be built from (metadata is client-writable).
        "job_id": metadata.get("job_id") if isinstance(metadata.get("job_id"), int) else None,
        "metadata_rows": sorted(metadata.items()),
    }


@access.console_view(lead=True)
@require_POST
def revert(request: HttpRequest, team: Team, memory_id: int, revision_id: int) -> HttpResponse:
    memory = get_object_or_404(Memory, team=team, pk=memory_id)
    revision = get_object_or_404(MemoryRevision, team=team, memory=memory, pk=revision_id)
    try:
        services.memory_revert(memory=memory, revision=revision, actor=Actor.for_user(request.user))
    except NotFound:
        return _gone(request, team, memory.pk)
    except DomainError as exc:
        messages.error(request, _message(exc))
    else:
        messages.success(
            request,
            f"Reverted to the state before the change of {revision.created_at:%Y-%m-%d %H:%M:%S}.",
        )
    return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)


@access.console_view(lead=True)
@require_POST
def promote(request: HttpRequest, team: Team, memory_id: int) -> HttpResponse:
    memory = get_object_or_404(Memory, team=team, pk=memory_id)
    try:
        team_memory, hit = services.memory_promote(
            memory=memory, actor=Actor.for_user(request.user)
        )
    except NotFound:
        return _gone(request, team, memory.pk)
    except DomainError as exc:
        messages.error(request, _message(exc))
        return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)
    if hit is not None:
        messages.warning(
            request,
            f"Not promoted: team memory #{team_memory.pk} already says the same thing "
            f"(similarity {hit.score:.2f}). Nothing was written.",
        )
    else:
        messages.success(
            request, f"Promoted: team memory #{team_memory.pk} created; this original is kept."
        )
    return redirect("console:memory-detail", team_id=team.id, memory_id=team_memory.pk)


def _message(exc: DomainError) -> str:
    if exc.details:
        return "; ".join(m for msgs in exc.details.values() for m in msgs)
    return exc.message


@access.console_view(lead=True)
@require_POST
def share(request: HttpRequest, team: Team, memory_id: int) -> HttpResponse:
    memory = get_object_or_404(Memory, team=team, pk=memory_id)
    if memory.scope != MemoryScope.PERSONAL:
        messages.error(request, "Only a personal memory is shared; every agent sees team memories.")
        return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)
    # Choices: this team's agents, never the owner (the form rejects anything else).
    form = ShareForm(request.POST, agents=[a for a in _team_agents(team) if a != memory.agent_id])
    if not form.is_valid():
        _errors(request, form)
    else:
        d = form.cleaned_data
        try:
            services.memory_share(memory=memory, agent_ids=d["agents"], permission=d["permission"])
        except NotFound:
            return _gone(request, team, memory.pk)
        except DomainError as exc:
            messages.error(request, _message(exc))
        else:
            messages.success(request, f"Shared with {', '.join(d['agents'])} ({d['permission']}).")
    return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)


@access.console_view(lead=True)
@require_POST
def unshare(request: HttpRequest, team: Team, memory_id: int) -> HttpResponse:
    memory = get_object_or_404(Memory, team=team, pk=memory_id)
    form = UnshareForm(request.POST)
    if not form.is_valid():
        _errors(request, form)
    elif services.memory_unshare(memory=memory, agent_ids=[form.cleaned_data["agent"]]):
        messages.success(request, f"Revoked the grant of {form.cleaned_data['agent']}.")
    else:
        messages.info(request, "There was no such grant.")
    return redirect("console:memory-detail", team_id=team.id, memory_id=memory.pk)
