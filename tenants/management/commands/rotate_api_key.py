"""Give a key a new secret; the old secret stays valid for a grace period."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants import selectors, services


class Command(BaseCommand):
    help = "Rotate API_KEY: print the new secret once; the previous one keeps working for the grace period."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("api_key", help="the public key id (X-API-Key)")
        parser.add_argument(
            "--grace-seconds",
            type=int,
            default=None,
            help=f"how long the old secret keeps working "
            f"(default {settings.API_KEY_ROTATION_GRACE_SECONDS}; 0 = stop now)",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        api_key = selectors.api_key_get_by_key_id(key_id=opts["api_key"])
        if api_key is None:
            raise CommandError(f"no such API key: {opts['api_key']}")
        if api_key.revoked_at is not None:
            raise CommandError("this key is revoked; issue a new one with create_api_key")
        if opts["grace_seconds"] is not None and opts["grace_seconds"] < 0:
            raise CommandError("--grace-seconds must be >= 0")
        issued = services.api_key_rotate(api_key=api_key, grace_seconds=opts["grace_seconds"])
        until = issued.api_key.previous_secret_expires_at
        # Older secrets still in their own grace (rotated again before it ended).
        earlier = [item["until"] for item in issued.api_key.earlier_secrets]
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "team_id": api_key.team_id,
                        "api_key": issued.key_id,
                        "secret": issued.secret,
                        "previous_secret_valid_until": until.isoformat() if until else None,
                        "earlier_secrets_valid_until": earlier,
                    }
                )
            )
            return
        self.stdout.write(f"api_key: {issued.key_id}")
        self.stdout.write(f"secret:  {issued.secret}")
        self.stdout.write(
            f"old secret valid until: {until.isoformat() if until else 'no longer valid'}"
        )
        for when in earlier:
            self.stdout.write(f"an older secret valid until: {when}")
        self.stdout.write(self.style.WARNING("The secret is shown only now: store it safely."))
