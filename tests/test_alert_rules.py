"""deploy/prometheus-alerts.yml: valid for Prometheus, firing when it should (promtool's own unit
tests, tests/alert_rules_test.yml), on series that exist, and covering beat's whole schedule."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from celery.schedules import crontab, maybe_schedule
from prometheus_client import REGISTRY

from memoryplatform.celery import app

from .conftest import require_service

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus-alerts.yml"
RULE_TESTS = ROOT / "tests" / "alert_rules_test.yml"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        # .ci/run installs it (Debian's prometheus package); CI fails rather than skips.
        require_service("promtool", "not installed (apt-get install prometheus)")
    assert path is not None
    return path


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_promtool_accepts_the_rules():
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_alert_fires_when_it_should_and_only_then():
    """promtool evaluates the rules over the series of tests/alert_rules_test.yml: every alert
    is expected at least once firing and once silent."""
    done = subprocess.run(
        [_promtool(), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        cwd=RULE_TESTS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    for alert in _rules():
        outcomes = {bool(c["exp_alerts"]) for c in cases if c["alertname"] == alert}
        assert outcomes == {True, False}, alert


def test_the_rules_query_only_series_that_exist():
    used = {
        re.sub(r"_bucket$", "", name)
        for rule in _rules().values()
        for name in re.findall(r"memoryplatform_\w+", rule["expr"])
    }
    exposed = {m.name for m in REGISTRY.collect()} | {m.name + "_total" for m in REGISTRY.collect()}
    assert used and used <= exposed, used - exposed


def _period(entry: dict[str, Any]) -> timedelta:
    """How often an entry of beat's schedule runs: every N seconds, or a crontab of some minutes
    of every hour (the only crontabs the schedule has)."""
    sched = maybe_schedule(entry["schedule"], app=app)
    if not isinstance(sched, crontab):
        return timedelta(seconds=sched.run_every.total_seconds())
    assert len(sched.hour) == 24 and len(sched.day_of_week) == 7, entry
    minutes = sorted(sched.minute)
    gaps = {b - a for a, b in zip(minutes, [*minutes[1:], minutes[0] + 60], strict=True)}
    assert len(gaps) == 1, f"{entry}: minutes not evenly spaced"
    return timedelta(minutes=gaps.pop())


def test_the_staleness_alerts_cover_the_whole_schedule_at_three_periods():
    """The frequent alert names the entries run every 10 minutes or more often, the hourly one
    takes every other entry: none is left out, and each alerts after at least three missed
    runs — a new entry of another period fails here until the rules say what to do with it."""
    rules = _rules()
    frequent = re.search(r'entry=~"([^"]+)"', rules["MemoryplatformFrequentTaskStale"]["expr"])
    hourly = re.search(r'entry!~"([^"]+)"', rules["MemoryplatformHourlyTaskStale"]["expr"])
    assert frequent and hourly and frequent.group(1) == hourly.group(1)
    named = set(frequent.group(1).split("|"))
    periods = {name: _period(entry) for name, entry in app.conf.beat_schedule.items()}
    assert named == {name for name, p in periods.items() if p <= timedelta(minutes=10)}
    assert all(
        timedelta(minutes=10) < p <= timedelta(hours=1)
        for n, p in periods.items()
        if n not in named
    )
    assert "> 1800" in rules["MemoryplatformFrequentTaskStale"]["expr"]  # 3 x 10 minutes
    assert "> 3 * 3600" in rules["MemoryplatformHourlyTaskStale"]["expr"]  # 3 x 1 hour
    # The "no scheduler" alert watches an entry that runs every minute.
    absent = rules["MemoryplatformNoScheduler"]["expr"]
    watched = re.search(r'entry="([^"]+)"', absent)
    assert watched and periods[watched.group(1)] <= timedelta(minutes=1)


def test_the_alerts_point_at_docs_that_exist():
    paths = re.findall(r"docs/[\w.-]+\.md", yaml.safe_dump(list(_rules().values())))
    assert paths and all((ROOT / path).exists() for path in paths), paths
