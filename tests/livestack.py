"""Real server processes for tests that need more than one (gunicorn, shared database)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import requests
from django.conf import settings

from memoryplatform.client import MemoryAPIError

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    env: dict[str, str]
    urls: list[str]
    api_key: str
    secret: str
    # The stack's own MariaDB database (None on SQLite).
    mysql_name: str | None = None
    team_id: str = ""  # the key's team


def mysql_connection(database: str | None = None) -> Any:
    """A raw connection to the test run's MariaDB server (autocommit off, as MySQLdb opens it)."""
    import MySQLdb

    db = settings.DATABASES["default"]
    return MySQLdb.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=int(db.get("PORT") or 3306),
        user=db.get("USER") or "root",
        passwd=db.get("PASSWORD") or "",
        **({"db": database} if database else {}),
    )


# A migrated database with the stack's team and key, made once per test run and copied for each
# stack: migrating took ~8 s of each live-stack test (128 of them on MariaDB). Keyed by the
# settings the stored key depends on (its secret is encrypted with them).
_TEMPLATE_ENV = ("SECRET_KEY", "SECRETS_ENCRYPTION_KEYS")


@dataclass
class _Template:
    location: str  # the SQLite file, or the MariaDB database's name
    creds: dict[str, str]
    tables: list[tuple[str, str]] = field(default_factory=list)  # MariaDB: (table, its DDL)


_templates: dict[tuple[str, ...], _Template] = {}


def _mysql_url(name: str) -> str:
    db = settings.DATABASES["default"]
    auth = db.get("USER") or "root"
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    return f"mysql://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 3306}/{name}"


def _is_mysql() -> bool:
    return bool(settings.DATABASES["default"]["ENGINE"] == "django.db.backends.mysql")


def _template(env: dict[str, str]) -> _Template:
    """The run's template for `env`, made on first use: `manage.py migrate` and
    `create_api_key --team xproc`, run as a stack's own processes would run them."""
    key = tuple(env.get(name, "") for name in _TEMPLATE_ENV)
    if key in _templates:
        return _templates[key]
    folder = tempfile.mkdtemp(prefix="mp_xproc_")
    atexit.register(shutil.rmtree, folder, True)
    if _is_mysql():
        location = f"mp_xproc_{uuid.uuid4().hex[:8]}"
        conn = mysql_connection()
        conn.cursor().execute(
            f"CREATE DATABASE {location} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        )
        conn.close()
        atexit.register(_drop_mysql, location)
        url = _mysql_url(location)
    else:
        location = f"{folder}/db.sqlite3"
        url = f"sqlite:///{location}"
    tenv = {**env, "DATABASE_URL": url, "DATA_DIR": folder}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=tenv, check=True)
    template = _Template(location, manage_json(tenv, "create_api_key", "--team", "xproc"))
    if _is_mysql():
        conn = mysql_connection(location)
        cur = conn.cursor()
        cur.execute("SHOW FULL TABLES WHERE Table_type = 'BASE TABLE'")
        for table, _kind in cur.fetchall():
            cur.execute(f"SHOW CREATE TABLE `{table}`")
            template.tables.append((table, cur.fetchone()[1]))
        conn.close()
    _templates[key] = template
    return template


def _database_url(tmp: Path, template: _Template) -> tuple[str, str | None]:
    """A fresh database of the same kind as the test run's (SQLite file, or a MariaDB database),
    holding a copy of `template`: its tables (foreign keys included), rows and id counters."""
    if _is_mysql():
        name = f"mp_xproc_{uuid.uuid4().hex[:8]}"
        conn = mysql_connection()
        cur = conn.cursor()
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        cur.execute(f"USE {name}")
        cur.execute("SET FOREIGN_KEY_CHECKS = 0")
        for table, ddl in template.tables:
            cur.execute(ddl)
            cur.execute(f"INSERT INTO `{table}` SELECT * FROM `{template.location}`.`{table}`")
        conn.commit()
        conn.close()
        return _mysql_url(name), name
    target = tmp / "db.sqlite3"
    src = sqlite3.connect(template.location)
    dst = sqlite3.connect(target)
    src.backup(dst)
    dst.close()
    src.close()
    return f"sqlite:///{target}", None


def _drop_mysql(name: str) -> None:
    conn = mysql_connection()
    conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    conn.close()


def start_server(
    env: dict[str, str], *, workers: int = 1, out: IO[bytes] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """One gunicorn process (one worker unless told) on a free port -> the process and its base
    URL; its output (gunicorn's warnings, the application's log) to `out` when given."""
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "memoryplatform.wsgi", "-w", str(workers)),
            *("-b", f"127.0.0.1:{port}", "--timeout", "120", "--log-level", "warning"),
        ],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=None if out is None else subprocess.STDOUT,
    )
    return proc, f"http://127.0.0.1:{port}"


def manage(env: dict[str, str], *args: str) -> str:
    """`manage.py <args>` in a process of its own -> what it printed."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def manage_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    """`manage.py <args> --json` in a process of its own -> the JSON it printed last."""
    return json.loads(manage(env, *args, "--json").strip().splitlines()[-1])


def wait_until_up(urls: list[str], *, healthy: bool = True) -> None:
    """Until each server answers /health: with a 2xx, or (`healthy` False: a server whose
    database is meant to be gone answers 503) with anything at all."""
    deadline = time.time() + 60
    for u in urls:
        while True:
            try:
                if requests.get(u + "/health", timeout=1).ok or not healthy:
                    break
            except requests.RequestException:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"server {u} did not start")
            time.sleep(0.2)


@contextmanager
def live_stack(
    tmp: Path, *, servers: int = 2, extra_env: dict[str, str] | None = None
) -> Iterator[Stack]:
    """`servers` gunicorn processes (one worker each) on one database, plus a team key."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
        "DATA_DIR": str(tmp),
        "API_RATE_LIMIT": "0",
        "DEBUG": "0",
        # Loaded on first use instead: a warm-up would build the glossary's cache in each test's
        # own DATA_DIR (~8 s) for tests that mostly never search across scripts
        # (tests/test_warm_up.py starts a worker with it).
        "WARM_UP_AT_START": "0",
        # No periodic task at a moment no test chose (an idle compress, a reclaim): the tests of
        # lifecycle.embedded_beat start it themselves.
        "EMBEDDED_BEAT": "0",
        **(extra_env or {}),
    }
    template = _template(env)
    url, mysql_name = _database_url(tmp, template)
    env["DATABASE_URL"] = url
    creds = template.creds
    procs: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for _ in range(servers):
            proc, url = start_server(env)
            procs.append(proc)
            urls.append(url)
        wait_until_up(urls)
        yield Stack(
            env=env,
            urls=urls,
            api_key=creds["api_key"],
            secret=creds["secret"],
            mysql_name=mysql_name,
            team_id=creds["team_id"],
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if mysql_name:
            _drop_mysql(mysql_name)


def start_worker(
    stack: Stack,
    *,
    log: Path | None = None,
    loglevel: str = "warning",
    pool: str = "solo",
    **env: str,
) -> subprocess.Popen[bytes]:
    """A Celery worker on the stack's broker; its output goes to `log` when given. The solo
    pool by default: the job runs in this very process, so killing it kills the job (`pool`
    "prefork": two child processes run the jobs, as in production)."""
    out = log.open("wb") if log is not None else None
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "memoryplatform",
            "worker",
            "-Q",
            "celery,llm,maintenance",
            f"--pool={pool}",
            f"--concurrency={1 if pool == 'solo' else 2}",
            f"--loglevel={loglevel}",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env={**stack.env, **env},
        stdout=out,
        stderr=subprocess.STDOUT if out is not None else None,
    )


# The Redis database the live-stack Celery tests use as their broker (emptied before each).
BROKER_DB = 14


@dataclass
class WorkerStack:
    stack: Stack
    broker: str
    worker: subprocess.Popen[bytes] | None


def llm_env(base_url: str) -> dict[str, str]:
    """The settings that point a stack at the fake OpenAI-compatible server."""
    return {"LLM_BASE_URL": base_url, "LLM_MODEL": "fake-chat", "LLM_API_KEY": "sk-test"}


@contextmanager
def worker_stack(
    tmp: Path,
    *,
    servers: int = 1,
    extra_env: dict[str, str] | None = None,
    worker: bool = True,
    log: Path | None = None,
    loglevel: str = "warning",
    **worker_env: str,
) -> Iterator[WorkerStack]:
    """live_stack on Redis (cache and working memory) with an emptied Redis broker, plus a
    Celery worker on it (`worker` False: the broker only); the worker is stopped on exit."""
    broker = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{BROKER_DB}"
    subprocess.run(["redis-cli", "-u", broker, "flushdb"], check=False, capture_output=True)
    env = {"CELERY_BROKER_URL": broker, "REDIS_URL": settings.REDIS_URL, **(extra_env or {})}
    with live_stack(tmp, servers=servers, extra_env=env) as stack:
        proc = start_worker(stack, log=log, loglevel=loglevel, **worker_env) if worker else None
        try:
            yield WorkerStack(stack, broker, proc)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=20)


def stack_python(stack: Stack, code: str) -> Any:
    """Runs `code` in a fresh Django process on the stack's database (`manage.py shell`) and
    returns what it printed as JSON on its last line: how a test reads the stack's rows, which
    live in another database than the test's own."""
    proc = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    return json.loads(out.strip().splitlines()[-1])


def stack_process(stack: Stack, code: str, **popen: Any) -> subprocess.Popen[str]:
    """`code` started in a fresh Django process on the stack's database (`manage.py shell`),
    its output read as text (`stdout` piped unless `popen` says otherwise)."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=stack.env,
        text=True,
        **{"stdout": subprocess.PIPE, **popen},
    )


# Holds one row's lock in a process of its own until a line arrives on stdin.
HOLD = """
import sys
from django.db import transaction
from {module} import {model}
with transaction.atomic():
    {model}.objects.select_for_update().get(pk={pk!r})
    print("locked", flush=True)
    sys.stdin.readline()
"""


@contextmanager
def row_held(stack: Stack, module: str, model: str, pk: Any) -> Iterator[None]:
    """Another process holds row `pk` of `module.model` locked for the `with` block (on SQLite,
    where every transaction begins IMMEDIATE, the database's write lock)."""
    proc = stack_process(
        stack, HOLD.format(module=module, model=model, pk=pk), stdin=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        # `shell` may print a line of its own first.
        while (line := proc.stdout.readline()) and line.strip() != "locked":
            pass
        assert line, "the holding process ended without the lock"
        yield
    finally:
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=60)


def wait_for_lock_waits(stack: Stack, count: int, unless: Future[Any] | None = None) -> None:
    """Until `count` transactions on the stack's database wait for a row lock, or the request
    `unless` has finished without waiting (the test's assertions then say what it did)."""
    monitor = mysql_connection()
    monitor.autocommit(True)
    deadline = time.time() + 90
    try:
        while True:
            cur = monitor.cursor()
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX t "
                "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = %s",
                [stack.mysql_name],
            )
            if cur.fetchone()[0] >= count or (unless is not None and unless.done()):
                return
            assert time.time() < deadline, f"never {count} lock waits"
            # InnoDB refreshes this table only when it was not read for 0.1 s.
            time.sleep(0.25)
    finally:
        monitor.close()


def queued_in_order(
    stack: Stack, row: tuple[str, str, Any], first: Callable[[], Any], second: Callable[[], Any]
) -> tuple[Any, Any]:
    """Runs `first`, then `second`, each in a thread, queued in that order on `row` (module,
    model, pk) while another process holds it; releasing the row lets them go in that order
    (InnoDB grants a row's lock in the order it was asked for). Both answers. A call that ends
    without waiting (it never reached the row) ends the wait for it: the caller's assertions say
    what it did."""
    with ThreadPoolExecutor(2) as pool:
        with row_held(stack, *row):
            one = pool.submit(first)
            wait_for_lock_waits(stack, 1, unless=one)
            two = pool.submit(second)
            wait_for_lock_waits(stack, 2, unless=two)
        return one.result(timeout=120), two.result(timeout=180)


def answer(call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` made to give an API error as `(status, code)` instead of raising it, so that a
    thread of queued_in_order returns what the server answered either way."""

    def run() -> Any:
        try:
            return call()
        except MemoryAPIError as e:
            return e.status, e.code

    return run
