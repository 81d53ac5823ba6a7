"""Knowledge-graph latency: a 10k-entity team graph, depth-2 subgraphs through the HTTP API.

Usage (from the project root):

    .venv/bin/python bench/graph_bench.py [--entities 10000] [--degree 2] [--queries 200]
        [--server gunicorn|runserver] [--mysql] [--json out.json] [--keep]

What it does:

1. **Server database** (`common.BenchServer`): a fresh SQLite file (or, with `--mysql`, a fresh
   MariaDB database `graphbench_<n>` at 127.0.0.1:3306 as root, dropped afterwards), migrated,
   one API key.
2. **Seed** in this process (Django set up against that database): N entities of one team
   (mixed types, a third of them owned by one of 5 agents) and a scale-free set of relations
   (Barabási–Albert: each new entity links to `--degree` earlier ones chosen in proportion to
   their degree), so there are hubs, as in real graphs where "用户" touches everything. Every
   entity gets a unit vector of the configured model's size (random, not embedded: vectors do
   not change traversal, and embedding 10k names would measure the model, not the graph).
3. **Serve** with gunicorn (one sync worker) and measure with `memoryplatform.client`, one
   client, sequential, client-side wall time per call:
   * `GET /graph?entity_ids=<random seed>&max_depth=2` — `--queries` times, seeds drawn at
     random (fixed RNG), default caps (500 nodes, 2000 edges); node and edge counts reported;
   * the same at depth 1 and 3, and with 3 seeds at depth 2;
   * `GET /graph` (the whole team graph, capped), `GET /graph/entities/<id>` (detail) and
     `GET /graph/entities?q=...` (semantic + name search over all 10k vectors), fewer times;
   * the service alone in-process (`graph.traversal.graph_subgraph` + rendering), to separate
     traversal from HTTP/auth overhead.

Target (the graph issue): a depth-2 subgraph of a 10k-entity team graph renders in < 100 ms.
Numbers and the command that produced them: docs/graph.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BenchServer, log, machine_info, machine_load, mysql, summarise

ENTITY_TYPES = ("person", "skill", "project", "concept", "organization", "location", "fact")
RELATION_TYPES = ("related_to", "uses", "knows", "works_on", "part_of", "located_in")


def seed(n: int, degree: int, team_id: str, rng: random.Random) -> tuple[list[str], float]:
    """Creates the graph with bulk inserts; returns the entity ids and the seconds it took."""
    import numpy as np

    from graph.models import Entity, Relation
    from graph.resolution import normalise_name
    from memories.retrieval.embeddings import get_embedder, to_bytes
    from tenants.models import Team

    t0 = time.perf_counter()
    team = Team.objects.get(pk=team_id)
    embedder = get_embedder()
    dim = embedder.dim or 384
    vrng = np.random.default_rng(7)
    entities = []
    for i in range(n):
        kind = ENTITY_TYPES[i % len(ENTITY_TYPES)]
        name = f"{kind} {i}" if i % 2 else f"实体{i}号"
        vec = vrng.standard_normal(dim).astype(np.float32)
        vec /= np.linalg.norm(vec)
        entities.append(
            Entity(
                team=team,
                agent_id=f"agent{i % 5}" if i % 3 == 0 else "",
                name=name,
                entity_type=kind,
                description=f"bench entity number {i}",
                normalized_name=normalise_name(name, kind),
                embedding=to_bytes(vec),
                embedding_model=embedder.model_name,
            )
        )
    Entity.objects.bulk_create(entities, batch_size=1000)
    # Barabási–Albert: a list with each node repeated once per edge end = sampling by degree.
    ends: list[int] = list(range(min(degree + 1, n)))
    pairs: set[tuple[int, int]] = set()
    for a in range(1, min(degree + 1, n)):
        pairs.add((a, a - 1))
    for new in range(degree + 1, n):
        targets: set[int] = set()
        while len(targets) < degree:
            targets.add(rng.choice(ends))
        for t in targets:
            pairs.add((new, t))
            ends.extend((new, t))
    relations = [
        Relation(
            team=team,
            source=entities[a],
            target=entities[b],
            relation_type=RELATION_TYPES[(a + b) % len(RELATION_TYPES)],
        )
        for a, b in sorted(pairs)
    ]
    Relation.objects.bulk_create(relations, batch_size=2000)
    return [str(e.pk) for e in entities], time.perf_counter() - t0


def timed(fn: Any, times: int) -> tuple[list[float], list[Any]]:
    ms: list[float] = []
    out: list[Any] = []
    for _ in range(times):
        t0 = time.perf_counter()
        out.append(fn())
        ms.append((time.perf_counter() - t0) * 1000)
    return ms, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--degree", type=int, default=2, help="relations per new entity")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--server", default="gunicorn", choices=["gunicorn", "runserver"])
    parser.add_argument("--mysql", action="store_true")
    parser.add_argument("--json", default="")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    rng = random.Random(42)
    database_url = None
    db_name = f"graphbench_{args.entities}"
    if args.mysql:
        mysql(
            f"DROP DATABASE IF EXISTS {db_name}; "
            f"CREATE DATABASE {db_name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        )
        database_url = f"mysql://root@127.0.0.1:3306/{db_name}"
    server = BenchServer(server=args.server, database_url=database_url, keep=args.keep)
    results: dict[str, Any] = {
        "machine": machine_info(),
        "load_before": machine_load(),
        "entities": args.entities,
        "degree": args.degree,
        "database": "mariadb" if args.mysql else "sqlite",
        "server": args.server,
    }
    try:
        server.prepare()
        os.environ.update(server.env())
        import django

        django.setup()
        ids, seconds = seed(args.entities, args.degree, server.team, rng)
        from graph.models import Relation

        results["relations"] = Relation.objects.count()
        log(f"seeded {len(ids)} entities, {results['relations']} relations in {seconds:.1f}s")
        server.start()
        from memoryplatform.client import MemoryClient

        client = MemoryClient(server.api_key, server.secret, base_url=server.base_url)
        for _ in range(10):  # warm-up: connections, the worker's imports
            client.get("/graph", {"entity_ids": [rng.choice(ids)], "max_depth": 2})

        def subgraph(depth: int, seeds: int = 1) -> Any:
            return client.get("/graph", {"entity_ids": rng.sample(ids, seeds), "max_depth": depth})

        rows: dict[str, Any] = {}
        for label, fn, times in (
            ("depth 2, 1 seed", lambda: subgraph(2), args.queries),
            ("depth 1, 1 seed", lambda: subgraph(1), args.queries // 2),
            ("depth 3, 1 seed", lambda: subgraph(3), args.queries // 2),
            ("depth 2, 3 seeds", lambda: subgraph(2, 3), args.queries // 2),
            ("whole graph (capped)", lambda: client.get("/graph"), 20),
            ("entity detail", lambda: client.get(f"/graph/entities/{rng.choice(ids)}"), 100),
            (
                "list q= (10k vectors)",
                lambda: client.get("/graph/entities", {"q": f"concept {rng.randrange(10**4)}"}),
                50,
            ),
        ):
            ms, outs = timed(fn, times)
            row: dict[str, Any] = summarise(ms)
            graphs = [o for o in outs if isinstance(o, dict) and "entities" in o]
            if graphs:
                nodes = sorted(len(g["entities"]) for g in graphs)
                row["nodes_median"] = nodes[len(nodes) // 2]
                row["nodes_max"] = nodes[-1]
                row["edges_median"] = sorted(len(g["relations"]) for g in graphs)[len(graphs) // 2]
                row["truncated"] = sum(bool(g["truncated"]) for g in graphs)
            rows[label] = row
            log(f"{label}: {row}")
        results["http"] = rows

        # The service alone, in this process: traversal + rendering, no HTTP, no auth.
        from graph.presenters import subgraph_body
        from graph.selectors import entities_get
        from graph.traversal import graph_subgraph
        from tenants.models import Team

        team = Team.objects.get(pk=server.team)

        def service() -> Any:
            seeds = entities_get(team=team, entity_ids=[rng.choice(ids)])
            return subgraph_body(graph_subgraph(team=team, seeds=seeds, max_depth=2))

        ms, _ = timed(service, args.queries)
        results["service_depth2"] = summarise(ms)
        log(f"service depth 2: {results['service_depth2']}")
        results["load_after"] = machine_load()
    finally:
        server.cleanup()
        if args.mysql:
            mysql(f"DROP DATABASE IF EXISTS {db_name}")
    print(json.dumps(results, indent=2, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
