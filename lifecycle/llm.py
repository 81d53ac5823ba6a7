"""Lifecycle engines: `get_engine()` returns the LLM engine when `LLM_BASE_URL` is set, else the
deterministic offline engine (`lifecycle.offline`). Both implement `schemas.LifecycleEngine`.

The LLM engine talks to any OpenAI-compatible chat endpoint with the `openai` client, whose own
retries (`LLM_MAX_RETRIES`, exponential backoff) cover 429, 5xx and connection errors. When the
model still cannot be reached, times out or fails, the operation raises
`DomainError("LLM_UNAVAILABLE")` (503) and nothing has been written by the caller yet.

Answers are requested as JSON (`response_format={"type": "json_object"}`; a provider that rejects
that parameter is asked again without it, once per engine) and parsed tolerantly: the first JSON
object (or array) is taken from prose, ```json fences or after a <think> block. Every item is
validated into the schemas; an item that does not validate is skipped with a warning, and an
answer with no usable JSON gives no items and a warning — never an exception (seed 000 §6.3).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any, TypeVar

from django.conf import settings
from pydantic import BaseModel, ValidationError

from memoryplatform.errors import DomainError

from . import prompts
from .offline import OfflineEngine, dominant_language
from .schemas import Fact, LifecycleEngine, PersonaDraft, ScenarioDraft, Summary, Usage

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4o-mini"

M = TypeVar("M", bound=BaseModel)

__all__ = ["LLMEngine", "LifecycleEngine", "OfflineEngine", "extract_json", "get_engine"]


# --- tolerant JSON ---------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)```", re.S)
_MAX_CANDIDATES = 200


def extract_json(text: str) -> Any | None:
    """The JSON value in an answer: the whole text, else a fenced block, else the first JSON
    object (then array) that decodes from some `{` (`[`) in the text. None if there is none."""
    text = _THINK.sub("", text or "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    for match in _FENCE.finditer(text):
        try:
            return json.loads(match.group(1).strip())
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for opener in "{[":
        tried = 0
        start = text.find(opener)
        while start != -1 and tried < _MAX_CANDIDATES:
            try:
                value, _end = decoder.raw_decode(text, start)
                return value
            except ValueError:
                tried += 1
                start = text.find(opener, start + 1)
    return None


def _item_list(data: Any, key: str) -> list[Any] | None:
    """The list of items in `{"<key>": [...]}`, a bare list, or a single item object."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        value = data.get(key)
        if isinstance(value, list):
            return value
        lists = [v for v in data.values() if isinstance(v, list)]
        if value is None and len(lists) == 1:  # {"items": [...]}, {"result": [...]}
            return lists[0]
        if any(k in data for k in ("content", "name", "memory_ids")):
            return [data]
    return None


def _short_error(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'item'}: {e['msg']}" for e in exc.errors()
    )[:300]


def _validate_items(raw: list[Any], model: type[M], context: dict[str, Any], what: str) -> list[M]:
    out: list[M] = []
    for i, obj in enumerate(raw):
        if isinstance(obj, str) and model in (Fact, Summary):
            obj = {"content": obj}
        try:
            out.append(model.model_validate(obj, context=context))
        except ValidationError as exc:
            logger.warning("LLM %s: item %d skipped (%s)", what, i, _short_error(exc))
    return out


# --- the engine ------------------------------------------------------------------------------------


def _usage(response: Any) -> Usage:
    u = getattr(response, "usage", None)
    if u is None:
        return Usage()
    prompt = int(getattr(u, "prompt_tokens", 0) or 0)
    completion = int(getattr(u, "completion_tokens", 0) or 0)
    total = int(getattr(u, "total_tokens", 0) or 0) or prompt + completion
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)


class LLMEngine:
    """The lifecycle operations on an OpenAI-compatible chat model."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, timeout: float, max_retries: int
    ) -> None:
        from openai import OpenAI

        self.model = model
        self.name = f"llm:{model}"
        self.timeout = timeout
        self._client = OpenAI(
            base_url=base_url,
            api_key=api_key or "none",  # local servers need none; the client insists on one
            timeout=timeout,
            max_retries=max_retries,
        )
        self._json_mode = True

    def _create(self, messages: list[dict[str, str]], *, json_mode: bool) -> Any:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
            kwargs["temperature"] = 0
        return self._client.chat.completions.create(**kwargs)

    def _chat(self, messages: list[dict[str, str]], what: str) -> tuple[Any | None, Usage]:
        """One completion: (the JSON in the answer or None, tokens used)."""
        import openai

        try:
            try:
                response = self._create(messages, json_mode=self._json_mode)
            except openai.BadRequestError as exc:
                if not self._json_mode:
                    raise
                # Some providers reject response_format/temperature; the prompt asks for JSON
                # anyway and the answer is parsed tolerantly.
                logger.warning(
                    "LLM %s rejected JSON mode (%s); retrying without it", self.model, exc
                )
                response = self._create(messages, json_mode=False)
                self._json_mode = False
        except openai.APITimeoutError as exc:
            logger.warning("LLM %s: %s timed out after %ss", self.model, what, self.timeout)
            raise DomainError(
                "LLM_UNAVAILABLE", f"the LLM did not answer within {self.timeout:g} s"
            ) from exc
        except openai.APIConnectionError as exc:
            logger.warning("LLM %s: %s could not connect: %s", self.model, what, exc)
            raise DomainError("LLM_UNAVAILABLE", "the LLM cannot be reached") from exc
        except openai.APIStatusError as exc:
            logger.warning("LLM %s: %s answered HTTP %s", self.model, what, exc.status_code)
            raise DomainError(
                "LLM_UNAVAILABLE", f"the LLM answered HTTP {exc.status_code}"
            ) from exc
        except openai.OpenAIError as exc:
            logger.warning("LLM %s: %s failed: %s", self.model, what, type(exc).__name__)
            raise DomainError("LLM_UNAVAILABLE", f"the LLM failed: {type(exc).__name__}") from exc

        usage = _usage(response)
        choices = getattr(response, "choices", None) or []
        content = choices[0].message.content if choices else None
        data = extract_json(content or "")
        if data is None:
            logger.warning(
                "LLM %s: %s answer has no JSON, no items taken (starts with %r)",
                self.model,
                what,
                (content or "")[:200],
            )
        return data, usage

    def compress(self, items: list[str], target_count: int) -> tuple[list[Summary], Usage]:
        if not items:
            return [], Usage()
        target = max(1, int(target_count))
        messages = prompts.compress_messages(items, target, dominant_language(items))
        data, usage = self._chat(messages, "compress")
        if isinstance(data, dict) and isinstance(data.get("summary"), str):
            data = [{**data, "content": data["summary"]}]  # {"summary": "..."}: one summary
        raw = _item_list(data, "summaries") if data is not None else []
        if raw is None:
            logger.warning("LLM %s: compress answer has no summaries list", self.model)
            raw = []
        summaries = _validate_items(raw, Summary, {"n_items": len(items)}, "compress")
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
        data, usage = self._chat(messages, "extract_facts")
        raw = _item_list(data, "facts") if data is not None else []
        if raw is None:
            logger.warning("LLM %s: extract_facts answer has no facts list", self.model)
            raw = []
        facts: list[Fact] = []
        seen: dict[str, Fact] = {}
        for fact in _validate_items(raw, Fact, {"n_items": len(items)}, "extract_facts"):
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
        data, usage = self._chat(messages, "aggregate")
        raw = _item_list(data, "scenarios") if data is not None else []
        if raw is None:
            logger.warning("LLM %s: aggregate answer has no scenarios list", self.model)
            raw = []
        known = {memory_id for memory_id, _ in memories}
        drafts = _validate_items(raw, ScenarioDraft, {"memory_ids": known}, "aggregate")
        return drafts, usage

    def persona(
        self, facts: list[tuple[int, str, str]], scenarios: list[tuple[str, str, str]]
    ) -> tuple[PersonaDraft, Usage]:
        if not facts and not scenarios:
            return PersonaDraft(), Usage()
        language = dominant_language([t for _, t, _ in facts] + [s for _, _, s in scenarios])
        messages = prompts.persona_messages(facts, scenarios, language)
        data, usage = self._chat(messages, "persona")
        if data is None:
            return PersonaDraft(), usage
        context = {
            "memory_ids": {memory_id for memory_id, _, _ in facts},
            "scenario_ids": {scenario_id for scenario_id, _, _ in scenarios},
        }
        try:
            draft = PersonaDraft.model_validate(data, context=context)
        except ValidationError as exc:
            logger.warning("LLM %s: persona answer skipped (%s)", self.model, _short_error(exc))
            return PersonaDraft(), usage
        return draft, usage


# --- factory ---------------------------------------------------------------------------------------

_engine: LifecycleEngine | None = None
_engine_key: tuple[Any, ...] | None = None
_engine_lock = threading.Lock()


def _settings_key() -> tuple[Any, ...]:
    return (
        settings.LLM_BASE_URL,
        settings.LLM_API_KEY,
        settings.LLM_MODEL,
        float(settings.LLM_TIMEOUT_SECONDS),
        int(settings.LLM_MAX_RETRIES),
    )


def _build(key: tuple[Any, ...]) -> LifecycleEngine:
    base_url, api_key, model, timeout, max_retries = key
    if not base_url:
        return OfflineEngine()
    if not model:
        logger.warning("LLM_MODEL is not set; asking %s for %s", base_url, DEFAULT_MODEL)
    return LLMEngine(
        base_url=base_url,
        api_key=api_key,
        model=model or DEFAULT_MODEL,
        timeout=timeout,
        max_retries=max_retries,
    )


def get_engine() -> LifecycleEngine:
    """The engine for the current settings (rebuilt when the LLM settings change)."""
    global _engine, _engine_key
    key = _settings_key()
    with _engine_lock:
        if _engine is None or _engine_key != key:
            _engine = _build(key)
            _engine_key = key
        return _engine
