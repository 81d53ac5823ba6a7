"""The API half of deploy/smoke.sh: drives a production deployment through two gunicorn
processes the way an agent behind the TLS proxy would (docs/deploy.md, "Smoke test").

    python deploy/smoke_client.py URL_A URL_B URL_W   # key and secret in SMOKE_API_KEY / SMOKE_SECRET

URL_W: the Celery worker's own metrics page (WORKER_METRICS_BIND).

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


def _sample(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`, in a scraped page."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def run(url_a: str, url_b: str, url_w: str) -> None:
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
    searches = _sample(
        metrics.text, "memoryplatform_http_requests_total", route="memories/personal/search"
    )
    if searches < 1:
        raise SmokeFailure(
            "/metrics on A does not count B's search: is PROMETHEUS_MULTIPROC_DIR set?"
        )

    _step("the worker's compress counted on the web's page and on the worker's own")
    compress = {"kind": "compress", "status": "succeeded"}
    if _sample(metrics.text, "memoryplatform_jobs_total", **compress) < 1:
        raise SmokeFailure("/metrics on A does not count the worker's compress job")
    own = requests.get(url_w + "/metrics", timeout=10)
    if own.status_code != 200 or _sample(own.text, "memoryplatform_jobs_total", **compress) < 1:
        raise SmokeFailure(f"the worker's /metrics: {own.status_code} {own.text[:200]!r}")
    other = requests.get(url_w + "/health", timeout=10)
    if other.status_code != 404:
        raise SmokeFailure(f"the worker's page answered /health: {other.status_code}")


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        run(sys.argv[1], sys.argv[2], sys.argv[3])
    except (SmokeFailure, MemoryAPIError, requests.RequestException) as exc:
        print(f"smoke: FAILED: {exc}", file=sys.stderr)
        return 1
    print("smoke: client checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
