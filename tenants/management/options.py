"""The `--team` option of the maintenance commands that run for every team or for one."""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser

from tenants.models import Team


def add_team_option(
    parser: CommandParser, help: str = "only this team (default: every team)"
) -> None:
    parser.add_argument("--team", default="", help=help)


def team_from_option(team_id: str | None) -> Team | None:
    """The team named by `--team`, None when the option is empty (every team); an unknown id is
    an error rather than a silent run over nothing."""
    if not team_id:
        return None
    team = Team.objects.filter(id=team_id).first()
    if team is None:
        raise CommandError(f"no team {team_id}")
    return team
