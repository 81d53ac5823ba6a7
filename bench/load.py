"""Load: N concurrent clients writing and searching for a bounded time, then an audit.

Usage (from the project root):

    .venv/bin/python bench/load.py --clients 16 --seconds 60 \\
        --database-url mysql://root@127.0.0.1:3306/membench_load \\
        --redis-url redis://127.0.0.1:6379/13 [--workers 2] [--json out.json]
    .venv/bin/python bench/load.py --database-url sqlite --seconds 20   # embedded default
    .venv/bin/python bench/load.py --base-url http://127.0.0.1:8080 --keys keys.json \\
        --database-url mysql://root@127.0.0.1:3306/mp_running --clients 32   # a running stack

What it does:

1. **Stack**: a fresh database (the MariaDB database named in `--database-url` is dropped and
   created; `sqlite` = a file in a temporary DATA_DIR), `manage.py migrate`, a key without rate
   limit, and gunicorn with `--workers` sync workers on a loopback port (`bench/common.py`),
   Redis as the cache (keys under a prefix of this run, deleted at the end). Everything is on
   127.0.0.1: other hosts are refused.
2. **Warm-up** (not timed): every client writes two memories and searches once, so each worker
   has loaded the embedding model and the indexes before the clock starts.
3. **Load**: `--clients` threads, each with its own keep-alive session and agent, loop over
   personal write, personal search, team write, personal search, personal write, team search
   until `--seconds` have passed or `--max-ops` per client are done. Every write has dedup on
   and a distinct content (corpus texts, English and Chinese, with a run-unique number); team
   writes of all clients go to one scope, so they contend for its dedup lock.
4. **Audit**: the ids of every acknowledged write (201) are compared with the rows in the
   database: a lost write is an acknowledged id that is not there. 5xx answers, other errors and
   client-side failures (timeouts: outcome unknown) are counted per endpoint; a write whose
   outcome is unknown (no answer, or a 5xx) is looked up by its run-unique content, to say
   whether it was stored all the same.

**External mode** (`--base-url`): no stack of its own; the load goes to a stack that is already
running (e.g. nginx in front of several gunicorn nodes, bench/multinode.py). `--keys` is a JSON
list of `{"team_id", "api_key", "secret"}` (the output of `create_api_key --json`, one per team):
client n uses key n mod len(keys), so the clients spread over several teams. `--database-url` is
then only read, for the audit (never dropped); `--redis-url` is not used.
`--agents-per-client K` makes each client rotate over K agents (K personal scopes), for runs
where the number of scopes matters more than the number of threads.

The clients re-send a request that got no answer (connection refused or reset, a proxy's
502/503/504) when that is safe — reads, searches, and writes under the Idempotency-Key the
client gives each — at most `--retries` times (MemoryClient's `retries`); the "re-sent" column
counts them. A 5xx counted is one the client still had after its re-sends.

Prints per endpoint n, errors, re-sent, p50/p95/p99/max (client-side wall time in ms, re-sends
included) and throughput; exits 1 when a write was lost or any 5xx was seen.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from common import BenchServer, code_version, log, machine_info, machine_load, summarise

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
CYCLE = (
    "write_personal",
    "search_personal",
    "write_team",
    "search_personal",
    "write_personal",
    "search_team",
)
ENDPOINTS = {
    "write_personal": "POST /memories/personal",
    "search_personal": "POST /memories/personal/search",
    "write_team": "POST /memories/team",
    "search_team": "POST /memories/team/search",
}


@dataclass
class Tally:
    """What one client saw, merged at the end."""

    ms: dict[str, list[float]] = field(default_factory=dict)
    status: dict[str, dict[str, int]] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)  # ids of writes answered 201
    deduped: set[int] = field(default_factory=set)  # ids answered 200 (dedup): must exist too
    resent: dict[str, int] = field(default_factory=dict)  # requests the client sent again
    unknown: int = 0  # writes without an answer (timeout, connection reset) or with a 5xx
    unknown_contents: list[str] = field(default_factory=list)  # their contents (run-unique)
    examples: list[str] = field(default_factory=list)

    def count(self, op: str, key: str) -> None:
        bucket = self.status.setdefault(op, {})
        bucket[key] = bucket.get(key, 0) + 1


def _check_loopback(url: str, what: str) -> None:
    host = urlparse(url).hostname or ""
    if host not in LOOPBACK:
        raise SystemExit(f"{what} must be on 127.0.0.1 (this benchmark talks to no other host)")


def _mysql(url: str, *, create: bool) -> None:
    import MySQLdb

    u = urlparse(url)
    name = u.path.lstrip("/")
    if not name.replace("_", "").isalnum():
        raise SystemExit(f"unexpected database name {name!r}")
    conn = MySQLdb.connect(
        host=u.hostname or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "root",
        passwd=u.password or "",
    )
    try:
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        if create:
            cur.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        conn.close()


def _stored_ids(target: Target) -> set[int]:
    """Ids of the load's teams' memories, read from the database directly."""
    teams = target.teams
    sql = "SELECT id FROM memories_memory WHERE id > %s AND team_id IN ({})".format(
        ", ".join(["%s"] * len(teams))
    )
    params = [target.baseline_id, *teams]
    if target.database_url and target.database_url.startswith("mysql"):
        import MySQLdb

        u = urlparse(target.database_url)
        conn = MySQLdb.connect(
            host=u.hostname or "127.0.0.1",
            port=u.port or 3306,
            user=u.username or "root",
            passwd=u.password or "",
            db=u.path.lstrip("/"),
        )
        try:
            cur = conn.cursor()
            cur.execute(sql, params)
            return {int(r[0]) for r in cur.fetchall()}
        finally:
            conn.close()
    import sqlite3

    assert target.data_dir is not None
    sconn = sqlite3.connect(target.data_dir / "db.sqlite3")
    try:
        rows = sconn.execute(sql.replace("%s", "?"), params).fetchall()
        return {int(r[0]) for r in rows}
    finally:
        sconn.close()


def _committed(target: Target, contents: list[str]) -> int:
    """How many of these (run-unique) contents are stored in the load's teams."""
    contents = [c for c in contents if c]
    if not contents:
        return 0
    teams = target.teams
    found = 0
    for start in range(0, len(contents), 200):
        chunk = contents[start : start + 200]
        sql = "SELECT COUNT(DISTINCT content) FROM memories_memory WHERE team_id IN ({}) AND content IN ({})".format(
            ", ".join(["%s"] * len(teams)), ", ".join(["%s"] * len(chunk))
        )
        params = [*teams, *chunk]
        if target.database_url and target.database_url.startswith("mysql"):
            import MySQLdb

            u = urlparse(target.database_url)
            conn = MySQLdb.connect(
                host=u.hostname or "127.0.0.1",
                port=u.port or 3306,
                user=u.username or "root",
                passwd=u.password or "",
                db=u.path.lstrip("/"),
                charset="utf8mb4",
            )
            try:
                cur = conn.cursor()
                cur.execute(sql, params)
                found += int(cur.fetchone()[0])
            finally:
                conn.close()
        else:
            import sqlite3

            assert target.data_dir is not None
            sconn = sqlite3.connect(target.data_dir / "db.sqlite3")
            try:
                found += int(sconn.execute(sql.replace("%s", "?"), params).fetchone()[0])
            finally:
                sconn.close()
    return found


def _delete_redis_prefix(redis_url: str, prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    return len(keys)


@dataclass
class Target:
    """Where the load goes and what the audit reads: a stack started here or a running one."""

    base_url: str
    keys: list[dict[str, str]]  # {"team_id", "api_key", "secret"}
    database_url: str | None  # None: the SQLite file in data_dir
    data_dir: Path | None = None
    # Rows at or below this id were there before the run (a running stack's data): not audited.
    baseline_id: int = 0

    @property
    def teams(self) -> list[str]:
        return sorted({k["team_id"] for k in self.keys})


class Client(threading.Thread):
    def __init__(
        self,
        n: int,
        target: Target,
        run_id: str,
        start: threading.Event,
        deadline: list[float],
        max_ops: int,
        timeout: float,
        agents: int = 1,
        retries: int = 2,
    ) -> None:
        super().__init__(name=f"client-{n}", daemon=True)
        from memoryplatform.client import MemoryClient

        self.n = n
        # One agent per client by default; K agents (K personal scopes) taken in turn.
        self.agents = [f"load-{n}"] if agents <= 1 else [f"load-{n}-{k}" for k in range(agents)]
        self.agent = self.agents[0]
        key = target.keys[n % len(target.keys)]
        self.api = MemoryClient(
            key["api_key"],
            key["secret"],
            base_url=target.base_url,
            timeout=timeout,
            retries=retries,
        )
        self.run_id = run_id
        self.start_event = start
        self.deadline = deadline
        self.max_ops = max_ops
        self.tally = Tally()
        self.warm_error: str | None = None
        lang = "zh" if n % 2 else "en"
        self.items = corpus.stream(lang, f"load-{n}")
        self.seq = itertools.count()
        self.questions: list[str] = []

    def _content(self) -> tuple[str, str]:
        item = next(self.items)
        # A number of its own: never a duplicate of another write (dedup compares numbers).
        return f"{item.text} (run {self.run_id} #{self.n}-{next(self.seq)})", item.question

    def _call(self, op: str) -> None:
        from memoryplatform.client import MemoryAPIError

        t = time.perf_counter()
        resends = self.api.resends
        content = ""
        try:
            if op == "write_personal" or op == "write_team":
                content, question = self._content()
                if op == "write_personal":
                    data = self.api.write_memory(self.agent, content, enable_dedup=True)
                else:
                    data = self.api.write_team_memory(content, agent_id=self.agent)
                self.questions.append(question)
                (self.tally.deduped if data.get("dedup_skipped") else self.tally.acked).add(
                    int(data["id"])
                )
                key = "200 dedup" if data.get("dedup_skipped") else "201"
            elif op == "search_personal":
                q = self.questions[-1] if self.questions else "what do I know"
                self.api.search(self.agent, q)
                key = "200"
            else:
                q = self.questions[-1] if self.questions else "team notes"
                self.api.search_team(q)
                key = "200"
        except MemoryAPIError as exc:
            key = f"{exc.status} {exc.code}"
            if exc.status >= 500 and op.startswith("write"):
                # The answer says the request failed, not whether the write committed before it
                # (a node killed after its commit, a proxy's 502): the outcome is unknown.
                self.tally.unknown += 1
                self.tally.unknown_contents.append(content)
            if len(self.tally.examples) < 10:
                self.tally.examples.append(f"{op}: {exc} (request {exc.request_id})")
        except Exception as exc:  # timeouts, resets: the write's outcome is unknown
            key = f"client {type(exc).__name__}"
            if op.startswith("write"):
                self.tally.unknown += 1
                self.tally.unknown_contents.append(content)
            if len(self.tally.examples) < 10:
                self.tally.examples.append(f"{op}: {type(exc).__name__}: {exc}")
        self.tally.ms.setdefault(op, []).append((time.perf_counter() - t) * 1000)
        self.tally.count(op, key)
        if self.api.resends > resends:
            self.tally.resent[op] = self.tally.resent.get(op, 0) + self.api.resends - resends

    def warm_up(self) -> None:
        try:
            for agent in self.agents:
                for _ in range(2):
                    content, question = self._content()
                    data = self.api.write_memory(agent, content)
                    self.tally.acked.add(int(data["id"]))
                    self.questions.append(question)
                self.api.search(agent, self.questions[-1])
        except Exception as exc:
            self.warm_error = f"{type(exc).__name__}: {exc}"

    def run(self) -> None:
        self.start_event.wait()
        for i in range(self.max_ops):
            if time.monotonic() >= self.deadline[0]:
                break
            # A new agent at each turn of the cycle: its write, then its searches.
            self.agent = self.agents[(i // len(CYCLE)) % len(self.agents)]
            self._call(CYCLE[(i + self.n) % len(CYCLE)])


def run(
    args: argparse.Namespace, on_load_start: Callable[[], None] | None = None
) -> dict[str, Any]:
    """One run; `on_load_start` is called when the timed load begins (after the warm-up)."""
    if getattr(args, "base_url", None):
        return run_external(args, on_load_start)
    sqlite = args.database_url == "sqlite"
    if not sqlite:
        _check_loopback(args.database_url, "--database-url")
    _check_loopback(args.redis_url, "--redis-url")
    run_id = uuid.uuid4().hex[:6]
    prefix = f"load-{run_id}"
    if not sqlite:
        _mysql(args.database_url, create=True)
    srv = BenchServer(
        database_url=None if sqlite else args.database_url,
        redis_url=args.redis_url,
        workers=args.workers,
        extra_env={"CACHE_KEY_PREFIX": prefix},
        keep=args.keep,
        team="loadbench",
        timeout_s=120,
    )
    report: dict[str, Any] = {
        "machine": machine_info(),
        "code": code_version(),
        "database": "sqlite" if sqlite else "mariadb",
        "redis": args.redis_url,
        "workers": args.workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "load_at_start": machine_load(),
    }
    try:
        srv.prepare()
        srv.start()
        _check_loopback(srv.base_url, "the server")
        target = Target(
            base_url=srv.base_url,
            keys=[{"team_id": srv.team, "api_key": srv.api_key, "secret": srv.secret}],
            database_url=srv.database_url,
            data_dir=srv.data_dir,
        )
        drive(args, target, run_id, report, log_tail=srv.log_tail, on_load_start=on_load_start)
    finally:
        srv.cleanup()
        if not sqlite and not args.keep:
            _mysql(args.database_url, create=False)
        try:
            report["redis_keys_deleted"] = _delete_redis_prefix(args.redis_url, prefix)
        except Exception as exc:
            log(f"could not delete the run's Redis keys ({prefix}:*): {exc}")
    return report


def run_external(
    args: argparse.Namespace, on_load_start: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The load against a running stack (`--base-url`, `--keys`); its database only read."""
    _check_loopback(args.base_url, "--base-url")
    if not args.keys:
        raise SystemExit("--base-url needs --keys (a JSON list of team_id/api_key/secret)")
    if args.database_url == "sqlite" or not args.database_url.startswith("mysql"):
        raise SystemExit("--base-url needs the stack's MariaDB --database-url (for the audit)")
    _check_loopback(args.database_url, "--database-url")
    keys = json.loads(Path(args.keys).read_text())
    if not isinstance(keys, list) or not keys:
        raise SystemExit("--keys: a non-empty JSON list of {team_id, api_key, secret}")
    target = Target(base_url=args.base_url.rstrip("/"), keys=keys, database_url=args.database_url)
    target.baseline_id = max(_stored_ids(target), default=0)
    report: dict[str, Any] = {
        "machine": machine_info(),
        "code": code_version(),
        "database": "mariadb",
        "base_url": target.base_url,
        "teams": len(target.teams),
        "workers": "external",
        "clients": args.clients,
        "agents_per_client": args.agents_per_client,
        "seconds": args.seconds,
        "load_at_start": machine_load(),
    }
    drive(args, target, uuid.uuid4().hex[:6], report, on_load_start=on_load_start)
    return report


def drive(
    args: argparse.Namespace,
    target: Target,
    run_id: str,
    report: dict[str, Any],
    *,
    log_tail: Callable[[int], str] | None = None,
    on_load_start: Callable[[], None] | None = None,
) -> None:
    """Warm-up, timed load and audit against `target`; the numbers go into `report`."""
    start = threading.Event()
    deadline = [float("inf")]
    clients = [
        Client(
            n,
            target,
            run_id,
            start,
            deadline,
            args.max_ops,
            args.timeout,
            agents=getattr(args, "agents_per_client", 1),
            retries=getattr(args, "retries", 2),
        )
        for n in range(args.clients)
    ]
    log(f"warming up {args.clients} clients; {machine_load()}")
    warmers = [threading.Thread(target=c.warm_up) for c in clients]
    for w in warmers:
        w.start()
    for w in warmers:
        w.join(timeout=600)
    failed = [c.warm_error for c in clients if c.warm_error]
    if failed:
        tail = log_tail(4000) if log_tail else ""
        raise RuntimeError(f"warm-up failed: {failed[:3]}\n{tail}")
    warm_acked = set().union(*(c.tally.acked for c in clients))
    log(f"load: {args.clients} clients for {args.seconds} s; {machine_load()}")
    for c in clients:
        c.start()
    if on_load_start is not None:
        on_load_start()
    t0 = time.monotonic()
    deadline[0] = t0 + args.seconds
    start.set()
    for c in clients:
        # Bounded: the deadline, plus one request's timeout for the last call in flight.
        c.join(timeout=args.seconds + args.timeout + 30)
    elapsed = time.monotonic() - t0
    stuck = [c.name for c in clients if c.is_alive()]
    report["load_at_end"] = machine_load()
    report["elapsed_s"] = round(elapsed, 1)
    report["stuck_clients"] = stuck

    ms: dict[str, list[float]] = {}
    status: dict[str, dict[str, int]] = {}
    acked: set[int] = set()
    deduped: set[int] = set()
    unknown = 0
    unknown_contents: list[str] = []
    examples: list[str] = []
    resent: dict[str, int] = {}
    for c in clients:
        for op, k in c.tally.resent.items():
            resent[op] = resent.get(op, 0) + k
        for op, values in c.tally.ms.items():
            ms.setdefault(op, []).extend(values)
        for op, counts in c.tally.status.items():
            for key, k in counts.items():
                status.setdefault(op, {})[key] = status.setdefault(op, {}).get(key, 0) + k
        acked |= c.tally.acked
        deduped |= c.tally.deduped
        unknown += c.tally.unknown
        unknown_contents.extend(c.tally.unknown_contents)
        examples.extend(c.tally.examples)
    stored = _stored_ids(target)
    total_ops = sum(len(v) for v in ms.values())
    report["endpoints"] = {
        ENDPOINTS[op]: {
            **summarise(ms.get(op, [])),
            "status": status.get(op, {}),
            "5xx": sum(k for key, k in status.get(op, {}).items() if key.startswith("5")),
            "errors": sum(k for key, k in status.get(op, {}).items() if not key.startswith("20")),
            "resent": resent.get(op, 0),
        }
        for op in ENDPOINTS
    }
    report["ops"] = total_ops
    report["ops_per_s"] = round(total_ops / elapsed, 1) if elapsed else None
    report["writes_acked"] = len(acked)
    report["writes_acked_in_load"] = len(acked - warm_acked)
    report["writes_deduped"] = len(deduped)
    report["writes_unknown"] = unknown
    # Which of them committed after all (each content is run-unique): found in the database.
    report["writes_unknown_committed"] = _committed(target, unknown_contents)
    report["rows_in_database"] = len(stored)
    report["lost_writes"] = len(acked - stored)
    report["dedup_ids_missing"] = len(deduped - stored)
    report["unacknowledged_rows"] = len(stored - acked)
    report["5xx"] = sum(e["5xx"] for e in report["endpoints"].values())
    report["error_examples"] = examples[:10]
    if (report["5xx"] or report["lost_writes"]) and log_tail is not None:
        report["server_log_tail"] = log_tail(6000)


def print_report(r: dict[str, Any]) -> None:
    print(f"\nmachine: {r['machine']}; code {r['code']}")
    print(
        f"{r['database']} + Redis, "
        + (
            f"gunicorn {r['workers']} sync workers"
            if r["workers"] != "external"
            else f"the stack at {r['base_url']} ({r['teams']} teams)"
        )
        + f", {r['clients']} clients, "
        f"{r['elapsed_s']} s; {r['load_at_start']} at start, {r['load_at_end']} at end\n"
    )
    print("| endpoint | n | errors | 5xx | re-sent | p50 ms | p95 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, e in r["endpoints"].items():
        print(
            f"| {name} | {e.get('n', 0)} | {e['errors']} | {e['5xx']} | {e.get('resent', 0)} | "
            f"{e.get('p50', '–')} | {e.get('p95', '–')} | {e.get('p99', '–')} | "
            f"{e.get('max', '–')} |"
        )
    print(
        f"\n{r['ops']} requests, {r['ops_per_s']}/s. Writes acknowledged: {r['writes_acked']} "
        f"({r['writes_acked_in_load']} during the load, the rest in the warm-up); rows in the "
        f"database: {r['rows_in_database']}; lost: {r['lost_writes']}; answered as duplicates: "
        f"{r['writes_deduped']}; outcome unknown (client error or 5xx): {r['writes_unknown']} "
        f"(of which stored all the same: {r.get('writes_unknown_committed', 0)}); rows "
        f"nobody was told about: {r['unacknowledged_rows']}; 5xx: {r['5xx']}."
    )
    if r.get("stuck_clients"):
        print(f"clients still waiting at the end: {r['stuck_clients']}")
    for line in r.get("error_examples", []):
        print(f"  error: {line}")
    if r.get("server_log_tail"):
        print("\nserver log (tail):\n" + r["server_log_tail"])


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=60.0, help="load phase length (max 900)")
    p.add_argument("--max-ops", type=int, default=20_000, help="per client, a bound besides time")
    p.add_argument("--workers", type=int, default=2, help="gunicorn sync workers")
    p.add_argument(
        "--database-url",
        default="mysql://root@127.0.0.1:3306/membench_load",
        help="a MariaDB database on 127.0.0.1 (dropped and re-created), or 'sqlite'",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="the client's re-sends of a request that got no answer (0: none; reported per "
        "endpoint as re-sent)",
    )
    p.add_argument("--keep", action="store_true", help="keep the data directory and database")
    p.add_argument("--json", type=Path, help="write the numbers here")
    p.add_argument(
        "--base-url",
        help="external mode: a running stack on 127.0.0.1 (no stack of its own; needs --keys)",
    )
    p.add_argument("--keys", type=Path, help="external mode: JSON list of team_id/api_key/secret")
    p.add_argument(
        "--agents-per-client", type=int, default=1, help="agents (personal scopes) per client"
    )
    args = p.parse_args()
    if not 1 <= args.clients <= 256 or not 0 < args.seconds <= 900 or args.max_ops < 1:
        p.error("--clients 1..256, --seconds up to 900, --max-ops >= 1")
    if not 1 <= args.agents_per_client <= 100:
        p.error("--agents-per-client 1..100")

    report = run(args)
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 1 if report.get("5xx") or report.get("lost_writes") else 0


if __name__ == "__main__":
    raise SystemExit(main())
