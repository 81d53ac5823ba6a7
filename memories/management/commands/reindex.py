"""Rebuild a search backend's engine from the database (docs/search.md, "Search backends")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.progress import Progress
from memories.models import Memory, MemoryTier
from tenants.models import Team


class Command(BaseCommand):
    help = (
        "Rebuild the search engine from the database: every team (the engine's collection is "
        "dropped and refilled) or one (--team). Only the milvus backend holds an engine; the "
        "local backend's indexes rebuild themselves in each process."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="milvus", choices=["milvus"])
        parser.add_argument("--team", default="", help="only this team (default: every team)")

    def handle(self, *args: Any, **opts: Any) -> None:
        from memories.retrieval.milvus import EngineDown, reindex

        team_id = opts["team"] or None
        if team_id is not None and not Team.objects.filter(id=team_id).exists():
            raise CommandError(f"no team {team_id}")
        qs = Memory.objects.filter(superseded_by__isnull=True).exclude(tier=MemoryTier.COLD)
        if team_id is not None:
            qs = qs.filter(team_id=team_id)
        with Progress(qs.count(), label="reindex", stream=self.stderr) as progress:
            try:
                sent = reindex(team_id=team_id, progress=progress)
            except EngineDown as exc:
                raise CommandError(f"the search engine is unreachable: {exc}") from exc
        self.stdout.write(f"sent {sent} memories to the milvus engine")
