"""Abandon (and retry once) lifecycle jobs whose lease expired — what beat runs every minute."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand

from lifecycle.services import jobs


class Command(BaseCommand):
    help = "Reclaim queued or running lifecycle jobs whose lease expired (their worker died)."

    def handle(self, *args: Any, **opts: Any) -> None:
        reclaimed = jobs.jobs_reclaim_expired()
        self.stdout.write(
            json.dumps(
                [
                    {"abandoned": r.abandoned.pk, "retry": r.retry.pk if r.retry else None}
                    for r in reclaimed
                ]
            )
        )
