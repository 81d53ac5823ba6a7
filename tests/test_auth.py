"""The HMAC matrix (docs/authentication.md) through the real authentication class."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from tenants import services
from tenants.models import ApiKey

from .helpers import SignedClient, error_code, inside_one_rate_window, ok_data

pytestmark = pytest.mark.django_db

CHINESE_BODY = {"team_id": "team_a", "name": "策略研究部", "description": "团队描述 — 中文"}


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("GET", "/stats", None),
        ("GET", "/teams/team_a", None),
        ("POST", "/teams", {"team_id": "team_a", "name": "A"}),
        ("POST", "/agents", {"agent_id": "coder", "name": "Coder"}),
        ("GET", "/agents/team_a", None),
    ],
)
def test_it_accepts_a_correct_signature_for_each_method(api, method, path, body):
    r = api.call(method, path, body)
    assert r.status_code in (200, 201), r.content
    assert r.json()["ok"] is True


def test_it_accepts_delete_signed_over_the_timestamp_alone(api, agent):
    r = api.delete("/agents/team_a/researcher")
    assert r.status_code == 200
    assert r.json() == {"ok": True, "data": None}


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_it_verifies_chinese_bodies_over_the_raw_bytes(api, ensure_ascii):
    r = api.post("/teams", CHINESE_BODY, ensure_ascii=ensure_ascii)
    assert r.status_code == 200, r.content
    data = ok_data(r)
    assert data["name"] == "策略研究部"
    assert data["description"] == "团队描述 — 中文"


def test_it_rejects_a_signature_over_a_reserialised_body(api):
    # Signed over ensure_ascii=True bytes but sent as raw UTF-8: the bytes differ, so must fail.
    ts = str(int(time.time()))
    signed = json.dumps(CHINESE_BODY, ensure_ascii=True).encode()
    sent = json.dumps(CHINESE_BODY, ensure_ascii=False).encode()
    sig = hmac.new(api.secret.encode(), ts.encode() + signed, hashlib.sha256).hexdigest()
    r = api.call("POST", "/teams", raw=sent, headers={"X-Timestamp": ts, "X-Signature": sig})
    assert r.status_code == 401
    assert error_code(r) == "INVALID_SIGNATURE"


def test_it_rejects_a_get_signed_over_an_empty_json_object(api):
    ts = str(int(time.time()))
    sig = hmac.new(api.secret.encode(), ts.encode() + b"{}", hashlib.sha256).hexdigest()
    r = api.get("/stats", headers={"X-Timestamp": ts, "X-Signature": sig})
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")


def test_it_rejects_a_wrong_secret(api):
    r = api.get("/stats", secret="not-the-secret")
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")


def test_it_rejects_a_tampered_body(api):
    ts = str(int(time.time()))
    body = json.dumps({"team_id": "team_a", "name": "A"}).encode()
    sig = hmac.new(api.secret.encode(), ts.encode() + body, hashlib.sha256).hexdigest()
    tampered = body.replace(b'"A"', b'"B"')
    r = api.call("POST", "/teams", raw=tampered, headers={"X-Timestamp": ts, "X-Signature": sig})
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")


@pytest.mark.parametrize(
    "missing",
    [
        ("X-API-Key",),
        ("X-Timestamp",),
        ("X-Signature",),
        ("X-API-Key", "X-Timestamp", "X-Signature"),
    ],
)
def test_it_answers_missing_auth_for_each_missing_header(api, missing):
    r = api.get("/stats", omit=missing)
    assert (r.status_code, error_code(r)) == (401, "MISSING_AUTH")


def test_it_answers_missing_auth_with_no_headers_at_all():
    r = Client().get("/stats")
    assert (r.status_code, error_code(r)) == (401, "MISSING_AUTH")


# 298, not 299: the timestamp is whole seconds (int() drops up to 1 s) and the request takes
# time, so -299 could land just past the 300 s window on a slow machine.
@pytest.mark.parametrize("offset", [-298, 298, 0])
def test_it_accepts_timestamps_within_the_window(api, offset):
    r = api.get("/stats", ts=int(time.time()) + offset)
    assert r.status_code == 200


@pytest.mark.parametrize("offset", [-302, 302, -100000])  # 302: the same whole-second margin
def test_it_rejects_timestamps_outside_the_window(api, offset):
    r = api.get("/stats", ts=int(time.time()) + offset)
    assert (r.status_code, error_code(r)) == (401, "TIMESTAMP_EXPIRED")


@pytest.mark.parametrize("ts", ["abc", "12.5", "1e9", "-5", "0x10", "１２３", "9" * 40])
def test_it_rejects_non_numeric_timestamps(api, ts):
    r = api.get("/stats", ts=ts)
    assert (r.status_code, error_code(r)) == (401, "INVALID_TIMESTAMP")


def test_it_rejects_an_unknown_key(api):
    r = SignedClient(Client(), "mk_doesnotexist", api.secret).get("/stats")
    assert (r.status_code, error_code(r)) == (401, "INVALID_API_KEY")


def test_it_rejects_a_revoked_key(api, issued):
    services.api_key_revoke(api_key=issued.api_key)
    r = api.get("/stats")
    assert (r.status_code, error_code(r)) == (401, "INVALID_API_KEY")


def test_it_rejects_an_expired_key(api, issued):
    ApiKey.objects.filter(pk=issued.api_key.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    r = api.get("/stats")
    assert (r.status_code, error_code(r)) == (401, "INVALID_API_KEY")


def test_a_rotated_key_accepts_old_and_new_secret_during_the_grace_period(api, issued):
    new = services.api_key_rotate(api_key=issued.api_key, grace_seconds=3600)
    assert new.secret != issued.secret
    assert api.get("/stats").status_code == 200  # old secret
    assert api.get("/stats", secret=new.secret).status_code == 200


def test_a_rotated_key_rejects_the_old_secret_after_the_grace_period(api, issued):
    new = services.api_key_rotate(api_key=issued.api_key, grace_seconds=3600)
    ApiKey.objects.filter(pk=issued.api_key.pk).update(
        previous_secret_expires_at=timezone.now() - timedelta(seconds=1)
    )
    r = api.get("/stats")
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
    assert api.get("/stats", secret=new.secret).status_code == 200


def test_rotation_without_grace_stops_the_old_secret_at_once(api, issued):
    new = services.api_key_rotate(api_key=issued.api_key, grace_seconds=0)
    assert error_code(api.get("/stats")) == "INVALID_SIGNATURE"
    assert api.get("/stats", secret=new.secret).status_code == 200


def test_a_second_rotation_within_the_grace_keeps_the_original_secret_for_its_own(api, issued):
    """Rotated twice before the first grace ended (two consoles, or a secret not saved): the
    agents still on the original secret keep working until its own grace ends."""
    first = services.api_key_rotate(api_key=issued.api_key, grace_seconds=3600)
    second = services.api_key_rotate(api_key=issued.api_key, grace_seconds=600)
    for secret in (issued.secret, first.secret, second.secret):
        assert api.get("/stats", secret=secret).status_code == 200
    row = ApiKey.objects.get(pk=issued.api_key.pk)
    assert len(row.old_secrets_until) == 2
    assert issued.secret not in json.dumps(row.earlier_secrets)  # encrypted like the others
    # The original ends when its own grace does; the first rotation's when its does.
    (earlier,) = row.earlier_secrets
    ApiKey.objects.filter(pk=row.pk).update(
        earlier_secrets=[{**earlier, "until": (timezone.now() - timedelta(seconds=1)).isoformat()}]
    )
    assert error_code(api.get("/stats")) == "INVALID_SIGNATURE"
    assert api.get("/stats", secret=first.secret).status_code == 200
    ApiKey.objects.filter(pk=row.pk).update(
        previous_secret_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert error_code(api.get("/stats", secret=first.secret)) == "INVALID_SIGNATURE"
    assert api.get("/stats", secret=second.secret).status_code == 200


def test_rotation_without_grace_ends_every_old_secret(api, issued):
    first = services.api_key_rotate(api_key=issued.api_key, grace_seconds=3600)
    services.api_key_rotate(api_key=issued.api_key, grace_seconds=3600)
    third = services.api_key_rotate(api_key=issued.api_key, grace_seconds=0)
    for secret in (issued.secret, first.secret):
        assert error_code(api.get("/stats", secret=secret)) == "INVALID_SIGNATURE"
    assert api.get("/stats", secret=third.secret).status_code == 200
    assert ApiKey.objects.get(pk=issued.api_key.pk).old_secrets() == []


def test_a_key_keeps_a_bounded_number_of_old_secrets(api, issued):
    secrets = [issued.secret]
    for _ in range(services.MAX_OLD_SECRETS + 2):
        secrets.append(services.api_key_rotate(api_key=issued.api_key, grace_seconds=3600).secret)
    row = ApiKey.objects.get(pk=issued.api_key.pk)
    assert len(row.old_secrets()) == services.MAX_OLD_SECRETS
    verifying = [api.get("/stats", secret=s).status_code == 200 for s in secrets]
    # The current secret and the newest old ones; the oldest two ended.
    assert verifying == [False, False] + [True] * (services.MAX_OLD_SECRETS + 1)


def test_the_signature_may_be_upper_case_hex(api):
    ts = str(int(time.time()))
    sig = hmac.new(api.secret.encode(), ts.encode(), hashlib.sha256).hexdigest().upper()
    assert api.get("/stats", headers={"X-Timestamp": ts, "X-Signature": sig}).status_code == 200


def test_the_secret_is_encrypted_at_rest(issued):
    row = ApiKey.objects.get(pk=issued.api_key.pk)
    assert issued.secret not in row.secret_encrypted
    assert issued.secret not in json.dumps(list(ApiKey.objects.values()), default=str)


def test_last_used_is_written_once_per_resolution_window(
    api, issued, django_assert_max_num_queries
):
    assert ApiKey.objects.get(pk=issued.api_key.pk).last_used_at is None
    api.get("/stats")
    first = ApiKey.objects.get(pk=issued.api_key.pk).last_used_at
    assert first is not None
    api.get("/stats")
    assert ApiKey.objects.get(pk=issued.api_key.pk).last_used_at == first


def test_a_request_after_the_first_does_not_write_last_used(api, issued, django_assert_num_queries):
    api.get("/teams/team_a")
    # key lookup (with team and agent joined) only: no UPDATE of last_used_at.
    with django_assert_num_queries(1):
        r = api.get("/teams/team_a")
    assert r.status_code == 200


def test_no_secret_appears_in_logs(api, issued, caplog):
    caplog.set_level(logging.DEBUG)
    api.get("/stats")
    api.get("/stats", secret="wrong")
    new = services.api_key_rotate(api_key=issued.api_key)
    services.api_key_revoke(api_key=issued.api_key)
    for secret in (issued.secret, new.secret):
        assert secret not in caplog.text


class TestSignatureV2:
    @staticmethod
    def _v2(api, method, path, body=None, nonce="n" * 20, ts=None, sign_path=None, sign_body=None):
        ts = str(int(time.time())) if ts is None else str(ts)
        raw = b"" if body is None else json.dumps(body).encode()
        head = f"v2\n{ts}\n{nonce}\n{method}\n{sign_path or path}\n".encode()
        signed = raw if sign_body is None else sign_body
        sig = hmac.new(api.secret.encode(), head + signed, hashlib.sha256).hexdigest()
        return api.call(
            method,
            path,
            raw=raw,
            headers={
                "X-Timestamp": ts,
                "X-Signature": sig,
                "X-Signature-Version": "2",
                "X-Nonce": nonce,
            },
        )

    def test_it_accepts_a_v2_signature(self, api):
        assert self._v2(api, "GET", "/stats").status_code == 200

    def test_it_rejects_a_replayed_nonce(self, api):
        assert self._v2(api, "GET", "/stats", nonce="abcdefghijklmnop1").status_code == 200
        r = self._v2(api, "GET", "/stats", nonce="abcdefghijklmnop1")
        assert (r.status_code, error_code(r)) == (401, "REPLAYED_REQUEST")

    def test_it_binds_the_path(self, api):
        r = self._v2(api, "GET", "/teams/team_a", sign_path="/stats")
        assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")

    def test_it_covers_the_body_of_a_delete(self, api):
        mid = api.post(
            "/memories/personal", {"agent_id": "a1", "content": "Deploys happen on Tuesdays"}
        ).json()["data"]["id"]
        api.post(f"/memories/personal/{mid}/share", {"agent_ids": ["a2"], "permission": "read"})
        path = f"/memories/personal/{mid}/share"
        body = {"agent_ids": ["a2"]}
        # A body the signature does not cover (a v1-style empty body) is refused under v2 ...
        r = self._v2(api, "DELETE", path, body=body, nonce="d" * 20, sign_body=b"")
        assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
        # ... and the signed one is accepted.
        r = self._v2(api, "DELETE", path, body=body, nonce="e" * 20)
        assert r.status_code == 200, r.content

    def test_a_team_can_require_v2(self, api, team):
        team.require_signature_v2 = True
        team.save()
        assert error_code(api.get("/stats")) == "INVALID_SIGNATURE"
        assert self._v2(api, "GET", "/stats", nonce="q" * 24).status_code == 200

    def test_v2_without_nonce_is_missing_auth(self, api):
        r = api.get("/stats", headers={"X-Signature-Version": "2"})
        assert (r.status_code, error_code(r)) == (401, "MISSING_AUTH")


class TestRateLimit:
    @override_settings(API_RATE_LIMIT=3, API_RATE_LIMIT_WINDOW_SECONDS=60)
    def test_it_answers_429_with_retry_after_over_the_limit(self, api):
        inside_one_rate_window()
        for _ in range(3):
            assert api.get("/stats").status_code == 200
        r = api.get("/stats")
        assert (r.status_code, error_code(r)) == (429, "RATE_LIMITED")
        assert 1 <= int(r["Retry-After"]) <= 60

    @override_settings(API_RATE_LIMIT=3)
    def test_a_per_key_limit_overrides_the_default(self, api, issued):
        ApiKey.objects.filter(pk=issued.api_key.pk).update(rate_limit=0)  # unlimited
        for _ in range(5):
            assert api.get("/stats").status_code == 200

    @override_settings(API_RATE_LIMIT=2)
    def test_keys_are_limited_independently(self, api, other_api):
        inside_one_rate_window()
        for _ in range(2):
            api.get("/stats")
        assert api.get("/stats").status_code == 429
        assert other_api.get("/stats").status_code == 200

    @override_settings(API_RATE_LIMIT=1)
    def test_unsigned_requests_do_not_use_up_the_quota(self, api):
        for _ in range(3):
            api.get("/stats", secret="wrong")
        assert api.get("/stats").status_code == 200
