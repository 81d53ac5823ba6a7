"""Operator commands: names and flags are relied upon by deployment scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.models import Agent, ApiKey, Team, TeamMembership

from .helpers import SignedClient, error_code
from .livestack import manage_json

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_api_key_creates_the_team_and_prints_json_once():
    data = json.loads(run("create_api_key", "--team", "hermes", "--json"))
    assert set(data) == {"team_id", "api_key", "secret"}
    assert data["team_id"] == "hermes"
    assert Team.objects.filter(id="hermes").exists()
    client = SignedClient(Client(), data["api_key"], data["secret"])
    assert client.get("/stats").status_code == 200


def test_create_api_key_reuses_an_existing_team(team):
    run("create_api_key", "--team", "team_a", "--label", "second")
    assert Team.objects.count() == 1
    assert ApiKey.objects.get(team=team).label == "second"


def test_a_team_id_differing_only_by_case_is_refused_on_every_database(team):
    """On MariaDB `TEAM_A` would have found `team_a` (and issued it a key), on SQLite created a
    second team: both refuse it now, and the admin's add form and team_upsert too."""
    from django.urls import reverse

    from core.errors import ValidationFailed
    from tenants.services import team_upsert

    from .factories import UserFactory

    with pytest.raises(CommandError, match="team ids must differ by more than case"):
        run("create_api_key", "--team", "TEAM_A")
    with pytest.raises(ValidationFailed):
        team_upsert(team_id="Team_A", name="other")
    root = Client()
    root.force_login(UserFactory(username="root", is_superuser=True))
    page = root.post(reverse("admin:tenants_team_add"), {"id": "Team_a", "name": "other"})
    assert page.status_code == 200 and "must differ by more than case" in page.content.decode()
    assert list(Team.objects.values_list("id", "name")) == [("team_a", team.name)]
    assert not ApiKey.objects.exists()
    # An id differing by more than case is another team.
    run("create_api_key", "--team", "team_a2")
    assert Team.objects.count() == 2


def test_create_api_key_for_an_agent_makes_an_agent_scoped_key():
    data = json.loads(run("create_api_key", "--team", "t1", "--agent", "coder", "--json"))
    key = ApiKey.objects.get(key_id=data["api_key"])
    assert key.agent is not None and key.agent.agent_id == "coder"
    assert Agent.objects.filter(team_id="t1", agent_id="coder").exists()


def test_create_api_key_human_output_shows_key_and_secret():
    out = run("create_api_key", "--team", "t2")
    assert "api_key: mk_" in out and "secret:" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--team", "bad team"],
        ["--team", "t", "--agent", "a/b"],
        ["--team", "t", "--expires-days", "0"],
    ],
)
def test_create_api_key_rejects_bad_input(args):
    with pytest.raises(CommandError):
        run("create_api_key", *args)
    assert not Team.objects.exists()


def test_rotate_prints_a_new_secret_and_keeps_the_old_one_for_the_grace(issued, api):
    data = json.loads(run("rotate_api_key", issued.key_id, "--grace-seconds", "60", "--json"))
    assert data["secret"] != issued.secret
    assert data["previous_secret_valid_until"]
    assert api.get("/stats").status_code == 200
    assert api.get("/stats", secret=data["secret"]).status_code == 200
    assert data["earlier_secrets_valid_until"] == []
    # Again within the grace: the original secret keeps its own.
    again = json.loads(run("rotate_api_key", issued.key_id, "--grace-seconds", "60", "--json"))
    assert again["earlier_secrets_valid_until"] == [data["previous_secret_valid_until"]]
    assert api.get("/stats").status_code == 200
    assert "an older secret valid until" in run("rotate_api_key", issued.key_id)


def test_revoke_stops_the_key(issued, api):
    assert "revoked" in run("revoke_api_key", issued.key_id)
    assert error_code(api.get("/stats")) == "INVALID_API_KEY"


def test_rotate_and_revoke_reject_unknown_keys():
    for cmd in ("rotate_api_key", "revoke_api_key"):
        with pytest.raises(CommandError):
            run(cmd, "mk_unknown")


def test_list_api_keys_never_prints_secrets(issued, other_api):
    rotated = json.loads(run("rotate_api_key", issued.key_id, "--json"))
    human = run("list_api_keys")
    as_json = run("list_api_keys", "--json")
    for text in (human, as_json):
        assert issued.key_id in text
        assert issued.secret not in text
        assert rotated["secret"] not in text
    assert not any("secret" in field for row in json.loads(as_json) for field in row)
    rows = json.loads(run("list_api_keys", "--team", "team_a", "--json"))
    assert [r["api_key"] for r in rows] == [issued.key_id]
    assert rows[0]["status"] == "active"


def test_list_api_keys_columns_line_up(issued):
    from tenants.models import Team
    from tenants.services import api_key_issue

    long_team = Team.objects.create(id="a-team-with-a-rather-long-identifier", name="long")
    api_key_issue(team=long_team, label="second key")
    lines = run("list_api_keys").strip().splitlines()
    assert len(lines) == 3
    # Every column starts at the same offset on every line, whatever the ids' lengths.
    header = lines[0]
    for column in ("team", "agent", "status", "last used", "label"):
        at = header.index(column)
        assert all(line[at - 2 : at] == "  " and line[at] != " " for line in lines[1:]), column


def test_add_team_member_creates_and_updates(team):
    out = run(
        "add_team_member",
        "--team",
        "team_a",
        "--username",
        "lead1",
        "--password",
        "pw-long-enough",
        "--role",
        "lead",
    )
    assert "created" in out
    m = TeamMembership.objects.get(user__username="lead1")
    assert (m.role, m.user.is_staff) == ("lead", True)
    run("add_team_member", "--team", "team_a", "--username", "lead1", "--role", "viewer")
    assert TeamMembership.objects.get(user__username="lead1").role == "viewer"
    with pytest.raises(CommandError):
        run("add_team_member", "--team", "nope", "--username", "x", "--password", "p")


def test_commands_run_as_real_processes(tmp_path):
    """The exact command line of the README, in a subprocess, on a fresh SQLite file."""
    env = {
        **os.environ,
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.base",
    }
    env.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    data = manage_json(env, "create_api_key", "--team", "cli_team")
    assert data["team_id"] == "cli_team"
    listing = subprocess.run(
        [sys.executable, "manage.py", "list_api_keys"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    assert data["api_key"] in listing.stdout
    assert data["secret"] not in listing.stdout + listing.stderr


def test_production_settings_refuse_an_insecure_secret_key():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "memoryplatform.settings.production"}
    env.pop("SECRET_KEY", None)
    # About the secret only: without REDIS_URL production also needs this opt-in to start.
    env["ALLOW_PER_PROCESS_CACHE"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert "SECRET_KEY is missing or insecure" in r.stderr
    env["SECRET_KEY"] = "s" * 60
    r = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0  # one repeated character is not a secret either
    env["SECRET_KEY"] = "k3J9-x8Qz_vP2mW7nR4tY6uB1cD5eF0gH3jK8lM2nP6qR9sT4vW7xZ1aC5dE8fG2h"
    r = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_bootstrap_demo_is_idempotent_and_prints_working_credentials(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.DEBUG = True
    first = run("bootstrap_demo")
    second = run("bootstrap_demo")
    creds = json.loads((tmp_path / "demo-credentials.json").read_text())
    assert oct((tmp_path / "demo-credentials.json").stat().st_mode & 0o777) == "0o600"
    assert creds["secret"] in first and creds["secret"] in second
    assert ApiKey.objects.filter(team_id="demo").count() == 1
    assert (
        SignedClient(Client(), creds["api_key"], creds["secret"]).get("/stats").status_code == 200
    )
    # Through the real login form (the login throttle needs the request Client.login lacks).
    r = Client().post(
        "/admin/login/",
        {"username": creds["admin_username"], "password": creds["admin_password"], "next": "/"},
    )
    assert (r.status_code, r["Location"]) == (302, "/")


def test_bootstrap_demo_team_makes_another_demo_team_with_its_own_key(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.DEBUG = True
    run("bootstrap_demo")
    out = run("bootstrap_demo", "--team", "demo2", "--url", "http://127.0.0.1:9123")
    creds = json.loads((tmp_path / "demo-credentials.json").read_text())
    # The first team stays the one `make run` prints; each team keeps its own key.
    assert creds["team_id"] == "demo"
    assert set(creds["teams"]) == {"demo", "demo2"}
    other = creds["teams"]["demo2"]
    assert other["api_key"] != creds["api_key"] and other["secret"] in out
    assert "http://127.0.0.1:9123/admin/" in out and ":8000" not in out
    assert "create_api_key --team" in out
    assert Team.objects.get(id="demo2").memberships.filter(user__username="admin").exists()
    # The new key works, for its own team only.
    signed = SignedClient(Client(), other["api_key"], other["secret"])
    assert signed.get("/teams/demo2").status_code == 200
    assert signed.get("/teams/demo").status_code in (403, 404)
    # Printing again changes nothing.
    again = run("bootstrap_demo", "--team", "demo2")
    assert other["secret"] in again
    assert ApiKey.objects.filter(team_id="demo2").count() == 1
    # A team id differing from one only by case is refused, nothing written.
    with pytest.raises(CommandError, match="team ids must differ by more than case"):
        run("bootstrap_demo", "--team", "Demo2")
    assert set(json.loads((tmp_path / "demo-credentials.json").read_text())["teams"]) == {
        "demo",
        "demo2",
    }
    assert set(Team.objects.values_list("id", flat=True)) == {"demo", "demo2"}
