"""Log lines carry the request id — on the web side and in the jobs a request queues, through a
real Celery worker — and LOG_FORMAT=json writes one JSON object per line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memoryplatform.client import MemoryClient

from .livestack import ROOT, worker_stack


def _shell(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_log_lines_carry_the_request_id():
    code = (
        "import logging; from core.middleware import request_id_var; "
        "request_id_var.set('rid-0123456789'); logging.getLogger('probe').warning('hello %s', 'x')"
    )
    out = _shell(code, LOG_FORMAT="json")
    lines = [json.loads(line) for line in out.stderr.splitlines() if '"probe"' in line]
    assert lines, out.stderr[-2000:]
    assert lines[0]["message"] == "hello x" and lines[0]["request_id"] == "rid-0123456789"
    assert lines[0]["level"] == "WARNING" and lines[0]["logger"] == "probe" and "time" in lines[0]


def test_text_is_the_default_and_an_unknown_format_is_refused():
    out = _shell("import logging; logging.getLogger('probe').warning('plain')")
    assert "WARNING probe [-] plain" in out.stderr
    import os

    bad = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
            "LOG_FORMAT": "xml",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "LOG_FORMAT must be text or json" in bad.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.services
def test_a_job_logs_under_the_request_id_that_queued_it(tmp_path: Path, redis_required):
    log = tmp_path / "worker.log"
    with worker_stack(tmp_path, log=log, loglevel="info", LOG_FORMAT="json") as ws:
        stack = ws.stack
        client = MemoryClient(stack.api_key, stack.secret, base_url=stack.urls[0])
        client.set_pipeline_config(
            compress_every_n=2, compress_target_count=1, warmup_max_memories=0
        )
        client.write_working("coder", "第一条：重构 compress 方法")
        client.session.headers["X-Request-ID"] = "trace-job-0123456789"
        client.write_working("coder", "第二条：同步更新文档")  # the write that queues it
        deadline = time.monotonic() + 90
        finished: list[dict[str, object]] = []
        while not finished and time.monotonic() < deadline:
            time.sleep(0.5)
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("{") and "lifecycle job" in line:
                    finished.append(json.loads(line))
        assert finished, log.read_text(errors="replace")[-3000:]
        assert finished[0]["request_id"] == "trace-job-0123456789"
