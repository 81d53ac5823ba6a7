"""Production settings refuse a per-process cache, pass `check --deploy`, and shared state holds
across real gunicorn processes (replay protection and rate limits in Redis)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import uuid

import requests

from memoryplatform.client import sign_v2
from tests.livestack import ROOT, live_stack

GOOD_SECRET = "k3J9-x8Qz_vP2mW7nR4tY6uB1cD5eF0gH3jK8lM2nP6qR9sT4vW7xZ1aC5dE8fG2h"
REFUSAL = "REDIS_URL is not set: replay protection and rate limits would be per process"


def production_env(tmp_path, **extra: str) -> dict[str, str]:
    """What an operator sets (README, production deployment), minus the services' addresses."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "ALLOWED_HOSTS")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.production",
            "SECRET_KEY": GOOD_SECRET,
            "DATA_DIR": str(tmp_path),
            "ALLOWED_HOSTS": "memory.example.com",
            "CSRF_TRUSTED_ORIGINS": "https://memory.example.com",
        }
    )
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_without_redis_refuses_to_start(tmp_path):
    r = manage(production_env(tmp_path), "check", "--deploy")
    assert r.returncode != 0
    assert REFUSAL in r.stderr
    assert "ALLOW_PER_PROCESS_CACHE=1" in r.stderr


def test_gunicorn_with_the_default_production_settings_refuses_too(tmp_path):
    env = production_env(tmp_path)
    env.pop("DJANGO_SETTINGS_MODULE")  # memoryplatform.wsgi defaults to production
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "memoryplatform.wsgi",
            "--preload",
            "-b",
            "127.0.0.1:0",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert REFUSAL in r.stderr


def test_importing_the_package_chooses_no_settings(tmp_path):
    """memoryplatform.wsgi imports the package (its Celery app) before it picks the production
    settings: nothing on that import may load Django's settings, or the server would run on the
    Celery fallback's (DEBUG on) instead."""
    env = production_env(tmp_path)
    env.pop("DJANGO_SETTINGS_MODULE")
    code = "import memoryplatform; from django.conf import settings; print(settings.configured)"
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert (r.returncode, r.stdout.strip()) == (0, "False"), r.stderr


def test_production_with_redis_passes_the_deployment_checks(tmp_path):
    # The settings only read REDIS_URL here; check --deploy does not connect to it.
    r = manage(production_env(tmp_path, REDIS_URL="redis://127.0.0.1:6379/0"), "check", "--deploy")
    assert r.returncode == 0, r.stderr
    assert "System check identified no issues" in r.stdout
    assert "WARNINGS" not in r.stdout + r.stderr


def test_a_single_process_deployment_may_opt_in_to_the_per_process_cache(tmp_path):
    r = manage(production_env(tmp_path, ALLOW_PER_PROCESS_CACHE="1"), "check", "--deploy")
    assert r.returncode == 0, r.stderr


def test_the_embedded_default_still_runs_without_redis(tmp_path):
    env = production_env(tmp_path, DJANGO_SETTINGS_MODULE="memoryplatform.settings.base")
    r = manage(env, "check")
    assert r.returncode == 0, r.stderr


def test_production_security_settings_are_read_from_the_environment(tmp_path):
    code = (
        "from django.conf import settings as s; import json; print(json.dumps(["
        "s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, "
        "s.SECURE_PROXY_SSL_HEADER, s.ALLOWED_HOSTS, s.SECURE_REDIRECT_EXEMPT]))"
    )
    defaults = production_env(tmp_path, REDIS_URL="redis://127.0.0.1:6379/0")
    r = manage(defaults, "shell", "-c", code)
    assert r.returncode == 0, r.stderr
    redirect, hsts, subdomains, proxy, hosts, exempt = json.loads(r.stdout.strip().splitlines()[-1])
    assert redirect is True and hsts >= 180 * 24 * 3600 and subdomains is True
    assert proxy == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert hosts == ["memory.example.com"]
    assert "^health$" in exempt  # probes reach the process over plain HTTP
    assert "^metrics$" in exempt  # so does a Prometheus on the same host

    # Directly exposed (no TLS proxy): no proxy header is trusted; another header's name works.
    r = manage({**defaults, "SECURE_PROXY_SSL_HEADER": ""}, "shell", "-c", code)
    assert json.loads(r.stdout.strip().splitlines()[-1])[3] is None
    r = manage(
        {**defaults, "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_SCHEME,https"},
        "shell",
        "-c",
        code,
    )
    assert json.loads(r.stdout.strip().splitlines()[-1])[3] == ["HTTP_X_FORWARDED_SCHEME", "https"]
    r = manage({**defaults, "SECURE_PROXY_SSL_HEADER": "https"}, "check")
    assert r.returncode != 0 and "SECURE_PROXY_SSL_HEADER must be" in r.stderr


def test_the_default_allowed_hosts_do_not_include_the_test_client_host(tmp_path):
    env = production_env(tmp_path, DJANGO_SETTINGS_MODULE="memoryplatform.settings.base")
    env.pop("ALLOWED_HOSTS")
    code = "from django.conf import settings as s; print(','.join(s.ALLOWED_HOSTS))"
    r = manage(env, "shell", "-c", code)
    assert r.returncode == 0, r.stderr
    assert "testserver" not in r.stdout and "127.0.0.1" in r.stdout


# --- shared state across two real processes ------------------------------------------------------


def _v2_headers(key: str, secret: str, method: str, path: str, body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    nonce = secrets.token_urlsafe(18)
    return {
        "X-API-Key": key,
        "X-Timestamp": ts,
        "X-Signature-Version": "2",
        "X-Nonce": nonce,
        "X-Signature": sign_v2(secret, ts, nonce, method, path, body),
        "Content-Type": "application/json",
    }


def test_replays_and_rate_limits_hold_across_two_gunicorn_processes(tmp_path, redis_required):
    extra = {
        "REDIS_URL": redis_required,
        # Keys of this stack only, whatever else uses the Redis database.
        "CACHE_KEY_PREFIX": f"xproc-{uuid.uuid4().hex[:8]}",
        # One window for the whole test: a window boundary would reset the count mid-test.
        "API_RATE_LIMIT_WINDOW_SECONDS": "86400",
    }
    with live_stack(tmp_path, servers=2, extra_env=extra) as stack:
        a, b = stack.urls
        session = requests.Session()

        # Every request is accepted once, through A; the same bytes replayed through B (and A)
        # are refused.
        n = 20
        accepted_replays = 0
        for i in range(n):
            body = json.dumps({"agent_id": "replay", "content": f"replay probe {i}"}).encode()
            headers = _v2_headers(stack.api_key, stack.secret, "POST", "/memories/personal", body)
            first = session.post(a + "/memories/personal", data=body, headers=headers)
            assert first.status_code == 201, first.text
            for url in (b, a):
                again = session.post(url + "/memories/personal", data=body, headers=headers)
                if again.status_code < 400:
                    accepted_replays += 1
                else:
                    assert again.status_code == 401
                    assert again.json()["code"] == "REPLAYED_REQUEST"
        assert accepted_replays == 0

        # A key limited to 5 requests per window, used through both processes in turn.
        out = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "create_api_key",
                "--team",
                "limited",
                "--rate-limit",
                "5",
                "--json",
            ],
            cwd=ROOT,
            env=stack.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        creds = json.loads(out.strip().splitlines()[-1])
        statuses = []
        for i in range(20):
            url = (a, b)[i % 2]
            headers = _v2_headers(creds["api_key"], creds["secret"], "GET", "/stats", b"")
            statuses.append(session.get(url + "/stats", headers=headers).status_code)
        assert statuses.count(200) == 5, statuses
        assert statuses.count(429) == 15, statuses
