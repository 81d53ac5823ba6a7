"""Load the embedding model and the search's dictionaries once, writing their caches to
DATA_DIR, in a process of its own: run it before the web workers start on a new DATA_DIR or
after an upgrade (docs/deploy.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memories.retrieval import gloss
from memories.retrieval.warm import warm_up


class Command(BaseCommand):
    help = (
        "Build the caches the warm-up reads (the dictionary bridge's glossary, the search "
        "tokenizer's dictionary) in DATA_DIR, so that no web worker builds them."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        # Built here, before the workers start, the caches are there when each worker's warm-up
        # reads them; without this, the first worker to start on a new DATA_DIR waits ~10 s for
        # a child process to build the glossary (docs/deploy.md, "Warm-up").
        timings = warm_up()
        steps = ", ".join(f"{name} {ms} ms" for name, ms in timings.items())
        self.stdout.write(f"warmed up ({steps}); glossary cache: {gloss.cache_path()}")
