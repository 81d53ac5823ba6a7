"""Typed results of the lifecycle engines (LLM or offline) and the engine interface.

Every answer of an LLM is parsed into these models; an item that does not validate is skipped by
the engine. Validation is tolerant where a model's intent is clear (a numeric
string, an importance of 1.2 clamped to 1, a category spelt "Preferences" or "偏好") and strict
where storing the item would be wrong (empty content, a memory id that was not in the input).

References to the input (`source_indexes`, `memory_ids`, `scenario_ids`) are checked against the
input when the model is validated with a context: `Fact.model_validate(obj, context={"n_items":
5})`, `ScenarioDraft.model_validate(obj, context={"memory_ids": {1, 2}})`,
`PersonaDraft.model_validate(obj, context={"memory_ids": ..., "scenario_ids": ...})`. Unknown
references are dropped; a scenario left with no memory is invalid.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Protocol

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.dates import until_moment
from llm import Usage

CATEGORIES = ("preference", "habit", "expertise", "decision", "plan", "metric", "event", "fact")

FACT_MAX_CHARS = 2000
SCENARIO_NAME_MAX_CHARS = 100

# Spellings models use for the categories (plural, Chinese) -> the canonical name.
_CATEGORY_ALIASES = {
    "preferences": "preference",
    "habits": "habit",
    "skill": "expertise",
    "skills": "expertise",
    "decisions": "decision",
    "plans": "plan",
    "todo": "plan",
    "metrics": "metric",
    "events": "event",
    "facts": "fact",
    "偏好": "preference",
    "喜好": "preference",
    "习惯": "habit",
    "专长": "expertise",
    "擅长": "expertise",
    "专业": "expertise",
    "决策": "decision",
    "决定": "decision",
    "计划": "plan",
    "待办": "plan",
    "指标": "metric",
    "数据": "metric",
    "事件": "event",
    "事实": "fact",
    "知识": "fact",
}


def normalise_category(value: Any) -> str:
    """One of CATEGORIES; anything unknown (or missing) is a plain "fact"."""
    if not isinstance(value, str):
        return "fact"
    key = value.strip().lower()
    if key in CATEGORIES:
        return key
    return _CATEGORY_ALIASES.get(key, "fact")


def _importance(value: Any) -> float:
    if value is None:
        return 0.5
    if isinstance(value, bool):
        raise ValueError("importance must be a number")
    number = float(value)  # ValueError/TypeError -> validation error
    if math.isnan(number) or math.isinf(number):
        raise ValueError("importance must be finite")
    # Models drift past the bounds (1.1, -0.1); the intent is still clear.
    return min(1.0, max(0.0, number))


def _int_list(value: Any) -> list[int]:
    """Ints from a list of ints / numeric strings / a single int; anything else is dropped."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        value = [value]
    out: list[int] = []
    for v in value:
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            n = v
        elif isinstance(v, float) and v.is_integer():
            n = int(v)
        elif isinstance(v, str) and v.strip().lstrip("-").isdigit():
            n = int(v.strip())
        else:
            continue
        if n not in out:
            out.append(n)
    return out


def _str_list(value: Any) -> list[str]:
    """Non-empty stripped strings, de-duplicated in order; a lone string becomes a list."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    out: list[str] = []
    for v in value:
        if isinstance(v, dict):  # {"content": "..."} / {"text": "..."} / {"name": "..."}
            v = next((v[k] for k in ("content", "text", "name", "value") if k in v), None)
        if isinstance(v, int | float) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str):
            continue
        s = v.strip()
        if s and s not in out:
            out.append(s)
    return out


def _context(info: ValidationInfo, key: str) -> Any:
    return info.context.get(key) if isinstance(info.context, dict) else None


def _stripped(v: Any) -> Any:
    return v.strip() if isinstance(v, str) else v


def _source_indexes(v: Any, info: ValidationInfo) -> list[int]:
    indexes = _int_list(v)
    n = _context(info, "n_items")
    if isinstance(n, int):
        indexes = [i for i in indexes if 0 <= i < n]
    return indexes


def _known(parse: Callable[[Any], list[Any]], key: str) -> Callable[..., list[Any]]:
    """A before-validator: the ids `parse` reads, less those not in the context's `key`."""

    def validate(v: Any, info: ValidationInfo) -> list[Any]:
        ids = parse(v)
        known = _context(info, key)
        if known is not None:
            ids = [i for i in ids if i in known]
        return ids

    return validate


# The field types the models share; the before-validators run before the Field constraints.
_Content = Annotated[str, BeforeValidator(_stripped)]
_Importance = Annotated[float, BeforeValidator(_importance)]
_SourceIndexes = Annotated[list[int], BeforeValidator(_source_indexes)]
_MemoryIds = Annotated[list[int], BeforeValidator(_known(_int_list, "memory_ids"))]
_ScenarioIds = Annotated[list[str], BeforeValidator(_known(_str_list, "scenario_ids"))]


class Fact(BaseModel):
    """One atomic, self-contained, long-term-valuable fact (an L1 atom)."""

    content: _Content = Field(min_length=1, max_length=FACT_MAX_CHARS)
    importance: _Importance = Field(default=0.5, ge=0.0, le=1.0)
    category: str = "fact"
    source_indexes: _SourceIndexes = Field(default_factory=list)
    # When the fact says it stops being true ("on leave until 2031-01-31"): that moment (a date
    # alone: the end of that day, UTC). A value that is not a date is dropped, never the fact.
    expires_at: datetime | None = None

    @field_validator("category", mode="before")
    @classmethod
    def _category(cls, v: Any) -> str:
        return normalise_category(v)

    @field_validator("expires_at", mode="before")
    @classmethod
    def _expires_at(cls, v: Any) -> datetime | None:
        if isinstance(v, datetime):
            return v
        return until_moment(v.strip()) if isinstance(v, str) else None


class Summary(BaseModel):
    """One compressed long-term memory standing for several working-memory items."""

    content: _Content = Field(min_length=1)
    importance: _Importance = Field(default=0.5, ge=0.0, le=1.0)
    source_indexes: _SourceIndexes = Field(default_factory=list)


class ScenarioDraft(BaseModel):
    """A topic block (L2) over some of the input memories."""

    name: str = Field(min_length=1, max_length=SCENARIO_NAME_MAX_CHARS)
    summary: str = ""
    memory_ids: _MemoryIds = Field(min_length=1)

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, v: Any) -> Any:
        # A long name is still a name: cut it rather than lose the scenario.
        return v.strip()[:SCENARIO_NAME_MAX_CHARS].strip() if isinstance(v, str) else v

    @field_validator("summary", mode="before")
    @classmethod
    def _summary(cls, v: Any) -> Any:
        if v is None:
            return ""
        return v.strip() if isinstance(v, str) else v


class PersonaDraft(BaseModel):
    """The L3 persona, with the memory and scenario ids it was built from."""

    preferences: list[str] = Field(default_factory=list)
    habits: list[str] = Field(default_factory=list)
    expertise: list[str] = Field(default_factory=list)
    communication_style: str = ""
    summary: str = ""
    memory_ids: _MemoryIds = Field(default_factory=list)
    scenario_ids: _ScenarioIds = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        # {"persona": {...}} is a common wrapping.
        if isinstance(data, dict) and isinstance(data.get("persona"), dict):
            return data["persona"]
        return data

    @field_validator("preferences", "habits", "expertise", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> list[str]:
        return _str_list(v)

    @field_validator("communication_style", "summary", mode="before")
    @classmethod
    def _text(cls, v: Any) -> str:
        if isinstance(v, list | tuple):
            return "; ".join(_str_list(v))
        return v.strip() if isinstance(v, str) else ""


class LifecycleEngine(Protocol):
    """What the lifecycle services call; implemented by `OfflineEngine` and `LLMEngine`.

    All methods are pure functions of their input (no database access) and return the tokens
    they spent. The LLM engine raises `DomainError("LLM_UNAVAILABLE")` when the model cannot
    be reached; an answer it cannot use yields fewer (or no) items, never an exception.
    """

    name: str  # "offline" or "llm:<model>"

    def compress(self, items: list[str], target_count: int) -> tuple[list[Summary], Usage]:
        """At most `target_count` summaries covering the working-memory `items`."""
        ...

    def extract_facts(self, items: list[str]) -> tuple[list[Fact], Usage]:
        """Atomic, self-contained, long-term-valuable facts; chit-chat skipped."""
        ...

    def aggregate(self, memories: list[tuple[int, str]]) -> tuple[list[ScenarioDraft], Usage]:
        """(memory_id, content) pairs -> topic groups over those ids."""
        ...

    def persona(
        self,
        facts: list[tuple[int, str, str]],
        scenarios: list[tuple[str, str, str]],
        profile: list[tuple[str, str]] | None = None,
    ) -> tuple[PersonaDraft, Usage]:
        """facts = (memory_id, content, category); scenarios = (scenario_id, name, summary);
        profile = the agent's profile fields (key, value), exact: they come first."""
        ...
