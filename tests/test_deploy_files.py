"""The deployment samples in deploy/ stay true to the code: every variable they set is one the
settings read (or a known outside one), the commands they run exist, the limits agree with the
settings. Nothing here starts a service: deploy/smoke.sh runs the recipe for real, and the compose
file is only parsed (no container engine in CI)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
SYSTEMD = DEPLOY / "systemd"

# Variables the deploy files may set that the settings do not read, and who reads them.
EXTERNAL_VARIABLES = {
    "DJANGO_SETTINGS_MODULE",  # Django itself (memoryplatform/wsgi.py, celery.py default it)
    "PROMETHEUS_MULTIPROC_DIR",  # prometheus-client and gunicorn.conf.py
    "PYTHONDONTWRITEBYTECODE",  # Python (Dockerfile)
    "PYTHONUNBUFFERED",
    "CELERY_QUEUES",  # the worker unit's own, expanded in its ExecStart
    "CELERY_CONCURRENCY",
}
APP_SERVICES = {"migrate", "web", "worker", "worker-llm", "beat"}


def _settings_variables() -> set[str]:
    """Every variable the settings read: `env.<type>("NAME"` / `env("NAME"` in settings/."""
    names: set[str] = set()
    for path in (ROOT / "memoryplatform" / "settings").glob("*.py"):
        names |= set(re.findall(r"\benv(?:\.\w+)?\(\s*\"([A-Z0-9_]+)\"", path.read_text()))
    return names


def _known(name: str) -> bool:
    return name in _settings_variables() or name in EXTERNAL_VARIABLES


def _env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=value: {line!r}"
            pairs[key] = value
    return pairs


def _unit(name: str) -> dict[str, list[str]]:
    """A systemd unit's directives (continuation lines joined), repeated keys kept in order."""
    text = (SYSTEMD / name).read_text().replace("\\\n", " ")
    directives: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            directives.setdefault(key, []).append(" ".join(value.split()))
    return directives


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_settings_variables_are_found():
    # The scan above must keep working if the settings change style.
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "MAX_REQUEST_BYTES"} <= _settings_variables()


def test_env_example_sets_only_known_variables_and_the_production_essentials():
    env = _env_file(DEPLOY / "memoryplatform.env.example")
    assert [name for name in env if not _known(name)] == []
    assert env["DJANGO_SETTINGS_MODULE"] == "memoryplatform.settings.production"
    for name in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS"):
        assert env[name], name
    assert env["DATABASE_URL"].startswith("mysql://")
    # The broker must not be REDIS_URL's database: a flushed cache would lose queued jobs too.
    assert env["CELERY_BROKER_URL"] != env["REDIS_URL"]


def test_systemd_units_run_the_projects_commands():
    web = _unit("memoryplatform-web.service")
    (start,) = web["ExecStart"]
    assert re.search(r"/bin/gunicorn memoryplatform\.wsgi ", start)
    worker = _unit("memoryplatform-worker@.service")
    (start,) = worker["ExecStart"]
    assert re.search(r"/bin/celery -A memoryplatform worker -Q \$\{CELERY_QUEUES\} ", start)
    beat = _unit("memoryplatform-beat.service")
    (start,) = beat["ExecStart"]
    assert re.search(r"/bin/celery -A memoryplatform beat ", start)
    # The schedule file is state, outside the checkout (WorkingDirectory).
    schedule = re.search(r"--schedule (\S+)", start)
    assert schedule and not schedule.group(1).startswith(beat["WorkingDirectory"][0])
    # The programs the units name are the ones the project installs, and the app module exists.
    for program in ("gunicorn", "celery"):
        assert (Path(sys.executable).parent / program).exists(), program
    assert (ROOT / "memoryplatform" / "wsgi.py").exists()
    # The search's caches are built before the workers start, by a command that exists.
    (warm,) = [pre for pre in web["ExecStartPre"] if "manage.py" in pre]
    assert warm == "-/opt/memoryplatform/.venv/bin/python manage.py warm_up"
    assert (ROOT / "memories" / "management" / "commands" / "warm_up.py").exists()
    for unit in (web, worker, beat):
        assert unit["EnvironmentFile"][0] == "/etc/memoryplatform/memoryplatform.env"
        for value in unit.get("Environment", []):
            for assignment in value.split():
                assert _known(assignment.partition("=")[0]), assignment


def test_systemd_units_are_valid_for_systemd():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # Syntax only: the units name paths (/opt/memoryplatform, the memoryplatform user) that
    # exist on a target host, not here; those complaints are filtered out.
    r = subprocess.run(
        [analyze, "verify", *[str(p) for p in SYSTEMD.glob("*.service")]],
        capture_output=True,
        text=True,
    )
    problems = [
        line
        for line in (r.stdout + r.stderr).splitlines()
        if ("nknown" in line or "nvalid" in line or "Failed to parse" in line)
    ]
    assert problems == []


def test_worker_queues_cover_every_queue_the_code_sends_to():
    sent = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    sent |= {settings.CELERY_TASK_DEFAULT_QUEUE, "llm", "maintenance"}  # lifecycle dispatch
    systemd = set()
    for env_file in SYSTEMD.glob("worker-*.env.example"):
        systemd |= set(_env_file(env_file)["CELERY_QUEUES"].split(","))
    assert sent <= systemd
    compose = _compose()["services"]
    consumed = set()
    for service in compose.values():
        command = service.get("command") or []
        if "worker" in command:
            consumed |= set(command[command.index("-Q") + 1].split(","))
    assert sent <= consumed


def test_compose_has_the_whole_stack_and_one_beat():
    compose = _compose()
    services = compose["services"]
    assert {"mariadb", "redis", "rabbitmq"} | APP_SERVICES <= set(services)
    assert "replicas" not in services["beat"].get("deploy", {})
    assert "--schedule" in services["beat"]["command"]
    for name in APP_SERVICES:
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert [v for v in service["environment"] if not _known(v)] == []
        # prometheus-client fails on a missing directory, and a restart must start it empty.
        assert service["environment"]["PROMETHEUS_MULTIPROC_DIR"] in service["tmpfs"]
    # The one-shot service before every other app service migrates and builds the caches in
    # the DATA_DIR volume they all mount.
    assert services["migrate"]["command"] == [
        "sh",
        "-c",
        "python manage.py migrate --noinput && python manage.py warm_up",
    ]
    assert services["migrate"]["volumes"] == services["web"]["volumes"]
    assert services["mariadb"]["command"] == [
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_unicode_ci",
    ]
    # Redis >= 7.0: working memory uses PEXPIRE NX/GT (memories/working/redis.py).
    assert int(services["redis"]["image"].split(":")[1].split(".")[0]) >= 7


def test_dockerfile_installs_the_mysql_extra_on_python_311_slim():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    for package in ("default-libmysqlclient-dev", "pkg-config", "build-essential"):
        assert package in text
    assert 'pip install --no-cache-dir ".[mysql]"' in text
    for name in re.findall(r"^\s*([A-Z][A-Z0-9_]+)=", text, re.M):
        assert _known(name), name


def test_nginx_limits_agree_with_the_settings_and_gunicorn():
    conf = (DEPLOY / "nginx" / "memoryplatform.conf").read_text()
    size = re.search(r"client_max_body_size (\d+)([km]?);", conf)
    assert size
    factor = {"": 1, "k": 1024, "m": 1024 * 1024}[size.group(2)]
    assert int(size.group(1)) * factor == settings.MAX_REQUEST_BYTES
    env = _env_file(DEPLOY / "memoryplatform.env.example")
    assert int(env["MAX_REQUEST_BYTES"]) == settings.MAX_REQUEST_BYTES
    # The header SECURE_PROXY_SSL_HEADER trusts (production default) is set, not passed through.
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in conf
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in conf
    # nginx waits longer than gunicorn's timeout: gunicorn, not the proxy, ends a slow request.
    (start,) = _unit("memoryplatform-web.service")["ExecStart"]
    timeout = re.search(r"--timeout (\d+)", start)
    assert timeout
    read = re.search(r"proxy_read_timeout (\d+)s;", conf)
    assert read and int(read.group(1)) > int(timeout.group(1))


def test_deploy_doc_table_names_only_known_variables():
    doc = (ROOT / "docs" / "deploy.md").read_text()
    table = re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", doc, re.M)
    assert len(table) >= 10
    assert [name for name in table if not _known(name)] == []
    assert "not exercised by CI" in doc


def test_smoke_script_is_valid_bash_on_the_production_settings():
    script = DEPLOY / "smoke.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    text = script.read_text()
    assert "DJANGO_SETTINGS_MODULE=memoryplatform.settings.production" in text
    assert "trap cleanup EXIT" in text


def test_nginx_multinode_routes_by_the_key_header_and_fails_over_safely():
    """deploy/nginx/memoryplatform-multinode.conf (docs/scaling.md): the same limits as the
    single-node file, the hash on the header that carries the key id, no re-sent POST."""
    conf = (DEPLOY / "nginx" / "memoryplatform-multinode.conf").read_text()
    size = re.search(r"client_max_body_size (\d+)([km]?);", conf)
    assert size
    factor = {"": 1, "k": 1024, "m": 1024 * 1024}[size.group(2)]
    assert int(size.group(1)) * factor == settings.MAX_REQUEST_BYTES
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in conf
    (start,) = _unit("memoryplatform-web.service")["ExecStart"]
    timeout = re.search(r"--timeout (\d+)", start)
    read = re.search(r"proxy_read_timeout (\d+)s;", conf)
    assert timeout and read and int(read.group(1)) > int(timeout.group(1))
    # The affinity key is the key id header the authentication reads (nginx: $http_<lower_name>).
    auth = (ROOT / "tenants" / "authentication.py").read_text()
    assert 'headers.get("X-API-Key"' in auth
    assert re.search(r"map \$http_x_api_key \$mp_affinity \{", conf)
    assert re.search(r"^\s*hash \$mp_affinity consistent;", conf, re.M)
    assert len(re.findall(r"^\s*server \S+:\d+ max_fails=\d+ fail_timeout=\d+s;", conf, re.M)) >= 2
    # Failover on connection errors only, never a POST that reached a node, and never a slow
    # request: the retry window is far below the read timeout.
    retry = re.search(r"^\s*proxy_next_upstream ([^;]+);", conf, re.M)
    assert retry and retry.group(1).split() == ["error", "timeout"]
    window = re.search(r"proxy_next_upstream_timeout (\d+)s;", conf)
    assert window and int(window.group(1)) < int(read.group(1))
    directives = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    assert "non_idempotent" not in directives


@pytest.mark.skipif(
    shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(), reason="no nginx"
)
def test_nginx_multinode_routing_lines_are_valid_nginx(tmp_path):
    """The map, upstream and proxy_next_upstream lines, as bench/multinode.py renders them for
    local nodes, pass `nginx -t` (the full file needs certificates and TLS)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import multinode
    finally:
        sys.path.remove(str(ROOT / "bench"))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    for balance in ("hash", "rr"):
        text = multinode.nginx_conf(tmp_path, 18080, [18001, 18002], balance)
        assert ("hash $mp_affinity consistent;" in text) == (balance == "hash")
        assert "proxy_next_upstream error timeout;" in text
        path = tmp_path / f"{balance}.conf"
        path.write_text(text)
        result = subprocess.run(
            [nginx, "-t", "-p", str(tmp_path), "-c", str(path), "-e", str(tmp_path / "e.log")],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stderr
