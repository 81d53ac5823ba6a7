"""`make run` serves the embedded default with gunicorn (threads) and static files; `make dev` is
Django's reloading development server. The server command is taken from the Makefile itself and
started, so the README's command is what is tested."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import requests

from .livestack import ROOT, free_port

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str, **variables: str) -> list[str]:
    args = ["make", "-n", target, *(f"{k}={v}" for k, v in variables.items())]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.replace("\\\n", " ").splitlines()


def test_make_dev_uses_the_reloading_development_server():
    assert any("manage.py runserver" in line for line in _dry_run("dev"))


def test_the_make_run_server_command_serves_api_static_files_and_landing(tmp_path):
    port = str(free_port())
    server = [line for line in _dry_run("run", PORT=port) if "gunicorn" in line]
    assert len(server) == 1 and "--worker-class gthread" in server[0]
    env = {**os.environ, "DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)  # the embedded default: SQLite under DATA_DIR
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base"},
        check=True,
    )
    # Its own process group, so that stopping it stops gunicorn's workers as well.
    proc = subprocess.Popen(["sh", "-c", server[0]], cwd=ROOT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if requests.get(base + "/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert time.time() < deadline, "make run's server did not start"
            time.sleep(0.3)
        assert requests.get(base + "/static/admin/css/base.css", timeout=5).status_code == 200
        assert 'href="/review/"' in requests.get(base + "/", timeout=5).text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
