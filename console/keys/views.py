"""Console views for the keys area. Thin: parse the form, call services/selectors, render.

A raw secret exists only in the response to the POST that issued or rotated it: it is rendered
straight into that page, sent with `Cache-Control: no-store`, and never put in a redirect, the
messages framework, the session or a log line (the services log key ids only). Reloading the
list afterwards cannot show it again.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from console import access
from tenants import selectors, services
from tenants.models import ApiKey, McpToken, Team

from .forms import IssueKeyForm, RotateKeyForm


def _key_or_404(team: Team, key_id: str) -> ApiKey:
    api_key = selectors.api_key_get(team=team, key_id=key_id)
    if api_key is None:
        raise Http404("No such key.")
    return api_key


def _list_page(
    request: HttpRequest,
    team: Team,
    form: IssueKeyForm | None = None,
    status: int = 200,
    mcp_form: IssueKeyForm | None = None,
) -> HttpResponse:
    context = {
        "area": "keys",
        "keys": selectors.api_key_list(team=team),
        "form": form or IssueKeyForm(team=team),
        "mcp_tokens": selectors.mcp_token_list(team=team),
        "mcp_form": mcp_form or IssueKeyForm(team=team, prefix="mcp"),
    }
    return render(request, "console/keys/index.html", context, status=status)


def _secret_page(
    request: HttpRequest, team: Team, issued: services.IssuedKey, title: str
) -> HttpResponse:
    response = render(
        request,
        "console/keys/secret.html",
        {"area": "keys", "issued": issued, "title": title},
    )
    # The page carries a secret: no browser or proxy may keep it (see the module docstring).
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response


@access.console_view()
def index(request: HttpRequest, team: Team) -> HttpResponse:
    """The team's keys (viewers see them too, never a secret) and, for a lead, the issue form."""
    return _list_page(request, team)


@never_cache
@require_POST
@access.console_view(lead=True)
def issue(request: HttpRequest, team: Team) -> HttpResponse:
    form = IssueKeyForm(request.POST, team=team)
    if not form.is_valid():
        return _list_page(request, team, form, status=400)
    issued = services.api_key_issue(
        team=team,
        agent=form.cleaned_data.get("agent"),
        label=form.cleaned_data.get("label") or "",
        expires_at=form.expires_at(),
        rate_limit=form.cleaned_data.get("rate_limit"),
    )
    return _secret_page(request, team, issued, "API key issued")


@never_cache
@access.console_view(lead=True)
def rotate(request: HttpRequest, team: Team, key_id: str) -> HttpResponse:
    """GET: confirm with a grace period; POST: rotate and show the new secret once."""
    api_key = _key_or_404(team, key_id)
    form = RotateKeyForm(request.POST or None)
    if api_key.revoked_at is not None:
        messages.error(request, f"Key {api_key.key_id} is revoked; issue a new one instead.")
        return redirect("console:keys", team_id=team.id)
    if request.method == "POST" and form.is_valid():
        issued = services.api_key_rotate(api_key=api_key, grace_seconds=form.grace_seconds())
        return _secret_page(request, team, issued, "API key rotated")
    status = 400 if request.method == "POST" else 200
    context = {"area": "keys", "key": api_key, "form": form}
    return render(request, "console/keys/rotate.html", context, status=status)


@access.console_view(lead=True)
def revoke(request: HttpRequest, team: Team, key_id: str) -> HttpResponse:
    """GET: the confirmation page; POST: revoke (at once, for both secrets)."""
    api_key = _key_or_404(team, key_id)
    if request.method == "POST":
        services.api_key_revoke(api_key=api_key)
        messages.success(request, f"Key {api_key.key_id} revoked: it no longer authenticates.")
        return redirect("console:keys", team_id=team.id)
    return render(request, "console/keys/revoke.html", {"area": "keys", "key": api_key})


# --- MCP tokens (docs/mcp.md): the same fields as a key; no rotation (issue a new one) ---------


def _token_or_404(team: Team, token_id: str) -> McpToken:
    token = selectors.mcp_token_get(team=team, token_id=token_id)
    if token is None:
        raise Http404("No such token.")
    return token


@never_cache
@require_POST
@access.console_view(lead=True)
def mcp_issue(request: HttpRequest, team: Team) -> HttpResponse:
    form = IssueKeyForm(request.POST, team=team, prefix="mcp")
    if not form.is_valid():
        return _list_page(request, team, mcp_form=form, status=400)
    issued = services.mcp_token_issue(
        team=team,
        agent=form.cleaned_data.get("agent"),
        label=form.cleaned_data.get("label") or "",
        expires_at=form.expires_at(),
        rate_limit=form.cleaned_data.get("rate_limit"),
    )
    response = render(
        request,
        "console/keys/mcp_secret.html",
        {"area": "keys", "issued": issued, "mcp_url": request.build_absolute_uri("/mcp")},
    )
    # The page carries the token: no browser or proxy may keep it (see the module docstring).
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response


@access.console_view(lead=True)
def mcp_revoke(request: HttpRequest, team: Team, token_id: str) -> HttpResponse:
    """GET: the confirmation page; POST: revoke at once."""
    token = _token_or_404(team, token_id)
    if request.method == "POST":
        services.mcp_token_revoke(mcp_token=token)
        messages.success(request, f"Token {token} revoked: it no longer authenticates.")
        return redirect("console:keys", team_id=team.id)
    return render(request, "console/keys/mcp_revoke.html", {"area": "keys", "token": token})
