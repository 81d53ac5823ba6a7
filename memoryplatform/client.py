"""Python clients for the memory platform API. `MemoryClient` needs only `requests`, not Django;
`AsyncMemoryClient` (the same methods, awaited) needs `httpx` (or its fork `httpx2`).

    from memoryplatform.client import MemoryClient, MemoryAPIError
    client = MemoryClient(api_key, secret, base_url="http://127.0.0.1:8000")
    client.write_memory("assistant", "用户偏好简洁回复", importance=0.8)
    for m in client.search("assistant", "沟通偏好"):
        print(m["score"], m["content"])

    async with AsyncMemoryClient(api_key, secret, base_url="http://127.0.0.1:8000") as client:
        await client.write_memory("assistant", "用户偏好简洁回复", importance=0.8)
        hits = await client.search("assistant", "沟通偏好")

Every method returns the envelope's `data` and raises `MemoryAPIError` (with `.code`,
`.status` and `.details`) when the server answers `ok: false`. Bodies are serialised once with
`json.dumps(..., ensure_ascii=True)` and those exact bytes are both signed and sent, which is
what the server verifies (docs/authentication.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import requests

__all__ = ["AsyncMemoryClient", "MemoryAPIError", "MemoryClient", "sign"]


def sign(secret: str, timestamp: int | str, body: bytes = b"") -> str:
    """v1 signature: hex HMAC-SHA256 over str(timestamp) + body (empty for GET/DELETE)."""
    return hmac.new(secret.encode(), str(timestamp).encode() + body, hashlib.sha256).hexdigest()


def sign_v2(
    secret: str, timestamp: int | str, nonce: str, method: str, full_path: str, body: bytes = b""
) -> str:
    """v2 signature: also covers method, path with query string and a single-use nonce, and the
    body whatever the method (a DELETE with a body signs it)."""
    head = f"v2\n{timestamp}\n{nonce}\n{method.upper()}\n{full_path}\n".encode()
    return hmac.new(secret.encode(), head + body, hashlib.sha256).hexdigest()


class MemoryAPIError(Exception):
    """The server said `ok: false` (or did not answer with the envelope)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.request_id = request_id


class _Endpoints:
    """Every endpoint, once, for both clients: each method returns what `request` returns — the
    envelope's data for `MemoryClient`, an awaitable of it for `AsyncMemoryClient`."""

    api_key: str
    secret: str
    base_url: str
    signature_version: int

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        raise NotImplementedError

    def _fetch_unsigned(self, path: str) -> Any:
        raise NotImplementedError

    def request_bytes(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/gzip",
    ) -> Any:
        """Like `request`, but sends `raw` bytes as the body (signed as they are) and returns a
        non-JSON answer (a download) as bytes; a JSON answer is unwrapped as usual."""
        raise NotImplementedError

    def _prepare(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        params: dict[str, Any] | None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[str, str, bytes, dict[str, str]]:
        """(method, url, the exact body bytes, headers): the body is serialised once (or given
        as `raw` bytes) and those bytes are both signed and sent."""
        method = method.upper()
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        full_path = path + (f"?{query}" if query else "")
        if raw is None:
            raw = (
                b""
                if body is None or method in ("GET", "DELETE")
                else json.dumps(body, ensure_ascii=True).encode()
            )
        ts = str(int(time.time()))
        headers = {"X-API-Key": self.api_key, "X-Timestamp": ts}
        if self.signature_version == 2:
            nonce = secrets.token_urlsafe(18)
            headers.update(
                {
                    "X-Signature-Version": "2",
                    "X-Nonce": nonce,
                    "X-Signature": sign_v2(self.secret, ts, nonce, method, full_path, raw),
                }
            )
        else:
            headers["X-Signature"] = sign(self.secret, ts, raw)
        if raw:
            headers["Content-Type"] = content_type
        return method, self.base_url + full_path, raw, headers

    @staticmethod
    def _unwrap(status: int, headers: Any, text: str) -> Any:
        rid = headers.get("X-Request-ID")
        try:
            payload = json.loads(text)
        except ValueError:
            raise MemoryAPIError(
                status, "BAD_RESPONSE", f"not a JSON answer: {text[:200]!r}", request_id=rid
            ) from None
        if not isinstance(payload, dict) or "ok" not in payload:
            raise MemoryAPIError(status, "BAD_RESPONSE", "answer without envelope", request_id=rid)
        if not payload["ok"]:
            raise MemoryAPIError(
                status,
                str(payload.get("code", "UNKNOWN")),
                str(payload.get("error", "")),
                payload.get("details"),
                request_id=rid,
            )
        return payload.get("data")

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("POST", path, body if body is not None else {})

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    # --- system and tenancy ------------------------------------------------------------------

    def health(self) -> Any:
        return self._fetch_unsigned("/health")

    def get_stats(self) -> Any:
        return self.get("/stats")

    def upsert_team(
        self,
        team_id: str,
        name: str,
        description: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> Any:
        body: dict[str, Any] = {"team_id": team_id, "name": name}
        if description is not None:
            body["description"] = description
        if config is not None:
            body["config"] = config
        return self.post("/teams", body)

    def get_team(self, team_id: str) -> Any:
        return self.get(f"/teams/{quote(team_id, safe='')}")

    def delete_team(self, team_id: str) -> Any:
        return self.delete(f"/teams/{quote(team_id, safe='')}")

    def upsert_agent(
        self,
        agent_id: str,
        name: str,
        role: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> Any:
        body: dict[str, Any] = {"agent_id": agent_id, "name": name}
        if role is not None:
            body["role"] = role
        if config is not None:
            body["config"] = config
        return self.post("/agents", body)

    def get_agent(self, team_id: str, agent_id: str) -> Any:
        return self.get(f"/agents/{quote(team_id, safe='')}/{quote(agent_id, safe='')}")

    def list_agents(self, team_id: str) -> Any:
        return self.get(f"/agents/{quote(team_id, safe='')}")

    def delete_agent(self, team_id: str, agent_id: str) -> Any:
        return self.delete(f"/agents/{quote(team_id, safe='')}/{quote(agent_id, safe='')}")

    # --- long-term memory (the original client's method names) ----------------------------

    def write_memory(
        self, agent_id: str, content: str, importance: float = 0.5, **extra: Any
    ) -> Any:
        return self.post(
            "/memories/personal",
            {"agent_id": agent_id, "content": content, "importance": importance, **extra},
        )

    def search(
        self,
        agent_id: str,
        query: str,
        limit: int = 10,
        min_score: float = 0.3,
        max_chars_per_memory: int = 0,
        max_total_chars: int = 0,
        **extra: Any,
    ) -> Any:
        body: dict[str, Any] = {
            "agent_id": agent_id,
            "query": query,
            "limit": limit,
            "min_score": min_score,
            **extra,
        }
        if max_chars_per_memory:
            body["max_chars_per_memory"] = max_chars_per_memory
        if max_total_chars:
            body["max_total_chars"] = max_total_chars
        return self.post("/memories/personal/search", body)

    def get_recent(self, agent_id: str, limit: int = 10) -> Any:
        return self.get(
            f"/memories/personal/recent/{quote(agent_id, safe='')}", params={"limit": limit}
        )

    def update_memory(self, memory_id: int, **fields: Any) -> Any:
        return self.put(f"/memories/personal/{int(memory_id)}", fields)

    def delete_memory(self, memory_id: int, purge: bool = False) -> Any:
        """To the trash (restorable); purge=True erases it at once."""
        return self.request(
            "DELETE",
            f"/memories/personal/{int(memory_id)}",
            params={"purge": "true"} if purge else None,
        )

    def delete_team_memory(self, memory_id: int, purge: bool = False) -> Any:
        return self.request(
            "DELETE",
            f"/memories/team/{int(memory_id)}",
            params={"purge": "true"} if purge else None,
        )

    # --- trash: removed memories, restorable for TRASH_RETENTION_DAYS ----------------------------

    def write_memories(self, items: list[dict[str, Any]], atomic: bool = False) -> Any:
        """Up to 100 personal memories (create bodies) in one request: `{"results": [...]}`."""
        return self.post("/memories/personal/batch", {"items": items, "atomic": atomic})

    def write_team_memories(self, items: list[dict[str, Any]], atomic: bool = False) -> Any:
        return self.post("/memories/team/batch", {"items": items, "atomic": atomic})

    def get_memory(self, memory_id: int) -> Any:
        """One memory (personal or team) by id, with `superseded_by` and `source`."""
        return self.get(f"/memories/{int(memory_id)}")

    def memory_history(self, memory_id: int) -> Any:
        """`{"revisions", "supersedes", "superseded_by"}`, revisions oldest first."""
        return self.get(f"/memories/{int(memory_id)}/history")

    def list_memories(
        self,
        scope: str | None = None,
        agent_id: str | None = None,
        cursor: str | None = None,
        page_size: int = 50,
    ) -> Any:
        """One page, newest first: `{"items", "next_cursor"}` (see iter_memories)."""
        return self.get(
            "/memories",
            params={"scope": scope, "agent_id": agent_id, "cursor": cursor, "page_size": page_size},
        )

    def list_trash(self, agent_id: str | None = None, page: int = 1, page_size: int = 20) -> Any:
        return self.get(
            "/memories/trash", params={"agent_id": agent_id, "page": page, "page_size": page_size}
        )

    def restore_memory(self, memory_id: int) -> Any:
        return self.post(f"/memories/trash/{int(memory_id)}/restore")

    def erase_memory(self, memory_id: int) -> Any:
        """Erases a trashed memory now (an erasure request)."""
        return self.delete(f"/memories/trash/{int(memory_id)}")

    def write_team_memory(self, content: str, importance: float = 0.5, **extra: Any) -> Any:
        return self.post("/memories/team", {"content": content, "importance": importance, **extra})

    def search_team(self, query: str, limit: int = 10, min_score: float = 0.3, **extra: Any) -> Any:
        return self.post(
            "/memories/team/search",
            {"query": query, "limit": limit, "min_score": min_score, **extra},
        )

    def get_team_recent(self, limit: int = 10) -> Any:
        return self.get("/memories/team/recent", params={"limit": limit})

    # --- working memory -----------------------------------------------------------------------

    def write_working(self, agent_id: str, content: str, ttl: int | None = None) -> Any:
        body: dict[str, Any] = {"agent_id": agent_id, "content": content}
        if ttl is not None:
            body["ttl"] = ttl
        return self.post("/memories/working", body)

    def get_working(self, agent_id: str, limit: int = 50) -> Any:
        return self.get(f"/memories/working/{quote(agent_id, safe='')}", params={"limit": limit})

    def clear_working(self, agent_id: str) -> Any:
        return self.delete(f"/memories/working/{quote(agent_id, safe='')}")

    # --- lifecycle (the original client's method names) -------------------------------------

    def compress(self, agent_id: str, target_count: int = 5) -> Any:
        return self.post(
            "/lifecycle/compress", {"agent_id": agent_id, "target_count": target_count}
        )

    def cleanup(self, max_age_days: int = 90, min_importance: float = 0.2, **extra: Any) -> Any:
        return self.post(
            "/lifecycle/cleanup",
            {"max_age_days": max_age_days, "min_importance": min_importance, **extra},
        )

    def extract_facts(
        self, agent_id: str, max_memories: int = 20, delete_after: bool = False
    ) -> Any:
        return self.post(
            "/lifecycle/extract-facts",
            {"agent_id": agent_id, "max_memories": max_memories, "delete_after": delete_after},
        )

    def aggregate_scenarios(self, agent_id: str, max_memories: int = 50) -> Any:
        return self.post(
            "/lifecycle/aggregate-scenes", {"agent_id": agent_id, "max_memories": max_memories}
        )

    def get_scenarios(self, agent_id: str) -> Any:
        return self.get(f"/lifecycle/scenarios/{quote(agent_id, safe='')}")

    def generate_persona(self, agent_id: str, max_items: int = 30) -> Any:
        return self.post(
            "/lifecycle/generate-persona", {"agent_id": agent_id, "max_items": max_items}
        )

    def get_persona(self, agent_id: str) -> Any:
        return self.get(f"/lifecycle/persona/{quote(agent_id, safe='')}")

    def set_pipeline_config(self, **kwargs: Any) -> Any:
        return self.post("/lifecycle/auto-config", kwargs)

    def get_pipeline_config(self) -> Any:
        return self.get("/lifecycle/auto-config")

    def auto_run(self) -> Any:
        return self.post("/lifecycle/auto-run", {})

    # --- jobs, export and import (docs/export.md) ---------------------------------------------

    def get_job(self, job_id: int) -> Any:
        """An asynchronous request's job: poll until `status` is succeeded or failed."""
        return self.get(f"/jobs/{int(job_id)}")

    def export(self, agent_id: str | None = None) -> Any:
        """Starts an export (the whole team without agent_id): `{"job_id"}`."""
        return self.post("/export", {"agent_id": agent_id} if agent_id else {})

    def download_export(self, job_id: int) -> Any:
        """The bundle of a succeeded export job, as bytes (gzip of JSON Lines)."""
        return self.request_bytes("GET", f"/export/{int(job_id)}")

    def import_bundle(self, data: bytes, on_conflict: str = "skip") -> Any:
        """Imports a bundle into the key's team: `{"imported", "skipped", "reembedded"}`."""
        return self.request_bytes("POST", "/import", data, params={"on_conflict": on_conflict})


class MemoryClient(_Endpoints):
    """The blocking client (requests, one keep-alive session)."""

    def __init__(
        self,
        api_key: str,
        secret: str,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 30.0,
        signature_version: int = 1,
        session: requests.Session | None = None,
    ) -> None:
        self.api_key = api_key
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.signature_version = signature_version
        # One keep-alive session: no TCP handshake per call.
        self.session = session or requests.Session()

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        method, url, raw, headers = self._prepare(method, path, body, params)
        response = self.session.request(
            method, url, data=raw or None, headers=headers, timeout=self.timeout
        )
        return self._unwrap(response.status_code, response.headers, response.text)

    def _fetch_unsigned(self, path: str) -> Any:
        response = self.session.get(self.base_url + path, timeout=self.timeout)
        return self._unwrap(response.status_code, response.headers, response.text)

    def request_bytes(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/gzip",
    ) -> Any:
        method, url, body, headers = self._prepare(
            method, path, None, params, raw=raw or b"", content_type=content_type
        )
        response = self.session.request(
            method, url, data=body or None, headers=headers, timeout=self.timeout
        )
        if response.ok and not _is_json(response.headers):
            return response.content
        return self._unwrap(response.status_code, response.headers, response.text)

    def iter_memories(
        self, scope: str | None = None, agent_id: str | None = None, page_size: int = 100
    ) -> Iterator[dict[str, Any]]:
        """Every memory the key may read, newest first, fetching page after page."""
        cursor = None
        while True:
            page = self.list_memories(scope, agent_id, cursor=cursor, page_size=page_size)
            yield from page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return


class AsyncMemoryClient(_Endpoints):
    """The same methods as `MemoryClient`, awaited (httpx, one keep-alive connection pool):

    async with AsyncMemoryClient(key, secret, base_url=url) as client:
        hits = await client.search("assistant", "沟通偏好")
    """

    def __init__(
        self,
        api_key: str,
        secret: str,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 30.0,
        signature_version: int = 1,
        client: Any = None,
    ) -> None:
        self.api_key = api_key
        self.secret = secret
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.signature_version = signature_version
        self.client = client or _httpx().AsyncClient(timeout=timeout)

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        method, url, raw, headers = self._prepare(method, path, body, params)
        response = await self.client.request(
            method, url, content=raw or None, headers=headers, timeout=self.timeout
        )
        return self._unwrap(response.status_code, response.headers, response.text)

    async def _fetch_unsigned(self, path: str) -> Any:
        response = await self.client.get(self.base_url + path, timeout=self.timeout)
        return self._unwrap(response.status_code, response.headers, response.text)

    async def request_bytes(
        self,
        method: str,
        path: str,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/gzip",
    ) -> Any:
        method, url, body, headers = self._prepare(
            method, path, None, params, raw=raw or b"", content_type=content_type
        )
        response = await self.client.request(
            method, url, content=body or None, headers=headers, timeout=self.timeout
        )
        if response.is_success and not _is_json(response.headers):
            return response.content
        return self._unwrap(response.status_code, response.headers, response.text)

    async def iter_memories(
        self, scope: str | None = None, agent_id: str | None = None, page_size: int = 100
    ) -> AsyncIterator[dict[str, Any]]:
        """Every memory the key may read, newest first: `async for memory in …`."""
        cursor = None
        while True:
            page = await self.list_memories(scope, agent_id, cursor=cursor, page_size=page_size)
            for item in page["items"]:
                yield item
            cursor = page["next_cursor"]
            if not cursor:
                return

    async def aclose(self) -> None:
        await self.client.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _is_json(headers: Any) -> bool:
    return str(headers.get("Content-Type", "")).startswith("application/json")


def _httpx() -> Any:
    """httpx, or its maintained fork httpx2 (what the OpenAI SDK installs); imported only by the
    async client, so the blocking one still needs nothing but requests."""
    try:
        import httpx2

        return httpx2
    except ImportError:
        import httpx

        return httpx
