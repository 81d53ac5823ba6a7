"""Move expired memories to the trash and delete trash past its retention (what the beat job
does; for the embedded mode/cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memories.purge import memories_expire, trash_empty_expired
from tenants.management.options import add_team_option, team_from_option


class Command(BaseCommand):
    help = (
        "Move memories past their own expires_at to the trash, then delete trash items whose "
        "retention (TRASH_RETENTION_DAYS) has passed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_team_option(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        team = team_from_option(opts["team"])
        moved = memories_expire(team=team)
        deleted = trash_empty_expired(team=team)
        self.stdout.write(f"moved {moved} expired memory(ies) to the trash")
        self.stdout.write(f"deleted {deleted} expired trash item(s)")
