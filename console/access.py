"""Who may see and change which team in the console.

One rule for every console view (and the same one the Django admin applies): a superuser sees
every team; a staff user sees only the teams they hold a TeamMembership for, `lead` may change,
`viewer` may only look. Another team's pages answer 404 — never 403 — so that a user cannot even
learn that a team or object exists. A viewer asking to change their own team gets 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseBase

from tenants import selectors as tenant_selectors
from tenants.models import Team, TeamRole


def team_ids(request: HttpRequest, *, lead: bool = False) -> set[str] | None:
    """The teams this user may see (lead=True: may change). None means all (superuser)."""
    user = request.user
    if user.is_superuser:
        return None
    attr = "_console_lead_teams" if lead else "_console_teams"
    if not hasattr(request, attr):
        roles = (TeamRole.LEAD,) if lead else None
        setattr(request, attr, tenant_selectors.team_ids_for_user(user=user, roles=roles))
    return getattr(request, attr)  # type: ignore[no-any-return]


def visible_teams(request: HttpRequest) -> list[Team]:
    ids = team_ids(request)
    qs = Team.objects.all() if ids is None else Team.objects.filter(id__in=ids)
    return list(qs.order_by("id"))


def can_change(request: HttpRequest, team: Team) -> bool:
    ids = team_ids(request, lead=True)
    return ids is None or team.id in ids


def team_for(request: HttpRequest, team_id: str, *, lead: bool = False) -> Team:
    """The team if the user may see it (404 otherwise); with lead=True, 403 for a viewer."""
    ids = team_ids(request)
    if ids is not None and team_id not in ids:
        raise Http404("No such team.")
    team = Team.objects.filter(id=team_id).first()
    if team is None:
        raise Http404("No such team.")
    if lead and not can_change(request, team):
        raise PermissionDenied("Viewers cannot change this team.")
    return team


# A view's answer: a page, a redirect, or a streamed download.
ViewFunc = Callable[..., HttpResponseBase]


def console_view(*, lead: bool = False) -> Callable[[ViewFunc], ViewFunc]:
    """Decorates `view(request, team, ...)` taking `team_id` from the URL.

    Requires an active staff user (else the admin login page), resolves the team with
    `team_for` and passes the Team object instead of its id. Use lead=True for any view that
    changes something, including the POST half of a view whose GET a viewer may see.
    """

    def decorator(view: ViewFunc) -> ViewFunc:
        @wraps(view)
        def wrapper(
            request: HttpRequest, team_id: str, *args: Any, **kwargs: Any
        ) -> HttpResponseBase:
            user = request.user
            if not (user.is_authenticated and user.is_active and user.is_staff):
                return redirect_to_login(request.get_full_path(), "/admin/login/")
            needs_lead = lead or request.method not in ("GET", "HEAD", "OPTIONS")
            team = team_for(request, team_id, lead=needs_lead)
            request.console_team = team  # type: ignore[attr-defined]  # for the context processor
            return view(request, team, *args, **kwargs)

        return wrapper

    return decorator
