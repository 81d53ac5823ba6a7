"""Lifecycle engines: `get_engine()` returns the LLM engine when an LLM is configured
(`llm.get_client()`, from `LLM_BASE_URL`), else the deterministic offline engine
(`lifecycle.offline`). Both implement `schemas.LifecycleEngine`.

The LLM engine puts the lifecycle's prompts (`lifecycle.prompts`) to the shared chat client
(`llm.ChatClient.chat_json`: retries, JSON-mode fallback, `DomainError("LLM_UNAVAILABLE")`,
tolerant JSON) and validates every item into the schemas; an item that does not validate is
skipped with a warning, and an answer with no usable JSON gives no items and a warning — never an
exception.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from pydantic import ValidationError

from llm import ChatClient, Usage, get_client, item_list, short_error, validate_items

from . import prompts
from .offline import OfflineEngine, dominant_language
from .schemas import Fact, LifecycleEngine, PersonaDraft, ScenarioDraft, Summary

logger = logging.getLogger(__name__)

__all__ = ["LLMEngine", "LifecycleEngine", "OfflineEngine", "get_engine"]

# Keys of a lone item object answered instead of a list (one summary, one scenario).
_SINGLE_ITEM_KEYS = ("content", "name", "memory_ids")


def _item_list(data: Any, key: str) -> list[Any] | None:
    return item_list(data, key, single_item_keys=_SINGLE_ITEM_KEYS)


# --- the engine ------------------------------------------------------------------------------------


class LLMEngine:
    """The lifecycle operations on an OpenAI-compatible chat model."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client
        self.model = client.model
        self.name = client.name

    def compress(self, items: list[str], target_count: int) -> tuple[list[Summary], Usage]:
        if not items:
            return [], Usage()
        target = max(1, int(target_count))
        messages = prompts.compress_messages(items, target, dominant_language(items))
        data, usage = self.client.chat_json(messages, what="compress")
        if isinstance(data, dict) and isinstance(data.get("summary"), str):
            data = [{**data, "content": data["summary"]}]  # {"summary": "..."}: one summary
        raw = _item_list(data, "summaries") if data is not None else []
        if raw is None:
            logger.warning("LLM %s: compress answer has no summaries list", self.model)
            raw = []
        summaries = validate_items(
            raw, Summary, context={"n_items": len(items)}, what="compress", string_field="content"
        )
        if len(summaries) > target:
            # Too many: fold the extra ones into the last allowed summary rather than lose them.
            logger.warning(
                "LLM %s: compress returned %d summaries for %d; merging the rest",
                self.model,
                len(summaries),
                target,
            )
            keep, extra = summaries[: target - 1], summaries[target - 1 :]
            sep = "；" if dominant_language([s.content for s in extra]) == "zh" else "; "
            indexes = sorted({i for s in extra for i in s.source_indexes})
            keep.append(
                Summary(
                    content=sep.join(s.content for s in extra),
                    importance=max(s.importance for s in extra),
                    source_indexes=indexes,
                )
            )
            summaries = keep
        if len(summaries) == 1 and not summaries[0].source_indexes:
            summaries[0].source_indexes = list(range(len(items)))
        return summaries, usage

    def extract_facts(self, items: list[str]) -> tuple[list[Fact], Usage]:
        if not items:
            return [], Usage()
        messages = prompts.extract_facts_messages(items, dominant_language(items))
        data, usage = self.client.chat_json(messages, what="extract_facts")
        raw = _item_list(data, "facts") if data is not None else []
        if raw is None:
            logger.warning("LLM %s: extract_facts answer has no facts list", self.model)
            raw = []
        facts: list[Fact] = []
        seen: dict[str, Fact] = {}
        for fact in validate_items(
            raw,
            Fact,
            context={"n_items": len(items)},
            what="extract_facts",
            string_field="content",
        ):
            key = " ".join(fact.content.casefold().split())
            if key in seen:
                seen[key].source_indexes = sorted(
                    set(seen[key].source_indexes) | set(fact.source_indexes)
                )
                continue
            seen[key] = fact
            facts.append(fact)
        return facts, usage

    def aggregate(self, memories: list[tuple[int, str]]) -> tuple[list[ScenarioDraft], Usage]:
        if not memories:
            return [], Usage()
        messages = prompts.aggregate_messages(
            memories, dominant_language([text for _, text in memories])
        )
        data, usage = self.client.chat_json(messages, what="aggregate")
        raw = _item_list(data, "scenarios") if data is not None else []
        if raw is None:
            logger.warning("LLM %s: aggregate answer has no scenarios list", self.model)
            raw = []
        known = {memory_id for memory_id, _ in memories}
        drafts = validate_items(raw, ScenarioDraft, context={"memory_ids": known}, what="aggregate")
        return drafts, usage

    def persona(
        self,
        facts: list[tuple[int, str, str]],
        scenarios: list[tuple[str, str, str]],
        profile: list[tuple[str, str]] | None = None,
    ) -> tuple[PersonaDraft, Usage]:
        if not facts and not scenarios and not profile:
            return PersonaDraft(), Usage()
        language = dominant_language([t for _, t, _ in facts] + [s for _, _, s in scenarios])
        messages = prompts.persona_messages(facts, scenarios, language, profile or [])
        data, usage = self.client.chat_json(messages, what="persona")
        if data is None:
            return PersonaDraft(), usage
        context = {
            "memory_ids": {memory_id for memory_id, _, _ in facts},
            "scenario_ids": {scenario_id for scenario_id, _, _ in scenarios},
        }
        try:
            draft = PersonaDraft.model_validate(data, context=context)
        except ValidationError as exc:
            logger.warning("LLM %s: persona answer skipped (%s)", self.model, short_error(exc))
            return PersonaDraft(), usage
        return draft, usage


# --- factory ---------------------------------------------------------------------------------------

_engine: LifecycleEngine | None = None
_engine_client: ChatClient | None = None
_engine_lock = threading.Lock()


def get_engine() -> LifecycleEngine:
    """The engine for the current settings: rebuilt when `llm.get_client()` is (the LLM settings
    changed), so the engine and the graph extraction share one client."""
    global _engine, _engine_client
    client = get_client()
    with _engine_lock:
        if _engine is None or client is not _engine_client:
            _engine = OfflineEngine() if client is None else LLMEngine(client)
            _engine_client = client
        return _engine
