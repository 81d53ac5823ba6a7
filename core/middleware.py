"""Request id and body size limit, both before anything reads the body."""

from __future__ import annotations

import contextvars
import functools
import io
import logging
import re
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from .errors import DomainError, ErrorCode

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")


class RequestIdLogFilter(logging.Filter):
    """Puts the current request id on every log record (`%(request_id)s`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class RequestIdMiddleware:
    """Gives every request an id, returned as `X-Request-ID` and written in every log line.

    A well-formed id sent by a proxy is kept so logs can be joined across hops.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        rid = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        request.request_id = rid  # type: ignore[attr-defined]
        token = request_id_var.set(rid)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = rid
        return response


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _special_limit(path: str) -> int | None:
    """The body limit of `path` when it has its own (REQUEST_BYTES_BY_PATH, exact; else the
    first of REQUEST_BYTES_BY_PATH_PATTERN it matches whole), None for MAX_REQUEST_BYTES."""
    exact = getattr(settings, "REQUEST_BYTES_BY_PATH", {}).get(path)
    if exact is not None:
        return int(exact)
    for pattern, limit in getattr(settings, "REQUEST_BYTES_BY_PATH_PATTERN", {}).items():
        if _compiled(pattern).fullmatch(path):
            return int(limit)
    return None


class BodySizeLimitMiddleware:
    """Answers 413 in the envelope before a too-large body is read.

    Bodies without Content-Length (chunked) are caught later by Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE check, which `core.api` maps to the same 413.

    A path of REQUEST_BYTES_BY_PATH (POST /import: a whole bundle) or REQUEST_BYTES_BY_PATH_PATTERN
    (the console's import form) has its own limit: its body
    is read here, at most that many bytes, and kept as the request's body, so that Django's
    global DATA_UPLOAD_MAX_MEMORY_SIZE check (made when `request.body` is first read) does not
    refuse it; a body over the limit, declared or not, is a 413.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raw = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw)
        except ValueError:
            length = 0
        special = _special_limit(request.path)
        limit = settings.MAX_REQUEST_BYTES if special is None else special
        if length > limit:
            return self._too_large(limit)
        if special is not None and request.method in ("POST", "PUT", "PATCH"):
            body = request.read(limit + 1)
            if len(body) > limit:
                return self._too_large(limit)
            # What HttpRequest.body itself keeps once it has read the stream.
            request._body = body  # type: ignore[attr-defined]
            request._stream = io.BytesIO(body)  # type: ignore[attr-defined]
        return self.get_response(request)

    @staticmethod
    def _too_large(limit: int) -> HttpResponse:
        err = DomainError(
            ErrorCode.PAYLOAD_TOO_LARGE, f"request body over the limit of {limit} bytes"
        )
        return JsonResponse(err.as_payload(), status=err.status)
