"""List keys and their state. Never prints a secret."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tenants import selectors
from tenants.models import Team


def _iso(value: Any) -> str | None:
    return value.isoformat() if value else None


class Command(BaseCommand):
    help = "List API keys (optionally of one team); secrets are never shown."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default=None)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        team = None
        if opts["team"]:
            team = Team.objects.filter(id=opts["team"]).first()
            if team is None:
                self.stdout.write("[]" if opts["json"] else f"no team {opts['team']}")
                return
        rows = [
            {
                "api_key": k.key_id,
                "team_id": k.team_id,
                "agent_id": k.agent.agent_id if k.agent else None,
                "label": k.label,
                "status": k.status,
                "created_at": _iso(k.created_at),
                "last_used_at": _iso(k.last_used_at),
                "expires_at": _iso(k.expires_at),
                "rotated_at": _iso(k.rotated_at),
                "revoked_at": _iso(k.revoked_at),
            }
            for k in selectors.api_key_list(team=team)
        ]
        if opts["json"]:
            self.stdout.write(json.dumps(rows))
            return
        if not rows:
            self.stdout.write("no API keys")
            return
        # Column widths from the data (ids and labels vary in length); times to the minute.
        table: list[list[str]] = [["api_key", "team", "agent", "status", "last used", "label"]] + [
            [
                str(r["api_key"]),
                str(r["team_id"]),
                str(r["agent_id"] or "-"),
                str(r["status"]),
                _minute(r["last_used_at"]) or "never",
                str(r["label"] or ""),
            ]
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=False)]
            self.stdout.write("  ".join([*cells, row[-1]]).rstrip())


def _minute(value: str | None) -> str:
    return value[:16].replace("T", " ") if value else ""
