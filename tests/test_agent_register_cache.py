"""The working-memory write path registers its agent through this process's cache of known
agents (tenants.services.agent_register), and an agent's deletion leaves a notice in the shared
cache that every process reads before trusting its entry.

Another process is played here by what it would hold: an entry made before the deletion, which
the deleting process's own `pop` does not reach. The cache is LocMem in these tests (Redis in
the MariaDB+Redis run), read for real; the two-process version is in
test_agent_deleted_elsewhere.py."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories.working import get_working_store
from tenants import services as tenant_services
from tenants.models import Agent

from .helpers import ok_data

pytestmark = pytest.mark.django_db(transaction=True)  # the notice is left on commit

AGENT = "coder"


def _write(api, text: str) -> None:
    ok_data(api.post("/memories/working", {"agent_id": AGENT, "content": text}))


def _agent_queries(captured: CaptureQueriesContext) -> list[str]:
    # The agents table itself ("tenants_agent", `tenants_agent`), not the key's join to it.
    table = re.compile(r"(FROM|INTO) [\"`]tenants_agent[\"`]")
    return [q["sql"] for q in captured.captured_queries if table.search(q["sql"])]


def test_an_entry_made_before_the_agents_deletion_is_not_trusted(api, team):
    _write(api, "Drafting the release notes for 2.4.")
    stale = tenant_services._known_agents.get((team.id, AGENT))
    assert stale is not None
    assert api.delete(f"/agents/{team.id}/{AGENT}").status_code in (200, 204)
    # What a process that served the first write still holds.
    tenant_services._known_agents.set((team.id, AGENT), stale)

    _write(api, "The release is due on Friday.")

    # Before, the agent stayed deleted until the entry expired: not listed, and its deletion
    # answered 404 while its working memory held the item.
    assert Agent.objects.filter(team=team, agent_id=AGENT).exists()
    assert AGENT in [a["id"] for a in ok_data(api.get(f"/agents/{team.id}"))]
    assert api.delete(f"/agents/{team.id}/{AGENT}").status_code in (200, 204)
    assert not ok_data(api.get(f"/memories/working/{AGENT}"))


def test_an_entry_made_under_the_latest_notice_spares_the_query(api, team):
    """What the cache is for: after the deletion and the write that registered the agent again,
    the next writes read the notice, not the agents table. Where the notice reaches no other
    process (LocMem: the SQLite run), a write reads the agent's row once, after its item is
    stored, and nothing before it."""
    shared = tenant_services._notices_reach_every_process()
    assert shared == ("RedisCache" in settings.CACHES["default"]["BACKEND"])
    per_write = 0 if shared else 1
    _write(api, "Drafting the release notes for 2.4.")
    with CaptureQueriesContext(connection) as before_deletion:
        _write(api, "The changelog is in docs/changes.md.")
    assert len(_agent_queries(before_deletion)) == per_write

    assert api.delete(f"/agents/{team.id}/{AGENT}").status_code in (200, 204)
    with CaptureQueriesContext(connection) as first:
        _write(api, "The release is due on Friday.")
    with CaptureQueriesContext(connection) as second:
        _write(api, "QA signs off on Thursday.")
    assert len(_agent_queries(first)) > per_write
    assert len(_agent_queries(second)) == per_write


def test_a_cache_that_cannot_be_read_is_no_proof(team, settings):
    """A notice that cannot be read could be a deletion: the agent is registered with a query
    (a Redis outage costs that query, not a lost agent)."""
    tenant_services.agent_register(team=team, agent_id=AGENT)
    assert tenant_services._known_agents.get((team.id, AGENT)) is not None
    # Deleted by another process, whose notice this one cannot read: Redis is unreachable.
    Agent.objects.filter(team=team, agent_id=AGENT).delete()
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        }
    }
    caches._settings = None  # type: ignore[attr-defined]
    try:
        tenant_services.agent_register(team=team, agent_id=AGENT)
        assert Agent.objects.filter(team=team, agent_id=AGENT).exists()
        # Nor is an entry trusted while the notice stays unreadable: the next write asks again.
        Agent.objects.filter(team=team, agent_id=AGENT).delete()
        tenant_services.agent_register(team=team, agent_id=AGENT)
        assert Agent.objects.filter(team=team, agent_id=AGENT).exists()
    finally:
        caches._settings = None  # type: ignore[attr-defined]


@pytest.mark.parametrize("entry", ["rest", "mcp"])
def test_a_deletion_committed_during_the_write_registers_the_agent_again(
    api, team, entry, request, monkeypatch
):
    """The window between trusting the entry and the item landing: another request deleted the
    agent, left its notice and purged its working memory, then the write's item landed. The item
    stayed in the working memory of an agent that no longer existed (not listed, its deletion a
    404, so nothing could erase it). The notice is read again after the write, by POST
    /memories/working and by the MCP tool alike.

    The other request is sent from inside the store's `add`, just before the real one runs: the
    only point of the window a single process can reach."""
    _write(api, "Drafting the release notes for 2.4.")
    store_class = type(get_working_store())
    add = store_class.add
    deleted: list[int] = []

    def deleted_first(self, **kwargs):
        if not deleted:  # once: the delete's purge goes through the store too, not `add`
            deleted.append(api.delete(f"/agents/{team.id}/{AGENT}").status_code)
            assert not get_working_store().list(team_id=team.id, agent_id=AGENT)  # purged
        return add(self, **kwargs)

    monkeypatch.setattr(store_class, "add", deleted_first)
    content = "The release is due on Friday."
    if entry == "rest":
        _write(api, content)
    else:
        from .factories import McpTokenFactory
        from .test_mcp import ok, run, session

        url = f"{request.getfixturevalue('live_server').url}/mcp"
        # A team-wide token: an agent-scoped one goes with its agent's deletion.
        token = McpTokenFactory(team=team).token

        async def go():
            async with session(url, token) as c:
                return ok(await c.call_tool("working_add", {"content": content, "agent_id": AGENT}))

        run(go())
    monkeypatch.undo()
    assert deleted and deleted[0] in (200, 204)
    assert AGENT in [a["id"] for a in ok_data(api.get(f"/agents/{team.id}"))]
    assert [i["content"] for i in ok_data(api.get(f"/memories/working/{AGENT}"))] == [content]
    assert api.delete(f"/agents/{team.id}/{AGENT}").status_code in (200, 204)
    assert not ok_data(api.get(f"/memories/working/{AGENT}"))
