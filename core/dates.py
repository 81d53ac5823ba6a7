"""Date-times as the API writes them, and as it reads them in."""

from __future__ import annotations

from datetime import UTC, datetime
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


def in_utc(dt: datetime) -> datetime | None:
    """An aware `dt` in UTC, as the database stores it; None when it has no UTC time
    (9999-12-31 at an offset west of UTC, 0001-01-01 east of it): Django's own conversion
    raises OverflowError at the query, a 500, where the caller should answer a 400."""
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        return None
