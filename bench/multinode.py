"""Several app nodes behind nginx on this machine: routing, failover, audit.

Usage (from the project root; heavy: nothing else should run on the machine meanwhile):

    .venv/bin/python bench/multinode.py --balance hash --seconds 60 \\
        --database-url mysql://root@127.0.0.1:3306/mp_multinode_load \\
        --redis-url redis://127.0.0.1:6379/13 [--kill-at 20 --down-for 10] \\
        [--celery-workers 2 --broker amqp://guest:guest@127.0.0.1:5672/mp_multinode] \\
        [--search-backend milvus] [--json out.json]

What it does:

1. **Database**: the MariaDB database of `--database-url` is dropped and created, migrated, and
   seeded in a child process: `--teams` teams with one API key each (no rate limit), and
   `--seed-per-scope` memories (corpus texts, random unit vectors) in every scope the load will
   use: each team's team scope and each agent's personal scope. Seeded scopes make an index load
   cost what it costs in production (a few MB and some ms per scope), not a few rows.
2. **Stack**: `--nodes` gunicorn servers (`--workers` sync workers each, fixed loopback ports,
   each with its own PROMETHEUS_MULTIPROC_DIR so its /metrics is the node's), sharing the
   database, Redis (`--redis-url`, keys under a prefix of the run, deleted at the end) and, with
   `--celery-workers N`, the broker (`--broker`, the web nodes queue jobs there) and N Celery
   workers (`-Q celery,llm,maintenance --concurrency 1`). nginx (`--nginx`, run as a process of
   this script with its own prefix in the temporary directory) listens on a loopback port; its
   `map`, `upstream` and `proxy_next_upstream*` / `proxy_*_timeout` lines are taken from
   deploy/nginx/memoryplatform-multinode.conf, the servers replaced by the local nodes, over
   plain HTTP. `--balance rr` drops the `hash` line (nginx's default round-robin).
   `--search-backend milvus`: one milvus-lite gRPC server process (`milvus-lite server
   --data-dir <tmp> --port <free>`) that every node and worker shares (SEARCH_BACKEND=milvus,
   SEARCH_MILVUS_URI=http://127.0.0.1:<port>), its collection built from the seeded rows by
   `manage.py reindex --backend milvus` (the seed is bulk-inserted, without change-log rows),
   and with `--celery-workers` a `celery beat` process too (the outbox's 30 s catch-up: writes
   queue `memories.ship_search_changes` on the broker; beat ships what a killed node committed
   but never queued). Stopped at the end with everything else.
3. **Load**: bench/load.py in external mode against nginx (`--clients` threads, client n on
   team n mod `--teams`, `--agents-per-client` agents each). With `--celery-workers`, one more
   thread sends an asynchronous ingest every `--ingest-every` seconds with an `Idempotency-Key`,
   retrying a failed send (5xx, connection error) with the same key, and at the end waits for
   every job to succeed.
4. **Failover** (`--kill-at S`): S seconds into the load, node 1's whole process group
   (gunicorn master and workers) is killed with SIGKILL, and restarted on the same port
   `--down-for` seconds later.
5. **Numbers**: load.py's per-endpoint latencies and audit (acknowledged writes missing from the
   database = lost); with milvus, once the outbox has caught up (`--engine-wait`), every
   scope's searchable rows counted in the database and in the engine, the changes left
   unshipped, and the engine server's RSS; per node, from its /metrics, requests and index loads
   (`memoryplatform_index_load_duration_seconds_count`) during the load, and index loads per
   1,000 requests; the resident memory of each node (master + workers) at the end.

Exit 1 when a write was lost, an ingest job did not succeed, the engine and the database differ
(milvus), or a 5xx was seen that the kill does
not explain (without `--kill-at` any 5xx; with it, more 5xx than requests could be in flight on the
killed node, i.e. more than `--clients`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
import load
from common import (
    PYTHON,
    ROOT,
    BenchServer,
    _children,
    free_port,
    log,
    machine_load,
    rss_kib,
)

NGINX_CONF = ROOT / "deploy" / "nginx" / "memoryplatform-multinode.conf"
QUEUES = "celery,llm,maintenance"


# --- seeding (child process with the run's environment) ----------------------------------------


def seed_child(spec: dict[str, Any]) -> list[dict[str, str]]:
    """Teams, keys, agents and seeded scopes; returns the keys (load.py's --keys format), the
    last one of a team of its own for the ingester."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")
    import django

    django.setup()
    import numpy as np
    from django.db import connection, transaction

    from memories.models import Memory, MemoryScope
    from memories.retrieval.embeddings import get_embedder, to_bytes
    from memories.retrieval.text import content_hash, tokens_for_storage
    from tenants import services

    embedder = get_embedder()
    per_scope = int(spec["seed_per_scope"])
    items = corpus.generate("en", max(per_scope, 1))
    tokens = [tokens_for_storage(i.text) for i in items]
    hashes = [content_hash(i.text) for i in items]
    rng = np.random.default_rng(7)

    def rows(team: Any, scope: str, agent_id: str) -> None:
        if per_scope <= 0:
            return
        vecs = rng.normal(size=(per_scope, embedder.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        Memory.objects.bulk_create(
            [
                Memory(
                    team=team,
                    scope=scope,
                    agent_id=agent_id,
                    content=items[i].text,
                    importance=items[i].importance,
                    category=items[i].category,
                    embedding=to_bytes(vecs[i]),
                    embedding_model=embedder.model_name,
                    content_hash=hashes[i],
                    search_tokens=tokens[i],
                )
                for i in range(per_scope)
            ],
            batch_size=1000,
        )

    keys: list[dict[str, str]] = []
    teams = int(spec["teams"])
    for t in range(teams):
        with transaction.atomic():
            team, _ = services.team_upsert(team_id=f"mn-{t:03d}", name=f"multinode {t}")
            issued = services.api_key_issue(
                team=team, agent=None, label="multinode", expires_at=None, rate_limit=0
            )
            keys.append({"team_id": team.id, "api_key": issued.key_id, "secret": issued.secret})
            rows(team, MemoryScope.TEAM, "")
            # The agents load.py's clients of this team will use (client n -> key n mod teams).
            for n in range(t, int(spec["clients"]), teams):
                agents = int(spec["agents_per_client"])
                names = [f"load-{n}"] if agents <= 1 else [f"load-{n}-{k}" for k in range(agents)]
                for agent_id in names:
                    services.agent_ensure(team=team, agent_id=agent_id)
                    rows(team, MemoryScope.PERSONAL, agent_id)
    # The ingester's own team: its facts are not the load's rows (load.py audits the load's teams).
    with transaction.atomic():
        team, _ = services.team_upsert(team_id="mn-ingest", name="multinode ingest")
        issued = services.api_key_issue(
            team=team, agent=None, label="multinode", expires_at=None, rate_limit=0
        )
        keys.append({"team_id": team.id, "api_key": issued.key_id, "secret": issued.secret})
    connection.close()
    return keys


def engine_check_child() -> dict[str, Any]:
    """SEARCH_BACKEND=milvus: the engine against the database, scope by scope.

    Every scope's searchable rows (not superseded, not cold: what the engine must hold) are
    counted in the database and in the engine, and the change log past the shipped cursor is
    counted (changes not yet in the engine)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.base")
    import django

    django.setup()
    from django.db import connection
    from django.db.models import Count

    from memories.models import IndexChange, Memory, MemoryScope, MemoryTier
    from memories.retrieval.index import scope_key
    from memories.retrieval.milvus import engine, shipped_cursor

    eng = engine()
    groups = (
        Memory.objects.filter(superseded_by__isnull=True)
        .exclude(tier=MemoryTier.COLD)
        .values("team_id", "scope", "agent_id")
        .annotate(n=Count("id"))
    )
    # A team-scope row keeps the agent that wrote it; its scope key has no agent.
    per_scope: dict[tuple[str, str], int] = {}
    for g in groups:
        agent = g["agent_id"] if g["scope"] == MemoryScope.PERSONAL else ""
        key = (g["team_id"], scope_key(g["team_id"], g["scope"], agent))
        per_scope[key] = per_scope.get(key, 0) + g["n"]
    db_rows = engine_rows = 0
    differ: list[str] = []
    for (team_id, scope), n in per_scope.items():
        in_engine = eng.count(team_id, scope)
        db_rows += n
        engine_rows += in_engine
        if in_engine != n:
            differ.append(f"{scope}: database {n}, engine {in_engine}")
    cursor = shipped_cursor()
    out = {
        "scopes": len(per_scope),
        "db_rows": db_rows,
        "engine_rows": engine_rows,
        "scopes_differing": differ,
        "unshipped_changes": IndexChange.objects.filter(id__gt=cursor).count(),
    }
    connection.close()
    return out


# --- the search engine (SEARCH_BACKEND=milvus) --------------------------------------------------


def start_milvus(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    """milvus-lite's gRPC server (`milvus-lite server`), one process every node and worker
    shares; answers once a client can list its collections."""
    logf = (tmp / "milvus-lite.log").open("ab")
    proc = subprocess.Popen(
        [
            str(Path(PYTHON).parent / "milvus-lite"),
            "server",
            "--data-dir",
            str(tmp / "milvus-data"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=tmp,
        stdout=logf,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    from pymilvus import MilvusClient

    last: Exception | None = None
    for _ in range(60):
        if proc.poll() is not None:
            break
        try:
            MilvusClient(uri=f"http://127.0.0.1:{port}", timeout=2).list_collections()
            return proc
        except Exception as exc:  # not listening yet
            last = exc
            time.sleep(0.5)
    stop_group(proc, timeout=10)
    log_text = (tmp / "milvus-lite.log").read_text()[-2000:]
    raise RuntimeError(f"milvus-lite server did not answer ({last}):\n{log_text}")


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM to the process group, SIGKILL when it has not gone after `timeout` s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# --- nginx -------------------------------------------------------------------------------------


def _blocks(text: str, head: str) -> list[str]:
    """The `head ... { ... }` blocks of an nginx file (no nested braces in those we take)."""
    return re.findall(rf"^{head}\b[^{{]*\{{[^}}]*\}}", text, flags=re.M)


def nginx_conf(prefix: Path, listen: int, nodes: list[int], balance: str) -> str:
    """The documented multi-node config's routing and failover lines, over plain HTTP, with the
    local nodes as servers."""
    prod = NGINX_CONF.read_text()
    maps = _blocks(prod, "map")
    (upstream,) = _blocks(prod, "upstream")
    server_line = re.search(r"^\s*server \S+ (.*?);", upstream, flags=re.M)
    assert server_line is not None, "no server line in the upstream block"
    params = server_line.group(1)
    body = [
        line
        for line in upstream.splitlines()[1:-1]
        if not re.match(r"\s*server ", line) and not line.strip().startswith("#")
    ]
    if balance == "rr":
        body = [line for line in body if not line.strip().startswith("hash ")]
    body += [f"    server 127.0.0.1:{p} {params};" for p in nodes]
    upstream_local = "upstream memoryplatform {\n" + "\n".join(body) + "\n}"
    # The server-level lines (before the first location: /mcp has its own read timeout).
    server_level = prod[prod.index("listen 443") :].split("location ", 1)[0]
    proxy = [
        line.strip()
        for line in server_level.splitlines()
        if re.match(r"\s*(proxy_next_upstream\S*|proxy_\w+_timeout) ", line)
    ]
    proxy_lines = "\n        ".join(proxy)
    return f"""worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    {chr(10).join(maps)}
    {upstream_local}
    server {{
        listen 127.0.0.1:{listen};
        client_max_body_size 1m;
        {proxy_lines}
        location / {{
            proxy_pass http://memoryplatform;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
        }}
    }}
}}
"""


# --- metrics -----------------------------------------------------------------------------------


def scrape(port: int) -> dict[str, float]:
    """A node's request count and index loads from its /metrics (0 when it does not answer)."""
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except requests.RequestException:
        return {
            "requests": 0.0,
            "index_loads": 0.0,
            "index_load_seconds": 0.0,
            "request_seconds": 0.0,
        }

    def total(name: str) -> float:
        return sum(
            float(m.group(1))
            for m in re.finditer(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, flags=re.M)
        )

    return {
        "requests": total("memoryplatform_http_requests_total"),
        "index_loads": total("memoryplatform_index_load_duration_seconds_count"),
        "index_load_seconds": total("memoryplatform_index_load_duration_seconds_sum"),
        # Time inside the application (Django middleware to response), every route.
        "request_seconds": total("memoryplatform_http_request_duration_seconds_sum"),
    }


def node_rss_mib(proc: subprocess.Popen[bytes] | None) -> dict[str, Any]:
    if proc is None or proc.poll() is not None:
        return {}
    pids = [proc.pid, *_children(proc.pid)]
    per = {pid: rss_kib(pid).get("rss", 0) for pid in pids}
    return {
        "total_mib": round(sum(per.values()) / 1024, 1),
        "workers_mib": [round(per[p] / 1024, 1) for p in pids[1:]],
    }


# --- ingest jobs through the broker ------------------------------------------------------------


class Ingester(threading.Thread):
    """Asynchronous ingests with an Idempotency-Key; a failed send is retried with the same key."""

    def __init__(self, base_url: str, key: dict[str, str], every: float, stop: threading.Event):
        super().__init__(name="ingester", daemon=True)
        from memoryplatform.client import MemoryClient

        self.api = MemoryClient(key["api_key"], key["secret"], base_url=base_url, timeout=60)
        self.every = every
        self.stop_event = stop
        self.jobs: dict[str, int] = {}  # idempotency key -> job id
        self.retries = 0
        self.failed: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop_event.wait(self.every):
            n += 1
            key = uuid.uuid4().hex
            messages = [
                {"role": "user", "content": f"My build number {n} passed on node testing."},
                {"role": "assistant", "content": "Noted."},
            ]
            for attempt in range(5):
                try:
                    data = self.api.ingest(
                        "ingester", messages, async_=True, idempotency_key=key, infer=True
                    )
                    self.jobs[key] = int(data["job_id"])  # type: ignore[typeddict-item]
                    break
                except Exception as exc:  # 502 from nginx, connection error: send it again
                    self.retries += 1
                    if attempt == 4:
                        self.failed.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(1)

    def wait_all(self, timeout: float) -> dict[str, Any]:
        statuses: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        for job_id in self.jobs.values():
            try:
                job = self.api.wait_for_job(
                    job_id, timeout=max(deadline - time.monotonic(), 1), interval=0.5
                )
                status = str(job["status"])
            except Exception as exc:
                status = f"error {type(exc).__name__}"
            statuses[status] = statuses.get(status, 0) + 1
        return {
            "sent": len(self.jobs),
            "distinct_jobs": len(set(self.jobs.values())),
            "send_retries": self.retries,
            "sends_not_answered": len(self.failed),
            "statuses": statuses,
        }


# --- the run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    for url, what in ((args.database_url, "--database-url"), (args.redis_url, "--redis-url")):
        load._check_loopback(url, what)
    if args.celery_workers:
        load._check_loopback(args.broker, "--broker")
    run_id = uuid.uuid4().hex[:6]
    prefix = f"mn-{run_id}"
    tmp = Path(tempfile.mkdtemp(prefix="multinode-"))
    env_extra = {
        "CACHE_KEY_PREFIX": prefix,
        "INDEX_MEMORY_BUDGET_MB": str(args.index_budget_mb),
        "LOG_LEVEL": "INFO",
    }
    if args.celery_workers:
        env_extra["CELERY_BROKER_URL"] = args.broker
    nodes: list[BenchServer] = []
    celery: list[subprocess.Popen[bytes]] = []
    beat: subprocess.Popen[bytes] | None = None
    milvus: subprocess.Popen[bytes] | None = None
    nginx: subprocess.Popen[bytes] | None = None
    stop_ingest = threading.Event()
    report: dict[str, Any] = {
        "balance": args.balance,
        "nodes": args.nodes,
        "workers_per_node": args.workers,
        "teams": args.teams,
        "clients": args.clients,
        "agents_per_client": args.agents_per_client,
        "seed_per_scope": args.seed_per_scope,
        "index_budget_mb": args.index_budget_mb,
        "celery_workers": args.celery_workers,
        "kill_at": args.kill_at,
        "down_for": args.down_for,
        "retries": args.retries,
        "search_backend": args.search_backend,
    }
    try:
        load._mysql(args.database_url, create=True)
        if args.search_backend == "milvus":
            mport = args.milvus_port or free_port()
            t0 = time.perf_counter()
            milvus = start_milvus(tmp, mport)
            log(f"milvus-lite server on 127.0.0.1:{mport} in {time.perf_counter() - t0:.1f} s")
            env_extra["SEARCH_BACKEND"] = "milvus"
            env_extra["SEARCH_MILVUS_URI"] = f"http://127.0.0.1:{mport}"
        base = BenchServer(
            database_url=args.database_url,
            redis_url=args.redis_url,
            extra_env=env_extra,
            data_dir=tmp,
        )
        t0 = time.perf_counter()
        base.manage("migrate", "--noinput")
        spec = {
            "teams": args.teams,
            "clients": args.clients,
            "agents_per_client": args.agents_per_client,
            "seed_per_scope": args.seed_per_scope,
        }
        ok, seeded = run_child(base, ["--seed-child", json.dumps(spec)], timeout=1800)
        if not ok:
            raise RuntimeError(f"seeding failed:\n{seeded}")
        *keys, ingest_key = seeded
        keys_path = tmp / "keys.json"
        keys_path.write_text(json.dumps(keys))
        scopes = args.teams + args.clients * args.agents_per_client
        report["scopes"] = scopes
        report["seed_s"] = round(time.perf_counter() - t0, 1)
        log(
            f"{args.teams} teams, {scopes} scopes of {args.seed_per_scope} seeded in {report['seed_s']} s"
        )
        if milvus is not None:
            # The seed is bulk-inserted (no change log): the engine is built from the rows. A
            # longer engine timeout than a search's: milvus-lite's server stalls some of its
            # 1,000-row upserts past the 5 s default while it seals a segment (measured: the
            # first such stall at ~50k rows failed the command).
            t0 = time.perf_counter()
            reindexer = BenchServer(
                database_url=args.database_url,
                redis_url=args.redis_url,
                extra_env={**env_extra, "SEARCH_MILVUS_TIMEOUT": "300"},
                data_dir=tmp,
            )
            reindexer.manage("reindex", "--backend", "milvus", timeout=3600)
            report["reindex_s"] = round(time.perf_counter() - t0, 1)
            log(f"engine collection built (reindex) in {report['reindex_s']} s")

        for i in range(args.nodes):
            prom = tmp / f"prometheus-{i + 1}"
            prom.mkdir()
            node = BenchServer(
                database_url=args.database_url,
                redis_url=args.redis_url,
                workers=args.workers,
                extra_env={**env_extra, "PROMETHEUS_MULTIPROC_DIR": str(prom)},
                timeout_s=120,
                data_dir=tmp,
                port=free_port(),
                log_name=f"node-{i + 1}.log",
            )
            node.start()
            nodes.append(node)
        for i in range(args.celery_workers):
            logf = (tmp / f"celery-{i + 1}.log").open("ab")
            celery.append(
                subprocess.Popen(
                    [
                        str(Path(PYTHON).parent / "celery"),
                        "-A",
                        "memoryplatform",
                        "worker",
                        "-Q",
                        QUEUES,
                        "-n",
                        f"mn{i + 1}-{run_id}@%h",
                        "--concurrency",
                        "1",
                        "-l",
                        "info",
                    ],
                    cwd=ROOT,
                    env=base.env(),
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        if milvus is not None and args.celery_workers:
            # The outbox's catch-up: each write queues a ship, beat ships what a killed node
            # committed but never queued (memoryplatform/celery.py, every 30 s).
            beat = subprocess.Popen(
                [
                    str(Path(PYTHON).parent / "celery"),
                    "-A",
                    "memoryplatform",
                    "beat",
                    "-s",
                    str(tmp / "celerybeat-schedule"),
                    "-l",
                    "info",
                ],
                cwd=ROOT,
                env=base.env(),
                stdout=(tmp / "beat.log").open("ab"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        nprefix = tmp / "nginx"
        nprefix.mkdir()
        listen = free_port()
        (nprefix / "nginx.conf").write_text(
            nginx_conf(nprefix, listen, [n.port for n in nodes], args.balance)
        )
        nginx = subprocess.Popen(
            [
                args.nginx,
                "-p",
                str(nprefix),
                "-c",
                str(nprefix / "nginx.conf"),
                "-g",
                "daemon off;",
            ],
            cwd=nprefix,
            stdout=subprocess.DEVNULL,
            stderr=(nprefix / "stderr.log").open("ab"),
            start_new_session=True,
        )
        base_url = f"http://127.0.0.1:{listen}"
        for _ in range(50):
            with contextlib.suppress(requests.RequestException):
                if requests.get(base_url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            logs = [nprefix / "error.log", nprefix / "stderr.log"]
            raise RuntimeError(
                "nginx did not answer: "
                + " ".join(p.read_text()[-2000:] for p in logs if p.exists())
            )
        log(f"nginx ({args.balance}) on {base_url} -> nodes {[n.port for n in nodes]}")

        ingester = (
            Ingester(base_url, ingest_key, args.ingest_every, stop_ingest)
            if args.celery_workers
            else None
        )
        before: dict[int, dict[str, float]] = {}
        events: list[str] = []
        t_load: list[float] = []

        def killer() -> None:
            victim = nodes[0]
            time.sleep(args.kill_at)
            assert victim.proc is not None
            os.killpg(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait(timeout=10)
            victim.proc = None
            events.append(f"{time.monotonic() - t_load[0]:.1f}s: node 1 killed (SIGKILL)")
            log(events[-1])
            time.sleep(args.down_for)
            victim.start()
            events.append(f"{time.monotonic() - t_load[0]:.1f}s: node 1 answering again")
            log(events[-1])

        def on_load_start() -> None:
            t_load.append(time.monotonic())
            for n in nodes:
                before[n.port] = scrape(n.port)
            if ingester is not None:
                ingester.start()
            if args.kill_at:
                threading.Thread(target=killer, name="killer", daemon=True).start()

        largs = argparse.Namespace(
            base_url=base_url,
            keys=keys_path,
            database_url=args.database_url,
            clients=args.clients,
            agents_per_client=args.agents_per_client,
            seconds=args.seconds,
            max_ops=args.max_ops,
            timeout=args.timeout,
            retries=args.retries,
        )
        report["load"] = load.run(largs, on_load_start=on_load_start)
        stop_ingest.set()
        report["events"] = events
        per_node: list[dict[str, Any]] = []
        for i, n in enumerate(nodes):
            after = scrape(n.port)
            b = before.get(n.port, {})
            reqs = after["requests"] - b.get("requests", 0.0)
            loads = after["index_loads"] - b.get("index_loads", 0.0)
            busy = after["request_seconds"] - b.get("request_seconds", 0.0)
            load_s = after["index_load_seconds"] - b.get("index_load_seconds", 0.0)
            per_node.append(
                {
                    "node": i + 1,
                    "requests": int(reqs),
                    "index_loads": int(loads),
                    "index_loads_per_1000": round(1000 * loads / reqs, 1) if reqs else None,
                    "index_loads_total_with_warmup": int(after["index_loads"]),
                    "index_load_seconds_total": round(after["index_load_seconds"], 1),
                    # Server-side mean: against the client's latency, the rest is queueing.
                    "server_ms_per_request": round(1000 * busy / reqs, 1) if reqs else None,
                    "index_load_seconds": round(load_s, 1),
                    "rss": node_rss_mib(n.proc),
                }
            )
        report["per_node"] = per_node
        reqs = sum(p["requests"] for p in per_node)
        loads_n = sum(p["index_loads"] for p in per_node)
        report["index_loads_per_1000"] = round(1000 * loads_n / reqs, 1) if reqs else None
        if ingester is not None:
            ingester.join(timeout=args.timeout + 10)
            report["ingest"] = ingester.wait_all(timeout=180)
        if milvus is not None:
            report["milvus_rss"] = node_rss_mib(milvus)
            report["engine"] = engine_check(base, args)
        report["load_at_end"] = machine_load()
    finally:
        stop_ingest.set()
        if nginx is not None and nginx.poll() is None:
            nginx.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                nginx.wait(timeout=10)
        for proc in [*celery, *([beat] if beat is not None else [])]:
            stop_group(proc)
        for n in nodes:
            n.stop()
        if milvus is not None:
            stop_group(milvus)
        if not args.keep:
            load._mysql(args.database_url, create=False)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"kept {tmp}")
        with contextlib.suppress(Exception):
            report["redis_keys_deleted"] = load._delete_redis_prefix(args.redis_url, prefix)
    return report


def run_child(base: BenchServer, argv: list[str], *, timeout: float) -> tuple[bool, Any]:
    """This script again in a child process with the stack's environment (Django set up there,
    not in the parent, which only drives the stack): (True, the JSON of its last output line),
    or (False, the tail of its stderr)."""
    out = subprocess.run(
        [PYTHON, str(Path(__file__).resolve()), *argv],
        cwd=ROOT,
        env=base.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        return False, out.stderr[-4000:]
    return True, json.loads(out.stdout.strip().splitlines()[-1])


def engine_check(base: BenchServer, args: argparse.Namespace) -> dict[str, Any]:
    """The engine against the database once the outbox has caught up: polled until nothing is
    left unshipped and every scope's count agrees, or `--engine-wait` seconds (a change ships
    once INDEX_CHANGE_SETTLE_SECONDS old, by a write's own task or beat's every 30 s)."""
    t0 = time.perf_counter()
    deadline = t0 + args.engine_wait
    while True:
        ok, check = run_child(base, ["--engine-check-child"], timeout=600)
        if not ok:
            return {"error": check}
        check["seconds_to_agree"] = round(time.perf_counter() - t0, 1)
        # Without Celery (embedded mode: no beat) the cursor waits for the next write; the rows
        # are in the engine all the same.
        caught_up = not check["unshipped_changes"] or not args.celery_workers
        if (caught_up and not check["scopes_differing"]) or time.perf_counter() > deadline:
            return check
        time.sleep(5)


def verdict(r: dict[str, Any], args: argparse.Namespace) -> list[str]:
    bad = []
    lr = r.get("load", {})
    if lr.get("lost_writes"):
        bad.append(f"{lr['lost_writes']} acknowledged writes lost")
    # Without the client's re-sends, a POST in flight on the killed node gets nginx's 502.
    allowed = args.clients if args.kill_at and not args.retries else 0
    if lr.get("5xx", 0) > allowed:
        bad.append(f"{lr['5xx']} 5xx (at most {allowed} explained by the kill)")
    ing = r.get("ingest")
    if ing and (set(ing["statuses"]) - {"succeeded"} or ing["sends_not_answered"]):
        bad.append(f"ingest jobs: {ing}")
    eng = r.get("engine")
    if eng is not None and (
        "error" in eng
        or eng["scopes_differing"]
        or (eng["unshipped_changes"] and args.celery_workers)
    ):
        bad.append(f"engine and database differ: {eng}")
    return bad


def print_report(r: dict[str, Any]) -> None:
    load.print_report(r["load"])
    print(
        f"\n{r['nodes']} nodes x {r['workers_per_node']} sync workers, nginx {r['balance']}; "
        f"{r['teams']} teams, {r['scopes']} scopes x {r['seed_per_scope']} seeded memories, "
        f"INDEX_MEMORY_BUDGET_MB={r['index_budget_mb']}"
    )
    print(
        "\n| node | requests | index loads | loads / 1,000 requests | seconds loading "
        "| server ms / request | RSS MiB: node (workers) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for p in r["per_node"]:
        rss = p["rss"]
        print(
            f"| {p['node']} | {p['requests']} | {p['index_loads']} | {p['index_loads_per_1000']} "
            f"| {p['index_load_seconds']} | {p['server_ms_per_request']} "
            f"| {rss.get('total_mib', '–')} ({' + '.join(map(str, rss.get('workers_mib', [])))}) |"
        )
    print(f"\nindex loads per 1,000 requests, all nodes: {r['index_loads_per_1000']}")
    if r.get("search_backend") == "milvus":
        print(
            f"search backend milvus (milvus-lite server): reindex {r.get('reindex_s')} s, "
            f"server RSS {r.get('milvus_rss', {}).get('total_mib', '–')} MiB at the end"
        )
        print(f"engine check: {r.get('engine')}")
    for e in r.get("events", []):
        print(f"event: {e}")
    if r.get("ingest"):
        print(f"ingest jobs: {r['ingest']}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--seed-child":
        print(json.dumps(seed_child(json.loads(sys.argv[2]))))
        return 0
    if len(sys.argv) == 2 and sys.argv[1] == "--engine-check-child":
        print(json.dumps(engine_check_child()))
        return 0
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--balance", choices=("hash", "rr"), default="hash")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--workers", type=int, default=2, help="gunicorn sync workers per node")
    p.add_argument("--teams", type=int, default=16)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--agents-per-client", type=int, default=2)
    p.add_argument("--seed-per-scope", type=int, default=2000)
    p.add_argument("--index-budget-mb", type=int, default=300, help="INDEX_MEMORY_BUDGET_MB")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--max-ops", type=int, default=20_000)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument(
        "--retries", type=int, default=2, help="load.py's client re-sends (0: the 502s show)"
    )
    p.add_argument("--kill-at", type=float, default=0.0, help="seconds into the load; 0 = no kill")
    p.add_argument("--down-for", type=float, default=10.0)
    p.add_argument("--celery-workers", type=int, default=0)
    p.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    p.add_argument("--ingest-every", type=float, default=2.0)
    p.add_argument("--database-url", default="mysql://root@127.0.0.1:3306/mp_multinode_load")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument(
        "--search-backend",
        choices=("local", "milvus"),
        default="local",
        help="milvus: a milvus-lite server process shared by every node and worker",
    )
    p.add_argument("--milvus-port", type=int, default=0, help="0 = a free port")
    p.add_argument(
        "--engine-wait",
        type=float,
        default=120.0,
        help="milvus: seconds to wait at the end for the engine to agree with the database",
    )
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if not 1 <= args.nodes <= 8 or not 1 <= args.teams <= 500 or not 0 < args.seconds <= 900:
        p.error("--nodes 1..8, --teams 1..500, --seconds up to 900")
    if args.kill_at and (args.nodes < 2 or args.kill_at >= args.seconds):
        p.error("--kill-at needs 2+ nodes and a time inside --seconds")
    report = run(args)
    print_report(report)
    bad = verdict(report, args)
    report["verdict"] = bad or "ok"
    print("\nverdict: " + ("; ".join(bad) if bad else "ok"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
