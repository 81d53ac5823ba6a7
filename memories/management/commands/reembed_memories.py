"""Re-embed memories after a model change (EMBEDDING_BACKEND / EMBEDDING_MODEL); with --tokens,
store the search tokens of memories written before they were stored (or under another tokenizer),
so that index loads read them instead of tokenising; with --traditional, re-embed the memories
whose vector was made from Chinese in traditional characters before the embedding read every
text in simplified ones (docs/search.md, "Diacritics and traditional characters")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.progress import in_batches
from memories.retrieval.embeddings import get_embedder
from memories.retrieval.text import for_embedding, tokens_stamp
from memories.selectors import (
    memories_needing_embedding,
    memories_needing_tokens,
    memories_whose_content,
)
from memories.services import memories_reembed, memories_store_tokens
from tenants.management.options import add_team_option, team_from_option


class Command(BaseCommand):
    help = "Embed memories whose vector was made by another model (or all with --all), with a progress bar."

    def add_arguments(self, parser: CommandParser) -> None:
        add_team_option(parser, help="only this team")
        parser.add_argument(
            "--all", action="store_true", help="also memories already embedded by the current model"
        )
        parser.add_argument("--batch-size", type=int, default=64)
        parser.add_argument(
            "--tokens",
            action="store_true",
            help="only store missing or outdated search tokens (no embedding)",
        )
        parser.add_argument(
            "--traditional",
            action="store_true",
            help="only re-embed memories with Chinese in traditional characters (stored before "
            "the embedding read them in simplified ones)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        team = team_from_option(opts["team"])
        if opts["batch_size"] < 1:
            raise CommandError("--batch-size must be >= 1")
        if opts["tokens"] and opts["traditional"]:
            raise CommandError("--tokens and --traditional are two runs")
        if opts["traditional"]:
            # Stored before the embedding read Chinese in simplified characters: every memory
            # whose text that reading changes may hold the vector of the text as written.
            ids = memories_whose_content(team=team, matches=lambda c: for_embedding(c) != c)
            work, what = memories_reembed, "re-embedded"
            self.stdout.write(f"{len(ids)} memories with Chinese in traditional characters")
        elif opts["tokens"]:
            ids = memories_needing_tokens(team=team, stamp=tokens_stamp())
            work, what = memories_store_tokens, "stored the search tokens of"
            self.stdout.write(f"{len(ids)} memories without current search tokens")
        else:
            embedder = get_embedder()
            ids = memories_needing_embedding(
                team=team, model_name=embedder.model_name, everything=opts["all"]
            )
            work, what = memories_reembed, "re-embedded"
            self.stdout.write(f"{len(ids)} memories to embed with {embedder.model_name}")
        done = in_batches(
            ids,
            lambda batch: work(memory_ids=batch),
            batch_size=opts["batch_size"],
            label=what.split(" ")[0],
            stream=self.stderr,
        )
        self.stdout.write(self.style.SUCCESS(f"{what} {done} memories"))
