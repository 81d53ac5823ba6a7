"""Lifecycle services: compress, facts, scenarios, persona, cleanup and the automatic pipeline.

Every entry point (API view, Celery task, management command, admin) calls these. Each operation
runs as a job through `pipeline.job_run`, which records a `JobRun` (status, counts, tokens, error).
"""
