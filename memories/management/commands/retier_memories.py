"""Apply the hot / warm / cold rule now (what the beat job does; for the embedded mode or cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memories.tiers import memories_retier
from tenants.models import Team


class Command(BaseCommand):
    help = (
        "Move memories between the hot, warm and cold tiers by the tier rule (docs/lifecycle.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="", help="only this team (default: every team)")

    def handle(self, *args: Any, **opts: Any) -> None:
        team = None
        if opts["team"]:
            team = Team.objects.filter(id=opts["team"]).first()
            if team is None:
                raise CommandError(f"no team {opts['team']}")
        result = memories_retier(team=team)
        moves = ", ".join(f"{k}: {v}" for k, v in sorted(result.moves.items())) or "none"
        self.stdout.write(f"examined {result.examined} memories; moves: {moves}")
