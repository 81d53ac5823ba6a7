"""Console dashboard: the charts' numbers for seeded data, usage counted from real API calls,
team scoping, a pinned query count and a cache outage."""

from __future__ import annotations

from datetime import datetime, time, timedelta

import pytest
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.dashboard import charts
from tenants import usage
from tenants.models import UsageDay

from .console_helpers import member_client
from .factories import JobRunFactory, MemoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _usage_cache_up():
    usage._cache_down_until = 0.0
    yield
    usage._cache_down_until = 0.0


def _days_ago(n: int) -> datetime:
    day = timezone.localdate() - timedelta(days=n)
    return timezone.make_aware(datetime.combine(day, time(12, 0)))


def _memory(team, *, scope="personal", agent="a", source=None, days_ago=0, content=None):
    return MemoryFactory(
        team=team,
        scope=scope,
        agent_id=agent,
        metadata={"source": source} if source is not None else {},
        created_at=_days_ago(days_ago),
        **({"content": content} if content else {}),
    )


def _job(team, *, status, kind="compress", days_ago=0):
    return JobRunFactory(
        team=team, agent_id="", kind=kind, status=status, created_at=_days_ago(days_ago)
    )


def _chart(response, title_start: str) -> charts.Chart:
    found = [c for c in response.context["charts"] if c.title.startswith(title_start)]
    assert found, [c.title for c in response.context["charts"]]
    return found[0]


def _column(chart: charts.Chart, name: str) -> list[str]:
    i = chart.headers.index(name)
    return [row[i] for row in chart.rows]


def _last(chart: charts.Chart, name: str) -> str:
    return _column(chart, name)[-1]


def seed(team, other_team) -> None:
    _memory(team, agent="a", source="chat", days_ago=5)
    _memory(team, agent="a", source="chat", days_ago=5)
    _memory(team, scope="team", agent="b", source="email", days_ago=2)
    _memory(team, agent="b", days_ago=100)  # before the window, no source
    _memory(other_team, agent="a", source="chat", days_ago=1)
    _memory(other_team, agent="x", source="secret-source", days_ago=1)


def test_team_home_redirects_to_the_dashboard(team, lead):
    r = lead.get("/review/team_a/")
    assert r.status_code == 302 and r.url == "/review/team_a/dashboard/"


def test_dashboard_counts_memories_by_scope_and_source_cumulatively(team, other_team, lead):
    seed(team, other_team)
    r = lead.get("/review/team_a/dashboard/")
    assert r.status_code == 200
    scope = _chart(r, "Memories stored by scope")
    assert len(scope.rows) == 30
    # The memory from 100 days ago is the starting point of the personal curve.
    assert _column(scope, "personal")[0] == "1"
    assert _last(scope, "personal") == "3" and _last(scope, "team") == "1"
    assert _column(scope, "team")[-4] == "0" and _column(scope, "team")[-3] == "1"
    source = _chart(r, "Memories stored by source")
    assert _last(source, "chat") == "2" and _last(source, "email") == "1"
    assert _last(source, "(no source)") == "1"
    assert "secret-source" not in r.content.decode()
    totals = r.context["totals"]
    assert (totals["memories"], totals["personal"], totals["team_memories"]) == (4, 3, 1)
    html = r.content.decode()
    assert html.count("<svg") == 6 and 'role="img"' in html and "<title id=" in html
    assert "<details>" in html


def test_dashboard_per_day_mode_puts_memories_on_their_days(team, other_team, lead):
    seed(team, other_team)
    r = lead.get("/review/team_a/dashboard/", {"mode": "daily", "days": "90"})
    scope = _chart(r, "New memories per day by scope")
    assert len(scope.rows) == 90
    personal = _column(scope, "personal")
    assert personal[-6] == "2" and personal.count("0") == 89  # the 100-day-old one is outside
    source = _chart(r, "New memories per day by source")
    assert _column(source, "email")[-3] == "1" and _column(source, "chat")[-6] == "2"
    assert _column(source, "total")[-3] == "1"


def test_dashboard_counts_jobs_and_failures_per_day(team, other_team, lead):
    _job(team, status="succeeded", days_ago=3)
    _job(team, status="failed", kind="extract-facts", days_ago=3)
    _job(team, status="failed", kind="extract-facts", days_ago=0)
    _job(team, status="running", days_ago=0)
    _job(other_team, status="failed", kind="cleanup", days_ago=0)
    r = lead.get("/review/team_a/dashboard/")
    jobs = _chart(r, "Lifecycle jobs per day")
    assert _column(jobs, "succeeded")[-4] == "1" and _column(jobs, "failed")[-4] == "1"
    assert _column(jobs, "failed")[-1] == "1" and _column(jobs, "queued or running")[-1] == "1"
    assert (r.context["totals"]["jobs"], r.context["totals"]["failed"]) == (4, 2)
    assert r.context["failed_by_kind"] == [("extract-facts", 2)]
    assert "cleanup" not in r.content.decode().split('id="failed-by-kind"')[1].split("</table>")[0]


def test_searches_and_writes_from_real_api_calls_show_per_day(team, api, other_api, lead):
    for i in range(2):
        assert (
            api.post("/memories/personal", {"agent_id": "a", "content": f"fact {i}"}).status_code
            == 201
        )
    assert api.post("/memories/team", {"agent_id": "b", "content": "team fact"}).status_code == 201
    assert api.post("/memories/working", {"agent_id": "a", "content": "scratch"}).status_code == 201
    for _ in range(3):
        assert (
            api.post("/memories/personal/search", {"agent_id": "a", "query": "fact"}).status_code
            == 200
        )
    assert api.post("/memories/team/search", {"query": "fact"}).status_code == 200
    # Another team's calls are counted for that team only.
    other_api.post("/memories/personal", {"agent_id": "a", "content": "elsewhere"})
    other_api.post("/memories/personal/search", {"agent_id": "a", "query": "elsewhere"})

    r = lead.get("/review/team_a/dashboard/")
    use = _chart(r, "API searches and writes per day")
    assert _last(use, "searches") == "4" and _last(use, "writes") == "4"
    assert (r.context["totals"]["searches"], r.context["totals"]["writes"]) == (4, 4)
    # a: 3 searches + 3 writes, b: 1 write; the team-wide search has no agent.
    assert r.context["activity"] == [("a", 3, 3), ("b", 0, 1)]
    active = _chart(r, "Top agents by searches")
    assert active.rows == [["a", "6"], ["b", "1"]]
    # Counts were flushed to the database, per agent and day.
    today = timezone.localdate()
    row = UsageDay.objects.get(team=team, agent_id="a", day=today)
    assert (row.searches, row.writes) == (3, 3)

    # More calls after a flush add to the same rows; a second flush counts nothing twice.
    api.post("/memories/personal/search", {"agent_id": "a", "query": "again"})
    usage.usage_flush()
    assert usage.usage_flush() == 0
    row.refresh_from_db()
    assert (row.searches, row.writes) == (4, 3)
    r = lead.get("/review/team_a/dashboard/")
    assert _last(_chart(r, "API searches and writes per day"), "searches") == "5"


def test_failed_api_calls_are_not_counted(team, api, lead):
    assert api.post("/memories/personal", {"agent_id": "a"}).status_code == 400
    r = lead.get("/review/team_a/dashboard/")
    assert r.context["totals"]["writes"] == 0


def test_top_agents_by_memories(team, other_team, lead):
    for _ in range(3):
        _memory(team, agent="busy")
    _memory(team, agent="quiet")
    _memory(team, scope="team", agent="")  # no author: not an agent
    for _ in range(5):
        _memory(other_team, agent="intruder")
    r = lead.get("/review/team_a/dashboard/")
    top = _chart(r, "Top agents by memories")
    assert top.rows == [["busy", "3"], ["quiet", "1"]]
    assert "intruder" not in r.content.decode()


def test_another_teams_dashboard_is_404_and_a_viewer_can_read_it(team, other_team):
    viewer = member_client(team, "viewer_dash", "viewer")
    assert viewer.get("/review/team_a/dashboard/").status_code == 200
    assert viewer.get("/review/team_b/dashboard/").status_code == 404
    assert viewer.get("/review/nope/dashboard/").status_code == 404


def test_bad_range_shows_the_form_error_and_the_defaults(team, lead):
    r = lead.get("/review/team_a/dashboard/", {"days": "7000", "mode": "weird"})
    assert r.status_code == 200
    assert r.context["days"] == 30 and r.context["mode"] == "cumulative"
    assert "Showing the defaults" in r.content.decode()


def _seed_many(team, prefix: str, agents: int, days: int) -> None:
    for a in range(agents):
        for d in range(days):
            _memory(team, agent=f"{prefix}{a}", source=f"src{a % 3}", days_ago=d)
            _job(team, status="failed" if d % 2 else "succeeded", days_ago=d)
            UsageDay.objects.create(
                team=team,
                agent_id=f"{prefix}{a}",
                day=timezone.localdate() - timedelta(days=d),
                searches=a + 1,
                writes=d,
            )
            usage.usage_record(team=team, agent_id=f"{prefix}{a}", kind=usage.KIND_SEARCH)


def _dashboard_queries(client) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/review/team_a/dashboard/").status_code == 200
    return len(ctx.captured_queries)


def test_dashboard_query_count_does_not_grow_with_agents_or_days(team, lead):
    _seed_many(team, "small", agents=1, days=1)
    small = _dashboard_queries(lead)
    _seed_many(team, "large", agents=6, days=12)
    large = _dashboard_queries(lead)
    assert small == large, (small, large)
    # session, user, membership, team, context teams; flush (team, usage rows, insert, update);
    # memories x2, usage, jobs, top agents x2; a little slack for transaction savepoints.
    assert large <= 18


@pytest.fixture
def cache_down(settings):
    """A Redis-backed cache whose Redis does not answer (nothing listens on port 1)."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 0.2,
                "SOCKET_TIMEOUT": 0.2,
            },
        }
    }
    caches._settings = None  # type: ignore[attr-defined]
    yield
    caches._settings = None  # type: ignore[attr-defined]


def test_cache_down_skips_counting_and_the_dashboard_still_renders(team, api, lead, cache_down):
    _memory(team, agent="a", source="chat", days_ago=1)
    r = api.post("/memories/personal", {"agent_id": "a", "content": "written while Redis is down"})
    assert r.status_code == 201
    r = lead.get("/review/team_a/dashboard/")
    assert r.status_code == 200
    assert r.context["totals"]["memories"] == 2 and r.context["totals"]["writes"] == 0
    assert r.content.decode().count("<svg") == 6


def test_usage_flush_is_scheduled_every_minute():
    from memoryplatform.celery import app

    entry = app.conf.beat_schedule["flush-usage-counters"]
    assert entry["task"] == "tenants.flush_usage" and entry["schedule"] == 60.0
    from tenants.tasks import flush_usage

    assert flush_usage.name == "tenants.flush_usage"


def test_flush_task_moves_cached_counts_to_the_database(team):
    usage.usage_record(team=team, agent_id="a", kind=usage.KIND_WRITE)
    usage.usage_record(team=team, agent_id="a", kind=usage.KIND_WRITE)
    usage.usage_record(team=team, agent_id=None, kind=usage.KIND_SEARCH)
    from tenants.tasks import flush_usage

    assert flush_usage.delay().get() == 3
    rows = {u.agent_id: (u.searches, u.writes) for u in UsageDay.objects.filter(team=team)}
    assert rows == {"a": (0, 2), "": (1, 0)}


def test_chart_text_is_escaped_and_axes_are_readable():
    c = charts.bar_chart(title="Top <agents>", labels=["<script>x</script>"], values=[7])
    assert "<script>" not in c.svg and "&lt;script&gt;" in c.svg
    assert charts.axis(0) == (1, 1) and charts.axis(2) == (2, 1) and charts.axis(7) == (8, 2)
    assert charts.axis(130) == (150, 50) and charts.axis(1000) == (1000, 200)
    line = charts.line_chart(
        title="t", labels=["a", "b", "c"], series=[charts.Series("s&p", [0, 2, 3])]
    )
    assert "s&amp;p" in line.svg and line.rows == [["a", "0"], ["b", "2"], ["c", "3"]]
    assert not line.empty and charts.line_chart(title="t", labels=["a"], series=[]).empty
