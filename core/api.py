"""The API envelope: renderer, parser, exception handler, JSON 404/500 (the schema: openapi.py).

Success is `{"ok": true, "data": ...}`; failure `{"ok": false, "error", "code"[, "details"]}`
Every error path in the API, including Django's own 404/500 and DRF's exceptions,
ends here so a client never sees HTML or a stack trace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    ObjectDoesNotExist,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
)
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, IntegrityError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from . import jsonlimits
from .errors import DomainError, ErrorCode
from .middleware import request_id_var

logger = logging.getLogger("memoryplatform.api")


# --- what every view does with a request and an answer -------------------------------------------


def validated_body(request: Request, serializer_class: type[BaseSerializer[Any]]) -> dict[str, Any]:
    """The request's body as `serializer_class` validates it; invalid, the view stops with a
    VALIDATION_ERROR (400) that names the fields (the exception handler below)."""
    s = serializer_class(data=request.data)
    s.is_valid(raise_exception=True)
    return s.validated_data


def upserted(body: Any, *, created: bool) -> Response:
    """The answer of a create-or-update: 201 when the object is new, 200 when it existed."""
    return Response(body, status=201 if created else 200)


class EnvelopeResponse(Response):
    """A success whose envelope carries fields next to `data` — a search's `partial: true` —
    so the shape of `data` stays what clients already parse. Declare them in the schema with
    api_operation(envelope=...)."""

    def __init__(self, data: Any, *, envelope: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self.envelope = dict(envelope)


class EnvelopeJSONRenderer(JSONRenderer):
    """Wraps successful payloads in the envelope; error payloads are already enveloped."""

    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        response = (renderer_context or {}).get("response")
        if response is not None and (response.exception or response.status_code >= 400):
            payload = data
        else:
            payload = {"ok": True, "data": data, **getattr(response, "envelope", {})}
        return super().render(payload, accepted_media_type, renderer_context)


class LenientJSONParser(JSONParser):
    """Parses every body as JSON whatever its Content-Type (the API is JSON only).

    A `curl -d '{...}'` without `-H 'Content-Type: application/json'` should work, not 415.
    The body must be a JSON object nested at most MAX_JSON_DEPTH levels deep (jsonlimits.py).
    """

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = stream.read() if stream is not None else b""
        if not raw.strip():
            return {}
        limit = settings.MAX_JSON_DEPTH
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DomainError(
                ErrorCode.INVALID_JSON, f"body is not valid UTF-8 JSON: {exc}"
            ) from exc
        except RecursionError:
            # Nested beyond what the decoder can recurse into (~900 levels): far over any limit.
            raise jsonlimits.too_deep(limit) from None
        jsonlimits.check_depth(raw, data, limit)
        jsonlimits.check_text(raw, data)
        if not isinstance(data, dict):
            raise DomainError(ErrorCode.INVALID_JSON, "body must be a JSON object")
        return data


def _validation_details(detail: Any) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for field, messages in detail.items():
            if isinstance(messages, dict):
                for sub, sub_messages in _validation_details(messages).items():
                    out[f"{field}.{sub}"] = sub_messages
            elif isinstance(messages, list):
                flat: list[str] = []
                for m in messages:
                    if isinstance(m, dict):
                        for sub, sub_messages in _validation_details(m).items():
                            out[f"{field}.{sub}"] = sub_messages
                    else:
                        flat.append(str(m))
                if flat:
                    out[str(field)] = flat
            else:
                out[str(field)] = [str(messages)]
        return out
    if isinstance(detail, list):
        return {"non_field_errors": [str(m) for m in detail]}
    return {"non_field_errors": [str(detail)]}


# MariaDB/MySQL error numbers. Busy: the row stayed held by another transaction for
# DB_LOCK_WAIT_SECONDS, or a deadlock chose this one; either way the server rolled back, and the
# request's atomic block with it. Down: no connection, or it was lost.
_DB_BUSY = frozenset({1205, 1213})
_DB_DOWN = frozenset({2002, 2003, 2005, 2006, 2013})


def _database_error(exc: OperationalError) -> DomainError | None:
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = str(exc)
    if errno in _DB_BUSY or "database is locked" in text:  # the second: SQLite's busy timeout
        logger.warning("database busy, answered 503: %s", text)
        return DomainError(
            ErrorCode.SERVICE_UNAVAILABLE,
            "busy: another request held data this one needed for longer than the lock wait; "
            "retry it",
            headers={"Retry-After": "1"},
        )
    if errno in _DB_DOWN or "unable to open database file" in text:
        logger.error("database unavailable, answered 503: %s", text)
        return DomainError(
            ErrorCode.SERVICE_UNAVAILABLE, "database unavailable", headers={"Retry-After": "5"}
        )
    return None


# A row another request removed between this one's read and its write: the foreign key refuses
# the write (1452: the referenced row is gone; 1451: a row now refers to the one being deleted).
_DB_REFERENCE = frozenset({1451, 1452})
# What Django raises when it saves an instance whose row is gone (an UPDATE that matched none).
_SAVE_MISSED = frozenset(
    {"Save with update_fields did not affect any rows.", "Forced update did not affect any rows."}
)


def _removed_meanwhile(exc: ObjectDoesNotExist | DatabaseError) -> DomainError | None:
    """A concurrent removal the service did not lock against answers what the request would
    have a moment later (404, or 409 for a write that refers to it), never a 500; the service's
    atomic block rolled back, so nothing was written. Logged, as a service should lock instead."""
    if isinstance(exc, ObjectDoesNotExist) or (
        type(exc) is DatabaseError and str(exc) in _SAVE_MISSED
    ):
        logger.warning("row gone during the request, answered 404: %s", exc)
        return DomainError(ErrorCode.NOT_FOUND, "not found: removed by another request meanwhile")
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if errno in _DB_REFERENCE or "FOREIGN KEY constraint failed" in str(exc):
        logger.warning("reference gone during the request, answered 409: %s", exc)
        return DomainError(
            ErrorCode.CONFLICT,
            "conflict: another request removed data this one refers to; nothing was written",
        )
    return None


def error_for_exception(exc: BaseException) -> DomainError | None:
    """Maps any known exception to a DomainError; None means "unexpected" (a 500)."""
    if isinstance(exc, DomainError):
        return exc
    if isinstance(exc, OperationalError):
        return _database_error(exc)
    if isinstance(exc, ObjectDoesNotExist | IntegrityError) or type(exc) is DatabaseError:
        return _removed_meanwhile(exc)
    if isinstance(exc, drf_exceptions.ValidationError):
        details = _validation_details(exc.detail)
        first = next(iter(details.items()), ("input", ["invalid"]))
        return DomainError(
            ErrorCode.VALIDATION_ERROR, f"{first[0]}: {first[1][0]}", details=details
        )
    if isinstance(exc, drf_exceptions.ParseError):
        return DomainError(ErrorCode.INVALID_JSON, "body is not valid JSON")
    if isinstance(exc, drf_exceptions.NotAuthenticated):
        return DomainError(ErrorCode.MISSING_AUTH, "authentication headers are missing")
    if isinstance(exc, drf_exceptions.AuthenticationFailed):
        return DomainError(ErrorCode.INVALID_API_KEY, str(exc.detail))
    if isinstance(exc, drf_exceptions.PermissionDenied | DjangoPermissionDenied):
        return DomainError(ErrorCode.FORBIDDEN, "forbidden")
    if isinstance(exc, drf_exceptions.NotFound | Http404):
        return DomainError(ErrorCode.NOT_FOUND, "not found")
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return DomainError(ErrorCode.METHOD_NOT_ALLOWED, str(exc.detail))
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return DomainError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, str(exc.detail))
    if isinstance(exc, drf_exceptions.Throttled):
        wait = int(getattr(exc, "wait", None) or 1)
        return DomainError(
            ErrorCode.RATE_LIMITED,
            f"rate limit exceeded, retry in {wait} s",
            headers={"Retry-After": str(max(1, wait))},
        )
    if isinstance(exc, RequestDataTooBig):
        return DomainError(ErrorCode.PAYLOAD_TOO_LARGE, "request body over the configured limit")
    if isinstance(exc, TooManyFieldsSent):
        return DomainError(
            ErrorCode.VALIDATION_ERROR,
            f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} query parameters",
        )
    if isinstance(exc, SuspiciousOperation):
        # Raised inside a view when the request itself is malformed (Django logs it as such).
        return DomainError(ErrorCode.VALIDATION_ERROR, "bad request")
    if isinstance(exc, drf_exceptions.APIException):
        code = {
            404: ErrorCode.NOT_FOUND,
            405: ErrorCode.METHOD_NOT_ALLOWED,
            413: ErrorCode.PAYLOAD_TOO_LARGE,
        }.get(exc.status_code, ErrorCode.VALIDATION_ERROR if exc.status_code == 400 else "")
        if code:
            return DomainError(code, str(exc.detail))
    return None


def internal_error_payload() -> dict[str, Any]:
    rid = request_id_var.get()
    return {
        "ok": False,
        "error": f"internal error; quote request id {rid} when reporting it",
        "code": ErrorCode.INTERNAL_ERROR,
    }


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF exception handler: every exception becomes an envelope, never a trace."""
    # Imported here: rest_framework.views reads DRF's settings when imported, which name this
    # module's renderer, so importing it at the top made this module unimportable as the first
    # of the two in a process (a Celery worker's metrics page, memoryplatform.worker_metrics).
    from rest_framework.views import set_rollback

    set_rollback()
    err = error_for_exception(exc)
    if err is None:
        view = context.get("view")
        logger.exception("unhandled error in %s", type(view).__name__ if view else "view")
        response = Response(internal_error_payload(), status=500)
        response.exception = True
        return response
    response = Response(err.as_payload(), status=err.status, headers=err.headers)
    response.exception = True
    return response


# --- Django-level handlers (URLs that reach no DRF view) ----------------------------------------


def _is_html_area(request: HttpRequest) -> bool:
    return request.path.startswith(("/admin", "/review", "/static"))


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_html_area(request):
        from django.views.defaults import page_not_found

        return page_not_found(request, exception or Http404())
    err = DomainError(ErrorCode.NOT_FOUND, f"no such endpoint: {request.method} {request.path}")
    return JsonResponse(err.as_payload(), status=404, json_dumps_params={"ensure_ascii": False})


def handler500(request: HttpRequest) -> HttpResponse:
    if _is_html_area(request):
        from django.views.defaults import server_error

        return server_error(request)
    return JsonResponse(internal_error_payload(), status=500)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    err = DomainError(ErrorCode.VALIDATION_ERROR, "bad request")
    return JsonResponse(err.as_payload(), status=400)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_html_area(request):
        from django.views.defaults import permission_denied

        return permission_denied(request, exception or DjangoPermissionDenied())
    err = DomainError(ErrorCode.FORBIDDEN, "forbidden")
    return JsonResponse(err.as_payload(), status=403)


class LenientContentNegotiation(DefaultContentNegotiation):
    """Answers JSON even when the client's Accept header asks for something else (never 406)."""

    def select_renderer(
        self, request: Any, renderers: Any, format_suffix: str | None = None
    ) -> Any:
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except drf_exceptions.NotAcceptable:
            return renderers[0], renderers[0].media_type
