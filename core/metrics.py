"""Prometheus metrics (prometheus-client): the instruments every app records into, the request
middleware, and the text exposition that `GET /metrics` serves.

Labels are closed sets only — a route *pattern* (`memories/personal/recent/<str:agent_id>`), a
method, a status class, a job kind, a search mode — never a team, an agent, an id or a query, so
the number of series is bounded and a scrape reveals nothing about tenants.

Several processes (gunicorn workers, Celery workers on the same machine): set
PROMETHEUS_MULTIPROC_DIR to an empty directory shared by them, before they start, and every
process's samples are aggregated at scrape time (prometheus-client's multiprocess mode;
docs/deploy.md). Without it each process reports its own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client import REGISTRY as DEFAULT_REGISTRY

# Request latencies of an API whose searches take ~20 ms and LLM operations seconds.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

HTTP_REQUESTS = Counter(
    "memoryplatform_http_requests_total",
    "HTTP requests by route pattern, method and status class",
    ["route", "method", "status"],
)
HTTP_LATENCY = Histogram(
    "memoryplatform_http_request_duration_seconds",
    "HTTP request latency by route pattern and method",
    ["route", "method"],
    buckets=_LATENCY_BUCKETS,
)
SEARCH_LATENCY = Histogram(
    "memoryplatform_search_duration_seconds",
    "Long-term memory search (embedding the query included), by mode",
    ["mode"],
    buckets=_FAST_BUCKETS,
)
WRITE_LATENCY = Histogram(
    "memoryplatform_memory_write_duration_seconds",
    "Long-term memory write (embedding and dedup included), by outcome",
    ["outcome"],
    buckets=_FAST_BUCKETS,
)
EMBEDDING_LATENCY = Histogram(
    "memoryplatform_embedding_duration_seconds",
    "Embedding calls (a cache hit is not a call), by kind",
    ["kind"],
    buckets=_FAST_BUCKETS,
)
EMBEDDED_TEXTS = Counter("memoryplatform_embedded_texts_total", "Texts embedded, by kind", ["kind"])
INDEX_LOADS = Histogram(
    "memoryplatform_index_load_duration_seconds",
    "Loading one scope's search index from the database",
    buckets=_LATENCY_BUCKETS,
)
INDEX_SCOPES = Gauge(
    "memoryplatform_index_scopes_loaded",
    "Scope indexes held in this process",
    multiprocess_mode="livesum",
)
INDEX_MEMORIES = Gauge(
    "memoryplatform_index_memories_loaded",
    "Memories held in this process's scope indexes",
    multiprocess_mode="livesum",
)
JOBS = Counter(
    "memoryplatform_jobs_total",
    "Lifecycle jobs finished, by kind and final status",
    ["kind", "status"],
)
JOB_LATENCY = Histogram(
    "memoryplatform_job_duration_seconds",
    "Lifecycle job run time (claimed to finished), by kind",
    ["kind"],
    buckets=_LATENCY_BUCKETS,
)
# Whether cleanup, the trash's retention and the other periodic tasks run at all: counted where
# they run, by the embedded mode's beat thread (lifecycle.embedded_beat) or by a Celery worker
# from beat's message (memoryplatform.celery). `entry` is a name of beat's schedule, a closed set.
PERIODIC_RUNS = Counter(
    "memoryplatform_periodic_tasks_total",
    "Periodic tasks of beat's schedule run, by schedule entry and outcome",
    ["entry", "outcome"],
)
PERIODIC_LAST_SUCCESS = Gauge(
    "memoryplatform_periodic_task_last_success_timestamp_seconds",
    "When a schedule entry last ran without error (Unix time)",
    ["entry"],
    # The latest over every process, the ended ones too: the one running the schedule (the
    # embedded beat's lock holder, the pool child a message went to) changes.
    multiprocess_mode="max",
)
LLM_TOKENS = Counter(
    "memoryplatform_llm_tokens_total",
    "Tokens used by LLM calls, by direction (prompt, completion)",
    ["direction"],
)
LLM_CALLS = Counter(
    "memoryplatform_llm_calls_total",
    "LLM calls, by outcome (ok, error)",
    ["outcome"],
)


@contextmanager
def timed(histogram: Histogram, **labels: str) -> Iterator[None]:
    """Observes the block's wall time (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        (histogram.labels(**labels) if labels else histogram).observe(time.perf_counter() - start)


def record_periodic_run(entry: str, *, ok: bool) -> None:
    """One run of a periodic task, `entry` being its name in beat's schedule: by the embedded
    mode's beat thread, or by a Celery worker from a message beat sent."""
    PERIODIC_RUNS.labels(entry=entry, outcome="ok" if ok else "error").inc()
    if ok:
        PERIODIC_LAST_SUCCESS.labels(entry=entry).set_to_current_time()


def exposition() -> tuple[bytes, str]:
    """The current metrics in Prometheus text format, and its content type."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(DEFAULT_REGISTRY), CONTENT_TYPE_LATEST


def _status_class(code: int) -> str:
    return f"{code // 100}xx"


class MetricsMiddleware:
    """Counts and times every request under its URL pattern (`unmatched` for a 404 outside the
    URL map), so `/memories/personal/recent/alice` and `…/bob` are one series."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = (match.route or "/") if match is not None else "unmatched"
        if match is not None and match.url_name == "not-found":
            route = "unmatched"
        method = request.method if request.method in _METHODS else "other"
        HTTP_LATENCY.labels(route=route, method=method).observe(time.perf_counter() - start)
        HTTP_REQUESTS.labels(
            route=route, method=method, status=_status_class(response.status_code)
        ).inc()
        return response


_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}
