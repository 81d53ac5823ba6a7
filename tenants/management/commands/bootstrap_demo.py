"""First-run setup for the embedded default (`make run`): a demo team, its key, an admin login.

Credentials are generated once and kept in DATA_DIR/demo-credentials.json (mode 0600) so each
`make run` can print them again; the database only ever holds the secret encrypted and the
password hashed. Refused when DEBUG is off unless --force.

`--team X` makes (or prints) another demo team with its own key, the same admin leading it: the
file keeps every demo team's key under "teams"; its top-level team_id/api_key/secret stay the
first team's, which `make run` prints.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from tenants import selectors, services
from tenants.models import Team, TeamRole, team_id_case_message, team_id_in_other_case


class Command(BaseCommand):
    help = "Create (once) and print the demo team, API key and admin login for local use."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="demo")
        parser.add_argument("--force", action="store_true", help="allow with DEBUG off")
        parser.add_argument(
            "--url",
            default="",
            help="where the server listens, for the printed links "
            "(default: http://$HOST:$PORT, 127.0.0.1:8000)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not settings.DEBUG and not opts["force"]:
            raise CommandError("bootstrap_demo is for local use (DEBUG=1); pass --force to insist")
        path = Path(settings.DATA_DIR) / "demo-credentials.json"
        creds: dict[str, Any] = {}
        if path.exists():
            creds = json.loads(path.read_text())
        team_id = opts["team"]
        other = team_id_in_other_case(team_id)
        if other is not None:
            raise CommandError(f"--team: {team_id_case_message(other)}")
        with transaction.atomic():
            key = self._ensure(team_id, creds)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(creds, fh, indent=2)
        url = (opts["url"] or _default_url()).rstrip("/")
        write = self.stdout.write
        write("")
        write(self.style.SUCCESS("Memory platform (embedded mode) — demo credentials"))
        write(f"  team:            {team_id}")
        write(f"  api_key:         {key['api_key']}")
        write(f"  secret:          {key['secret']}")
        write(
            f"  admin login:     {creds['admin_username']} / {creds['admin_password']}"
            f"  at {url}/admin/"
        )
        write(f"  review console:  {url}/review/ (same login)")
        write(f"  API docs:        {url}/api/docs/ (sign requests with the key above)")
        write("  a key is bound to its team; for another team:")
        write("    python manage.py bootstrap_demo --team <id>     (another demo team + key)")
        write("    python manage.py create_api_key --team <id>     (a key for an existing team)")
        write(f"  (kept in {path}; delete it and the database to start over)")
        write("")

    def _ensure(self, team_id: str, creds: dict[str, Any]) -> dict[str, str]:
        """Makes sure the team, its demo key and the admin exist; updates `creds` in place and
        returns the team's {"api_key", "secret"}."""
        team = Team.objects.filter(id=team_id).first()
        if team is None:
            name = "Demo team" if team_id == "demo" else f"Demo team {team_id}"
            team, _ = services.team_upsert(
                team_id=team_id, name=name, description="created by bootstrap_demo"
            )
        teams: dict[str, dict[str, str]] = creds.setdefault("teams", {})
        if creds.get("team_id") and creds["team_id"] not in teams:
            # A file written before "teams" existed: its top level is the first team's key.
            teams[creds["team_id"]] = {"api_key": creds["api_key"], "secret": creds["secret"]}
        mine = teams.get(team_id, {})
        key = selectors.api_key_get_by_key_id(key_id=mine.get("api_key", ""))
        if key is None or not key.is_active or key.team_id != team.id:
            issued = services.api_key_issue(team=team, label="demo (bootstrap_demo)")
            mine = {"api_key": issued.key_id, "secret": issued.secret}
            teams[team_id] = mine
        if not creds.get("team_id") or creds["team_id"] == team_id:
            creds.update(team_id=team_id, **mine)
        User = get_user_model()
        username = creds.get("admin_username", "admin")
        user = User.objects.filter(username=username).first()
        if user is None or not creds.get("admin_password"):
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser(username=username, email="", password=password)
            else:
                user.set_password(password)
                user.save()
            creds.update(admin_username=username, admin_password=password)
        services.membership_set(team=team, user=user, role=TeamRole.LEAD)
        return mine


def _default_url() -> str:
    host = os.environ.get("HOST") or "127.0.0.1"
    port = os.environ.get("PORT") or "8000"
    return f"http://{host}:{port}"
