"""HMAC-SHA256 request authentication (docs/authentication.md).

v1 (default, what clients of the original API send): the signature is
`HMAC_SHA256(secret, str(timestamp).encode() + raw_body)` over the exact bytes received; GET and
DELETE (and empty bodies) sign the timestamp alone.

v2 (opt-in with `X-Signature-Version: 2` and `X-Nonce`): the signed bytes are
`"v2\\n{timestamp}\\n{nonce}\\n{METHOD}\\n{path?query}\\n".encode() + raw_body` (the body of any
method, DELETE included); a nonce is accepted
once per key within the skew window. A team may require v2; teams created under
NEW_TEAMS_REQUIRE_SIGNATURE_V2 (on in production) do.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from core.errors import DomainError, ErrorCode

from . import crypto
from .models import ApiKey, McpToken, Team
from .selectors import api_key_get_by_key_id, mcp_token_get_by_hash
from .services import api_key_secrets, api_key_touch, mcp_token_hash, mcp_token_touch

logger = logging.getLogger(__name__)

_TIMESTAMP_RE = re.compile(r"^[0-9]{1,12}$")
_NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
_BODY_SIGNED_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True)
class ApiPrincipal:
    """Who is calling: the key's team and, for an agent-scoped key, its agent."""

    team: Team
    api_key: ApiKey
    agent_id: str | None

    is_authenticated = True
    is_anonymous = False

    @property
    def team_id(self) -> str:
        return self.team.id

    def __str__(self) -> str:
        return f"key {self.api_key.key_id}"


def signed_message(
    *,
    method: str,
    timestamp: str,
    body: bytes,
    version: int = 1,
    nonce: str = "",
    full_path: str = "",
) -> bytes:
    if version == 1 and method.upper() not in _BODY_SIGNED_METHODS:
        body = b""  # v1 (the original contract): GET and DELETE sign the timestamp alone
    if version == 2:
        # v2 covers whatever body is sent, whatever the method (a DELETE may carry one).
        head = f"v2\n{timestamp}\n{nonce}\n{method.upper()}\n{full_path}\n".encode()
        return head + body
    return timestamp.encode() + body


def signed_paths(request: HttpRequest) -> list[str]:
    """The `path?query` a v2 signature may cover: the request target exactly as the client sent
    it, Django's `get_full_path()`, and the path with every byte but `/` and the unreserved ones
    percent-encoded (what `quote(segment, safe="")` clients such as the SDK send).

    Django decodes the path and re-encodes it its own way (`/a%40b` becomes `/a@b`), so a client
    that signs what it sends would be refused for any id with such characters. gunicorn passes
    the raw target as `RAW_URI` (uWSGI and others as `REQUEST_URI`); runserver and the test
    client pass none, which leaves the two rebuilt forms. All name the same resource, so
    accepting any of them lets no signature reach another one.
    """
    paths: list[str] = []
    raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI") or ""
    if raw and not raw.startswith("/"):
        # An absolute-form target (`http://host/path?query`) as proxies may send.
        parts = urlsplit(raw)
        raw = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    query = request.META.get("QUERY_STRING", "")
    for path in (
        raw if raw.startswith("/") else "",
        request.get_full_path(),
        quote(request.path, safe="/") + (f"?{query}" if query else ""),
    ):
        if path and path not in paths:
            paths.append(path)
    return paths


def _fail(code: ErrorCode, message: str) -> DomainError:
    return DomainError(code, message)


class HmacAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ApiPrincipal, ApiKey]:
        headers = request.headers
        key_id = headers.get("X-API-Key", "")
        timestamp = headers.get("X-Timestamp", "")
        signature = headers.get("X-Signature", "")
        missing = [
            name
            for name, value in (
                ("X-API-Key", key_id),
                ("X-Timestamp", timestamp),
                ("X-Signature", signature),
            )
            if not value
        ]
        if missing:
            raise _fail(ErrorCode.MISSING_AUTH, f"missing header(s): {', '.join(missing)}")

        timestamp = timestamp.strip()
        if not _TIMESTAMP_RE.match(timestamp):
            raise _fail(
                ErrorCode.INVALID_TIMESTAMP, "X-Timestamp must be an integer of unix seconds"
            )
        skew = abs(time.time() - int(timestamp))
        if skew > settings.HMAC_MAX_SKEW_SECONDS:
            raise _fail(
                ErrorCode.TIMESTAMP_EXPIRED,
                f"X-Timestamp is {int(skew)} s away from server time (max "
                f"{settings.HMAC_MAX_SKEW_SECONDS}); sign again with the current time",
            )

        api_key = api_key_get_by_key_id(key_id=key_id.strip()[:64])
        if api_key is None or not api_key.is_active:
            raise _fail(ErrorCode.INVALID_API_KEY, "unknown, revoked or expired API key")

        version_header = headers.get("X-Signature-Version", "1").strip() or "1"
        if version_header not in ("1", "2"):
            raise _fail(ErrorCode.INVALID_SIGNATURE, "X-Signature-Version must be 1 or 2")
        version = int(version_header)
        if version == 1 and api_key.team.require_signature_v2:
            raise _fail(ErrorCode.INVALID_SIGNATURE, "this team requires signature version 2")
        nonce = ""
        if version == 2:
            nonce = headers.get("X-Nonce", "").strip()
            if not nonce:
                raise _fail(ErrorCode.MISSING_AUTH, "missing header(s): X-Nonce")
            if not _NONCE_RE.match(nonce):
                raise _fail(
                    ErrorCode.INVALID_SIGNATURE,
                    "X-Nonce must be 16-128 characters of [A-Za-z0-9_-]",
                )

        # The exact bytes received: never re-serialised (clients differ in ensure_ascii etc.).
        body = (
            request._request.body if version == 2 or request.method in _BODY_SIGNED_METHODS else b""
        )
        messages = [
            signed_message(
                method=request.method or "GET",
                timestamp=timestamp,
                body=body,
                version=version,
                nonce=nonce,
                full_path=full_path,
            )
            for full_path in (signed_paths(request._request) if version == 2 else [""])
        ]
        provided = signature.strip().lower().encode("utf-8", "replace")
        try:
            candidates = api_key_secrets(api_key=api_key)
        except crypto.InvalidToken:
            logger.error(
                "secret of key %s cannot be decrypted: SECRET_KEY or "
                "SECRETS_ENCRYPTION_KEYS changed?",
                api_key.key_id,
            )
            raise _fail(ErrorCode.INVALID_API_KEY, "unknown, revoked or expired API key") from None
        matched = False
        for secret in candidates:
            for message in messages:
                expected = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest().encode()
                # Compare every candidate (no early exit) in constant time.
                matched |= hmac.compare_digest(expected, provided)
        if not matched:
            raise _fail(ErrorCode.INVALID_SIGNATURE, "signature does not match")

        if version == 2:
            self._claim_nonce(api_key, nonce)

        api_key_touch(api_key=api_key)
        principal = ApiPrincipal(
            team=api_key.team,
            api_key=api_key,
            agent_id=api_key.agent.agent_id if api_key.agent is not None else None,
        )
        return principal, api_key

    @staticmethod
    def _claim_nonce(api_key: ApiKey, nonce: str) -> None:
        # Kept twice the skew window: a replay with a still-valid timestamp is always caught.
        try:
            fresh = cache.add(
                f"nonce:{api_key.pk}:{nonce}", 1, timeout=2 * settings.HMAC_MAX_SKEW_SECONDS
            )
        except Exception:
            # Replay protection cannot be proven without the cache: refuse rather than accept.
            raise DomainError(
                ErrorCode.SERVICE_UNAVAILABLE, "replay protection unavailable (cache down)"
            ) from None
        if not fresh:
            raise _fail(ErrorCode.REPLAYED_REQUEST, "this nonce was already used")

    def authenticate_header(self, request: Request) -> str:
        return 'HMAC-SHA256 realm="memoryplatform"'


class IsTeamAuthenticated(BasePermission):
    """Every API view needs a verified key (the authentication class raises otherwise)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ApiKey)


# --- MCP bearer tokens (the agentmcp endpoint) ------------------------------------------------

_BEARER_RE = re.compile(r"^Bearer[ \t]+(\S{1,512})[ \t]*$", re.IGNORECASE)


@dataclass(frozen=True)
class McpPrincipal:
    """Who is calling the MCP endpoint: the token's team and, for an agent token, its agent."""

    team: Team
    mcp_token: McpToken
    agent_id: str | None

    @property
    def label(self) -> str:
        """How revisions and trash reasons name the caller (as `key <id>` for API keys)."""
        return f"mcp token {self.mcp_token}"


def mcp_token_authenticate(raw: str) -> McpPrincipal:
    """The principal of a raw token; MISSING_AUTH without one, INVALID_API_KEY for an unknown,
    revoked or expired one (one message for all three: no oracle)."""
    if not raw:
        raise _fail(ErrorCode.MISSING_AUTH, "missing bearer token")
    token = mcp_token_get_by_hash(token_hash=mcp_token_hash(raw))
    if token is None or not token.is_active:
        raise _fail(ErrorCode.INVALID_API_KEY, "unknown, revoked or expired MCP token")
    mcp_token_touch(mcp_token=token)
    return McpPrincipal(
        team=token.team,
        mcp_token=token,
        agent_id=token.agent.agent_id if token.agent is not None else None,
    )


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` header value ("" when there is none)."""
    if not authorization.strip():
        return ""
    match = _BEARER_RE.match(authorization.strip())
    if match is None:
        raise _fail(ErrorCode.MISSING_AUTH, "Authorization must be `Bearer <token>`")
    return match.group(1)
