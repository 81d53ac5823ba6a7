"""Team statistics. Each app contributes its own counts, always filtered by the team."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from graph.models import Entity, Relation
from lifecycle.models import ArchiveReason, Persona, Scenario, WorkingArchive
from memories.selectors import memory_counts
from memories.working import get_working_store
from tenants.models import Agent, Team

from . import health


def team_stats(*, team: Team) -> dict[str, Any]:
    counts = memory_counts(team=team)
    try:
        working: int | None = get_working_store().count_team(team_id=team.id)
    except Exception:
        working = None  # Redis down: reported through redis_ok
    redis = health.check_redis()
    backend = "redis" if settings.REDIS_URL else "database"
    embedding = health.check_embedding()
    return {
        "personal_memories": counts.get("personal", 0),
        "team_memories": counts.get("team", 0),
        "agents": Agent.objects.filter(team=team).count(),
        "working_memories": working,
        # Items the per-agent working-memory cap pushed out, kept in the archive (restorable).
        "working_evicted_to_archive": WorkingArchive.objects.filter(
            team=team, reason=ArchiveReason.EVICTED
        ).count(),
        "scenarios": Scenario.objects.filter(team=team).count(),
        "personas": Persona.objects.filter(team=team).count(),
        "entities": Entity.objects.filter(team=team).count(),
        "relations": Relation.objects.filter(team=team).count(),
        # null in embedded mode: there is no Redis to be up or down (working memory, cache and
        # rate limits live in the database and the process); `working_store` says what is used.
        "redis_ok": redis.ok if settings.REDIS_URL else None,
        "embedding_ok": embedding.ok,
        "working_store": backend,
        "working_memory_backend": backend,  # the earlier name of `working_store`
        "embedding_model": embedding.detail,
        "llm": f"openai-compatible ({settings.LLM_MODEL})" if settings.LLM_BASE_URL else "offline",
    }
