"""Import a bundle (docs/export.md), or a mem0 listing converted into one, into a team: what
POST /import does, by the same code."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from core.progress import Progress
from lifecycle.presenters import import_body
from lifecycle.services.bundle import ON_CONFLICT, bundle_import, bundle_read_header
from lifecycle.services.convert import AGENT_KEYS, SOURCES, as_bundle
from memories.services import Actor
from tenants.models import Team


class Command(BaseCommand):
    help = (
        "Import a gzipped JSON Lines bundle, or another service's export (--from mem0, --from "
        "letta, --from zep), into a team (all or nothing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the bundle, '-' for stdin")
        parser.add_argument("--team", required=True, help="the team to import into")
        parser.add_argument("--on-conflict", choices=ON_CONFLICT, default="skip")
        parser.add_argument(
            "--from",
            dest="source",
            choices=SOURCES,
            default="bundle",
            help="what the file is: this server's bundle, a mem0 listing (get_all's JSON), a "
            "Letta agent file (.af) or a Zep user's nodes, edges and threads (JSON)",
        )
        parser.add_argument(
            "--agent-from",
            choices=AGENT_KEYS,
            default="user_id",
            help="mem0: the key naming the agent a memory goes to",
        )
        parser.add_argument(
            "--default-agent", default="", help="mem0: the agent of a memory without that key"
        )
        parser.add_argument(
            "--agent-id",
            default="",
            help="letta: the id here of the file's one agent; zep: the agent the user is here",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']}")
        if opts["file"] == "-":
            data = sys.stdin.buffer.read()
        else:
            try:
                with open(opts["file"], "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise CommandError(str(exc)) from exc
        try:
            data = as_bundle(
                data,
                source=opts["source"],
                agent_from=opts["agent_from"],
                default_agent=opts["default_agent"],
                agent_id=opts["agent_id"],
            )
            header = bundle_read_header(data)
            total = sum(int(n) for n in header["counts"].values())
            with ExitStack() as bars:

                def embedding(texts: int) -> Callable[[int], None]:
                    # The embedding done before the transaction, a bar of its own.
                    return bars.enter_context(
                        Progress(texts, label="embedded", stream=self.stderr)
                    ).advance

                progress = bars.enter_context(Progress(total, label="imported", stream=self.stderr))
                result = bundle_import(
                    team=team,
                    data=data,
                    on_conflict=opts["on_conflict"],
                    actor=Actor(label="command import_team"),
                    progress=progress.advance,
                    embedding_progress=embedding,
                )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(import_body(result)))
