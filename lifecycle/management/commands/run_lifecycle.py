"""Run a lifecycle operation for a team (and agent) now, recorded as a job with trigger "command"."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from lifecycle import presenters
from lifecycle.services import pipeline
from tenants.models import Team

OPS = ["compress", "extract-facts", "aggregate-scenes", "generate-persona", "cleanup", "auto-run"]
NEEDS_AGENT = {"compress", "extract-facts", "aggregate-scenes", "generate-persona"}


class Command(BaseCommand):
    help = "Run a lifecycle operation now: compress, extract-facts, aggregate-scenes, generate-persona, cleanup, auto-run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--agent", default="")
        parser.add_argument("--op", required=True, choices=OPS)

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']}")
        op, agent = opts["op"], opts["agent"]
        if op in NEEDS_AGENT and not agent:
            raise CommandError(f"--agent is required for {op}")
        try:
            if op == "auto-run":
                actions = pipeline.auto_run(team=team, trigger="command")
                body: Any = {"results": [presenters.auto_run_action_body(a) for a in actions]}
            else:
                config = pipeline.config_get(team=team)
                defaults: dict[str, dict[str, Any]] = {
                    "compress": {"target_count": config.compress_target_count},
                    "cleanup": {
                        "max_age_days": config.cleanup_idle_days or 90,
                        "min_importance": config.cleanup_min_importance,
                    },
                }
                params = defaults.get(op, {})
                result = pipeline.run(
                    team=team, kind=op, trigger="command", agent_id=agent, params=params
                )
                body = presenters.result_body(result)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2, default=str))
