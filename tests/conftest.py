from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client

from tenants.services import api_key_issue

from .factories import AgentFactory, TeamFactory
from .fake_openai import FakeOpenAI
from .helpers import SignedClient


@pytest.fixture(autouse=True)
def _clean_cache():
    """Each test starts with an empty cache (rate-limit counters, nonces, version stamps)."""
    from tenants import ratelimit

    ratelimit._cache_down_until = 0.0
    # Test transactions roll back and ids are reused: an index must not outlive its test.
    from memories.retrieval.index import registry

    registry.clear()
    from core.localcache import clear_all

    clear_all()
    try:
        cache.clear()
    except Exception:
        if settings.REQUIRE_SERVICES:
            raise
    yield
    # A search cut short by its recall timeout leaves its scope loading in the background: let
    # it end before the database is flushed or rolled back, and drop what it loaded.
    deadline = time.monotonic() + 60
    while registry.loading() and time.monotonic() < deadline:
        time.sleep(0.01)
    registry.clear()


def pytest_collection_modifyitems(config, items):
    """SEARCH_BACKEND=milvus: database tests commit for real (transaction=True), so that the
    writes' on-commit shipping to the engine runs as in production (_milvus_backend); tests of
    the in-process index itself (marked local_index) do not apply."""
    if settings.SEARCH_BACKEND != "milvus":
        return
    skip_local = pytest.mark.skip(reason="tests the in-process index (SEARCH_BACKEND=local)")
    for item in items:
        if item.get_closest_marker("local_index") is not None:
            item.add_marker(skip_local)
        marker = item.get_closest_marker("django_db")
        if marker is not None and not marker.kwargs.get("transaction"):
            kwargs = {**marker.kwargs, "transaction": True}
            item.add_marker(pytest.mark.django_db(*marker.args, **kwargs), append=False)
        elif marker is None and {"db", "transactional_db"} & set(item.fixturenames):
            item.add_marker(pytest.mark.django_db(transaction=True), append=False)


def milvus_engine_at(path: str) -> None:
    """Points the milvus backend at a fresh milvus-lite data path (settings already overridden)."""
    from memories.retrieval import milvus

    milvus.reset_engines()


def release_milvus(path: str) -> None:
    """Stops the in-process milvus-lite server of a test's data path and forgets its client."""
    from memories.retrieval import milvus

    for eng in list(milvus._engines.values()):
        if eng._client is not None:
            eng._client.close()
    milvus.reset_engines()
    from milvus_lite import server_manager_instance

    server_manager_instance.release_server(path)


def milvus_available() -> bool:
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(autouse=True)
def _milvus_backend(request, settings, tmp_path, monkeypatch):
    """With SEARCH_BACKEND=milvus in the environment, every test runs on a milvus-lite engine of
    its own (a data path in tmp_path), with real commits (so the writes' on-commit shipping
    runs, inline in the embedded job mode) and no settle time (so the shipped cursor moves at
    once and searches read the engine, not only the unshipped change log)."""
    if settings.SEARCH_BACKEND != "milvus":
        yield
        return
    if not milvus_available():
        pytest.skip("SEARCH_BACKEND=milvus needs the milvus extra: pip install '.[milvus]'")
    path = str(tmp_path / "milvus.db")
    settings.SEARCH_MILVUS_URI = path
    # A process the test spawns (manage.py mcp_stdio, gunicorn) gets an engine of its own: a
    # milvus-lite data path belongs to one process.
    monkeypatch.setenv("SEARCH_MILVUS_URI", str(tmp_path / "milvus-subprocess.db"))
    settings.INDEX_CHANGE_SETTLE_SECONDS = 0.0
    milvus_engine_at(path)
    yield
    release_milvus(path)


def require_service(name: str, reason: str) -> None:
    """Skips a service-backed test, or fails it when REQUIRE_SERVICES=1 (CI)."""
    if settings.REQUIRE_SERVICES:
        pytest.fail(f"{name} is required (REQUIRE_SERVICES=1) but unavailable: {reason}")
    pytest.skip(f"{name} unavailable: {reason}")


@pytest.fixture
def redis_required():
    if not settings.REDIS_URL:
        require_service("Redis", "REDIS_URL is not set")
    try:
        from django_redis import get_redis_connection

        get_redis_connection("default").ping()
    except Exception as exc:
        require_service("Redis", str(exc))
    return settings.REDIS_URL


@pytest.fixture(scope="session")
def _llm_server():
    # One server for the run: stopping one takes half a second.
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake_llm(_llm_server, settings):
    """The LLM settings pointed at the local OpenAI-compatible fake (only the external LLM is
    faked), its reply queue and request log emptied, answering normally."""
    _llm_server.chat_replies.clear()
    _llm_server.requests.clear()
    _llm_server.chat_mode = "ok"
    _llm_server.delay = 0.0
    settings.LLM_BASE_URL = _llm_server.base_url
    settings.LLM_MODEL = "fake-chat"
    settings.LLM_API_KEY = "sk-test"
    settings.LLM_TIMEOUT_SECONDS = 5
    settings.LLM_MAX_RETRIES = 0
    yield _llm_server
    _llm_server.chat_mode = "ok"
    _llm_server.delay = 0.0


@pytest.fixture
def team(db):
    return TeamFactory(id="team_a", name="Team A")


@pytest.fixture
def other_team(db):
    return TeamFactory(id="team_b", name="Team B")


@pytest.fixture
def issued(team):
    return api_key_issue(team=team, label="tests")


@pytest.fixture
def api(issued) -> SignedClient:
    return SignedClient(Client(), issued.key_id, issued.secret)


@pytest.fixture
def other_api(other_team) -> SignedClient:
    k = api_key_issue(team=other_team, label="tests")
    return SignedClient(Client(), k.key_id, k.secret)


@pytest.fixture
def agent(team):
    return AgentFactory(team=team, agent_id="researcher", name="研究员")


@pytest.fixture
def agent_api(team, agent) -> SignedClient:
    k = api_key_issue(team=team, agent=agent, label="agent-scoped")
    return SignedClient(Client(), k.key_id, k.secret)


@pytest.fixture
def lead(team):
    """A console client logged in as a lead of team_a."""
    from .console_helpers import member_client

    return member_client(team, "lead_a", "lead")


@pytest.fixture
def viewer(team):
    """A console client logged in as a viewer of team_a."""
    from .console_helpers import member_client

    return member_client(team, "viewer_a", "viewer")
