"""Serve MCP over stdio for a local agent (Claude Desktop, Cursor, …): `manage.py mcp_stdio`.

The token comes from the environment (MEMORY_MCP_TOKEN), never from the command line (which
other users of the machine can read). It is checked once at start, so a wrong token fails fast
with a message on stderr, and again on every tool call (revocation, expiry, rate limit).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import anyio
from django.core.management.base import BaseCommand, CommandError

from agentmcp.server import StdioToken, credential, mcp
from core.errors import DomainError
from lifecycle.embedded_beat import start_embedded_beat
from memories.retrieval.warm import warm_up_at_start
from tenants.authentication import mcp_token_authenticate

TOKEN_ENV = "MEMORY_MCP_TOKEN"


class Command(BaseCommand):
    help = f"Serve the MCP tools over stdin/stdout with the token in ${TOKEN_ENV}."

    def handle(self, *args: Any, **opts: Any) -> None:
        raw = os.environ.get(TOKEN_ENV, "").strip()
        if not raw:
            raise CommandError(f"set {TOKEN_ENV} to a token from `manage.py create_mcp_token`")
        try:
            principal = mcp_token_authenticate(raw)
        except DomainError as err:
            raise CommandError(f"{TOKEN_ENV}: {err.message}") from None
        # stdout is the protocol channel: anything else goes to stderr.
        self.stderr.write(
            f"MCP over stdio for team {principal.team.id}"
            + (f", agent {principal.agent_id}" if principal.agent_id else "")
        )
        # The model and dictionaries load while the client connects and lists the tools, not in
        # its first memory_add or memory_search (~1.5 s); a tool call meanwhile waits on their
        # locks, as it would have loaded them itself. Its log goes to stderr (the logging
        # handler's stream): stdout is the protocol's.
        threading.Thread(target=warm_up_at_start, name="warm-up", daemon=True).start()
        # The periodic tasks (idle compresses, cleanup, the trash's retention, …) in the embedded
        # mode, where a local agent may run no server: unless another process on this DATA_DIR
        # runs them (a server, another client's mcp_stdio), which holds the schedule's lock.
        start_embedded_beat()
        with credential(StdioToken(raw)):
            anyio.run(mcp.run_stdio_async)
