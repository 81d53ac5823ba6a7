"""A gunicorn worker loads the embedding model and the search's dictionaries before it takes its
first request (gunicorn.conf.py's post_worker_init, memories.retrieval.warm), and the MCP stdio
server while its client connects, unless WARM_UP_AT_START is off."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from memories.retrieval.warm import warm_up, warm_up_at_start

from .fake_openai import FakeOpenAI
from .livestack import ROOT, manage_json, start_server, wait_until_up


def _env(tmp_path: Path, warm: str) -> dict[str, str]:
    """A process of its own on a new SQLite file and DATA_DIR (what is warmed up reads no
    database; a new DATA_DIR has no glossary cache yet)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        "DATA_DIR": str(tmp_path),
        "WARM_UP_AT_START": warm,
    }
    env.pop("REDIS_URL", None)
    return env


def _first_answer_log(tmp_path: Path, warm: str) -> str:
    """What one gunicorn worker logged by the time it answered its first request."""
    log = tmp_path / f"gunicorn-{warm}.log"
    with log.open("wb") as out:
        proc, url = start_server(_env(tmp_path, warm), out=out)
        try:
            # Any answer will do (the database is not migrated): the worker is taking requests.
            wait_until_up([url], healthy=False)
            return log.read_text()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_a_worker_warms_up_before_its_first_request(tmp_path):
    text = _first_answer_log(tmp_path, "1")
    assert "warmed up in" in text and "'embedding'" in text, text
    assert "building the CC-CEDICT gloss cache" in text  # a new DATA_DIR: built at start
    # No broker: the worker runs beat's periodic tasks itself (lifecycle.embedded_beat).
    assert "embedded beat started" in text
    assert "warmed up in" not in _first_answer_log(tmp_path, "0")


def test_the_command_builds_the_caches_a_worker_then_only_reads(tmp_path):
    """`manage.py warm_up` builds the glossary's cache in a process of its own (a worker that
    builds it keeps what the build leaves: docs/benchmarks.md); a worker started after it reads
    the file."""
    done = subprocess.run(
        [sys.executable, "manage.py", "warm_up"],
        cwd=ROOT,
        env=_env(tmp_path, "1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "warmed up (embedding" in done.stdout, done.stdout + done.stderr
    assert "building the CC-CEDICT gloss cache" in done.stderr
    assert list(tmp_path.glob("cedict-gloss-*.sqlite3"))
    assert list(tmp_path.glob("jieba-*-search-dict-*.txt"))
    text = _first_answer_log(tmp_path, "1")
    assert "warmed up in" in text and "building the CC-CEDICT gloss cache" not in text, text


def test_a_remote_embedding_model_is_not_called_at_start(settings):
    """A remote model has nothing to load; a call that hangs would hold the worker up."""
    with FakeOpenAI() as fake:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_MODEL = "fake-embed"
        settings.EMBEDDING_API_BASE_URL = fake.base_url
        assert set(warm_up()) == {"tokens", "glossary"}
        assert fake.requests == []


def test_a_warm_up_that_fails_is_logged_and_the_process_goes_on(settings, caplog):
    settings.EMBEDDING_BACKEND = "nope"  # EMBEDDING_UNAVAILABLE when loaded
    settings.WARM_UP_AT_START = True
    warm_up_at_start()  # does not raise
    assert "warm-up failed" in caplog.text
    caplog.clear()
    settings.WARM_UP_AT_START = False
    warm_up_at_start()
    assert caplog.text == ""


def test_the_mcp_stdio_server_warms_up_while_its_client_connects(tmp_path):
    env = _env(tmp_path, "1")
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    token = manage_json(env, "create_mcp_token", "--team", "warm", "--agent", "a1")["token"]
    log = tmp_path / "mcp.log"
    with log.open("wb") as err:
        # stdin left open and silent: the server waits for its client, and warms up meanwhile.
        proc = subprocess.Popen(
            [*manage, "mcp_stdio"],
            cwd=ROOT,
            env={**env, "MEMORY_MCP_TOKEN": token},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 90
            while "warmed up in" not in log.read_text() and time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()
                time.sleep(0.2)
        finally:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()  # end of the client: the server exits
            out = proc.stdout.read()
            proc.wait(timeout=30)
    assert "warmed up in" in log.read_text(), log.read_text()
    assert out == b""  # nothing on the protocol's channel but the protocol
