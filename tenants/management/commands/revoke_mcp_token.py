"""Revoke an MCP token: every request bearing it is refused (401) from now on."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants import selectors, services


class Command(BaseCommand):
    help = "Revoke TOKEN_ID (irreversible)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "token_id", help="the token's public id (mcp_<id>, as create/list_mcp_tokens print)"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        token = selectors.mcp_token_get_by_token_id(token_id=opts["token_id"])
        if token is None:
            raise CommandError(f"no such MCP token: {opts['token_id']}")
        services.mcp_token_revoke(mcp_token=token)
        self.stdout.write(f"revoked {token} (team {token.team_id})")
