"""Reads for tenancy. Every read takes the caller's team explicitly."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from core.errors import CrossTeamForbidden, NotFound

from .models import Agent, ApiKey, McpToken, Team, TeamMembership


def team_check_same(*, team: Team, team_id: str) -> Team:
    """The caller's team when `team_id` names it; any other id is 403, existing or not."""
    if team_id != team.id:
        raise CrossTeamForbidden()
    return team


def agent_get(*, team: Team, agent_id: str) -> Agent:
    try:
        return Agent.objects.get(team=team, agent_id=agent_id)
    except Agent.DoesNotExist:
        raise NotFound("agent") from None


def agent_list(*, team: Team) -> QuerySet[Agent]:
    return Agent.objects.filter(team=team).order_by("agent_id")


def api_key_list(*, team: Team | None = None) -> QuerySet[ApiKey]:
    qs = ApiKey.objects.select_related("team", "agent").order_by("team_id", "-created_at")
    return qs.filter(team=team) if team is not None else qs


def api_key_get_by_key_id(*, key_id: str) -> ApiKey | None:
    return ApiKey.objects.select_related("team", "agent").filter(key_id=key_id).first()


def team_ids_for_user(
    *, user: AbstractBaseUser | AnonymousUser, roles: tuple[str, ...] | None = None
) -> set[str]:
    """Teams an admin user governs; superusers are handled by callers (they see everything)."""
    if not user.is_authenticated:
        return set()
    qs = TeamMembership.objects.filter(user_id=user.pk)
    if roles:
        qs = qs.filter(role__in=roles)
    return set(qs.values_list("team_id", flat=True))


def api_key_get(*, team: Team, key_id: str) -> ApiKey | None:
    """One of the team's keys by its public id; another team's key is simply not found."""
    return ApiKey.objects.select_related("agent").filter(team=team, key_id=key_id).first()


def mcp_token_get_by_hash(*, token_hash: str) -> McpToken | None:
    return McpToken.objects.select_related("team", "agent").filter(token_hash=token_hash).first()


def mcp_token_get_by_token_id(*, token_id: str) -> McpToken | None:
    """By the public id, with or without its `mcp_` prefix."""
    token_id = token_id.removeprefix("mcp_").split("_", 1)[0]
    return McpToken.objects.select_related("team", "agent").filter(token_id=token_id).first()


def mcp_token_list(*, team: Team | None = None) -> QuerySet[McpToken]:
    qs = McpToken.objects.select_related("team", "agent").order_by("team_id", "-created_at")
    return qs.filter(team=team) if team is not None else qs


def mcp_token_get(*, team: Team, token_id: str) -> McpToken | None:
    """One of the team's MCP tokens by its public id; another team's is simply not found."""
    token_id = token_id.removeprefix("mcp_")
    return McpToken.objects.select_related("agent").filter(team=team, token_id=token_id).first()
