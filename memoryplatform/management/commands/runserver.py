"""`manage.py runserver` (`make dev`) with the embedded mode's periodic tasks, as `make run`.

Django's staticfiles app owns `runserver` (it serves the static files); this command is that one
and also starts the thread that runs beat's schedule (lifecycle.embedded_beat). The project's
app is listed before staticfiles in INSTALLED_APPS so that its `runserver` is the one found.
"""

from __future__ import annotations

from typing import Any

from django.contrib.staticfiles.management.commands.runserver import Command as StaticRunserver

from lifecycle.embedded_beat import start_embedded_beat


class Command(StaticRunserver):
    help = (
        "Starts Django's development server, serving static files, and in the embedded mode the "
        "thread that runs the periodic tasks."
    )

    def inner_run(self, *args: Any, **options: Any) -> None:
        # inner_run runs in the process that serves: the autoreloader's child (a new one after
        # every code change, whose thread goes with it), not the parent that only watches files.
        # As under gunicorn, the lock (the data directory's, or the database's on MariaDB)
        # lets one thread run the schedule.
        start_embedded_beat()
        super().inner_run(*args, **options)
