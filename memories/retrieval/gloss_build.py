"""Builds the glossary's cache file in a process of its own: `python -m
memories.retrieval.gloss_build <path> <cache name>`, run by gloss.glossary() on a miss.

Why a process: building the tables takes ~75 MB of short-lived Python objects, and a long-lived
process (a gunicorn worker) keeps ~40 MB of that after the build is over (docs/benchmarks.md,
"Worker memory with the warm-up at start"); a child returns it all when it exits. It sets Django
up from the environment its parent passed on, and refuses (exit status 3) when the name it would
give the cache is not the parent's: its settings key the tables differently, so what it built
would not be what the parent asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path

WRONG_KEY = 3


def main(argv: list[str]) -> int:
    import django

    django.setup()
    from memories.retrieval import gloss

    path, name = Path(argv[0]), argv[1]
    if gloss.cache_name() != name:
        print(f"cache name {gloss.cache_name()} is not {name}", file=sys.stderr)
        return WRONG_KEY
    written = gloss.build_file(path)
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
