"""Tolerant reading of LLM answers: the JSON in an answer, the list of items in it, and the
validation of each item into a pydantic model.

An answer with no usable JSON gives no items; an item that does not validate is skipped with a
warning. Neither is an exception: a model that answers badly yields fewer items, never a failed
operation.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

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


def item_list(data: Any, key: str, *, single_item_keys: Collection[str] = ()) -> list[Any] | None:
    """The list of items in `{"<key>": [...]}`, a bare list, the only list of an object
    (`{"items": [...]}`), or — when the object has one of `single_item_keys` — the object itself
    as the one item. None when there is no list."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        value = data.get(key)
        if isinstance(value, list):
            return value
        lists = [v for v in data.values() if isinstance(v, list)]
        if value is None and len(lists) == 1:  # {"items": [...]}, {"result": [...]}
            return lists[0]
        if any(k in data for k in single_item_keys):
            return [data]
    return None


def short_error(exc: ValidationError) -> str:
    """A pydantic error in one log-sized line."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'item'}: {e['msg']}" for e in exc.errors()
    )[:300]


def validate_items(
    raw: list[Any],
    model: type[M],
    *,
    context: dict[str, Any],
    what: str,
    string_field: str | None = None,
) -> list[M]:
    """Each item validated into `model` (with `context`); the ones that fail are skipped with a
    warning naming `what`. With `string_field`, a bare string item is read as that field."""
    out: list[M] = []
    for i, obj in enumerate(raw):
        if string_field is not None and isinstance(obj, str):
            obj = {string_field: obj}
        try:
            out.append(model.model_validate(obj, context=context))
        except ValidationError as exc:
            logger.warning("LLM %s: item %d skipped (%s)", what, i, short_error(exc))
    return out
