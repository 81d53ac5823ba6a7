"""Forget unimportant, idle memories of a team: a dry run unless --apply."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lifecycle.results import CleanupResult
from lifecycle.services import operations, pipeline
from tenants.models import Team


class Command(BaseCommand):
    help = (
        "Show (or with --apply, apply the cleanup ladder to) memories with importance < X not "
        "accessed for N days: not cold yet -> cold; cold for CLEANUP_COLD_GRACE_DAYS -> trash. "
        "Pinned ones never."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--max-age-days", type=int, required=True)
        parser.add_argument("--min-importance", type=float, required=True)
        parser.add_argument("--agent", default="")
        parser.add_argument(
            "--apply",
            action="store_true",
            help="really move them, cold or to the trash (default: dry run)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']}")
        if opts["max_age_days"] < 0 or not 0.0 <= opts["min_importance"] <= 1.0:
            raise CommandError("--max-age-days must be >= 0 and --min-importance within 0..1")
        params = {"max_age_days": opts["max_age_days"], "min_importance": opts["min_importance"]}
        if not opts["apply"]:
            preview = operations.cleanup_preview(
                team=team, agent_id=opts["agent"] or None, **params
            )
            for c in preview.candidates:
                m = c.memory
                self.stdout.write(
                    f"#{m.pk} [{m.scope}/{m.agent_id or '-'}] {m.content[:70]!r} — {c.reason}"
                    f" → {c.action}"
                )
            self.stdout.write(
                f"dry run: {preview.would_clean} memories would go to the trash and "
                f"{preview.would_cool} would go cold, {preview.remaining} in scope. "
                "Add --apply to do it."
            )
            return
        result = pipeline.run(
            team=team,
            kind="cleanup",
            trigger="command",
            agent_id=opts["agent"],
            params={**params, "dry_run": False},
        )
        assert isinstance(result, CleanupResult)
        self.stdout.write(
            f"moved {result.cleaned} memories to the trash, restorable for "
            f"{settings.TRASH_RETENTION_DAYS} days (GET /memories/trash, POST "
            f"/memories/trash/<id>/restore); {len(result.cooled)} went cold (out of everyday "
            f"search, trashed by a cleanup {settings.CLEANUP_COLD_GRACE_DAYS} days from now "
            f"if still idle); {result.remaining} remain."
        )
