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
        cleanup = parser.add_argument_group("cleanup (default: the team's pipeline config)")
        cleanup.add_argument(
            "--dry-run", action="store_true", help="list what cleanup would remove; remove nothing"
        )
        cleanup.add_argument("--max-age-days", type=int, default=None)
        cleanup.add_argument("--min-importance", type=float, default=None)

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']}")
        op, agent = opts["op"], opts["agent"]
        if op in NEEDS_AGENT and not agent:
            raise CommandError(f"--agent is required for {op}")
        cleanup_options = (opts["dry_run"], opts["max_age_days"], opts["min_importance"])
        if op != "cleanup" and cleanup_options != (False, None, None):
            raise CommandError(
                "--dry-run, --max-age-days and --min-importance are for --op cleanup"
            )
        if opts["max_age_days"] is not None and opts["max_age_days"] < 0:
            raise CommandError("--max-age-days must be >= 0")
        if opts["min_importance"] is not None and not 0.0 <= opts["min_importance"] <= 1.0:
            raise CommandError("--min-importance must be within 0..1")
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
                if op == "cleanup":
                    if opts["max_age_days"] is not None:
                        params["max_age_days"] = opts["max_age_days"]
                    if opts["min_importance"] is not None:
                        params["min_importance"] = opts["min_importance"]
                    params["dry_run"] = opts["dry_run"]
                result = pipeline.run(
                    team=team, kind=op, trigger="command", agent_id=agent, params=params
                )
                body = presenters.result_body(result)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2, default=str))
