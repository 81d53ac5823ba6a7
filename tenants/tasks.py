"""Maintenance tasks of the tenants app (thin: they call services)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="tenants.flush_usage", ignore_result=True)
def flush_usage() -> int:
    from .usage import usage_flush

    return usage_flush()
