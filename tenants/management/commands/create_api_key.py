"""Issue an API key for a team (created if missing); prints the secret exactly once."""

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
    help = "Create an API key for TEAM (creating the team if needed) and print key and secret once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="team id, [A-Za-z0-9_-]{1,64}")
        parser.add_argument("--name", default=None, help="team name when the team is created")
        parser.add_argument(
            "--agent", default=None, help="bind the key to this agent (agent-scoped key)"
        )
        parser.add_argument("--label", default="", help="a note to recognise the key by")
        parser.add_argument("--expires-days", type=int, default=None, help="expire after N days")
        parser.add_argument(
            "--rate-limit",
            type=int,
            default=None,
            help="requests per window for this key (0 = unlimited)",
        )
        parser.add_argument(
            "--json", action="store_true", help='print {"team_id", "api_key", "secret"} as JSON'
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
        issued = services.api_key_issue(
            team=team,
            agent=agent,
            label=opts["label"],
            expires_at=expires_at,
            rate_limit=opts["rate_limit"],
        )
        if opts["json"]:
            out = {"team_id": team.id, "api_key": issued.key_id, "secret": issued.secret}
            if agent is not None:
                out["agent_id"] = agent.agent_id
            self.stdout.write(json.dumps(out))
            return
        self.stdout.write(f"team:    {team.id}")
        if agent is not None:
            self.stdout.write(f"agent:   {agent.agent_id} (agent-scoped key)")
        self.stdout.write(f"api_key: {issued.key_id}")
        self.stdout.write(f"secret:  {issued.secret}")
        self.stdout.write(self.style.WARNING("The secret is shown only now: store it safely."))
