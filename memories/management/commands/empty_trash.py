"""Delete console-purge trash past its expiry (what the beat job does; for the embedded mode/cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memories.purge import trash_empty_expired
from tenants.models import Team


class Command(BaseCommand):
    help = "Delete purged memories whose trash retention (TRASH_RETENTION_DAYS) has expired."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="", help="only this team (default: every team)")

    def handle(self, *args: Any, **opts: Any) -> None:
        team = None
        if opts["team"]:
            team = Team.objects.filter(id=opts["team"]).first()
            if team is None:
                raise CommandError(f"no team {opts['team']}")
        deleted = trash_empty_expired(team=team)
        self.stdout.write(f"deleted {deleted} expired trash item(s)")
