"""Issue an API key for a team (created if missing); prints the secret exactly once."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from tenants import services
from tenants.management.issuing import IssueCommand


class Command(IssueCommand):
    help = "Create an API key for TEAM (creating the team if needed) and print key and secret once."
    noun = "key"
    json_help = 'print {"team_id", "api_key", "secret"} as JSON'

    @transaction.atomic
    def handle(self, *args: Any, **opts: Any) -> None:
        req = self.issue_request(opts)
        team, agent = req.team, req.agent
        issued = services.api_key_issue(**req.issue_kwargs())
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
