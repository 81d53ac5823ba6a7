"""How deeply a request body may nest (`MAX_JSON_DEPTH`), checked without recursion; and that
its strings are text.

A 2 KB body of nested arrays is enough to exhaust Python's recursion limit, in the JSON decoder
(RecursionError) or later in whatever walks the value (serializers, the renderer, the database
driver): a 500 from a tiny request. The body object itself is level 1, so `{"metadata": {}}` is
two levels deep. Nothing the API stores needs more than a few.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ValidationFailed


def too_deep(limit: int) -> ValidationFailed:
    message = f"JSON nested deeper than {limit} levels"
    return ValidationFailed({"body": [message]}, f"body: {message}")


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` (parsed JSON) nests objects/arrays more than `limit` levels deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def check_depth(raw: bytes, value: Any, limit: int) -> None:
    """Raises VALIDATION_ERROR when the parsed body nests deeper than `limit`."""
    if not isinstance(value, dict | list):
        return
    # Fast path for nearly every body: it cannot nest deeper than it has opening brackets.
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return
    if depth_exceeds(value, limit):
        raise too_deep(limit)


# A JSON string may escape half of a surrogate pair alone ("\ud800"): json.loads gives a str that
# no UTF-8 encoder takes, so the database driver failed on it (a 500), wherever a field did not
# check it itself (a metadata key, a profile value). Only an escape can make one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _lone_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def check_text(raw: bytes, value: Any) -> None:
    """Raises VALIDATION_ERROR naming the field (`messages.0.content`) when a string of the
    parsed body, a key or a value, holds a lone surrogate. Bodies without a surrogate escape,
    nearly all, are not walked."""
    if not _SURROGATE_ESCAPE.search(raw):
        return
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                where = f"{path}.{key}" if path else str(key)
                if _lone_surrogate(key):
                    raise _not_text(path or "body", "a key")
                stack.append((child, where))
        elif isinstance(node, list):
            stack.extend((child, f"{path}.{n}") for n, child in enumerate(node))
        elif isinstance(node, str) and _lone_surrogate(node):
            raise _not_text(path or "body", "the text")


def _not_text(field: str, what: str) -> ValidationFailed:
    message = f"{what} holds half of a surrogate pair alone (\\ud800 to \\udfff): not text"
    return ValidationFailed({field: [message]}, f"{field}: {message}")
