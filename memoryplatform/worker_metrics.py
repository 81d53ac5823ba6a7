"""`GET /metrics` served by a Celery worker (WORKER_METRICS_BIND, docs/metrics.md).

A worker counts its jobs, LLM tokens and the periodic tasks beat sends it, but only a web process
answered `/metrics`: a worker on a machine (or in a container) with no web process beside it
sharing PROMETHEUS_MULTIPROC_DIR was not seen by any scrape. With WORKER_METRICS_BIND set, the
worker's main process serves the same page on that address, with the same access rules as the
web's (METRICS_ALLOWED_IPS, METRICS_TOKEN, the API's 404 for anyone else): a thread running a
small WSGI server from the standard library, as prometheus-client's own `start_http_server`
does, behind the web's access check.

With the prefork pool the jobs run in child processes: they are counted only through
PROMETHEUS_MULTIPROC_DIR (the worker's own directory, or the one it shares with the web).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)


def parse_bind(value: str) -> tuple[str, int]:
    """`host:port` (`[::1]:9540` for IPv6) -> (host, port)."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ImproperlyConfigured(
            f"WORKER_METRICS_BIND must be host:port (e.g. 127.0.0.1:9540), not {value!r}"
        )
    return host.strip("[]"), int(port)


def metrics_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """The web's `GET /metrics` (memoryplatform.views.metrics) as a bare WSGI application: the
    same page, the same check, the same 404 for any other caller, method or path."""
    from django.core.handlers.wsgi import WSGIRequest
    from django.http import HttpResponse

    from core import api
    from core import metrics as core_metrics

    from . import health

    request = WSGIRequest(environ)
    response: HttpResponse
    if (
        request.path == "/metrics"
        and request.method in ("GET", "HEAD")
        and health.may_scrape_metrics(request)
    ):
        body, content_type = core_metrics.exposition()
        response = HttpResponse(
            b"" if request.method == "HEAD" else body, content_type=content_type
        )
    else:
        response = api.handler404(request)
    start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
    return [response.content]


class _Server(ThreadingMixIn, WSGIServer):
    # A slow scraper does not hold the next one; the threads never keep the worker alive.
    daemon_threads = True


def _server_class(host: str, port: int) -> tuple[type[_Server], str]:
    """A server class of the address's family (WSGIServer's is IPv4 only) and the address to
    bind, as prometheus-client's `start_http_server` does (after Python's http.server)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return type("_FamilyServer", (_Server,), {"address_family": family}), str(sockaddr[0])


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access line per scrape on the worker's log."""


def serve(host: str, port: int) -> WSGIServer | None:
    """Serves `/metrics` on (host, port) from a daemon thread; None (logged) when the address is
    taken, e.g. by another worker of this host, which then serves the same shared directory."""
    try:
        server_class, address = _server_class(host, port)
        server = make_server(address, port, metrics_app, server_class, handler_class=_QuietHandler)
    except OSError as exc:
        logger.warning(
            "worker metrics: cannot listen on %s:%s (%s); this worker's counts are still in "
            "PROMETHEUS_MULTIPROC_DIR for whoever serves it",
            host,
            port,
            exc,
        )
        return None
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    logger.info("worker metrics: GET /metrics on %s:%s", host, port)
    return server


def serve_from_settings(pool: str) -> WSGIServer | None:
    """What the start of a worker with this pool (its class or name) does
    (memoryplatform.celery): nothing unless WORKER_METRICS_BIND is set."""
    bind = settings.WORKER_METRICS_BIND
    if not bind:
        return None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR") and not any(
        name in pool.lower() for name in ("solo", "thread")
    ):
        logger.warning(
            "worker metrics: without PROMETHEUS_MULTIPROC_DIR this page counts the worker's main "
            "process only, not the pool processes that run the jobs (docs/metrics.md)"
        )
    return serve(*parse_bind(bind))
