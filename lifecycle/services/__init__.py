"""Lifecycle services: compress, facts, scenarios, persona, cleanup and the automatic pipeline.

Every entry point (API view, Celery task, management command, admin) calls these. Each operation
runs inside `jobs.run_job`, which records a `JobRun` (status, counts, tokens, error).
"""
