"""Put working-memory items the cap pushed into the archive back into working memory: a listing
unless --apply."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lifecycle.services import archive
from tenants.models import Team


class Command(BaseCommand):
    help = (
        "List (or with --apply, restore) working-memory items archived because the per-agent "
        "cap pushed them out."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--agent", default="", help="only this agent's items")
        parser.add_argument(
            "--id",
            dest="ids",
            type=int,
            action="append",
            default=[],
            help="archive row id (repeatable)",
        )
        parser.add_argument("--apply", action="store_true", help="really restore (default: list)")

    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']}")
        found = archive.evicted_list(team=team, agent_id=opts["agent"])
        if opts["ids"]:
            found = found.filter(pk__in=opts["ids"])
        rows = list(found)
        if not opts["apply"]:
            for r in rows:
                self.stdout.write(
                    f"#{r.pk} [{r.agent_id}] item {r.item_id} of {r.item_created_at:%Y-%m-%d %H:%M:%S}"
                    f" (archived {r.archived_at:%Y-%m-%d %H:%M:%S}): {r.content[:70]!r}"
                )
            self.stdout.write(
                f"{len(rows)} evicted item(s) restorable. Add --apply to put them back."
            )
            return
        restored = archive.archive_restore(team=team, archive_ids=[r.pk for r in rows])
        for done in restored:
            self.stdout.write(
                f"#{done.archive_id} -> working item {done.item_id} of {done.agent_id}"
            )
        self.stdout.write(f"restored {len(restored)} item(s)")
