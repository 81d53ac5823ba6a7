"""Issue an MCP bearer token for a team (created if missing); prints the token exactly once."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from tenants import services
from tenants.management.issuing import IssueCommand


class Command(IssueCommand):
    help = (
        "Create a bearer token for the MCP endpoint (/mcp, mcp_stdio) for TEAM, optionally "
        "bound to one agent, and print it once."
    )
    noun = "token"
    json_help = 'print {"token", "token_id", "team_id"} as JSON'

    @transaction.atomic
    def handle(self, *args: Any, **opts: Any) -> None:
        req = self.issue_request(opts)
        team, agent = req.team, req.agent
        issued = services.mcp_token_issue(**req.issue_kwargs())
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
