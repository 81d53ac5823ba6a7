"""Delete console-purge trash past its expiry (what the beat job does; for the embedded mode/cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memories.purge import trash_empty_expired
from tenants.management.options import add_team_option, team_from_option


class Command(BaseCommand):
    help = "Delete purged memories whose trash retention (TRASH_RETENTION_DAYS) has expired."

    def add_arguments(self, parser: CommandParser) -> None:
        add_team_option(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        team = team_from_option(opts["team"])
        deleted = trash_empty_expired(team=team)
        self.stdout.write(f"deleted {deleted} expired trash item(s)")
