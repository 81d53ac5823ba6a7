"""Revoke a key: every request signed with it is refused from now on."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants import selectors, services


class Command(BaseCommand):
    help = "Revoke API_KEY (irreversible)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("api_key", help="the public key id (X-API-Key)")

    def handle(self, *args: Any, **opts: Any) -> None:
        api_key = selectors.api_key_get_by_key_id(key_id=opts["api_key"])
        if api_key is None:
            raise CommandError(f"no such API key: {opts['api_key']}")
        services.api_key_revoke(api_key=api_key)
        self.stdout.write(f"revoked {api_key.key_id} (team {api_key.team_id})")
