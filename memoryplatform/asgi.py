"""ASGI entry point. Defaults to production settings, like wsgi.py."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.production")

application = get_asgi_application()
