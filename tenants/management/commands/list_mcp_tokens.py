"""List MCP tokens (never their secret: only its hash is stored)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants import selectors
from tenants.models import Team


class Command(BaseCommand):
    help = "List MCP tokens: id, team, agent, status, label."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default=None, help="only this team's tokens")

    def handle(self, *args: Any, **opts: Any) -> None:
        team = None
        if opts["team"]:
            team = Team.objects.filter(id=opts["team"]).first()
            if team is None:
                raise CommandError(f"no such team: {opts['team']}")
        for t in selectors.mcp_token_list(team=team):
            agent = t.agent.agent_id if t.agent is not None else "*"
            self.stdout.write(f"{t}\t{t.team_id}\t{agent}\t{t.status}\t{t.label}")
