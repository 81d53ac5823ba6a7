"""gunicorn settings, read by gunicorn whenever it starts in this directory
(`gunicorn memoryplatform.wsgi ...`, as in the README); command-line flags override them.

Only the HTTP limits are set here, explicitly rather than by gunicorn's defaults, because they
are part of the API's contract (docs/security.md). A request over one of them is answered by
gunicorn itself, before Django sees it, with a short plain error page, not the JSON envelope:

* request line (method + path + query + version) over `limit_request_line` bytes: 414;
* more than `limit_request_fields` header fields, or one longer than
  `limit_request_field_size` bytes: 431.

8190 (gunicorn's maximum) rather than its 4094 default for the request line: `GET /graph` takes
up to 100 seed entity ids, and 100 repeated `entity_ids=<uuid>` parameters are ~4.8 KB. Past
these limits, the application's own (in the envelope) apply: MAX_REQUEST_BYTES for the body
(413), Django's DATA_UPLOAD_MAX_NUMBER_FIELDS (1000) for query parameters (400).
"""

limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190


def child_exit(server: object, worker: object) -> None:
    """Prometheus multiprocess mode (PROMETHEUS_MULTIPROC_DIR, docs/metrics.md): a worker that
    exits stops counting in the "live" gauges (indexes loaded) of the next scrape."""
    import os

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined]


def post_worker_init(worker: object) -> None:
    """Each worker, once the application is loaded and before it takes a request, loads the
    embedding model and the search's dictionaries (memories.retrieval.warm): its first write or
    search no longer waits ~1.5 s for them. `WARM_UP_AT_START=0` turns it off. In the embedded
    mode (no broker) it also starts the thread that runs beat's periodic tasks
    (lifecycle.embedded_beat; `EMBEDDED_BEAT=0` turns it off)."""
    from lifecycle.embedded_beat import start_embedded_beat
    from memories.retrieval.warm import warm_up_at_start

    warm_up_at_start()
    start_embedded_beat()
