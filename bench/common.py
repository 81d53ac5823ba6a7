"""Shared helpers for the benchmark scripts in bench/ (not a test module, not a library API).

* `BenchServer` — a throw-away server for a benchmark: a fresh temporary DATA_DIR and SQLite
  database (or a given DATABASE_URL), `manage.py migrate`, an API key from
  `manage.py create_api_key --json`, then gunicorn (one sync worker) or `runserver --noreload`
  on a free loopback port, waited for on `/health` and stopped (process group) at the end.
* `percentile`, `summarise` — client-side latency statistics (milliseconds).
* `rss_kib` — VmRSS / VmHWM of a process from /proc.
* `machine_load` — `uptime`-style load averages, to print next to every number.

Everything runs from the project root (the parent of this folder) with the project's Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PYTHON = sys.executable


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- statistics -------------------------------------------------------------------------------


def mysql(sql: str) -> None:
    """Runs SQL on the local MariaDB as root (the benchmarks' throw-away databases)."""
    subprocess.run(
        ["mysql", "-h", "127.0.0.1", "-u", "root", "-e", sql],
        check=True,
        capture_output=True,
        timeout=60,
    )


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default method), p in 0..100."""
    if not values:
        return float("nan")
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    rank = (len(xs) - 1) * p / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def summarise(ms: Sequence[float]) -> dict[str, float]:
    """n, mean, p50, p95, p99, max of a list of milliseconds."""
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "mean": round(statistics.fmean(ms), 2),
        "p50": round(percentile(ms, 50), 2),
        "p95": round(percentile(ms, 95), 2),
        "p99": round(percentile(ms, 99), 2),
        "max": round(max(ms), 2),
    }


# --- machine ----------------------------------------------------------------------------------


def machine_load() -> str:
    """ "load average: 1.23, 1.10, 0.98 (2 cores)" from /proc/loadavg."""
    try:
        parts = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return "load average: n/a"
    return f"load average: {', '.join(parts)} ({os.cpu_count()} cores)"


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "python": sys.version.split()[0],
    }


def code_version() -> dict[str, Any]:
    """Which application code a run measured (the tree changes while benchmarks run).

    Read-only git calls: HEAD, the number of changed files, and a hash of the search-relevant
    sources as they are on disk now (the server imports them when it starts).
    """
    import hashlib

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    h = hashlib.sha256()
    for rel in (
        "memories/retrieval/search.py",
        "memories/retrieval/scoring.py",
        "memories/retrieval/index.py",
        "memories/retrieval/text.py",
        "memories/retrieval/embeddings.py",
        "memories/services.py",
        "memories/retrieval/dedup.py",
        "memoryplatform/settings/base.py",
    ):
        path = ROOT / rel
        if path.exists():
            h.update(rel.encode() + b"\0" + path.read_bytes())
    return {
        "head": git("rev-parse", "--short", "HEAD"),
        "changed_files": len([x for x in git("status", "--porcelain").splitlines() if x.strip()]),
        "search_code_sha256": h.hexdigest()[:12],
    }


def rss_kib(pid: int) -> dict[str, int]:
    """{"rss": VmRSS, "hwm": VmHWM} in KiB of a live process (empty if it is gone)."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                out["hwm"] = int(line.split()[1])
    except OSError:
        pass
    return out


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            kids.extend(int(x) for x in text)
    except OSError:
        pass
    return kids


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the server -------------------------------------------------------------------------------


@dataclass
class BenchServer:
    """A server of its own for one benchmark run. Use as a context manager, or call
    `prepare()` (database + key) and `start()` separately to seed the database in between.

    `database_url` None = a fresh SQLite file in the temporary DATA_DIR. A MySQL/MariaDB URL is
    used as given (the database must exist and should be empty: the caller owns it).
    """

    server: str = "gunicorn"  # gunicorn | runserver
    workers: int = 1  # gunicorn sync workers
    database_url: str | None = None
    redis_url: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    keep: bool = False
    team: str = "bench"
    timeout_s: int = 900
    # 0: a free port at each start. Fixed: a restarted server answers where it did before
    # (bench/multinode.py restarts a killed node behind nginx).
    port: int = 0
    log_name: str = "server.log"  # several servers may share one DATA_DIR
    # filled in by prepare() / start()
    data_dir: Path | None = None
    base_url: str = ""
    api_key: str = ""
    secret: str = ""
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    def env(self) -> dict[str, str]:
        assert self.data_dir is not None
        env = dict(os.environ)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
                "DATA_DIR": str(self.data_dir),
                "DATABASE_URL": self.database_url or f"sqlite:///{self.data_dir / 'db.sqlite3'}",
                "API_RATE_LIMIT": "0",
                "DEBUG": "0",
                "PYTHONUNBUFFERED": "1",
                # The periodic tasks off, as when the documented figures were measured: a run
                # stays one workload, not one with a cleanup or a retier at a random minute.
                "EMBEDDED_BEAT": "0",
            }
        )
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        else:
            env.pop("REDIS_URL", None)
        env.pop("CELERY_BROKER_URL", None)
        env.update(self.extra_env)
        return env

    def manage(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"manage.py {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            )
        return result.stdout

    def prepare(self) -> None:
        """Temporary DATA_DIR, migrated database, one API key (rate limit 0)."""
        self.data_dir = Path(tempfile.mkdtemp(prefix="membench-"))
        t0 = time.perf_counter()
        self.manage("migrate", "--noinput")
        out = self.manage("create_api_key", "--team", self.team, "--rate-limit", "0", "--json")
        creds = json.loads(out.strip().splitlines()[-1])
        self.api_key, self.secret = creds["api_key"], creds["secret"]
        log(f"database ready in {time.perf_counter() - t0:.1f}s ({self.data_dir})")

    def start(self) -> None:
        assert self.data_dir is not None, "prepare() first"
        port = self.port or free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        if self.server == "gunicorn":
            cmd = [
                str(Path(PYTHON).parent / "gunicorn"),
                "memoryplatform.wsgi",
                "-w",
                str(self.workers),
                "-b",
                f"127.0.0.1:{port}",
                "--timeout",
                str(self.timeout_s),
                "--graceful-timeout",
                "5",
            ]
        elif self.server == "runserver":
            cmd = [PYTHON, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
        else:
            raise ValueError(f"unknown server {self.server!r}")
        self.log_path = self.data_dir / self.log_name
        logf = self.log_path.open("ab")  # appended: a restarted server keeps the first log
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.env(),
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                r = requests.get(self.base_url + "/health", timeout=2)
                if r.status_code == 200:
                    log(f"server up at {self.base_url} ({self.server}, pid {self.proc.pid})")
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server did not answer /health within 120 s:\n{self.log_tail()}")

    def worker_pid(self) -> int:
        """The process that serves requests: gunicorn's worker, or runserver itself."""
        assert self.proc is not None
        if self.server == "gunicorn":
            kids = _children(self.proc.pid)
            if kids:
                return kids[0]
        return self.proc.pid

    def log_tail(self, n: int = 4000) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self.data_dir is not None and not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        elif self.data_dir is not None:
            log(f"kept {self.data_dir}")

    def __enter__(self) -> BenchServer:
        try:
            self.prepare()
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
