"""Embed graph entities again: after a model change (EMBEDDING_BACKEND / EMBEDDING_MODEL) those
made by another model, whose vectors graph search and resolution ignore until then; with
--traditional, those whose name or description has Chinese in traditional characters, embedded
before the embedding read every text in simplified ones (docs/search.md, "Diacritics and
traditional characters"); with --all, every one."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.progress import in_batches
from graph.selectors import entities_needing_embedding
from graph.services import embedding_text, entities_reembed
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.text import for_embedding
from tenants.management.options import add_team_option, team_from_option


def _read_differently(name: str, description: str) -> bool:
    text = embedding_text(name, description)
    return for_embedding(text) != text


class Command(BaseCommand):
    help = "Embed graph entities whose vector was made by another model (or all with --all)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_team_option(parser, help="only this team")
        parser.add_argument(
            "--all", action="store_true", help="also entities already embedded by the current model"
        )
        parser.add_argument(
            "--traditional",
            action="store_true",
            help="only entities with Chinese in traditional characters (embedded before the "
            "embedding read them in simplified ones)",
        )
        parser.add_argument("--batch-size", type=int, default=64)

    def handle(self, *args: Any, **opts: Any) -> None:
        team = team_from_option(opts["team"])
        if opts["batch_size"] < 1:
            raise CommandError("--batch-size must be >= 1")
        if opts["all"] and opts["traditional"]:
            raise CommandError("--all already includes --traditional")
        embedder = get_embedder()
        ids = entities_needing_embedding(
            team=team,
            model_name=embedder.model_name,
            everything=opts["all"],
            matches=_read_differently if opts["traditional"] else None,
        )
        what = "with Chinese in traditional characters" if opts["traditional"] else "to embed"
        self.stdout.write(f"{len(ids)} entities {what} ({embedder.model_name})")
        done = in_batches(
            ids,
            lambda batch: entities_reembed(entity_ids=batch),
            batch_size=opts["batch_size"],
            label="re-embedded",
            stream=self.stderr,
        )
        self.stdout.write(self.style.SUCCESS(f"re-embedded {done} entities"))
