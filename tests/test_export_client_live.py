"""Export, download and import with our clients (sync and async) against a real HTTP server."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import pytest

from memories.models import Memory
from memories.services import memory_create
from memoryplatform.client import AsyncMemoryClient, MemoryAPIError, MemoryClient
from tenants.services import api_key_issue, team_upsert

from .factories import AgentFactory

# A live server and its own transactions (as tests/test_client_live.py).
pytestmark = pytest.mark.django_db(transaction=True)


def read_bundle(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in gzip.decompress(data).splitlines()]
    return lines[0], lines[1:]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_client_exports_downloads_and_imports(live_server, kind):
    source, _ = team_upsert(team_id="client_src", name="src")
    target, _ = team_upsert(team_id="client_dst", name="dst")
    AgentFactory(team=source, agent_id="alice")
    memory_create(team=source, scope="personal", agent_id="alice", content="Alice likes jasmine")
    keys = [api_key_issue(team=t) for t in (source, target)]
    loop = asyncio.new_event_loop()
    opened: list[Any] = []

    class _Blocking:
        """An AsyncMemoryClient driven from this sync test, on one event loop."""

        def __init__(self, client: AsyncMemoryClient) -> None:
            self.client = client

        def __getattr__(self, name: str) -> Any:
            method = getattr(self.client, name)
            return lambda *a, **kw: loop.run_until_complete(method(*a, **kw))

    def make(k: Any) -> Any:
        if kind == "sync":
            client: Any = MemoryClient(k.key_id, k.secret, base_url=live_server.url)
            opened.append(client.session.close)
            return client
        aclient = AsyncMemoryClient(k.key_id, k.secret, base_url=live_server.url)
        opened.append(lambda: loop.run_until_complete(aclient.aclose()))
        return _Blocking(aclient)

    src, dst = make(keys[0]), make(keys[1])
    try:
        job_id = src.export()["job_id"]
        assert src.get_job(job_id)["status"] == "succeeded"  # inline in tests
        data = src.download_export(job_id)
        assert isinstance(data, bytes) and read_bundle(data)[0]["counts"]["memory"] == 1
        assert dst.import_bundle(data)["imported"]["memory"] == 1
        assert dst.import_bundle(data)["skipped"]["memory"] == 1
        with pytest.raises(MemoryAPIError) as err:
            dst.download_export(job_id)
        assert err.value.status == 404 and err.value.code == "NOT_FOUND"
        with pytest.raises(MemoryAPIError) as err:
            dst.import_bundle(b"junk")
        assert err.value.code == "VALIDATION_ERROR"
        assert src.export(agent_id="alice")["job_id"] > job_id
    finally:
        for close in opened:
            close()
        loop.close()
    assert Memory.objects.filter(team=target, content="Alice likes jasmine").exists()
