"""The OpenAPI schema tells the truth: schemathesis drives a live gunicorn from `/api/schema/`.

Every operation of the served schema gets generated requests (valid ones, and invalid ones that
must be refused), each signed with real HMAC over the exact bytes sent, in turn with signature v1
and v2 by a team-wide key and by an agent-scoped key (so the 403s an agent key meets are checked
against the schema too). The run fails on any 5xx,
any status code, content type or body the schema does not declare for that operation, any answer
that is not the envelope, and any signed request refused as unauthenticated (which would make
the whole run vacuous). Path parameters are drawn partly from objects that exist (an agent, a
memory, an entity...), so the success paths are exercised and not only the 404s.

Bounded for CI: a fixed number of examples per operation, deterministic generation. It runs on
whatever database the suite runs on (a fresh SQLite file, or a fresh MariaDB database).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from core.errors import ERROR_STATUS
from core.validators import AGENT_ID_RE, TEAM_ID_RE
from graph.selectors import parse_uuid
from memoryplatform.client import MemoryClient

from ..livestack import ROOT, live_stack
from .hmac_auth import HmacAuth, TakingTurns

MAX_EXAMPLES = 12
AGENTS = ("sx_alice", "sx_bob", "sx_carol")
KEY_AGENT = "sx_carol"  # the agent of the run's agent-scoped key
TEAM = "xproc"  # the team live_stack issues its key for
AGENT_KEY_ARGS = ("--team", TEAM, "--agent", KEY_AGENT)


# POST /import takes a gzip bundle: generated bodies are gzip of random bytes, of JSON lines that
# are not a bundle, and of an empty bundle (a header alone), besides random non-gzip bytes.
schemathesis.openapi.media_type(
    "application/gzip",
    st.one_of(
        st.binary(max_size=64),
        st.binary(max_size=256).map(lambda b: gzip.compress(b, mtime=0)),
        st.lists(st.dictionaries(st.text(max_size=8), st.integers(), max_size=3), max_size=3).map(
            lambda rows: gzip.compress("\n".join(json.dumps(r) for r in rows).encode(), mtime=0)
        ),
        st.just(
            gzip.compress(
                json.dumps(
                    {"format": "memoryplatform-bundle", "version": 1, "counts": {}}
                ).encode(),
                mtime=0,
            )
        ),
    ),
)


@schemathesis.check
def envelope(ctx: Any, response: Any, case: Any) -> None:
    """Every answer is the JSON envelope, and an error's code belongs to its HTTP status; but
    a Markdown export's success is the document itself (content_type_conformance checks that
    its operation declares it)."""
    content_type = (response.headers.get("content-type") or [""])[0]
    if case.path == "/export/{job_id}" and case.method == "GET" and response.status_code == 200:
        # An export's bundle, downloaded as it is.
        assert content_type == "application/gzip" and response.content[:2] == b"\x1f\x8b"
        return
    if response.status_code < 400 and content_type.startswith("text/markdown"):
        assert case.path.endswith(".md"), f"a document from {case.path}"
        assert response.content.decode("utf-8").startswith("# "), "not a Markdown document"
        return
    assert content_type.startswith("application/json"), f"not JSON: {content_type!r}"
    payload = json.loads(response.content)
    assert isinstance(payload, dict), "the body is not an object"
    if response.status_code < 400:
        assert set(payload) == {"ok", "data"} and payload["ok"] is True, "not a success envelope"
    else:
        assert payload.get("ok") is False, "an error without ok: false"
        assert isinstance(payload.get("error"), str) and payload["error"], "no error message"
        code = payload.get("code")
        assert ERROR_STATUS.get(code) == response.status_code, (
            f"code {code!r} is not an HTTP {response.status_code} code"
        )


@schemathesis.check
def signed_requests_are_accepted(ctx: Any, response: Any, case: Any) -> None:
    """Every request of this run is correctly signed: a 401 means the signing or the schema's
    description of it is wrong, and would hide every other check behind an early refusal."""
    assert response.status_code not in (401, 429), response.content[:300]


CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.negative_data_rejection,
    envelope,
    signed_requests_are_accepted,
]


def _seed(client: MemoryClient, team_id: str) -> dict[str, list[Any]]:
    """Objects for path parameters to point at, so success answers are checked too.

    Run before each operation's test, as the one before may have deleted them (the same content
    again is a dedup hit or a merge, so the pool does not grow)."""
    pool: dict[str, list[Any]] = {"team_id": [team_id], "agent_id": list(AGENTS)}
    for agent in AGENTS:
        client.upsert_agent(agent, name=agent)
    memory_ids = []
    for i, agent in enumerate(AGENTS):
        memory_ids.append(client.write_memory(agent, f"用户偏好简洁的回复 {i}")["id"])
        client.write_working(agent, f"今天讨论了部署方案 {i}")
    memory_ids.append(client.write_team_memory("团队约定：每周一上午例会")["id"])
    pool["memory_id"] = memory_ids
    a = client.post("/graph/entities", {"name": "Alice", "entity_type": "person"})
    b = client.post("/graph/entities", {"name": "Acme", "entity_type": "organization"})
    relation = client.post(
        "/graph/relations",
        {"source_entity_id": a["id"], "target_entity_id": b["id"], "relation_type": "works_at"},
    )
    pool["entity_id"] = [a["id"], b["id"]]
    pool["relation_id"] = [relation["id"]]
    return pool


def _seed_lifecycle(client: MemoryClient) -> list[str]:
    """A scenario and a persona: `key` is an agent id for GET, a scenario or persona id for
    DELETE. Made once (they cost a lifecycle run); once deleted, their ids answer 404."""
    scenarios = client.aggregate_scenarios(AGENTS[0])["scenarios"]
    persona = client.generate_persona(AGENTS[0])["persona"]
    return [*AGENTS, *(s["id"] for s in scenarios), persona["id"]]


def _generated_schema() -> dict[str, Any]:
    """The schema `/api/schema/` serves, generated in-process at collection time so that every
    operation becomes its own test (`test_the_served_schema_is_the_one_tested` checks that the
    live server serves exactly this)."""
    from drf_spectacular.generators import SchemaGenerator

    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))


CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            # The HMAC headers are set by the signing auth, not generated.
            "with-security-parameters": False,
            "database": "none",
        },
        "phases": {"stateful": {"enabled": False}},
    }
)
RAW_SCHEMA = _generated_schema()
schema = schemathesis.openapi.from_dict(RAW_SCHEMA, config=CONFIG)
# Ids of objects that exist on the live server, by path parameter name (filled by `live`).
POOL: dict[str, list[Any]] = {}


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any]) -> Any:
    """Often a path parameter names an object that exists (success answers get checked too)."""
    if not path_parameters:
        return st.just(path_parameters)
    operation = context.operation
    # DELETE /teams/<the run's own team> would delete the key the run signs with and turn every
    # later answer into a 401: that operation only ever sees other ids (403
    # FORBIDDEN_CROSS_TEAM); its success path is covered by tests/test_teams_agents.py.
    if operation.method.upper() == "DELETE" and operation.path == "/teams/{team_id}":
        return st.just(path_parameters)
    # Likewise deleting the agent of the agent-scoped key would delete that key.
    spared = (
        {KEY_AGENT}
        if operation.method.upper() == "DELETE" and "{agent_id}" in operation.path
        else set()
    )
    return st.fixed_dictionaries(
        {
            name: _maybe_existing(name, value, spared=spared)
            for name, value in path_parameters.items()
        }
    )


# Body fields that name objects, and the pool they are drawn from.
BODY_REFERENCES = {
    "team_id": "team_id",
    "agent_id": "agent_id",
    "source_entity_id": "entity_id",
    "target_entity_id": "entity_id",
}
VALID = {
    "team_id": lambda v: isinstance(v, str) and re.fullmatch(TEAM_ID_RE, v) is not None,
    "agent_id": lambda v: isinstance(v, str) and re.fullmatch(AGENT_ID_RE, v) is not None,
    "entity_id": lambda v: isinstance(v, str) and parse_uuid(v) is not None,
    "relation_id": lambda v: isinstance(v, str) and parse_uuid(v) is not None,
    "memory_id": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "key": lambda v: isinstance(v, str),
}


def _maybe_existing(pool_name: str, value: Any, spared: set[Any] | None = None) -> Any:
    """`value`, or sometimes an object of the pool: only when `value` itself is valid, so that
    a negative case (a value meant to be refused) stays as generated and
    `negative_data_rejection` keeps its meaning."""
    choices = [c for c in POOL.get(pool_name, []) if c not in (spared or set())]
    if not choices or not VALID[pool_name](value):
        return st.just(value)
    return st.sampled_from([value, *choices])


@schema.hook
def flatmap_body(context: Any, body: Any) -> Any:
    """Often a body's reference (an agent, an entity, the team) names an object that exists."""
    if not isinstance(body, dict) or not body:
        return st.just(body)
    return st.fixed_dictionaries(
        {
            name: _maybe_existing(BODY_REFERENCES[name], value)
            if name in BODY_REFERENCES
            else st.just(value)
            for name, value in body.items()
        }
    )


@dataclass
class Live:
    url: str
    team_key: HmacAuth
    agent_key: HmacAuth
    client: MemoryClient
    lifecycle_keys: list[str]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp: Path = tmp_path_factory.mktemp("schemathesis")
    with live_stack(tmp, servers=1) as stack:
        client = MemoryClient(stack.api_key, stack.secret, stack.urls[0])
        _seed(client, TEAM)
        out = subprocess.run(
            [sys.executable, "manage.py", "create_api_key", "--json", *AGENT_KEY_ARGS],
            cwd=ROOT,
            env=stack.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        agent_creds = json.loads(out.strip().splitlines()[-1])
        yield Live(
            url=stack.urls[0],
            team_key=HmacAuth(stack.api_key, stack.secret, versions=(1, 2)),
            agent_key=HmacAuth(agent_creds["api_key"], agent_creds["secret"], versions=(2, 1)),
            client=client,
            lifecycle_keys=_seed_lifecycle(client),
        )


@pytest.fixture
def pool(live: Live) -> Iterator[dict[str, list[Any]]]:
    POOL.update(_seed(live.client, TEAM), key=live.lifecycle_keys)
    yield POOL
    POOL.clear()


@pytest.fixture(scope="module")
def signing(live: Live) -> TakingTurns:
    # Team key v1, team key v2, agent key v2, agent key v1, ... (3 of 4 by the team key would
    # leave the agent key too few requests; 1 of 2 is enough for its 403s).
    return TakingTurns(live.team_key, live.agent_key)


def test_the_served_schema_is_the_one_tested(live: Live) -> None:
    served = requests.get(f"{live.url}/api/schema/?format=json", timeout=30)
    assert served.status_code == 200
    assert served.json() == RAW_SCHEMA


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_what_the_schema_declares(
    case: Any, live: Live, signing: TakingTurns, pool: Any
) -> None:
    case.call_and_validate(
        base_url=live.url,
        session=requests.Session(),
        auth=signing,
        checks=CHECKS,
        timeout=60,
    )


# --- the HTTP limits in front of the schema (gunicorn.conf.py) ---------------------------------


def test_a_graph_request_with_the_most_seeds_fits_the_request_line(live: Live) -> None:
    # 100 repeated seed ids are ~4.8 KB of request line: over gunicorn's default 4094.
    seeds = "&".join(f"entity_ids={uuid.uuid4()}" for _ in range(100))
    r = requests.get(f"{live.url}/graph?{seeds}", auth=live.team_key, timeout=30)
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")  # seeds that do not exist


def test_a_request_line_over_the_limit_is_refused_by_gunicorn(live: Live) -> None:
    r = requests.get(f"{live.url}/health?q={'a' * 8200}", timeout=30)
    assert r.status_code == 414


@pytest.mark.parametrize(
    "headers",
    [
        {f"X-Pad-{i}": "x" for i in range(101)},  # more header fields than allowed
        {"X-Pad": "x" * 8200},  # one field longer than allowed
    ],
    ids=["fields", "field-size"],
)
def test_headers_over_the_limits_are_refused_by_gunicorn(live: Live, headers: Any) -> None:
    r = requests.get(f"{live.url}/health", headers=headers, timeout=30)
    assert r.status_code == 431
