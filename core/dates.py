"""Date-times as the API writes them."""

from __future__ import annotations

from datetime import datetime
from typing import overload


@overload
def iso(dt: datetime) -> str: ...
@overload
def iso(dt: None) -> None: ...
@overload
def iso(dt: datetime | None) -> str | None: ...
def iso(dt: datetime | None) -> str | None:
    """ISO 8601 the way DRF renders a DateTimeField (UTC as "Z"), None stays None.

    Every date-time in a JSON answer goes through here, so hand-built dicts and serializers
    agree to the character.
    """
    if dt is None:
        return None
    value = dt.isoformat()
    return value[:-6] + "Z" if value.endswith("+00:00") else value
