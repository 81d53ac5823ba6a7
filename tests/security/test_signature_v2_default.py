"""New teams require v2 signatures where NEW_TEAMS_REQUIRE_SIGNATURE_V2 is on (production).

A v1 signature covers the timestamp and the body only: for a bodiless request it is the HMAC of
the timestamp alone, so a captured `GET /stats` is also a valid `DELETE /teams/<id>` for as long
as its timestamp is within HMAC_MAX_SKEW_SECONDS. v2 signs method, path and a single-use nonce.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from memoryplatform.client import sign_v2
from tenants.models import Team
from tenants.services import api_key_issue
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import SignedClient, error_code, ok_data
from tests.reference_client import MemoryClient

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def production(settings):  # type: ignore[no-untyped-def]
    """The production value of the flag (pytest-django's settings fixture: override_settings)."""
    settings.NEW_TEAMS_REQUIRE_SIGNATURE_V2 = True
    return settings


def v2(client: SignedClient, method: str, path: str, body: object = None):  # type: ignore[no-untyped-def]
    """A v2-signed request: the SDK's own signing function, through Django's test client."""
    raw = b"" if body is None else json.dumps(body).encode()
    ts, nonce = str(int(time.time())), secrets.token_urlsafe(18)
    signed = raw if method in ("POST", "PUT", "PATCH") else b""
    return client.call(
        method,
        path,
        raw=raw,
        headers={
            "X-Timestamp": ts,
            "X-Nonce": nonce,
            "X-Signature-Version": "2",
            "X-Signature": sign_v2(client.secret, ts, nonce, method, path, signed),
        },
    )


def create_api_key(team_id: str) -> SignedClient:
    out = StringIO()
    call_command("create_api_key", "--team", team_id, "--json", stdout=out)
    creds = json.loads(out.getvalue())
    return SignedClient(Client(), creds["api_key"], creds["secret"])


def assert_v2_only(client: SignedClient) -> None:
    r = client.get("/stats")
    assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
    assert "requires signature version 2" in r.json()["error"]
    assert v2(client, "GET", "/stats").status_code == 200


def test_the_production_settings_turn_it_on_and_the_embedded_default_leaves_it_off():
    env = {
        k: v for k, v in os.environ.items() if k not in ("NEW_TEAMS_REQUIRE_SIGNATURE_V2", "DEBUG")
    }
    code = "from django.conf import settings; print(settings.NEW_TEAMS_REQUIRE_SIGNATURE_V2)"
    seen = {}
    for module in ("memoryplatform.settings.base", "memoryplatform.settings.production"):
        r = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={
                **env,
                "DJANGO_SETTINGS_MODULE": module,
                "SECRET_KEY": secrets.token_hex(40),
                # production.py refuses a per-process cache; only the settings are read here.
                "REDIS_URL": "redis://127.0.0.1:6379/0",
            },
            capture_output=True,
            text=True,
            check=True,
        )
        seen[module.rsplit(".", 1)[1]] = r.stdout.strip()
    assert seen == {"base": "False", "production": "True"}


@pytest.mark.django_db
@pytest.mark.usefixtures("production")
class TestUnderTheProductionDefault:
    def test_a_team_created_by_create_api_key_requires_v2(self):
        client = create_api_key("prod_team")
        assert Team.objects.get(id="prod_team").require_signature_v2 is True
        assert_v2_only(client)

    def test_the_demo_team_of_bootstrap_demo_requires_v2(self, production, tmp_path):
        production.DATA_DIR, production.DEBUG = tmp_path, True
        call_command("bootstrap_demo", stdout=StringIO())
        creds = json.loads((tmp_path / "demo-credentials.json").read_text())
        assert Team.objects.get(id=creds["team_id"]).require_signature_v2 is True
        assert_v2_only(SignedClient(Client(), creds["api_key"], creds["secret"]))

    def test_the_api_upsert_of_the_team_is_v2_only_and_keeps_the_flag(self):
        # POST /teams creates or updates the key's own team, which exists since the key does:
        # what the API must not do is weaken the flag on its way.
        client = create_api_key("prod_team")
        r = client.post("/teams", {"team_id": "prod_team", "name": "Renamed"})
        assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
        r = v2(client, "POST", "/teams", {"team_id": "prod_team", "name": "Renamed"})
        assert ok_data(r)["name"] == "Renamed"
        assert Team.objects.get(id="prod_team").require_signature_v2 is True

    def test_a_team_added_in_the_admin_starts_with_v2_required(self):
        root = UserFactory(username="root", is_superuser=True)
        c = Client()
        c.force_login(root)
        page = c.get(reverse("admin:tenants_team_add")).content.decode()
        assert re.search(r'<input type="checkbox" name="require_signature_v2"[^>]* checked', page)
        assert "can replay it" in page  # the risk, next to the switch
        assert Team(id="any", name="any").require_signature_v2 is True  # any other path too

    def test_a_captured_v1_signature_cannot_be_replayed_as_another_request(self):
        client = create_api_key("prod_team")
        ts = str(int(time.time()))
        captured = {"X-Timestamp": ts, "X-Signature": client_sign(client, ts)}
        r = client.call("DELETE", "/teams/prod_team", headers=captured)
        assert (r.status_code, error_code(r)) == (401, "INVALID_SIGNATURE")
        assert Team.objects.filter(id="prod_team").exists()


def client_sign(client: SignedClient, ts: str) -> str:
    from memoryplatform.client import sign

    return sign(client.secret, ts)  # what a v1 GET /stats carries: the timestamp alone


@pytest.mark.django_db
def test_why_v1_is_risky_a_get_signature_deletes_the_team():
    """The residual risk of a team that opts back into v1, shown on purpose."""
    client = create_api_key("legacy_team")
    ts = str(int(time.time()))
    captured = {"X-Timestamp": ts, "X-Signature": client_sign(client, ts)}
    assert client.call("GET", "/stats", headers=captured).status_code == 200
    r = client.call("DELETE", "/teams/legacy_team", headers=captured)  # the same headers
    assert r.status_code == 200
    assert not Team.objects.filter(id="legacy_team").exists()


@pytest.mark.django_db(transaction=True)
def test_in_the_embedded_default_a_new_team_works_with_the_original_client(live_server):
    client = create_api_key("reference_team")
    assert Team.objects.get(id="reference_team").require_signature_v2 is False
    reference = MemoryClient(client.key_id, client.secret, base_url=live_server.url)
    body = {"team_id": "reference_team", "name": "Reference"}
    assert reference.post("/teams", body).json()["ok"] is True
    assert reference.post("/agents", {"agent_id": "bot", "name": "Bot"}).json()["ok"] is True
    assert reference.get("/stats").json()["ok"] is True


@pytest.mark.django_db
@pytest.mark.usefixtures("production")
class TestOptingBackIntoV1:
    def test_a_lead_switches_their_team_back_to_v1_and_is_warned(self):
        client = create_api_key("legacy_team")
        lead = UserFactory(username="lead_legacy")
        MembershipFactory(user=lead, team=Team.objects.get(id="legacy_team"), role="lead")
        c = Client()
        c.force_login(lead)
        url = reverse("admin:tenants_team_change", args=["legacy_team"])
        assert "can replay it" in c.get(url).content.decode()
        r = c.post(url, {"name": "Legacy", "description": "", "config": "{}"}, follow=True)
        assert r.status_code == 200
        assert "now accepts v1 signatures" in r.content.decode()
        assert Team.objects.get(id="legacy_team").require_signature_v2 is False
        assert ok_data(client.get("/stats")) is not None  # v1 works again
        assert v2(client, "GET", "/stats").status_code == 200  # and v2 still does

    def test_turning_the_setting_on_leaves_existing_teams_as_they_were(self):
        with override_settings(NEW_TEAMS_REQUIRE_SIGNATURE_V2=False):
            old = Team.objects.create(id="old_team", name="Old")
        issued = api_key_issue(team=old)
        client = SignedClient(Client(), issued.key_id, issued.secret)
        assert ok_data(client.post("/teams", {"team_id": "old_team", "name": "Old 2"}))
        assert Team.objects.get(id="old_team").require_signature_v2 is False
