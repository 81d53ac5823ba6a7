"""Apply the hot / warm / cold rule now (what the beat job does; for the embedded mode or cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memories.tiers import memories_retier, memories_rewarm
from tenants.management.options import add_team_option, team_from_option


class Command(BaseCommand):
    help = (
        "Move memories between the hot, warm and cold tiers by the tier rule (docs/lifecycle.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_team_option(parser)
        parser.add_argument(
            "--rewarm",
            action="store_true",
            help="also warm back the cold memories the rule no longer calls cold (after "
            "lowering TIER_COLD_RETENTION); never cleanup candidates in their grace period "
            "or consolidated fragments",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        team = team_from_option(opts["team"])
        result = memories_retier(team=team)
        moves = ", ".join(f"{k}: {v}" for k, v in sorted(result.moves.items())) or "none"
        self.stdout.write(f"examined {result.examined} memories; moves: {moves}")
        if opts["rewarm"]:
            warmed = memories_rewarm(team=team)
            moves = ", ".join(f"{k}: {v}" for k, v in sorted(warmed.moves.items())) or "none"
            self.stdout.write(f"rewarm: examined {warmed.examined} cold memories; moves: {moves}")
