"""Strict input fields: a JSON value of the wrong type is a VALIDATION_ERROR, not coerced.

DRF's own fields accept `"name": 123` as "123" and `"importance": "0.5"` as 0.5; the API's
contract is a 400 when a field has the wrong type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from .errors import ValidationFailed


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "Must be a number."}

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "Must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            # 5.0 is accepted as 5: JSON has one number type and some clients emit floats.
            if isinstance(data, float) and data.is_integer():
                data = int(data)
            else:
                self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class FutureDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date-time string still ahead (one without an offset is UTC)."""

    default_error_messages = {
        "invalid": "Must be an ISO 8601 date-time, e.g. 2027-01-31T18:00:00Z.",
        "past": "Must be in the future.",
    }

    def to_internal_value(self, value: Any) -> Any:
        if not isinstance(value, str):
            self.fail("invalid")
        # DRF's own answers "Datetime value out of range." for one with no time in UTC.
        when = super().to_internal_value(value)
        if when <= timezone.now():
            self.fail("past")
        return when


class JSONObjectField(serializers.DictField):
    """A JSON object; `null_values`: null is one of the values it may hold (a memory's metadata
    is any JSON object; a search filter's null is "no value")."""

    def __init__(self, *, null_values: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.JSONField(allow_null=null_values))
        super().__init__(**kwargs)


def query_int(value: str | None, *, name: str, default: int, minimum: int, maximum: int) -> int:
    """Parses an integer query parameter, raising VALIDATION_ERROR when absent-but-bad or out of range."""
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValidationFailed(
            {name: ["Must be an integer."]}, f"{name}: must be an integer"
        ) from None
    if not minimum <= number <= maximum:
        raise ValidationFailed(
            {name: [f"Must be between {minimum} and {maximum}."]},
            f"{name}: must be between {minimum} and {maximum}",
        )
    return number


@dataclass(frozen=True)
class QueryInt:
    """An integer query parameter: its bounds are enforced (`parse`) and documented
    (`parameter`, with minimum and maximum in the OpenAPI schema) from this one definition."""

    name: str
    default: int
    minimum: int
    maximum: int
    description: str = ""

    def parse(self, params: Mapping[str, Any]) -> int:
        return query_int(
            params.get(self.name),
            name=self.name,
            default=self.default,
            minimum=self.minimum,
            maximum=self.maximum,
        )

    @property
    def parameter(self) -> OpenApiParameter:
        bounds = f"{self.minimum}..{self.maximum} ({self.default})"
        return OpenApiParameter(
            self.name,
            {
                "type": "integer",
                "minimum": self.minimum,
                "maximum": self.maximum,
                "default": self.default,
            },
            description=f"{self.description}; {bounds}" if self.description else bounds,
        )
