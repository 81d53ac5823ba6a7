"""Write a team's (or one agent's) bundle to a file or stdout: what POST /export stores for
download, by the same code (docs/export.md)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.progress import Progress
from lifecycle.services.bundle import bundle_counts, bundle_filename, bundle_write
from tenants.models import Team


class Command(BaseCommand):
    help = "Export a team's (or one agent's) memories as a gzipped JSON Lines bundle."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--agent", default=None, help="only this agent (default: whole team)")
        parser.add_argument(
            "--output",
            default=None,
            help="file to write, '-' for stdout (default: memoryplatform-<team>[-<agent>]-<date>.jsonl.gz)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']}")
        agent_id = opts["agent"] or None
        output = opts["output"] or bundle_filename(team=team, agent_id=agent_id)
        total = sum(bundle_counts(team=team, agent_id=agent_id).values())
        with Progress(total, label="exported", stream=self.stderr) as progress:
            if output == "-":
                counts = bundle_write(
                    team=team, agent_id=agent_id, sink=sys.stdout.buffer, progress=progress.advance
                )
                sys.stdout.buffer.flush()
            else:
                with open(output, "wb") as sink:
                    counts = bundle_write(
                        team=team, agent_id=agent_id, sink=sink, progress=progress.advance
                    )
        summary = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        self.stderr.write(f"wrote {output}: {summary}")
