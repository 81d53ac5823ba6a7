"""Search filters: the legacy keys (`category`, `metadata` equality, `created_after` /
`created_before`) and operators on fields, combined with `$and` / `$or`:

    {"importance": {"$gte": 0.7}}
    {"$or": [{"category": {"$in": ["rule", "preference"]}}, {"metadata.source": "demo"}]}
    {"created_at": {"$lt": "2026-01-01T00:00:00Z"}, "metadata.priority": {"$gt": 2}}

Fields: `importance`, `created_at`, `expires_at`, `category`, `run_id`, `tier` and
`metadata.<key>` (`expires_at`: null is "never expires"). Operators: `$eq`, `$ne`,
`$in`, `$nin`, `$gt`, `$gte`, `$lt`, `$lte`; a bare value means `$eq`. `parse_filters` checks a
filter completely (an unknown operator or field is a `FilterError` naming it, which the API
answers with 400); `filters_q` turns a checked filter into a Q that the caller ANDs with the
tenant's scope, so a filter can only narrow what the scope already allows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q
from django.utils.dateparse import parse_datetime

from core.dates import in_utc

LEGACY_KEYS = {"category", "metadata", "created_after", "created_before"}
FIELDS = {"importance", "created_at", "expires_at", "category", "run_id", "tier"}
OPERATORS = {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte"}
_ORDERING = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
# A metadata key is a name, never a lookup path ("a__contains" would be one for the ORM).
_META_KEY = re.compile(r"^(?!.*__)[A-Za-z0-9_-]{1,64}$")
MAX_DEPTH = 5
MAX_LIST = 100


class FilterError(ValueError):
    """The filter cannot be applied; the message names the offending key or operator."""


def parse_filters(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The filter checked and normalised (dates parsed); raises FilterError."""
    if not isinstance(raw, Mapping):
        raise FilterError("filters must be an object.")
    return _parse_node(raw, depth=0)


def with_run_id(filters: dict[str, Any], run_id: str) -> dict[str, Any]:
    """A checked filter narrowed to one run (the `run_id` shorthand of search and list)."""
    if not run_id:
        return filters
    only_run = {"run_id": {"$eq": run_id}}
    return {"$and": [filters, only_run]} if filters else only_run


def filters_q(filters: Mapping[str, Any]) -> Q:
    """A Q for a filter `parse_filters` returned (or accepts)."""
    q = Q()
    for key, value in filters.items():
        if key == "$and":
            for part in value:
                q &= filters_q(part)
        elif key == "$or":
            alternatives = Q()
            for part in value:
                alternatives |= filters_q(part)
            q &= alternatives
        elif key == "metadata":  # legacy: an object of equalities
            for meta_key, meta_value in value.items():
                q &= Q(**{f"metadata__{meta_key}": meta_value})
        elif key == "created_after":
            q &= Q(created_at__gte=value)
        elif key == "created_before":
            q &= Q(created_at__lt=value)
        else:
            q &= _condition_q(_lookup(key), value)
    return q


def _parse_node(node: Mapping[str, Any], *, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise FilterError(f"filters nest deeper than {MAX_DEPTH} levels of $and / $or.")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value or len(value) > MAX_LIST:
                raise FilterError(f"{key} takes a list of 1..{MAX_LIST} filters.")
            if not all(isinstance(part, Mapping) for part in value):
                raise FilterError(f"{key} takes a list of filter objects.")
            out[key] = [_parse_node(part, depth=depth + 1) for part in value]
        elif key.startswith("$"):
            raise FilterError(f"Unknown operator {key} (use $and / $or to combine filters).")
        elif key == "metadata":
            if not isinstance(value, Mapping) or any(
                isinstance(v, dict | list) for v in value.values()
            ):
                raise FilterError("metadata must be an object of scalar values.")
            for meta_key in value:
                _check_meta_key(meta_key)
            out[key] = dict(value)
        elif key in ("created_after", "created_before"):
            out[key] = _datetime(key, value)
        elif key in FIELDS or key.startswith("metadata."):
            if key.startswith("metadata."):
                _check_meta_key(key.removeprefix("metadata."))
            out[key] = _parse_condition(key, value)
        else:
            raise FilterError(
                f"Unknown filter {key} (fields: importance, created_at, expires_at, category, "
                "run_id, tier, metadata.<key>; also category, metadata, created_after, "
                "created_before)."
            )
    return out


def _parse_condition(field: str, value: Any) -> dict[str, Any]:
    """{"$op": operand, ...} with operands checked for the field; a bare value is $eq."""
    if not isinstance(value, Mapping):
        value = {"$eq": value}
    if not value:
        raise FilterError(f"{field}: an empty condition.")
    out: dict[str, Any] = {}
    for op, operand in value.items():
        if op not in OPERATORS:
            raise FilterError(f"Unknown operator {op} on {field}.")
        if op in ("$in", "$nin"):
            if not isinstance(operand, list) or len(operand) > MAX_LIST:
                raise FilterError(f"{field}: {op} takes a list of at most {MAX_LIST} values.")
            out[op] = [_operand(field, op, v) for v in operand]
        else:
            out[op] = _operand(field, op, operand)
    return out


def _operand(field: str, op: str, value: Any) -> Any:
    if isinstance(value, dict | list):
        raise FilterError(f"{field}: {op} takes a scalar value.")
    if field == "importance":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FilterError(f"importance: {op} takes a number.")
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        # SQLite binds integers as 64-bit: a larger one was a 500 there.
        raise FilterError(f"{field}: {op} takes integers within 64 bits.")
    if field == "created_at":
        return _datetime(field, value)
    if field == "expires_at":
        # null: a memory without an expiry (only with $eq / $ne: nothing orders against "never").
        if value is None and op in ("$eq", "$ne"):
            return None
        return _datetime(field, value)
    if field in ("category", "run_id", "tier") and not isinstance(value, str):
        raise FilterError(f"{field}: {op} takes a string.")
    if op in _ORDERING and (isinstance(value, bool) or value is None):
        raise FilterError(f"{field}: {op} takes a number or a string.")
    return value


def _datetime(field: str, value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:  # well formed, but no such date ("2031-02-30")
        parsed = None
    if parsed is None:
        raise FilterError(f"{field} must be an ISO 8601 datetime.")
    # Without an offset it is UTC, as the database's times are (and as a write's expires_at is).
    utc = in_utc(parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC))
    if utc is None:
        raise FilterError(f"{field} is out of range once in UTC.")
    return utc


def _check_meta_key(key: str) -> None:
    if not _META_KEY.match(key):
        raise FilterError(
            f"metadata key {key!r}: 1..64 letters, digits, - and _ (no double underscore)."
        )


def _lookup(field: str) -> str:
    return (
        "metadata__" + field.removeprefix("metadata.") if field.startswith("metadata.") else field
    )


def _condition_q(lookup: str, condition: Mapping[str, Any]) -> Q:
    # A memory without the metadata key is "not equal" to any value (as in MongoDB, mem0): SQL's
    # NOT on a missing JSON key would leave it out, so it is added explicitly.
    missing = Q(**{f"{lookup}__isnull": True}) if lookup.startswith("metadata__") else Q(pk__in=[])
    q = Q()
    for op, operand in condition.items():
        if op == "$eq":
            q &= Q(**{lookup: operand})
        elif op == "$ne":
            q &= ~Q(**{lookup: operand}) | missing
        elif op == "$in":
            q &= Q(**{f"{lookup}__in": operand})
        elif op == "$nin":
            q &= ~Q(**{f"{lookup}__in": operand}) | missing
        else:
            q &= Q(**{f"{lookup}__{_ORDERING[op]}": operand})
    return q
