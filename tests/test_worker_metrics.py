"""A Celery worker's `/metrics` (WORKER_METRICS_BIND) and the periodic tasks it runs from beat's
messages: counted under the same series as the embedded mode's beat thread."""

from __future__ import annotations

import logging
import re
import socket
import time
import uuid
from pathlib import Path

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured
from prometheus_client.parser import text_string_to_metric_families

from memoryplatform.celery import _ENTRY_OF_TASK, app
from memoryplatform.worker_metrics import parse_bind, serve

from .livestack import _mysql_url, free_port, stack_python, start_worker, worker_stack


def test_each_task_of_the_schedule_names_one_entry():
    """What lets a worker tell which entry beat's message is for (it carries no entry name)."""
    tasks = [entry["task"] for entry in app.conf.beat_schedule.values()]
    assert len(set(tasks)) == len(tasks)
    assert {_ENTRY_OF_TASK[task] for task in tasks} == set(app.conf.beat_schedule)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("127.0.0.1:9540", ("127.0.0.1", 9540)), ("[::1]:9540", ("::1", 9540))],
)
def test_the_bind_address_is_host_and_port(value, expected):
    assert parse_bind(value) == expected


@pytest.mark.parametrize("value", ["9540", "127.0.0.1", "127.0.0.1:0", "host:99999", ":9540"])
def test_a_bad_bind_address_stops_the_start_with_what_it_should_be(value):
    with pytest.raises(ImproperlyConfigured, match="host:port"):
        parse_bind(value)


def test_the_workers_page_has_the_webs_access_rules(settings, caplog):
    port = free_port()
    server = serve("127.0.0.1", port)
    assert server is not None
    url = f"http://127.0.0.1:{port}"
    try:
        page = requests.get(url + "/metrics", timeout=10)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/plain")
        assert "memoryplatform_periodic_tasks_total" in page.text
        head = requests.head(url + "/metrics", timeout=10)
        assert head.status_code == 200 and head.content == b""
        for method, path in [("POST", "/metrics"), ("GET", "/"), ("GET", "/metrics/x")]:
            r = requests.request(method, url + path, timeout=10)
            assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", (method, path)
        # Loopback no longer allowed: only the token opens it, as on the web.
        settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
        settings.METRICS_TOKEN = "s3cret-token"
        assert requests.get(url + "/metrics", timeout=10).status_code == 404
        wrong = {"Authorization": "Bearer wrong"}
        assert requests.get(url + "/metrics", headers=wrong, timeout=10).status_code == 404
        right = {"Authorization": "Bearer s3cret-token"}
        assert requests.get(url + "/metrics", headers=right, timeout=10).status_code == 200
        # A second worker of the host on the same address: logged, not a failed start.
        with caplog.at_level(logging.WARNING, logger="memoryplatform.worker_metrics"):
            assert serve("127.0.0.1", port) is None
        assert "cannot listen on 127.0.0.1" in caplog.text
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_listens_on_an_ipv6_address():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    port = free_port()
    server = serve(*parse_bind(f"[::1]:{port}"))
    assert server is not None
    try:
        page = requests.get(f"http://[::1]:{port}/metrics", timeout=10)  # ::1 is allowed
        assert page.status_code == 200 and "memoryplatform_jobs_total" in page.text
    finally:
        server.shutdown()
        server.server_close()


# Beat's own code sends the entry's message (with the header beat adds), after the same task sent
# directly, as other code sends it: only beat's is a periodic run.
_SEND = """
import json
from celery.beat import Scheduler
from memoryplatform.celery import app
if {direct}:
    app.send_task("graph.prune_identities")
beat = Scheduler(app)
beat.apply_async(beat.schedule["prune-identities"], advance=False)
print(json.dumps(True))
"""

_SUCCEEDED = re.compile(r"Task graph\.prune_identities\[[^\]]+\] succeeded")
_RUNS = "memoryplatform_periodic_tasks_total"
_LAST = "memoryplatform_periodic_task_last_success_timestamp_seconds"


def _sample(url: str, name: str, **labels: str) -> float | None:
    text = requests.get(url, timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def _wait(url: str, name: str, until: float, **labels: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if _sample(url, name, **labels) == until:
                return
        except requests.ConnectionError:
            pass  # the worker is still starting
        time.sleep(0.3)
    raise AssertionError(f"{name}{labels} never reached {until}")


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
def test_a_worker_counts_the_runs_beat_sent_it_and_serves_them(tmp_path, redis_required):
    with worker_stack(tmp_path, worker=False) as ws:
        stack = ws.stack
        # A worker of its own container: its own directory, its own page.
        port, prom, log = free_port(), tmp_path / "prom-ok", tmp_path / "ok.log"
        prom.mkdir()
        worker = start_worker(
            stack,
            log=log,
            loglevel="info",
            WORKER_METRICS_BIND=f"127.0.0.1:{port}",
            PROMETHEUS_MULTIPROC_DIR=str(prom),
        )
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            started = time.time()
            stack_python(stack, _SEND.format(direct=True))
            _wait(url, _RUNS, 1, entry="prune-identities", outcome="ok")
            deadline = time.monotonic() + 30
            while len(_SUCCEEDED.findall(log.read_text())) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(_SUCCEEDED.findall(log.read_text())) == 2  # both messages ran
            # ... and only beat's was counted
            assert _sample(url, _RUNS, entry="prune-identities", outcome="ok") == 1
            assert _sample(url, _RUNS, entry="prune-identities", outcome="error") is None
            last = _sample(url, _LAST, entry="prune-identities")
            assert last is not None and started <= last <= time.time()
        finally:
            worker.terminate()
            worker.wait(timeout=30)

        # A prefork worker whose database is gone: the pool's child fails the task, and the
        # main process's page counts it through the shared directory.
        if stack.mysql_name:
            broken_db = _mysql_url(f"mp_gone_{uuid.uuid4().hex[:8]}")
        else:
            broken_db = f"sqlite:///{Path(tmp_path) / 'missing' / 'db.sqlite3'}"
        port, prom = free_port(), tmp_path / "prom-broken"
        prom.mkdir()
        worker = start_worker(
            stack,
            log=tmp_path / "broken.log",
            pool="prefork",
            DATABASE_URL=broken_db,
            WORKER_METRICS_BIND=f"127.0.0.1:{port}",
            PROMETHEUS_MULTIPROC_DIR=str(prom),
        )
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            stack_python(stack, _SEND.format(direct=False))
            _wait(url, _RUNS, 1, entry="prune-identities", outcome="error")
            assert _sample(url, _RUNS, entry="prune-identities", outcome="ok") is None
            assert _sample(url, _LAST, entry="prune-identities") is None  # never succeeded
        finally:
            worker.terminate()
            worker.wait(timeout=30)
