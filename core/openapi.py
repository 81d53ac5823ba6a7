"""The OpenAPI description: one decorator per operation, one hook for the envelope.

The schema at `/api/schema/` must describe what the server really answers (a schemathesis run in
the test suite checks every status code and body against it), so the answers are declared once,
here, instead of as `extend_schema` boilerplate on every view:

* `api_operation(...)` on a view method names the `data` serializer, the success status(es) the
  view really returns (201 for a created object, 200 for a merge or a dedup hit, ...) and the
  errors only that operation can answer (403, 404, 409, 503).
* `envelope_hook` (a drf-spectacular post-processing hook) wraps every 2xx body in
  `{"ok": true, "data": ...}`, gives every error status the error envelope with the codes that
  status can carry, and adds the errors that follow from the operation's shape alone: 401, 429
  and 503 for signed operations (authentication, rate limit, v2 replay protection), 400 and 413
  for operations with a body, 400 for operations with query parameters, 404 for operations with
  path parameters, 500 everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from drf_spectacular.utils import OpenApiResponse, extend_schema

from .errors import ERROR_STATUS

F = TypeVar("F", bound=Callable[..., Any])

# What each error status means; the machine codes it can carry come from ERROR_STATUS.
ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid JSON, or a validation error (`details` names the fields).",
    401: "Missing or invalid authentication headers, key or signature.",
    403: "Another team's id, or not allowed for this key's agent.",
    404: "No such object in the key's team (another team's id answers the same), or no such "
    "endpoint.",
    405: "Method not allowed on this path.",
    409: "Conflict with the current state.",
    413: "Request body over `MAX_REQUEST_BYTES`.",
    415: "Unsupported media type.",
    429: "Rate limit of the key exceeded; retry after `Retry-After` seconds.",
    500: "Internal error; quote the `X-Request-ID` when reporting it.",
    503: "A dependency this operation needs is down (Redis, the embedding model, the LLM, the "
    "replay-protection cache of signature v2); the rest of the API keeps working.",
}

# The operation key that carries api_operation(envelope=...) to envelope_hook.
ENVELOPE_EXTENSION = "x-envelope-fields"

# Statuses every signed operation can answer, whatever it does.
AUTH_ERRORS = (401, 429, 503)

ERROR_ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "enum": [False]},
        "error": {"type": "string", "description": "human readable"},
        "code": {"type": "string", "enum": sorted(code.value for code in ERROR_STATUS)},
        "details": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "description": "validation failures per field",
        },
    },
    "required": ["ok", "error", "code"],
}

# `data` of an answer that has nothing to say (DELETE of a memory, an agent, a team).
NULL_DATA_SCHEMA: dict[str, Any] = {"nullable": True, "enum": [None], "description": "always null"}


def codes_for(status: int) -> list[str]:
    # Plain strings (.value): the schema is also rendered as YAML, whose dumper knows no enums.
    return sorted(code.value for code, s in ERROR_STATUS.items() if s == status)


def api_operation(
    *,
    summary: str,
    response: Any = None,
    request: Any = None,
    statuses: Sequence[int] = (200,),
    errors: Iterable[int] = (),
    parameters: Sequence[Any] = (),
    description: str | None = None,
    operation_id: str | None = None,
    public: bool = False,
    extra_responses: Mapping[int, Any] | None = None,
    media_type: str = "application/json",
    envelope: Mapping[str, Any] | None = None,
) -> Callable[[F], F]:
    """Documents one operation.

    `response` is the serializer of `data` (None: `data` is null); `statuses` are the success
    statuses the view answers; `errors` the error statuses specific to the operation (the hook
    adds those that follow from its shape). `public` operations need no signature. Another
    `media_type` (a Markdown export) describes a success answered as that document itself, not
    in the envelope; its errors are still enveloped JSON. `envelope` declares optional fields
    of the success envelope next to `data` (name -> JSON schema; core.api.EnvelopeResponse).
    """
    success: dict[Any, OpenApiResponse] = {
        (status if media_type == "application/json" else (status, media_type)): OpenApiResponse(
            response=response,
            description={200: "OK", 201: "Created"}.get(status, ""),
        )
        for status in statuses
    }
    for status, serializer in (extra_responses or {}).items():
        success[status] = OpenApiResponse(
            response=serializer, description={202: "Accepted"}.get(status, "")
        )
    failures = {
        status: OpenApiResponse(description=ERROR_DESCRIPTIONS[status]) for status in errors
    }
    kwargs: dict[str, Any] = {
        "summary": summary,
        "responses": {**success, **failures},
        "parameters": list(parameters) or None,
        # None: the operation reads no body (a bare POST such as auto-run declares none).
        "request": request,
    }
    if description:
        kwargs["description"] = description
    if operation_id:
        kwargs["operation_id"] = operation_id
    if public:
        kwargs["auth"] = []
    if envelope:
        # Carried to envelope_hook, which moves it into the success envelopes' schema.
        kwargs["extensions"] = {ENVELOPE_EXTENSION: dict(envelope)}
    return extend_schema(**kwargs)


def _error_component(status: int) -> dict[str, Any]:
    return {
        "allOf": [
            {"$ref": "#/components/schemas/ErrorEnvelope"},
            {
                "type": "object",
                "properties": {"code": {"type": "string", "enum": codes_for(status)}},
            },
        ]
    }


def _wrap_success(response: dict[str, Any], envelope: Mapping[str, Any]) -> None:
    content = response.get("content") or {}
    if content and "application/json" not in content:
        return  # a file or document answered as itself (an export, a Markdown page)
    inner = content.get("application/json", {}).get("schema", NULL_DATA_SCHEMA)
    response["content"] = {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "ok": {"type": "boolean", "enum": [True]},
                    "data": inner,
                    **envelope,
                },
                "required": ["ok", "data"],
            }
        }
    }


def envelope_hook(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular post-processing hook: the envelope around every answer."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorEnvelope"] = ERROR_ENVELOPE_SCHEMA
    for status in sorted(ERROR_DESCRIPTIONS):
        if codes_for(status):
            schemas[f"Error{status}"] = _error_component(status)
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            envelope = operation.pop(ENVELOPE_EXTENSION, {})
            shape: set[int] = {500}
            if operation.get("security"):
                shape.update(AUTH_ERRORS)
            if "requestBody" in operation:
                shape.update((400, 413))
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and not parameter.get("required"):
                    # Every query parameter of the API reads `?name=` as absent (the default).
                    parameter["allowEmptyValue"] = True
            locations = {p.get("in") for p in operation.get("parameters", [])}
            if "query" in locations:
                shape.add(400)
            if "path" in locations:
                # A path parameter that does not fit the URL pattern (a `/` in it) is no endpoint.
                shape.add(404)
            for status in shape:
                responses.setdefault(str(status), {"description": ERROR_DESCRIPTIONS[status]})
            for status_code, response in responses.items():
                if str(status_code).startswith("2"):
                    _wrap_success(response, envelope)
                else:
                    response["content"] = {
                        "application/json": {
                            "schema": {"$ref": f"#/components/schemas/Error{status_code}"}
                        }
                    }
            operation["responses"] = dict(sorted(responses.items()))
    return result
