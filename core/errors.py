"""The one domain exception type services raise; `core.api` maps it to the envelope."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """The machine codes of the error envelope (`code`); ERROR_STATUS gives their status."""

    INVALID_JSON = "INVALID_JSON"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    MISSING_AUTH = "MISSING_AUTH"
    INVALID_API_KEY = "INVALID_API_KEY"
    INVALID_TIMESTAMP = "INVALID_TIMESTAMP"
    TIMESTAMP_EXPIRED = "TIMESTAMP_EXPIRED"
    INVALID_SIGNATURE = "INVALID_SIGNATURE"
    REPLAYED_REQUEST = "REPLAYED_REQUEST"
    FORBIDDEN_CROSS_TEAM = "FORBIDDEN_CROSS_TEAM"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    CONFLICT = "CONFLICT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    RATE_LIMITED = "RATE_LIMITED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    WORKING_MEMORY_UNAVAILABLE = "WORKING_MEMORY_UNAVAILABLE"
    EMBEDDING_UNAVAILABLE = "EMBEDDING_UNAVAILABLE"
    LLM_UNAVAILABLE = "LLM_UNAVAILABLE"
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
    SEARCH_UNAVAILABLE = "SEARCH_UNAVAILABLE"


# Machine code -> HTTP status of the error envelope. Adding a code here is all it takes to use it.
ERROR_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.VALIDATION_ERROR: 400,
    ErrorCode.MISSING_AUTH: 401,
    ErrorCode.INVALID_API_KEY: 401,
    ErrorCode.INVALID_TIMESTAMP: 401,
    ErrorCode.TIMESTAMP_EXPIRED: 401,
    ErrorCode.INVALID_SIGNATURE: 401,
    ErrorCode.REPLAYED_REQUEST: 401,
    ErrorCode.FORBIDDEN_CROSS_TEAM: 403,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.WORKING_MEMORY_UNAVAILABLE: 503,
    ErrorCode.EMBEDDING_UNAVAILABLE: 503,
    ErrorCode.LLM_UNAVAILABLE: 503,
    ErrorCode.SERVICE_UNAVAILABLE: 503,
    ErrorCode.SEARCH_UNAVAILABLE: 503,
}


class DomainError(Exception):
    """A failure the caller can act on: carries a machine code, a message and optional details."""

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        *,
        details: dict[str, list[str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if code not in ERROR_STATUS:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.details = details
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

    def as_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"ok": False, "error": self.message, "code": self.code.value}
        if self.details:
            payload["details"] = self.details
        return payload


class NotFound(DomainError):
    def __init__(self, what: str = "resource") -> None:
        super().__init__(ErrorCode.NOT_FOUND, f"{what} not found")


class CrossTeamForbidden(DomainError):
    def __init__(self) -> None:
        # Same message whether the other team exists or not: no existence oracle.
        super().__init__(ErrorCode.FORBIDDEN_CROSS_TEAM, "this key cannot access another team")


class Forbidden(DomainError):
    def __init__(self, message: str = "this key's agent may not do that") -> None:
        super().__init__(ErrorCode.FORBIDDEN, message)


class ValidationFailed(DomainError):
    def __init__(self, details: dict[str, list[str]], message: str = "invalid input") -> None:
        super().__init__(ErrorCode.VALIDATION_ERROR, message, details=details)
