"""System checks for search settings: a typo must stop the server, not fail every search."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register()
def search_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from .retrieval.scoring import FUSIONS

    errors: list[checks.CheckMessage] = []
    if settings.SEARCH_FUSION not in FUSIONS:
        errors.append(
            checks.Error(
                f"SEARCH_FUSION={settings.SEARCH_FUSION!r} is not one of {sorted(FUSIONS)}",
                id="memories.E001",
            )
        )
    if settings.SEARCH_NEIGHBOUR_SECONDS < 0 or not 0 <= settings.SEARCH_NEIGHBOUR_WEIGHT <= 1:
        errors.append(
            checks.Error(
                "SEARCH_NEIGHBOUR_SECONDS must be >= 0 and SEARCH_NEIGHBOUR_WEIGHT within 0..1",
                id="memories.E002",
            )
        )
    if not 0 <= settings.SEARCH_XLING_LEXICAL_WEIGHT <= 1:
        errors.append(
            checks.Error("SEARCH_XLING_LEXICAL_WEIGHT must be within 0..1", id="memories.E003")
        )
    if not 0 < settings.SEARCH_XLING_DENSE_WEIGHT <= 1:
        errors.append(
            checks.Error(
                "SEARCH_XLING_DENSE_WEIGHT must be within 0 (excluded)..1", id="memories.E003"
            )
        )
    from .retrieval.backends import BACKENDS

    if settings.SEARCH_BACKEND not in BACKENDS:
        errors.append(
            checks.Error(
                f"SEARCH_BACKEND={settings.SEARCH_BACKEND!r} is not one of {list(BACKENDS)}",
                id="memories.E004",
            )
        )
    elif settings.SEARCH_BACKEND == "milvus":
        if not settings.SEARCH_MILVUS_URI:
            errors.append(
                checks.Error(
                    "SEARCH_BACKEND=milvus needs SEARCH_MILVUS_URI (http://host:19530 or a "
                    "milvus-lite path ending in .db)",
                    id="memories.E005",
                )
            )
        try:
            import pymilvus  # noqa: F401
        except ImportError:
            errors.append(
                checks.Error(
                    "SEARCH_BACKEND=milvus needs the milvus extra: pip install '.[milvus]'",
                    id="memories.E006",
                )
            )
    return errors
