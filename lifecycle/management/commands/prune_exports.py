"""Remove export bundles past EXPORT_RETENTION_HOURS — what beat runs every hour."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from lifecycle.services.bundle import exports_prune


class Command(BaseCommand):
    help = "Remove the stored bundles of exports older than EXPORT_RETENTION_HOURS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-hours",
            type=int,
            default=None,
            help="instead of EXPORT_RETENTION_HOURS",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        removed = exports_prune(older_than_hours=opts["older_than_hours"])
        self.stdout.write(f"removed {removed} export chunks")
