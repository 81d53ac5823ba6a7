"""The API half of deploy/smoke.sh: drives a production deployment through two gunicorn
processes the way an agent behind the TLS proxy would (docs/deploy.md, "Smoke test").

    python deploy/smoke_client.py URL_A URL_B   # API key and secret in SMOKE_API_KEY / SMOKE_SECRET

Every request carries `X-Forwarded-Proto: https`, the header nginx sets: production settings
redirect plain HTTP to HTTPS. Exits non-zero with a message naming the failed step.
"""

from __future__ import annotations

import os
import sys
import time

import requests
from prometheus_client.parser import text_string_to_metric_families

from memoryplatform.client import MemoryAPIError, MemoryClient

AGENT = "smoke-agent"
FACT = "The deployment smoke test keeps its herons in the blue boathouse by the river"
WORKING_ITEMS = [
    "Refactoring the compress method of the memory system",
    "Goal: compress returns a structured dict",
    "Routes and the API reference must be updated together",
    "Verify the response format with an end-to-end request",
]
COMPRESS_WAIT_SECONDS = 90


class SmokeFailure(Exception):
    pass


def _client(url: str) -> MemoryClient:
    session = requests.Session()
    # What the TLS proxy sends: without it, SECURE_SSL_REDIRECT answers 301 to https://.
    session.headers["X-Forwarded-Proto"] = "https"
    # Teams created under production settings refuse v1 signatures (NEW_TEAMS_REQUIRE_SIGNATURE_V2).
    return MemoryClient(
        os.environ["SMOKE_API_KEY"],
        os.environ["SMOKE_SECRET"],
        base_url=url,
        signature_version=2,
        session=session,
    )


def _step(name: str) -> None:
    print(f"smoke: {name}", flush=True)


def run(url_a: str, url_b: str) -> None:
    a, b = _client(url_a), _client(url_b)

    _step("write a long-term memory through process A")
    written = a.write_memory(AGENT, FACT, importance=0.8)
    memory_id = written["id"]

    _step("search finds it through process B (the index change crossed processes)")
    hits = b.search(AGENT, "where are the herons kept", min_score=0.0)
    if memory_id not in [hit["id"] for hit in hits]:
        raise SmokeFailure(f"search on B did not find memory {memory_id}: {hits!r}")

    _step("pipeline config: compress after every 4 working-memory writes")
    a.set_pipeline_config(compress_every_n=4, compress_target_count=1, warmup_max_memories=0)

    _step("4 working-memory writes, alternating processes")
    item_ids = []
    for i, item in enumerate(WORKING_ITEMS):
        item_ids.append((a if i % 2 == 0 else b).write_working(AGENT, item)["id"])

    _step(f"the Celery worker compresses them (waiting up to {COMPRESS_WAIT_SECONDS} s)")
    started = time.monotonic()
    while b.get_working(AGENT):
        if time.monotonic() - started > COMPRESS_WAIT_SECONDS:
            raise SmokeFailure(
                f"working memory still holds {len(b.get_working(AGENT))} items after "
                f"{COMPRESS_WAIT_SECONDS} s: is the worker consuming the queues?"
            )
        time.sleep(0.5)
    summaries = [
        m for m in a.get_recent(AGENT, limit=20) if m["metadata"].get("source") == "compression"
    ]
    if not summaries:
        raise SmokeFailure("working memory is empty but no summary memory was written")
    sources = sorted(s for m in summaries for s in m["metadata"].get("source_items", []))
    if sources != sorted(item_ids):
        raise SmokeFailure(f"the summary cites {sources}, expected {sorted(item_ids)}")
    print(f"smoke:   compressed in {time.monotonic() - started:.1f} s", flush=True)

    _step("static file served by the application (WhiteNoise)")
    static = requests.get(
        url_b + "/static/admin/css/base.css", headers={"X-Forwarded-Proto": "https"}, timeout=10
    )
    if static.status_code != 200 or not static.headers.get("Content-Type", "").startswith(
        "text/css"
    ):
        raise SmokeFailure(
            f"/static/admin/css/base.css: {static.status_code} {static.headers.get('Content-Type')}"
        )

    _step("metrics from loopback, summed over both processes")
    metrics = requests.get(url_a + "/metrics", timeout=10)
    if metrics.status_code != 200 or "memoryplatform_http_requests_total" not in metrics.text:
        raise SmokeFailure(f"/metrics: {metrics.status_code} {metrics.text[:200]!r}")
    # Only B searched: A's answer counts it when PROMETHEUS_MULTIPROC_DIR is shared.
    searches = sum(
        sample.value
        for family in text_string_to_metric_families(metrics.text)
        for sample in family.samples
        if sample.name == "memoryplatform_http_requests_total"
        and sample.labels.get("route") == "memories/personal/search"
    )
    if searches < 1:
        raise SmokeFailure(
            "/metrics on A does not count B's search: is PROMETHEUS_MULTIPROC_DIR set?"
        )


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        run(sys.argv[1], sys.argv[2])
    except (SmokeFailure, MemoryAPIError, requests.RequestException) as exc:
        print(f"smoke: FAILED: {exc}", file=sys.stderr)
        return 1
    print("smoke: client checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
