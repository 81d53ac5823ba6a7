"""Model fields shared by the apps."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.backends.base.base import BaseDatabaseWrapper

# MariaDB/MySQL compare text through the column's collation, and the server's default
# (utf8mb4_unicode_ci or utf8mb4_general_ci) folds case and accents. SQLite, Redis (working
# memory), Milvus's filters and Python compare exactly. A binary collation on MySQL makes an
# identifier mean the same thing on every backend.
_EXACT_COLLATION = {"mysql": "utf8mb4_bin"}


class ExactCharField(models.CharField):
    """Text compared exactly on every database: an identifier, or a key built from one.

    The collation depends on the database, so it is not part of the field's deconstruction:
    migrations stay the same for every backend, and only MySQL's columns get it.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        collation = _EXACT_COLLATION.get(connection.vendor)
        if collation is not None:
            params["collation"] = collation
        return params


class AgentIdField(ExactCharField):
    """An agent id: "Alice" and "alice" are two agents, on MariaDB too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 64)
        super().__init__(*args, **kwargs)


class AlterToExactField(migrations.AlterField):
    """AlterField to an ExactCharField: only MySQL's column changes (its collation). Elsewhere
    the column already compares exactly, and SQLite would copy the whole table for nothing."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor in _EXACT_COLLATION:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor in _EXACT_COLLATION:
            super().database_backwards(app_label, schema_editor, from_state, to_state)
