"""Links the graph entities of a team (or of every team) that name the same thing in different
scopes to one team-level identity (graph.identity; docs/graph.md "Team identity").

Extraction links what it writes; this catches up on what was written before, by the API, or
imported. Idempotent: a second run links nothing new."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graph.identity import link_team
from tenants.models import Team


class Command(BaseCommand):
    help = "Link the entities of different agents that name the same thing to a team identity."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--team", action="append", default=[], help="only this team (repeatable)"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        teams = list(Team.objects.order_by("id"))
        if opts["team"]:
            wanted = set(opts["team"])
            teams = [t for t in teams if t.id in wanted]
            missing = wanted - {t.id for t in teams}
            if missing:
                raise CommandError(f"no team {', '.join(sorted(missing))}")
        for team in teams:
            result = link_team(team=team)
            self.stdout.write(
                f"{team.id}: {result.entities} linkable entities, {result.linked} linked, "
                f"{result.identities_created} identities created, "
                f"{result.identities_pruned} pruned"
            )
