"""Every API answer is an envelope, including 404, 405, 413, 400 and 500."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client, override_settings

from .helpers import error_code, ok_data

pytestmark = pytest.mark.django_db


def test_health_needs_no_auth_and_is_enveloped():
    r = Client().get("/health")
    assert r.status_code == 200
    assert r.json() == {"ok": True, "data": {"status": "ok"}}
    assert r["Content-Type"].startswith("application/json")


def test_every_answer_carries_a_request_id(api):
    r = api.get("/stats")
    assert len(r["X-Request-ID"]) >= 8
    assert Client().get("/nope")["X-Request-ID"]


def test_a_proxy_request_id_is_kept():
    r = Client().get("/health", headers={"X-Request-ID": "abc12345-proxy"})
    assert r["X-Request-ID"] == "abc12345-proxy"


@pytest.mark.parametrize("method", ["get", "post", "put", "delete", "patch"])
def test_unknown_urls_are_404_not_found_in_the_envelope(method):
    r = getattr(Client(), method)("/no/such/endpoint")
    assert r.status_code == 404
    assert r.json()["code"] == "NOT_FOUND"
    assert b"<html" not in r.content.lower()


def test_a_trailing_slash_variant_is_not_an_html_page():
    r = Client().get("/stats/")
    assert r.status_code == 404
    assert error_code(r) == "NOT_FOUND"


@pytest.mark.parametrize(
    "method,path",
    [("put", "/health"), ("delete", "/stats"), ("get", "/teams"), ("patch", "/agents")],
)
def test_wrong_methods_are_405_in_the_envelope(api, method, path):
    r = api.call(method, path, {} if method in ("put", "patch") else None)
    assert r.status_code == 405
    assert error_code(r) == "METHOD_NOT_ALLOWED"


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe", b"123", b"null"])
def test_malformed_or_non_object_json_is_400_invalid_json(api, raw):
    r = api.call("POST", "/teams", raw=raw)
    assert r.status_code == 400
    assert error_code(r) == "INVALID_JSON"


def test_an_empty_post_body_is_an_empty_object(api):
    r = api.call("POST", "/teams", raw=b"")
    assert r.status_code == 400
    assert error_code(r) == "VALIDATION_ERROR"
    assert set(r.json()["details"]) == {"team_id", "name"}


def test_a_body_without_json_content_type_is_still_parsed(api):
    body = json.dumps({"team_id": "team_a", "name": "A"}).encode()
    import time

    from .helpers import sign

    ts = str(int(time.time()))
    r = Client().generic(
        "POST",
        "/teams",
        data=body,
        content_type="application/x-www-form-urlencoded",
        headers={
            "X-API-Key": api.key_id,
            "X-Timestamp": ts,
            "X-Signature": sign(api.secret, ts, body),
        },
    )
    assert r.status_code == 200, r.content


def test_an_accept_header_asking_for_html_still_gets_json(api):
    r = api.get("/stats", headers={"Accept": "text/plain"})
    assert r.status_code == 200
    assert r.json()["ok"] is True


@override_settings(MAX_REQUEST_BYTES=1000, DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_oversized_bodies_are_413(api):
    r = api.post("/teams", {"team_id": "team_a", "name": "x" * 5000})
    assert r.status_code == 413
    assert error_code(r) == "PAYLOAD_TOO_LARGE"


def test_the_default_body_limit_is_one_mebibyte(api):
    r = api.post("/teams", {"team_id": "team_a", "name": "A", "description": "x" * (1024 * 1024)})
    assert (r.status_code, error_code(r)) == (413, "PAYLOAD_TOO_LARGE")


def test_unexpected_exceptions_are_500_with_a_logged_request_id(api, monkeypatch, caplog):
    from memoryplatform import stats

    def boom(**kwargs):
        raise RuntimeError("kaboom: internal detail")

    monkeypatch.setattr(stats, "team_stats", boom)
    caplog.set_level(logging.ERROR)
    r = api.get("/stats")
    assert r.status_code == 500
    payload = r.json()
    assert payload["code"] == "INTERNAL_ERROR"
    assert "kaboom" not in r.content.decode()  # never the trace or the message
    assert "Traceback" not in r.content.decode()
    rid = r["X-Request-ID"]
    assert rid in payload["error"]
    assert any(
        rid == getattr(rec, "request_id", None) and "kaboom" in rec.exc_text
        for rec in caplog.records
        if rec.exc_text
    )


def test_validation_errors_name_the_field(api):
    r = api.post("/teams", {"team_id": "bad id!", "name": 5, "config": []})
    assert r.status_code == 400
    payload = r.json()
    assert payload["code"] == "VALIDATION_ERROR"
    assert set(payload["details"]) == {"team_id", "name", "config"}


def test_chinese_round_trips_byte_exact(api):
    text = "用户偏好简洁回复，不喜欢冗长解释 ✓ 𠀀"
    r = api.post("/teams", {"team_id": "team_a", "name": "A", "description": text})
    assert ok_data(r)["description"] == text
    assert text.encode("utf-8") in r.content  # served as UTF-8, not \u escapes
    assert ok_data(api.get("/teams/team_a"))["description"] == text


def test_openapi_schema_describes_the_headers_and_the_envelope():
    r = Client().get("/api/schema/?format=json")
    assert r.status_code == 200
    schema = json.loads(r.content)
    schemes = schema["components"]["securitySchemes"]
    assert {s["name"] for s in schemes.values()} == {"X-API-Key", "X-Timestamp", "X-Signature"}
    assert "ErrorEnvelope" in schema["components"]["schemas"]
    stats_ok = schema["paths"]["/stats"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]
    assert set(stats_ok["properties"]) == {"ok", "data"}
    assert schema["paths"]["/stats"]["get"]["security"] == [
        {"ApiKey": [], "Timestamp": [], "Signature": []}
    ]
    assert "security" not in schema["paths"]["/health"]["get"] or schema["paths"]["/health"]["get"][
        "security"
    ] in ([], [{}])


def test_swagger_docs_are_served():
    r = Client().get("/api/docs/")
    assert r.status_code == 200
    assert b"swagger" in r.content.lower()
