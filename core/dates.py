"""Date-times as the API writes them, and as it reads them in."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import overload

from django.utils.dateparse import parse_date, parse_datetime


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


def until_moment(value: str) -> datetime | None:
    """The moment something "true until `value`" stops being true: a date alone is inclusive
    (true all that day, in UTC), so it ends at the next midnight UTC; a date-time is taken as it
    is, UTC without an offset. None when `value` is not an ISO 8601 date or date-time, names no
    such day (2030-02-30), or has no time the databases store (year 999; the day after
    9999-12-31)."""
    try:
        day = parse_date(value)
        if day is not None:
            moment = datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)
        else:
            parsed = parse_datetime(value)
            if parsed is None:
                return None
            moment = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
    utc = in_utc(moment)
    if utc is None or utc.year < 1000:
        return None
    return moment
