"""GET /metrics: Prometheus text, only for allowed addresses or the metrics token, labelled by
route pattern (never a team, agent or id), with search/write/embedding/index/job/LLM series; and
aggregated over several gunicorn processes in multiprocess mode."""

from __future__ import annotations

import json
import re

import pytest
import requests
from django.test import Client
from prometheus_client import REGISTRY

from memoryplatform.client import MemoryClient

from .helpers import ok_data
from .livestack import live_stack

pytestmark = pytest.mark.django_db


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def scrape(**extra: str) -> str:
    r = Client().get("/metrics", **extra)
    assert r.status_code == 200, r.content[:200]
    assert r["Content-Type"].startswith("text/plain")
    return r.content.decode()


def test_requests_are_counted_by_route_pattern_without_tenant_details(api):
    route = "memories/personal/recent/<str:agent_id>"
    before = sample("memoryplatform_http_requests_total", route=route, method="GET", status="2xx")
    for agent in ("agent-alpha-secret", "agent-beta-secret"):
        assert api.get(f"/memories/personal/recent/{agent}").status_code == 200
    after = sample("memoryplatform_http_requests_total", route=route, method="GET", status="2xx")
    assert after - before == 2
    body = scrape()
    assert "agent-alpha-secret" not in body and "team_a" not in body
    # An unknown path is one series, not one per path.
    Client().get("/no/such/path/12345")
    assert "/no/such/path" not in scrape()
    assert (
        sample("memoryplatform_http_requests_total", route="unmatched", method="GET", status="4xx")
        >= 1
    )


def test_search_write_embedding_and_index_series(api):
    writes = sample("memoryplatform_memory_write_duration_seconds_count", outcome="created")
    skips = sample("memoryplatform_memory_write_duration_seconds_count", outcome="dedup_skipped")
    searches = sample("memoryplatform_search_duration_seconds_count", mode="hybrid")
    texts = sample("memoryplatform_embedded_texts_total", kind="passage")
    body = {"agent_id": "a1", "content": "指标测试：每周二部署生产环境"}
    assert api.post("/memories/personal", body).status_code == 201
    assert api.post("/memories/personal", body).status_code == 200  # the same again: skipped
    ok_data(api.post("/memories/personal/search", {"agent_id": "a1", "query": "什么时候部署"}))
    assert (
        sample("memoryplatform_memory_write_duration_seconds_count", outcome="created")
        == writes + 1
    )
    assert (
        sample("memoryplatform_memory_write_duration_seconds_count", outcome="dedup_skipped")
        == skips + 1
    )
    assert sample("memoryplatform_search_duration_seconds_count", mode="hybrid") == searches + 1
    assert sample("memoryplatform_embedded_texts_total", kind="passage") >= texts + 1
    assert sample("memoryplatform_index_scopes_loaded") >= 1
    assert "memoryplatform_index_load_duration_seconds_bucket" in scrape()


def test_jobs_and_llm_tokens_are_counted(api, fake_llm):
    api.post("/lifecycle/auto-config", {"enabled": False})
    for text in ("第一条工作记忆：明天评审", "second working item: deploy on Tuesday"):
        assert api.post("/memories/working", {"agent_id": "a1", "content": text}).status_code == 201
    jobs = sample("memoryplatform_jobs_total", kind="compress", status="succeeded")
    prompt = sample("memoryplatform_llm_tokens_total", direction="prompt")
    calls = sample("memoryplatform_llm_calls_total", outcome="ok")
    fake_llm.chat_replies.append(
        json.dumps(
            {
                "summaries": [
                    {"content": "评审和部署安排", "importance": 0.6, "source_indexes": [0, 1]}
                ]
            }
        )
    )
    ok_data(api.post("/lifecycle/compress", {"agent_id": "a1"}))
    assert sample("memoryplatform_jobs_total", kind="compress", status="succeeded") == jobs + 1
    assert sample("memoryplatform_job_duration_seconds_count", kind="compress") >= 1
    assert sample("memoryplatform_llm_calls_total", outcome="ok") == calls + 1
    assert sample("memoryplatform_llm_tokens_total", direction="prompt") == prompt + 100


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"REMOTE_ADDR": "10.1.2.3"}, 404),
        ({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}, 404),
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_AUTHORIZATION": "Bearer wrong"}, 404),
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_AUTHORIZATION": "Bearer s3cret-token"}, 200),
        ({"REMOTE_ADDR": "192.168.7.20"}, 200),  # inside an allowed network
    ],
)
def test_only_allowed_addresses_or_the_token_may_scrape(settings, extra, status):
    settings.METRICS_TOKEN = "s3cret-token"
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1", "::1", "192.168.7.0/24"]
    r = Client().get("/metrics", **extra)
    assert r.status_code == status
    if status == 404:
        # The API's own 404: nobody can tell there is a metrics page.
        assert r.json()["code"] == "NOT_FOUND"


@pytest.mark.django_db(transaction=True)
def test_multiprocess_mode_adds_up_every_gunicorn_process(tmp_path):
    prom = tmp_path / "prom"
    prom.mkdir()
    with live_stack(tmp_path, servers=2, extra_env={"PROMETHEUS_MULTIPROC_DIR": str(prom)}) as s:
        for url in s.urls:
            client = MemoryClient(s.api_key, s.secret, base_url=url)
            for _ in range(3):
                client.get_stats()
        text = requests.get(s.urls[0] + "/metrics", timeout=10).text
    match = re.search(
        r'memoryplatform_http_requests_total\{method="GET",route="stats",status="2xx"\} (\S+)',
        text,
    )
    assert match is not None, text[:500]
    assert float(match.group(1)) == 6  # 3 through each of the two processes


def test_the_grafana_dashboard_queries_only_series_that_exist():
    from pathlib import Path

    dashboard = (
        Path(__file__).resolve().parent.parent / "deploy" / "grafana-dashboard.json"
    ).read_text()
    used = {re.sub(r"_bucket$", "", m) for m in re.findall(r"memoryplatform_\w+", dashboard)}
    exposed = {m.name for m in REGISTRY.collect()} | {m.name + "_total" for m in REGISTRY.collect()}
    assert used and used <= exposed, used - exposed
