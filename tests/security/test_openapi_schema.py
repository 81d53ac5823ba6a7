"""The OpenAPI schema describes what the server answers, and who may read it.

The live conformance run (test_schemathesis.py) checks answers against the schema; these tests
pin the parts of the schema that run cannot see by itself (which statuses and shapes are
declared, the bounds of query parameters and that they are enforced) and the edges around it:
API_DOCS_PUBLIC, the signature v2 path as the client sent it, too many query parameters.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from drf_spectacular.generators import SchemaGenerator

from ..factories import UserFactory
from ..helpers import error_code, ok_data

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))


def _operations(schema: dict[str, Any]):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def _data_schema(schema: dict[str, Any], path: str, method: str, status: str) -> dict[str, Any]:
    response = schema["paths"][path][method]["responses"][status]
    data = response["content"]["application/json"]["schema"]["properties"]["data"]
    while "$ref" in data:
        data = schema["components"]["schemas"][data["$ref"].rsplit("/", 1)[1]]
    return data


def test_the_schema_generates_and_validates_without_a_warning(tmp_path):
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml")
    )


@pytest.mark.parametrize(
    "path,method,statuses",
    [
        ("/teams", "post", {"200", "201"}),
        ("/agents", "post", {"200", "201"}),
        ("/memories/personal", "post", {"200", "201"}),
        ("/memories/team", "post", {"200", "201"}),
        ("/memories/working", "post", {"201"}),
        ("/graph/entities", "post", {"200", "201"}),
        ("/graph/relations", "post", {"200", "201"}),
        ("/stats", "get", {"200"}),
    ],
)
def test_created_and_updated_answers_are_declared_as_sent(schema, path, method, statuses):
    declared = {s for s in schema["paths"][path][method]["responses"] if s.startswith("2")}
    assert declared == statuses


def test_every_delete_declares_the_200_it_answers(schema):
    deletes = [(p, op) for p, m, op in _operations(schema) if m == "delete"]
    assert len(deletes) >= 10
    for path, operation in deletes:
        assert {s for s in operation["responses"] if s.startswith("2")} == {"200"}, path


def test_a_delete_that_answers_null_says_so(schema):
    data = _data_schema(schema, "/memories/personal/{memory_id}", "delete", "200")
    assert data["enum"] == [None]


def test_lookups_declare_404_and_signed_operations_their_auth_errors(schema):
    for path, method, operation in _operations(schema):
        responses = operation["responses"]
        assert "500" in responses
        if "{" in path:
            assert "404" in responses, (method, path)
        if operation.get("security"):
            assert {"401", "429", "503"} <= set(responses), (method, path)
        else:
            assert "401" not in responses, (method, path)
        if "requestBody" in operation:
            assert {"400", "413"} <= set(responses), (method, path)
    assert "401" not in schema["paths"]["/health"]["get"]["responses"]


# The Markdown exports answer the document itself (their errors are enveloped like any other).
DOCUMENTS = {
    ("/lifecycle/persona/{agent_id}.md", "get"),
    ("/lifecycle/scenarios/{agent_id}.md", "get"),
}


def test_every_answer_is_enveloped_and_every_error_names_its_codes(schema):
    components = schema["components"]["schemas"]
    for path, method, operation in _operations(schema):
        for status, response in operation["responses"].items():
            if (path, method) in DOCUMENTS and status == "200":
                assert response["content"] == {"text/markdown": {"schema": {"type": "string"}}}
                continue
            if "application/json" not in response["content"]:
                # The other answer that is not JSON: an export's bundle, downloaded as it is.
                assert (path, method, status) == ("/export/{job_id}", "get", "200")
                assert set(response["content"]) == {"application/gzip"}
                continue
            body = response["content"]["application/json"]["schema"]
            if status.startswith("2"):
                assert body["required"] == ["ok", "data"], (method, path, status)
                assert body["properties"]["ok"] == {"type": "boolean", "enum": [True]}
            else:
                assert body == {"$ref": f"#/components/schemas/Error{status}"}
    assert components["Error401"]["allOf"][1]["properties"]["code"]["enum"] == [
        "INVALID_API_KEY",
        "INVALID_SIGNATURE",
        "INVALID_TIMESTAMP",
        "MISSING_AUTH",
        "REPLAYED_REQUEST",
        "TIMESTAMP_EXPIRED",
    ]


@pytest.mark.parametrize(
    "path,method,fields",
    [
        (
            "/lifecycle/compress",
            "post",
            {"compressed", "remaining", "total_before", "target_count", "summary", "memory_ids"},
        ),
        (
            "/lifecycle/extract-facts",
            "post",
            {"facts", "count", "duplicates", "superseded", "analyzed"},
        ),
        ("/lifecycle/aggregate-scenes", "post", {"scenarios", "count"}),
        ("/lifecycle/generate-persona", "post", {"persona"}),
        (
            "/lifecycle/cleanup",
            "post",
            {"cleaned", "remaining", "dry_run", "would_clean", "candidates"},
        ),
        ("/lifecycle/auto-run", "post", {"results"}),
        ("/lifecycle/auto-config", "get", {"team_id", "enabled", "configured"}),
        ("/lifecycle/auto-config", "post", {"team_id", "enabled", "configured"}),
        ("/lifecycle/persona/{key}", "get", {"id", "agent_id", "preferences", "summary"}),
        ("/lifecycle/persona/{key}", "delete", {"deleted"}),
        ("/lifecycle/sources/{memory_id}", "get", {"memory_id", "source_items"}),
        ("/lifecycle/extract-graph", "post", {"entities", "relations", "entity_count"}),
    ],
)
def test_lifecycle_answers_have_their_real_shape(schema, path, method, fields):
    data = _data_schema(schema, path, method, "200")
    assert fields <= set(data["properties"]), set(data["properties"])
    assert "result" not in data["properties"]


BOUNDS = [
    ("/graph/entities", "get", "page", 1, 10**6),
    ("/graph/entities", "get", "page_size", 1, 100),
    ("/graph/relations", "get", "page", 1, 10**6),
    ("/graph/relations", "get", "page_size", 1, 100),
    ("/graph", "get", "max_depth", 1, 3),
    ("/graph", "get", "max_nodes", 1, 5000),
    ("/graph", "get", "max_edges", 1, 10000),
    ("/memories/team/recent", "get", "limit", 1, 100),
    ("/memories/personal/recent/{agent_id}", "get", "limit", 1, 100),
    ("/memories/working/{agent_id}", "get", "limit", 1, 1000),
]


@pytest.mark.parametrize("path,method,name,minimum,maximum", BOUNDS)
def test_query_bounds_are_in_the_schema_and_enforced(
    schema, api, path, method, name, minimum, maximum
):
    parameter = next(p for p in schema["paths"][path][method]["parameters"] if p["name"] == name)
    assert (parameter["schema"]["minimum"], parameter["schema"]["maximum"]) == (minimum, maximum)
    url = path.replace("{agent_id}", "researcher")
    assert api.get(f"{url}?{name}={maximum}").status_code == 200
    assert api.get(f"{url}?{name}={minimum}").status_code == 200
    for bad in (minimum - 1, maximum + 1, "1.5", "x"):
        r = api.get(f"{url}?{name}={bad}")
        assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR"), bad
        assert name in r.json()["details"]


def test_more_query_parameters_than_django_parses_is_a_400_not_a_500(api):
    query = "&".join(f"p{i}=1" for i in range(1001))
    r = api.get(f"/graph/entities?{query}")
    assert (r.status_code, error_code(r)) == (400, "VALIDATION_ERROR")
    assert "query parameters" in r.json()["error"]


# --- API_DOCS_PUBLIC ------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/schema/", "/api/docs/"])
def test_the_api_docs_are_public_by_default(url):
    assert Client().get(url).status_code == 200


@override_settings(API_DOCS_PUBLIC=False)
@pytest.mark.parametrize("url", ["/api/schema/", "/api/docs/"])
def test_private_api_docs_are_a_404_for_anyone_but_staff(url, api):
    r = Client().get(url)
    assert (r.status_code, error_code(r)) == (404, "NOT_FOUND")
    assert b"openapi" not in r.content.lower() and b"swagger" not in r.content.lower()
    # A valid API key is no admin login either.
    assert api.get(url).status_code == 404
    member = Client()
    member.force_login(UserFactory(username="not_staff", is_staff=False))
    assert member.get(url).status_code == 404
    staff = Client()
    staff.force_login(UserFactory(username="staff"))
    assert staff.get(url).status_code == 200


def test_production_settings_keep_the_api_docs_private():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.production",
        "SECRET_KEY": "k" * 30 + "0123456789abcdefghijklmnopqrstuvwxyz",
        "ALLOW_PER_PROCESS_CACHE": "1",
    }
    env.pop("API_DOCS_PUBLIC", None)
    out = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.API_DOCS_PUBLIC)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False"


# --- signature v2: the path as the client sent it ---------------------------------------------


def _v2_call(api, method: str, sent_path: str, signed_path: str, **environ: str):
    ts = str(int(time.time()))
    nonce = os.urandom(12).hex()
    message = f"v2\n{ts}\n{nonce}\n{method}\n{signed_path}\n".encode()
    signature = hmac.new(api.secret.encode(), message, hashlib.sha256).hexdigest()
    headers = {
        "X-API-Key": api.key_id,
        "X-Timestamp": ts,
        "X-Signature": signature,
        "X-Signature-Version": "2",
        "X-Nonce": nonce,
    }
    return api.client.generic(method, sent_path, headers=headers, **environ)


def test_v2_accepts_the_target_signed_as_sent_percent_encoding_included(api):
    # An agent id may hold "@" and ":"; clients percent-encode them (the SDK does), Django's
    # re-encoded path does not. gunicorn hands the raw target over as RAW_URI.
    raw = "/memories/working/ops%40acme%3Aeu?limit=5"
    r = _v2_call(api, "GET", raw, raw, RAW_URI=raw)
    assert r.status_code == 200, r.content
    r = _v2_call(api, "GET", raw, raw, REQUEST_URI=f"http://testserver{raw}")
    assert r.status_code == 200, r.content


def test_v2_accepts_a_fully_percent_encoded_path_without_the_raw_target(api):
    # runserver and the test client pass no raw target: the SDK's quote(id, safe="") form still
    # verifies.
    sdk_path = "/memories/working/ops%40acme%3Aeu"
    r = _v2_call(api, "GET", sdk_path, sdk_path)
    assert r.status_code == 200, r.content


def test_v2_still_accepts_djangos_form_of_the_path(api):
    raw = "/memories/working/ops%40acme"
    r = _v2_call(api, "GET", raw, "/memories/working/ops@acme", RAW_URI=raw)
    assert r.status_code == 200, r.content


def test_v2_signed_for_one_target_is_refused_on_another(api):
    signed = "/memories/working/ops%40acme"
    sent = "/memories/working/ops%40other"
    r = _v2_call(api, "GET", sent, signed, RAW_URI=sent)
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
    r = _v2_call(api, "DELETE", sent, signed, RAW_URI=sent)
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
    assert ok_data(api.get("/stats"))["agents"] == 0
