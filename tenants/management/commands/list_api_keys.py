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
        header = f"{'api_key':<28} {'team':<20} {'agent':<16} {'status':<8} {'last used':<25} label"
        self.stdout.write(header)
        for r in rows:
            self.stdout.write(
                f"{r['api_key']:<28} {r['team_id']:<20} {r['agent_id'] or '-':<16} {r['status']:<8} "
                f"{r['last_used_at'] or 'never':<25} {r['label']}"
            )
