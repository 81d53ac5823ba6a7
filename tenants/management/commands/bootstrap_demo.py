"""First-run setup for the embedded default (`make run`): a demo team, its key, an admin login.

Credentials are generated once and kept in DATA_DIR/demo-credentials.json (mode 0600) so each
`make run` can print them again; the database only ever holds the secret encrypted and the
password hashed. Refused when DEBUG is off unless --force.
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
from tenants.models import Team, TeamRole


class Command(BaseCommand):
    help = "Create (once) and print the demo team, API key and admin login for local use."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="demo")
        parser.add_argument("--force", action="store_true", help="allow with DEBUG off")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not settings.DEBUG and not opts["force"]:
            raise CommandError("bootstrap_demo is for local use (DEBUG=1); pass --force to insist")
        path = Path(settings.DATA_DIR) / "demo-credentials.json"
        creds: dict[str, str] = {}
        if path.exists():
            creds = json.loads(path.read_text())
        with transaction.atomic():
            creds = self._ensure(opts["team"], creds)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(creds, fh, indent=2)
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("Memory platform (embedded mode) — demo credentials"))
        self.stdout.write(f"  team:            {creds['team_id']}")
        self.stdout.write(f"  api_key:         {creds['api_key']}")
        self.stdout.write(f"  secret:          {creds['secret']}")
        self.stdout.write(
            f"  admin login:     {creds['admin_username']} / {creds['admin_password']}"
            "  at http://127.0.0.1:8000/admin/"
        )
        self.stdout.write("  review console:  http://127.0.0.1:8000/review/ (same login)")
        self.stdout.write(f"  (kept in {path}; delete it and the database to start over)")
        self.stdout.write("")

    def _ensure(self, team_id: str, creds: dict[str, str]) -> dict[str, str]:
        team = Team.objects.filter(id=team_id).first()
        if team is None:
            team, _ = services.team_upsert(
                team_id=team_id, name="Demo team", description="created by make run"
            )
        key = selectors.api_key_get_by_key_id(key_id=creds.get("api_key", ""))
        if key is None or not key.is_active or key.team_id != team.id:
            issued = services.api_key_issue(team=team, label="demo (make run)")
            creds.update(team_id=team.id, api_key=issued.key_id, secret=issued.secret)
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
        return creds
