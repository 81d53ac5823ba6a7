"""Maintenance tasks of the graph app (thin: they call services)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="graph.prune_identities", ignore_result=True)
def prune_identities_task() -> int:
    """Removes the team identities a member's deletion left with a single scope."""
    from .identity import prune_all_identities

    return prune_all_identities()
