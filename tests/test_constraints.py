"""Closed sets and ranges hold in the database itself (CheckConstraint), not only in serializers
and forms: a bulk `update()` or a raw write that bypasses them is refused with IntegrityError.

Runs on SQLite and on MariaDB (>= 10.2 enforces CHECK), whichever DATABASE_URL selects.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.db import IntegrityError, models, transaction

from .factories import (
    EntityFactory,
    JobRunFactory,
    MembershipFactory,
    MemoryFactory,
    MemoryRevisionFactory,
    MemoryShareFactory,
    PipelineConfigFactory,
    PurgeRunFactory,
    RelationFactory,
    TrashedMemoryFactory,
    WorkingArchiveFactory,
)

pytestmark = pytest.mark.django_db

INVALID = [
    (MemoryFactory, "importance", 5.0),
    (MemoryFactory, "importance", -0.1),
    (MemoryFactory, "scope", "global"),
    (MemoryRevisionFactory, "action", "delete"),
    (MemoryShareFactory, "permission", "admin"),
    (PurgeRunFactory, "status", "pending"),
    (TrashedMemoryFactory, "removed_by", "nobody"),
    (TrashedMemoryFactory, "scope", "global"),
    (MembershipFactory, "role", "owner"),
    (PipelineConfigFactory, "cleanup_min_importance", 1.5),
    (PipelineConfigFactory, "cleanup_min_importance", -1.0),
    (JobRunFactory, "status", "paused"),
    (JobRunFactory, "kind", "dance"),
    (JobRunFactory, "trigger", "cron"),
    (WorkingArchiveFactory, "reason", "expired"),
    (EntityFactory, "entity_type", "animal"),
    (RelationFactory, "relation_type", "hates"),
]


@pytest.mark.parametrize(
    ("factory", "field", "value"),
    INVALID,
    ids=[f"{f._meta.model.__name__}.{field}={value}" for f, field, value in INVALID],
)
def test_bulk_update_to_an_invalid_value_is_refused(factory: Any, field: str, value: Any) -> None:
    row = factory()
    model = type(row)
    # A savepoint, so the failed statement does not poison the test's transaction (MariaDB).
    with pytest.raises(IntegrityError), transaction.atomic():
        model.objects.filter(pk=row.pk).update(**{field: value})
    row.refresh_from_db()
    assert getattr(row, field) != value


@pytest.mark.parametrize("importance", [0.0, 1.0])
def test_importance_bounds_are_allowed(importance: float) -> None:
    memory = MemoryFactory()
    type(memory).objects.filter(pk=memory.pk).update(importance=importance)
    memory.refresh_from_db()
    assert memory.importance == importance


def test_every_closed_set_field_has_a_check_constraint() -> None:
    """A new `choices=` field on one of our models must come with its CheckConstraint."""
    missing = []
    for label in ("tenants", "memories", "lifecycle", "graph"):
        for model in apps.get_app_config(label).get_models():
            checked = {
                name
                for constraint in model._meta.constraints
                if isinstance(constraint, models.CheckConstraint)
                for name, _ in _lookups(constraint.condition)
            }
            for field in model._meta.concrete_fields:
                if field.choices and field.name not in checked:
                    missing.append(f"{model.__name__}.{field.name}")
    assert missing == []


def _lookups(q: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for child in q.children:
        if isinstance(child, models.Q):
            out.extend(_lookups(child))
        else:
            out.append((child[0].split("__")[0], child[1]))
    return out
