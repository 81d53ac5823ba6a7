"""/health/ready needs no authentication, so strangers learn only which parts fail, not how:
error texts and versions go to loopback callers and to callers with HEALTH_DETAILS_TOKEN."""

from __future__ import annotations

import pytest
from django.test import Client

PUBLIC = "203.0.113.7"  # a documentation address, not loopback
TOKEN = "health-3f9c1b7e5a2d4c6b8e0f1a3c5e7b9d2f"


@pytest.fixture
def broken_broker(settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def ready(remote_addr: str = "127.0.0.1", **headers: str):
    return Client(REMOTE_ADDR=remote_addr).get("/health/ready", headers=headers)


def test_a_stranger_sees_only_ok_flags(db):
    r = ready(PUBLIC)
    assert r.status_code == 200
    checks = r.json()["data"]["checks"]
    assert set(checks) == {"database", "redis", "broker", "embedding"}
    assert all(c == {"ok": True} for c in checks.values()), checks


def test_a_stranger_learns_the_names_of_failing_parts_only(db, broken_broker):
    r = ready(PUBLIC)
    assert r.status_code == 503
    payload = r.json()
    assert payload["code"] == "SERVICE_UNAVAILABLE"
    assert payload["error"] == "not ready: broker failing"
    assert payload["details"] == {"broker": ["failing"]}
    assert payload["data"]["checks"]["broker"] == {"ok": False}
    text = r.content.decode()
    assert "Error" not in text and "refused" not in text.lower() and "port" not in text.lower()


def test_loopback_callers_see_the_details(db, broken_broker):
    r = ready("127.0.0.1")
    assert r.status_code == 503
    detail = r.json()["details"]["broker"][0]
    assert detail != "failing" and "Error" in detail
    assert "detail" in r.json()["data"]["checks"]["database"]
    assert "detail" in ready("::1").json()["data"]["checks"]["database"]


def test_a_request_forwarded_by_a_local_proxy_is_not_a_loopback_caller(db, broken_broker):
    r = ready("127.0.0.1", X_Forwarded_For=PUBLIC)
    assert r.json()["details"] == {"broker": ["failing"]}


def test_loopback_trust_can_be_turned_off(db, broken_broker, settings):
    settings.HEALTH_DETAILS_LOOPBACK = False
    assert ready("127.0.0.1").json()["details"] == {"broker": ["failing"]}


def test_the_health_token_unlocks_the_details_from_anywhere(db, broken_broker, settings):
    settings.HEALTH_DETAILS_TOKEN = TOKEN
    assert "Error" in ready(PUBLIC, X_Health_Token=TOKEN).json()["details"]["broker"][0]
    assert ready(PUBLIC, X_Health_Token=TOKEN + "x").json()["details"] == {"broker": ["failing"]}
    assert ready(PUBLIC).json()["details"] == {"broker": ["failing"]}


def test_no_token_configured_means_no_token_accepted(db, broken_broker, settings):
    settings.HEALTH_DETAILS_TOKEN = ""
    assert ready(PUBLIC, X_Health_Token="").json()["details"] == {"broker": ["failing"]}
