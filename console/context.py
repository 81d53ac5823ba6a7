"""Template context shared by every console page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from . import access


def console(request: HttpRequest) -> dict[str, Any]:
    """The user's teams for the team switcher; cheap and only evaluated when a template uses it."""
    if not request.path.startswith("/review/") or not request.user.is_authenticated:
        return {}
    ctx: dict[str, Any] = {"console_teams": access.visible_teams(request)}
    team = getattr(request, "console_team", None)
    if team is not None:
        ctx["team"] = team
        ctx["can_change"] = access.can_change(request, team)
    return ctx
