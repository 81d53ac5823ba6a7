"""Issue an MCP bearer token for a team (created if missing); prints the token exactly once."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from tenants import services
from tenants.models import Team, agent_id_validator, team_id_validator


class Command(BaseCommand):
    help = (
        "Create a bearer token for the MCP endpoint (/mcp, mcp_stdio) for TEAM, optionally "
        "bound to one agent, and print it once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="team id, [A-Za-z0-9_-]{1,64}")
        parser.add_argument("--name", default=None, help="team name when the team is created")
        parser.add_argument(
            "--agent", default=None, help="bind the token to this agent (agent token)"
        )
        parser.add_argument("--label", default="", help="a note to recognise the token by")
        parser.add_argument("--expires-days", type=int, default=None, help="expire after N days")
        parser.add_argument(
            "--rate-limit",
            type=int,
            default=None,
            help="requests per window for this token (0 = unlimited)",
        )
        parser.add_argument(
            "--json", action="store_true", help='print {"token", "token_id", "team_id"} as JSON'
        )

    @transaction.atomic
    def handle(self, *args: Any, **opts: Any) -> None:
        team_id: str = opts["team"]
        try:
            team_id_validator(team_id)
        except ValidationError as exc:
            raise CommandError(f"--team: {exc.messages[0]}") from exc
        team = Team.objects.filter(id=team_id).first()
        if team is None:
            team, _ = services.team_upsert(team_id=team_id, name=opts["name"] or team_id)
        agent = None
        if opts["agent"]:
            try:
                agent_id_validator(opts["agent"])
            except ValidationError as exc:
                raise CommandError(f"--agent: {exc.messages[0]}") from exc
            agent = services.agent_ensure(team=team, agent_id=opts["agent"])
        expires_at = None
        if opts["expires_days"] is not None:
            if opts["expires_days"] <= 0:
                raise CommandError("--expires-days must be positive")
            expires_at = timezone.now() + timedelta(days=opts["expires_days"])
        if opts["rate_limit"] is not None and opts["rate_limit"] < 0:
            raise CommandError("--rate-limit must be >= 0")
        issued = services.mcp_token_issue(
            team=team,
            agent=agent,
            label=opts["label"],
            expires_at=expires_at,
            rate_limit=opts["rate_limit"],
        )
        token_id = str(issued.mcp_token)
        if opts["json"]:
            out = {"token": issued.token, "token_id": token_id, "team_id": team.id}
            if agent is not None:
                out["agent_id"] = agent.agent_id
            self.stdout.write(json.dumps(out))
            return
        self.stdout.write(f"team:     {team.id}")
        if agent is not None:
            self.stdout.write(f"agent:    {agent.agent_id} (agent token)")
        self.stdout.write(f"token_id: {token_id}")
        self.stdout.write(f"token:    {issued.token}")
