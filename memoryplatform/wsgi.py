"""WSGI entry point. Defaults to production settings: gunicorn refuses an insecure SECRET_KEY."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.production")

application = get_wsgi_application()
