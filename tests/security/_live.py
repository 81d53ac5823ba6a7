"""Helpers for tests that run real processes on a live stack (tests/livestack.py): Celery workers
that can be killed, and Django code run inside the stack's own database (its processes do not
share the test database, which may be SQLite in memory)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

from ..livestack import ROOT, Stack


def in_stack(stack: Stack, code: str, **env: str) -> Any:
    """Runs `code` in a Django shell of the stack (its database, its settings); the code sets
    `out`, returned decoded from JSON."""
    script = (
        "import json\nout = None\n"
        + textwrap.dedent(code)
        + "\nprint('@@OUT@@' + json.dumps(out, default=str))\n"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env={**stack.env, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("@@OUT@@")][-1]
    return json.loads(line[len("@@OUT@@") :])


JOBS = """
from lifecycle.models import JobRun
out = list(JobRun.objects.order_by("id").values(
    "id", "kind", "trigger", "status", "agent_id", "active_key", "claim_key", "retry_of_id",
    "counts", "error", "lease_expires_at", "started_at"))
"""


def jobs(stack: Stack) -> list[dict[str, Any]]:
    return list(in_stack(stack, JOBS))


def kill_hard(proc: subprocess.Popen[bytes]) -> None:
    """kill -9: no cleanup, no acknowledgement, no final database write."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def wait_until(check: Callable[[], Any], *, seconds: float, what: str) -> Any:
    """Polls `check` until it returns something truthy; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.2)
