"""WSGI entry point. Defaults to production settings: gunicorn refuses an insecure SECRET_KEY."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from memoryplatform import celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryplatform.settings.production")
if celery.SETTINGS_DEFAULTED and not settings.configured:
    # Importing this package already set the Celery fallback (base settings: DEBUG on, the dev
    # secret accepted). A server started without DJANGO_SETTINGS_MODULE gets production instead.
    os.environ["DJANGO_SETTINGS_MODULE"] = "memoryplatform.settings.production"

application = get_wsgi_application()
