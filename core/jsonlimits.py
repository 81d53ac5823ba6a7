"""How deeply a request body may nest (`MAX_JSON_DEPTH`), checked without recursion.

A 2 KB body of nested arrays is enough to exhaust Python's recursion limit, in the JSON decoder
(RecursionError) or later in whatever walks the value (serializers, the renderer, the database
driver): a 500 from a tiny request. The body object itself is level 1, so `{"metadata": {}}` is
two levels deep. Nothing the API stores needs more than a few.
"""

from __future__ import annotations

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
