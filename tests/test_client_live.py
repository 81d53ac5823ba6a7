"""Our client and the original API's reference client against a real HTTP server (pytest-django live_server)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from lifecycle.models import JobRun, JobStatus
from memoryplatform.client import AsyncMemoryClient, MemoryAPIError, MemoryClient, _httpx
from tenants.services import api_key_issue, team_upsert

from .factories import JobRunFactory
from .reference_client import MemoryClient as ReferenceMemoryClient

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def keys(live_server):
    out = {}
    for team_id in ("codex_team", "team_a", "team_b"):
        team, _ = team_upsert(team_id=team_id, name=team_id)
        out[team_id] = api_key_issue(team=team)
    return out


class _Blocking:
    """An AsyncMemoryClient driven from a sync test: each awaited call runs to completion on one
    event loop (the one its connection pool belongs to)."""

    def __init__(self, client: AsyncMemoryClient, loop: asyncio.AbstractEventLoop) -> None:
        self._client, self._loop = client, loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method  # an attribute (resends)
        return lambda *args, **kwargs: self._loop.run_until_complete(method(*args, **kwargs))


@pytest.fixture(params=["sync", "async"])
def new_client(request):
    """Builds our client of each kind: the same tests run against MemoryClient and
    AsyncMemoryClient."""
    loop = asyncio.new_event_loop()
    made: list[AsyncMemoryClient] = []

    def make(api_key: str, secret: str, **kwargs: Any) -> Any:
        if request.param == "sync":
            return MemoryClient(api_key, secret, **kwargs)
        client = AsyncMemoryClient(api_key, secret, **kwargs)
        made.append(client)
        return _Blocking(client, loop)

    yield make
    for client in made:
        loop.run_until_complete(client.aclose())
    loop.close()


def test_original_client_first_request(live_server, keys):
    """The original API's first request, verbatim: /health, then a hand-signed GET /stats."""
    r = requests.get(f"{live_server.url}/health")
    assert r.json() == {"ok": True, "data": {"status": "ok"}}
    API_KEY, SECRET = keys["codex_team"].key_id, keys["codex_team"].secret
    ts = int(time.time())
    sig = hmac.new(SECRET.encode(), str(ts).encode(), hashlib.sha256).hexdigest()
    r = requests.get(
        f"{live_server.url}/stats",
        headers={"X-API-Key": API_KEY, "X-Timestamp": str(ts), "X-Signature": sig},
    )
    data = r.json()
    assert data["ok"] is True
    assert {"personal_memories", "team_memories", "agents"} <= set(data["data"])


def test_cross_team_isolation_with_the_original_client(live_server, keys):
    client = ReferenceMemoryClient(
        keys["codex_team"].key_id, keys["codex_team"].secret, base_url=live_server.url
    )
    assert client.post("/teams", {"team_id": "codex_team", "name": "Codex 团队"}).status_code == 200
    r = client.post("/agents", {"agent_id": "codex_agent", "name": "Codex 助手", "role": "coder"})
    assert r.status_code == 201 and r.json()["data"]["name"] == "Codex 助手"
    r = client.get("/teams/other_team")
    assert (r.status_code, r.json().get("code")) == (403, "FORBIDDEN_CROSS_TEAM")
    r = client.get("/agents/other_team/some_agent")
    assert (r.status_code, r.json().get("code")) == (403, "FORBIDDEN_CROSS_TEAM")
    r = client.get_stats()
    assert r.json()["data"]["agents"] == 1
    # PUT and DELETE are signed the original client's way too.
    assert client.delete("/agents/codex_team/codex_agent").json() == {"ok": True, "data": None}


def test_original_client_stats_per_team(live_server, keys):
    a = ReferenceMemoryClient(
        keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url
    )
    b = ReferenceMemoryClient(
        keys["team_b"].key_id, keys["team_b"].secret, base_url=live_server.url
    )
    a.post("/agents", {"agent_id": "agent_1", "name": "Agent 1"})
    b.post("/agents", {"agent_id": "agent_1", "name": "Agent B1"})
    b.post("/agents", {"agent_id": "agent_2", "name": "Agent B2"})
    assert a.get_stats().json()["data"]["agents"] == 1
    assert b.get_stats().json()["data"]["agents"] == 2


def test_our_client_round_trip_and_typed_errors(live_server, keys, new_client):
    client = new_client(keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url)
    assert client.health() == {"status": "ok"}
    team = client.upsert_team("team_a", "团队 A", description="中文描述", config={"lang": "zh"})
    assert (team["name"], team["config"]) == ("团队 A", {"lang": "zh"})
    agent = client.upsert_agent("researcher", "研究员", role="research")
    assert agent["team_id"] == "team_a"
    assert [a["id"] for a in client.list_agents("team_a")] == ["researcher"]
    assert client.get_agent("team_a", "researcher")["name"] == "研究员"
    with pytest.raises(MemoryAPIError) as exc:
        client.get_team("team_b")
    assert (exc.value.status, exc.value.code) == (403, "FORBIDDEN_CROSS_TEAM")
    with pytest.raises(MemoryAPIError) as exc:
        client.upsert_agent("bad/id", "x")
    assert exc.value.code == "VALIDATION_ERROR" and "agent_id" in exc.value.details
    with pytest.raises(MemoryAPIError) as exc:
        client.get_agent("team_a", "ghost")
    assert exc.value.code == "NOT_FOUND" and exc.value.request_id
    assert client.delete_agent("team_a", "researcher") is None
    bad = new_client(keys["team_a"].key_id, "wrong", base_url=live_server.url)
    with pytest.raises(MemoryAPIError) as exc:
        bad.get_stats()
    assert exc.value.code == "INVALID_SIGNATURE"


def test_our_client_signs_v2(live_server, keys, new_client):
    client = new_client(
        keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url, signature_version=2
    )
    assert client.get_stats()["agents"] == 0
    assert client.upsert_agent("a1", "名字")["name"] == "名字"
    assert client.get("/agents/team_a", params={"x": "1"})[0]["id"] == "a1"


@pytest.mark.parametrize("version", [1, 2])
def test_our_client_trash_round_trip(live_server, keys, version, new_client):
    client = new_client(
        keys["team_a"].key_id,
        keys["team_a"].secret,
        base_url=live_server.url,
        signature_version=version,
    )
    kept = client.write_memory("a1", "the user drinks green tea")["id"]
    gone = client.write_memory("a1", "a note to erase at once")["id"]
    team_note = client.write_team_memory("the team meets on Mondays")["id"]
    assert client.delete_memory(kept) is None
    assert client.delete_memory(gone, purge=True) is None
    assert client.delete_team_memory(team_note) is None
    page = client.list_trash(agent_id="a1")
    assert [i["id"] for i in page["items"]] == [kept] and page["items"][0]["removed_by"] == "api"
    assert {i["id"] for i in client.list_trash()["items"]} == {kept, team_note}
    assert client.restore_memory(kept)["content"] == "the user drinks green tea"
    assert client.erase_memory(team_note) is None
    with pytest.raises(MemoryAPIError) as exc:
        client.restore_memory(team_note)
    assert (exc.value.status, exc.value.code) == (404, "NOT_FOUND")
    assert client.list_trash()["total"] == 0


def test_the_client_module_imports_without_django(tmp_path):
    code = (
        "import sys, importlib.util\n"
        "sys.modules['django'] = None\n"  # any import of django now fails
        f"spec = importlib.util.spec_from_file_location('c', r'{ROOT / 'memoryplatform' / 'client.py'}')\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(m.sign('s', 1))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == hmac.new(b"s", b"1", hashlib.sha256).hexdigest()


def test_curl_style_request_with_utf8_body(live_server, keys):
    """A non-Python client sending raw UTF-8 (ensure_ascii=False) bytes."""
    k = keys["team_a"]
    body = json.dumps({"agent_id": "bot", "name": "机器人"}, ensure_ascii=False).encode()
    ts = str(int(time.time()))
    sig = hmac.new(k.secret.encode(), ts.encode() + body, hashlib.sha256).hexdigest()
    r = requests.post(
        f"{live_server.url}/agents",
        data=body,
        headers={
            "X-API-Key": k.key_id,
            "X-Timestamp": ts,
            "X-Signature": sig,
            "Content-Type": "application/json",
        },
    )
    assert r.status_code == 201
    assert r.json()["data"]["name"] == "机器人"


def test_the_async_client_runs_calls_concurrently(live_server, keys):
    """Several awaited calls in flight on one AsyncMemoryClient (one connection pool). Reads:
    the test server's in-memory SQLite refuses concurrent writers."""
    topics = ["绿茶", "部署", "风控", "回测", "周报"]

    async def scenario() -> list[Any]:
        async with AsyncMemoryClient(
            keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url
        ) as client:
            for topic in topics:
                await client.write_memory("a1", f"关于{topic}的一条记忆")
            return await asyncio.gather(*(client.search("a1", topic) for topic in topics))

    results = asyncio.run(scenario())
    assert [r[0]["content"] for r in results] == [f"关于{t}的一条记忆" for t in topics]


def test_both_clients_offer_the_same_methods():
    public = {n for n in dir(MemoryClient) if not n.startswith("_")}
    assert public == {n for n in dir(AsyncMemoryClient) if not n.startswith("_")} - {"aclose"}


def test_reading_memories_with_both_clients(live_server, keys, new_client):
    client = new_client(keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url)
    ids = [client.write_memory("a1", f"第 {i} 条可读的记忆，主题 {i}")["id"] for i in range(3)]
    assert client.get_memory(ids[0])["content"] == "第 0 条可读的记忆，主题 0"
    client.update_memory(ids[0], importance=0.9)
    assert [r["change"] for r in client.memory_history(ids[0])["revisions"]] == ["update"]
    page = client.list_memories(page_size=2)
    assert [m["id"] for m in page["items"]] == [ids[2], ids[1]] and page["next_cursor"]
    batch = client.write_memories([{"agent_id": "a1", "content": "批量写入的一条"}])
    assert [r["status"] for r in batch["results"]] == [201]
    client.delete_memory(batch["results"][0]["memory"]["id"], purge=True)
    rest = client.list_memories(cursor=page["next_cursor"], page_size=2)
    assert [m["id"] for m in rest["items"]] == [ids[0]] and rest["next_cursor"] is None


def test_iterating_every_memory(live_server, keys):
    key, secret = keys["team_a"].key_id, keys["team_a"].secret
    sync = MemoryClient(key, secret, base_url=live_server.url)
    ids = [sync.write_memory("a1", f"iterate over note {i}")["id"] for i in range(5)]
    assert [m["id"] for m in sync.iter_memories(page_size=2)] == ids[::-1]

    async def collect() -> list[int]:
        async with AsyncMemoryClient(key, secret, base_url=live_server.url) as client:
            return [m["id"] async for m in client.iter_memories(page_size=2)]

    assert asyncio.run(collect()) == ids[::-1]


def test_reading_a_job_and_waiting_for_it(live_server, keys, new_client):
    client = new_client(keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url)
    client.write_working("a1", "the user prefers tea to coffee")
    answer = client.compress("a1", target_count=1)
    ran = JobRun.objects.filter(team_id="team_a", kind="compress").latest("pk")
    job = client.get_job(ran.pk)
    assert (job["id"], job["kind"], job["status"], job["agent_id"]) == (
        ran.pk,
        "compress",
        "succeeded",
        "a1",
    )
    assert job["result"] == answer and job["error"] is None and job["retry_of"] is None
    assert client.wait_for_job(ran.pk) == job  # final already: one request
    queued = JobRunFactory(team=ran.team, agent_id="a1", status=JobStatus.QUEUED)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {queued.pk} still queued"):
        client.wait_for_job(queued.pk, timeout=0.3, interval=0.1)
    assert 0.3 <= time.monotonic() - started < 5
    with pytest.raises(MemoryAPIError) as exc:
        client.get_job(ran.pk + 1000)
    assert exc.value.code == "NOT_FOUND"


class _Recorder:
    """A local HTTP server that records each request and answers `{"ok": true, "data": …}` with
    the next queued data: what exactly the clients put on the wire (body, headers, query),
    which the live server's answers alone do not show."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[Any] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                recorder.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": self.rfile.read(length),
                    }
                )
                data = recorder.answers.pop(0) if recorder.answers else None
                payload = json.dumps({"ok": True, "data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    r = _Recorder()
    yield r
    r.close()


def test_ingest_and_run_id_on_the_wire(recorder, new_client):
    client = new_client("mk_test", "secret", base_url=recorder.url)
    fact = {"decision": "ADD", "memory": {"id": 7, "content": "用户喜欢绿茶"}}
    recorder.answers = [
        {"archived": 2, "facts": [fact]},
        {"job_id": 41},
        {"items": [], "next_cursor": None},
        [],
    ]
    messages = [
        {"role": "user", "content": "我喜欢绿茶"},
        {"role": "assistant", "content": "记住了"},
    ]
    assert client.ingest("a1", messages, run_id="run-1") == {"archived": 2, "facts": [fact]}
    assert client.ingest("a1", messages, infer=False, async_=True, idempotency_key="k-1") == {
        "job_id": 41
    }
    client.list_memories(agent_id="a1", run_id="run-1")
    client.search("a1", "绿茶", run_id="run-1")
    sync_ingest, async_ingest, listing, search = recorder.requests
    assert (sync_ingest["method"], sync_ingest["path"]) == ("POST", "/memories/ingest")
    assert json.loads(sync_ingest["body"]) == {
        "agent_id": "a1",
        "messages": messages,
        "run_id": "run-1",
        "infer": True,
        "async": False,
    }
    # A write the client may re-send carries a key of its own (`retries`, on by default).
    assert len(sync_ingest["headers"]["Idempotency-Key"]) >= 16
    assert json.loads(async_ingest["body"]) == {
        "agent_id": "a1",
        "messages": messages,
        "infer": False,
        "async": True,
    }
    headers = async_ingest["headers"]
    assert headers["Idempotency-Key"] == "k-1"
    # The header is sent beside the signature, which still covers timestamp + body only (v1).
    expected = hmac.new(
        b"secret", headers["X-Timestamp"].encode() + async_ingest["body"], hashlib.sha256
    ).hexdigest()
    assert headers["X-Signature"] == expected and headers["X-API-Key"] == "mk_test"
    assert listing["path"] == "/memories?agent_id=a1&page_size=50&run_id=run-1"
    assert json.loads(search["body"])["run_id"] == "run-1"


def test_ingest_and_the_run_id_filters_with_both_clients(live_server, keys, new_client):
    client = new_client(keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url)
    messages = [
        {"role": "user", "content": "I live in Singapore and trade crypto on Binance."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "My leverage limit is 3x on every account."},
    ]
    done = client.ingest("a1", messages, run_id="s-1", idempotency_key="ingest-1")
    assert "archived" in done and done["archived"] == 3
    assert {f["decision"] for f in done["facts"]} == {"ADD"}
    assert {f["memory"]["run_id"] for f in done["facts"]} == {"s-1"}
    ids = sorted(f["memory"]["id"] for f in done["facts"])
    # A retry with the same key gets the first answer and writes nothing.
    assert client.ingest("a1", messages, run_id="s-1", idempotency_key="ingest-1") == done
    client.write_memory("a1", "Binance fees are paid in BNB", run_id="s-2")
    assert sorted(m["id"] for m in client.list_memories(run_id="s-1")["items"]) == ids
    # The filter operators of search, in the listing (the iterator pages with them).
    either = {"run_id": {"$in": ["s-1", "s-2"]}}
    assert len(client.list_memories(filters=either)["items"]) == len(ids) + 1
    assert [
        m["run_id"] for m in client.list_memories(filters={"run_id": {"$eq": "s-2"}})["items"]
    ] == ["s-2"]
    hits = client.search("a1", "Binance", min_score=0, run_id="s-1")
    assert sorted(m["id"] for m in hits) == ids
    assert [m["content"] for m in client.search("a1", "Binance", min_score=0, run_id="s-2")] == [
        "Binance fees are paid in BNB"
    ]
    assert client.search_team("Binance", min_score=0, run_id="s-1") == []

    accepted = client.ingest(
        "a1", [{"role": "user", "content": "I prefer green tea."}], async_=True, run_id="s-3"
    )
    assert set(accepted) == {"job_id"}
    job = client.wait_for_job(accepted["job_id"], timeout=30)
    assert (job["kind"], job["status"]) == ("ingest", "succeeded")
    assert job["result"] is not None and job["result"]["archived"] == 1


def test_episodes_and_procedures_with_both_clients(live_server, keys, new_client):
    client = new_client(keys["team_a"].key_id, keys["team_a"].secret, base_url=live_server.url)
    failed = client.record_episode(
        "a1",
        "Deploy the billing service to production",
        "failure",
        steps=["built the image", "switched traffic"],
        lesson="Migrate before building.",
        run_id="s-9",
    )
    assert (failed["outcome"], failed["run_id"]) == ("failure", "s-9")
    found = client.search_episodes("a1", "deploy billing", min_score=0)
    assert [e["id"] for e in found] == [failed["id"]] and found[0]["lesson"].startswith("Migrate")
    assert client.search_episodes("a1", "deploy billing", outcome="success", min_score=0) == []
    rule = client.add_procedure("a1", "Answer in at most three sentences.")
    assert rule["status"] == "active"
    edited = client.update_procedure("a1", rule["id"], rule="Answer in two sentences.")
    assert edited["rule"] == "Answer in two sentences."
    assert client.list_procedures("a1")["procedures"] == [edited]
    assert client.propose_procedures("a1") == {"proposals": [], "count": 0, "examined": 0}
    assert client.delete_procedure("a1", rule["id"]) == {"deleted": rule["id"]}
    with pytest.raises(MemoryAPIError) as exc:
        client.update_procedure("a1", rule["id"], status="rejected")
    assert exc.value.code == "NOT_FOUND"
    history = client.procedure_history("a1", procedure_id=rule["id"])["revisions"]
    assert [(r["change"], r["rule"]) for r in history] == [
        ("removed", "Answer in two sentences."),
        ("changed", "Answer in two sentences."),
        ("added", "Answer in at most three sentences."),
    ]
    assert len(client.procedure_history("a1", limit=1)["revisions"]) == 1
    back = client.restore_procedure("a1", rule["id"])
    assert (back["id"], back["rule"], back["status"]) == (rule["id"], edited["rule"], "active")
    with pytest.raises(MemoryAPIError) as exc:
        client.restore_procedure("a1", rule["id"])
    assert exc.value.code == "CONFLICT"


def test_without_retries_a_write_carries_no_key_of_its_own(recorder, new_client):
    client = new_client("mk_test", "secret", base_url=recorder.url, retries=0)
    recorder.answers = [{"id": 1}, {"id": 2}]
    client.write_memory("a1", "用户喜欢绿茶")
    client.write_memory("a1", "用户喜欢红茶", idempotency_key="mine")
    first, second = recorder.requests
    assert "Idempotency-Key" not in first["headers"]
    assert second["headers"]["Idempotency-Key"] == "mine"


class _DyingNode:
    """A proxy in front of the live server that, for the requests it is told to, behaves like a
    node killed mid-request: `drop` forwards the request (the server runs and commits it) and
    closes the connection without an answer; `bad_gateway` answers nginx's 502 page without
    forwarding. Everything else is passed through."""

    def __init__(self, upstream: str) -> None:
        self.plan: list[str] = []  # what to do with the next requests, in order
        self.seen: list[dict[str, str]] = []
        node = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                node.seen.append(headers)
                action = node.plan.pop(0) if node.plan else "pass"
                if action == "bad_gateway":
                    page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
                    self.send_response(502)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                    return
                answer = requests.request(
                    self.command, upstream + self.path, data=body or None, headers=headers
                )
                if action == "drop":
                    self.close_connection = True
                    return  # the node died after its work: no answer at all
                self.send_response(answer.status_code)
                for name in ("Content-Type", "X-Request-ID", "Idempotent-Replayed"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PUT = do_DELETE = _relay

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def dying_node(live_server):
    node = _DyingNode(live_server.url)
    yield node
    node.close()


@pytest.mark.parametrize("version", [1, 2])
def test_a_write_whose_node_died_after_the_commit_is_sent_again_and_stored_once(
    keys, dying_node, new_client, version
):
    from memories.models import Memory

    k = keys["team_a"]
    client = new_client(k.key_id, k.secret, base_url=dying_node.url, signature_version=version)
    dying_node.plan = ["drop"]
    # Dedup off: only the Idempotency-Key can tell the re-send from a second write.
    written = client.write_memory("ops", "发布窗口改到周四晚上", enable_dedup=False)
    assert Memory.objects.filter(content="发布窗口改到周四晚上").count() == 1
    assert written["content"] == "发布窗口改到周四晚上" and "dedup_skipped" not in written
    first, second = dying_node.seen
    # The same key, signed anew (v2: a fresh nonce; the first was claimed by the dead node).
    assert first["Idempotency-Key"] == second["Idempotency-Key"]
    assert first["X-Signature"] != second["X-Signature"] or version == 1

    dying_node.plan = ["bad_gateway", "drop"]
    team = client.write_team_memory("值班表每周一更新", enable_dedup=False)
    assert Memory.objects.filter(content="值班表每周一更新").count() == 1
    assert Memory.objects.get(content="值班表每周一更新").pk == team["id"]

    dying_node.plan = ["drop"]
    batch = client.write_memories(
        [{"agent_id": "ops", "content": "周报周五发", "enable_dedup": False}]
    )
    assert [r["status"] for r in batch["results"]] == [201]
    assert Memory.objects.filter(content="周报周五发").count() == 1


def test_searches_and_reads_are_sent_again_but_other_writes_are_not(keys, dying_node, new_client):
    k = keys["team_a"]
    client = new_client(k.key_id, k.secret, base_url=dying_node.url)
    memory = client.write_memory("ops", "灰度发布先放 5% 流量")
    dying_node.plan = ["bad_gateway"]
    assert [m["id"] for m in client.search("ops", "灰度发布")] == [memory["id"]]
    dying_node.plan = ["drop"]
    assert client.get_memory(memory["id"])["id"] == memory["id"]
    assert client.resends == 2

    # An update is not keyed: whether it ran is unknown, so the client says so and stops.
    dying_node.plan = ["drop"]
    with pytest.raises((requests.ConnectionError, _httpx().TransportError)):
        client.update_memory(memory["id"], content="灰度发布先放 10% 流量")
    assert client.resends == 2 and len(dying_node.seen) == 6


def test_with_retries_off_the_proxy_error_reaches_the_caller(keys, dying_node, new_client):
    from memories.models import Memory

    k = keys["team_a"]
    client = new_client(k.key_id, k.secret, base_url=dying_node.url, retries=0)
    dying_node.plan = ["bad_gateway"]
    with pytest.raises(MemoryAPIError) as exc:
        client.write_memory("ops", "不会写入", enable_dedup=False)
    assert (exc.value.status, exc.value.code) == (502, "BAD_RESPONSE")
    assert not Memory.objects.filter(content="不会写入").exists()


def test_an_api_error_is_an_answer_and_is_not_sent_again(keys, dying_node, new_client):
    k = keys["team_a"]
    client = new_client(k.key_id, k.secret, base_url=dying_node.url)
    with pytest.raises(MemoryAPIError) as exc:
        client.get_memory(999_999)
    assert exc.value.code == "NOT_FOUND" and client.resends == 0 and len(dying_node.seen) == 1
