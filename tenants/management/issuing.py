"""What `create_api_key` and `create_mcp_token` share: a credential for a team (created if
missing), optionally bound to one agent, with a label, an expiry and a rate limit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenants import services
from tenants.models import (
    Agent,
    Team,
    agent_id_validator,
    team_id_case_message,
    team_id_in_other_case,
    team_id_validator,
)


@dataclass(frozen=True)
class IssueRequest:
    team: Team
    agent: Agent | None
    label: str
    expires_at: datetime | None
    rate_limit: int | None

    def issue_kwargs(self) -> dict[str, Any]:
        """The keyword arguments api_key_issue and mcp_token_issue both take."""
        return {
            "team": self.team,
            "agent": self.agent,
            "label": self.label,
            "expires_at": self.expires_at,
            "rate_limit": self.rate_limit,
        }


class IssueCommand(BaseCommand):
    """Parses and checks the options; the subclass issues the credential and prints it."""

    noun = "credential"  # "key", "token": in the help texts
    json_help = ""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="team id, [A-Za-z0-9_-]{1,64}")
        parser.add_argument("--name", default=None, help="team name when the team is created")
        parser.add_argument("--agent", default=None, help=f"bind the {self.noun} to this agent")
        parser.add_argument("--label", default="", help=f"a note to recognise the {self.noun} by")
        parser.add_argument("--expires-days", type=int, default=None, help="expire after N days")
        parser.add_argument(
            "--rate-limit",
            type=int,
            default=None,
            help=f"requests per window for this {self.noun} (0 = unlimited)",
        )
        parser.add_argument("--json", action="store_true", help=self.json_help)

    def issue_request(self, opts: dict[str, Any]) -> IssueRequest:
        team_id: str = opts["team"]
        try:
            team_id_validator(team_id)
        except ValidationError as exc:
            raise CommandError(f"--team: {exc.messages[0]}") from exc
        other = team_id_in_other_case(team_id)
        if other is not None:  # on MariaDB the lookup below would have found it
            raise CommandError(f"--team: {team_id_case_message(other)}")
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
        return IssueRequest(team, agent, opts["label"], expires_at, opts["rate_limit"])
