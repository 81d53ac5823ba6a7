"""`/mcp`: the MCP streamable HTTP endpoint, served by a plain Django (WSGI) view.

The bearer token is checked (and counted against its rate limit) before any MCP message is
read: no token or a bad one is a 401 in the API's error envelope. Then the request is handed to
the SDK's ASGI transport in stateless JSON mode: every POST carries one JSON-RPC message and is
answered in full by one JSON response, so a synchronous worker (runserver, gunicorn sync) can
serve it like any other request. A fresh session manager serves each request: its `run()` can be
entered only once, and stateless mode keeps nothing between requests anyway.

`async_to_sync` runs the SDK's event loop in a helper thread while this request thread waits;
the tools' ORM work comes back to this thread (`sync_to_async(thread_sensitive=True)`), so it
uses the request's database connection and transaction handling like every other view.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from core import jsonlimits
from core.errors import DomainError, ErrorCode
from tenants.authentication import McpPrincipal, bearer_token, mcp_token_authenticate
from tenants.ratelimit import check_rate_limit

Message = MutableMapping[str, Any]

# A tool's arguments sit two levels below the JSON-RPC message (`params.arguments`): they may
# nest as deep as a REST body (MAX_JSON_DEPTH), no deeper.
ENVELOPE_LEVELS = 2


def _check_depth(body: bytes) -> None:
    """The REST API's nesting limit (core.jsonlimits), before the SDK parses the body: deep
    nesting would otherwise exhaust a recursion limit somewhere (the parser, a serializer)."""
    limit = settings.MAX_JSON_DEPTH + ENVELOPE_LEVELS
    try:
        value = json.loads(body)
    except RecursionError:
        raise jsonlimits.too_deep(limit) from None
    except ValueError:
        return  # not JSON: the SDK answers with a JSON-RPC parse error
    jsonlimits.check_depth(body, value, limit)


def _refusal(err: DomainError) -> HttpResponse:
    response = JsonResponse(
        err.as_payload(), status=err.status, json_dumps_params={"ensure_ascii": False}
    )
    for name, value in err.headers.items():
        response[name] = value
    if err.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="memoryplatform"'
    return response


def _scope(request: HttpRequest) -> dict[str, Any]:
    # WSGI header values are latin-1 strings by definition: encoding back is lossless.
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method or "GET",
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode("utf-8"),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (request.META.get("SERVER_NAME", ""), int(request.META.get("SERVER_PORT") or 0)),
        "state": {},
    }


async def _serve(
    scope: dict[str, Any], body: bytes, principal: McpPrincipal
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Runs the SDK's transport for this one request and collects its whole response."""
    # Imported on the first MCP request, not with the URL map: the SDK and its dependencies
    # (starlette, pydantic models, anyio) cost ~20 MB in every worker that never serves MCP.
    import anyio
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from .server import credential, mcp

    status = 500
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []
    answered = anyio.Event()
    body_sent = False

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # The client stays connected until the answer is complete.
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    manager = StreamableHTTPSessionManager(
        # The SDK's documented way to serve an MCPServer from another framework is its
        # Starlette app; we need its transport only, which takes the low-level server.
        app=mcp._lowlevel_server,
        stateless=True,
        json_response=True,
    )
    with credential(principal):
        async with manager.run():
            await manager.handle_request(scope, receive, send)
    return status, headers, b"".join(chunks)


@csrf_exempt  # bearer-token API: no cookie ever authenticates it
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    try:
        principal = mcp_token_authenticate(bearer_token(request.headers.get("Authorization", "")))
        check_rate_limit(principal.mcp_token)
        if request.method != "POST":
            # Stateless: no SSE stream to open with GET (the SDK would hold this worker waiting
            # on one forever), no session to end with DELETE. The spec's answer is 405.
            raise DomainError(
                ErrorCode.METHOD_NOT_ALLOWED,
                "this MCP endpoint is stateless: POST one JSON-RPC message per request",
                headers={"Allow": "POST"},
            )
        _check_depth(request.body)
    except DomainError as err:
        return _refusal(err)
    status, headers, body = async_to_sync(_serve)(_scope(request), request.body, principal)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() != b"content-length":
            response[name.decode("latin-1")] = value.decode("latin-1")
    return response
