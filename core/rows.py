"""Partial updates of a row: write only what the caller gave.

A service that sets some fields of a row it read and then calls `save()` writes every column back
as it read it, undoing another request's change of a field it never meant to touch (a lost
update). The services lock the row, read it afresh, set the given fields with `assign_given`
and save with the names it returns.
"""

from __future__ import annotations

from typing import Any

from django.db import models


def assign_given(obj: models.Model, **values: Any) -> list[str]:
    """Sets each value that is not None on `obj`; returns the fields to save
    (`save(update_fields=...)`): those set, plus `updated_at` when the model stamps it."""
    fields = [name for name, value in values.items() if value is not None]
    for name in fields:
        setattr(obj, name, values[name])
    if any(f.name == "updated_at" for f in obj._meta.concrete_fields):
        fields.append("updated_at")
    return fields
