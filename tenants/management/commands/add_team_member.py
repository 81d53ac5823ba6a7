"""Create or update an admin user and their membership of a team (deployment scripts rely on it)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from tenants import services
from tenants.models import Team, TeamRole


class Command(BaseCommand):
    help = "Make USERNAME a lead or viewer of TEAM in the web admin (creating the user if needed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", default=None, help="set (or reset) the password")
        parser.add_argument(
            "--role",
            choices=[TeamRole.LEAD, TeamRole.VIEWER],
            default=TeamRole.VIEWER,
        )

    @transaction.atomic
    def handle(self, *args: Any, **opts: Any) -> None:
        team = Team.objects.filter(id=opts["team"]).first()
        if team is None:
            raise CommandError(f"no team {opts['team']} (create it with create_api_key)")
        User = get_user_model()
        user, created = User.objects.get_or_create(username=opts["username"])
        if created and not opts["password"]:
            raise CommandError("--password is required for a new user")
        if opts["password"]:
            user.set_password(opts["password"])
        user.is_staff = True  # needed to log in to the admin; what they see is scoped by team
        user.save()
        services.membership_set(team=team, user=user, role=opts["role"])
        verb = "created" if created else "updated"
        self.stdout.write(f"{verb} {user.get_username()}: {opts['role']} of {team.id}")
