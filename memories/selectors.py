"""Reads for memories. Every read takes the caller's team explicitly."""

from __future__ import annotations

from tenants.models import Team


def memory_counts(*, team: Team) -> dict[str, int]:
    """Long-term memories per scope for the team ({} until the memory store exists)."""
    return {}
