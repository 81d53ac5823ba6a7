"""Console views for the dashboard area. Thin: parse the form, call selectors, build the charts."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import access
from memories import selectors as memory_selectors
from tenants.models import Team
from tenants.usage import usage_flush

from . import charts, selectors

DAY_CHOICES = [("30", "last 30 days"), ("90", "last 90 days")]
MODE_CHOICES = [("cumulative", "cumulative"), ("daily", "per day")]


class DashboardForm(forms.Form):
    days = forms.TypedChoiceField(choices=DAY_CHOICES, coerce=int, required=False, initial="30")
    mode = forms.ChoiceField(choices=MODE_CHOICES, required=False, initial="cumulative")


def _labels(window: selectors.Window) -> list[str]:
    return [d.strftime("%m-%d") for d in window.days]


def build_charts(*, team: Team, days: int, mode: str) -> dict[str, Any]:
    """Every chart of the dashboard for `team` over the last `days` days."""
    window = selectors.Window.last(days)
    labels = _labels(window)
    mem = selectors.memory_counts(team=team, window=window)
    if mode == "daily":
        memory_scope = charts.stacked_bar_chart(
            title="New memories per day by scope",
            labels=labels,
            series=[charts.Series(k, v) for k, v in mem.by_scope_daily.items()],
        )
        memory_source = charts.stacked_bar_chart(
            title="New memories per day by source",
            labels=labels,
            series=[charts.Series(k, v) for k, v in mem.by_source_daily.items()],
        )
    else:
        by_scope = mem.cumulative(mem.by_scope_daily, mem.scope_before)
        by_source = mem.cumulative(mem.by_source_daily, mem.source_before)
        memory_scope = charts.line_chart(
            title="Memories stored by scope",
            labels=labels,
            series=[charts.Series(k, v) for k, v in by_scope.items()],
        )
        memory_source = charts.line_chart(
            title="Memories stored by source",
            labels=labels,
            series=[charts.Series(k, v) for k, v in by_source.items()],
        )
    usage = selectors.usage_counts(team=team, window=window)
    usage_chart = charts.stacked_bar_chart(
        title="API searches and writes per day",
        labels=labels,
        series=[charts.Series("searches", usage.searches), charts.Series("writes", usage.writes)],
    )
    jobs = selectors.job_counts(team=team, window=window)
    jobs_chart = charts.stacked_bar_chart(
        title="Lifecycle jobs per day",
        labels=labels,
        series=[
            charts.Series("succeeded", jobs.succeeded, "#009e73"),
            charts.Series("failed", jobs.failed, "#d55e00"),
            charts.Series("queued or running", jobs.other, "#98a2b3"),
        ],
    )
    by_memories = selectors.top_agents_by_memories(team=team)
    top_memories = charts.bar_chart(
        title="Top agents by memories",
        labels=[a for a, _ in by_memories],
        values=[n for _, n in by_memories],
    )
    by_activity = selectors.top_agents_by_activity(team=team, window=window)
    top_activity = charts.bar_chart(
        title=f"Top agents by searches + writes ({days} days)",
        labels=[a for a, _, _ in by_activity],
        values=[s + w for _, s, w in by_activity],
    )
    stored = {k: mem.scope_before.get(k, 0) + sum(v) for k, v in mem.by_scope_daily.items()}
    tiers = memory_selectors.tier_counts(team=team)
    return {
        "charts": [
            memory_scope,
            memory_source,
            usage_chart,
            jobs_chart,
            top_memories,
            top_activity,
        ],
        "totals": {
            "memories": sum(stored.values()),
            "personal": stored.get("personal", 0),
            "team_memories": stored.get("team", 0),
            "hot": tiers["hot"],
            "warm": tiers["warm"],
            "cold": tiers["cold"],
            "searches": sum(usage.searches),
            "writes": sum(usage.writes),
            "jobs": sum(jobs.succeeded) + sum(jobs.failed) + sum(jobs.other),
            "failed": sum(jobs.failed),
        },
        "failed_by_kind": sorted(jobs.failed_by_kind.items(), key=lambda kv: (-kv[1], kv[0])),
        "activity": by_activity,
    }


@access.console_view()
def index(request: HttpRequest, team: Team) -> HttpResponse:
    form = DashboardForm(request.GET or None)
    days, mode = 30, "cumulative"
    if form.is_bound and form.is_valid():
        days = form.cleaned_data["days"] or 30
        mode = form.cleaned_data["mode"] or "cumulative"
    # Counts still in the cache go to the database first, so the page is current even in the
    # embedded mode that has no beat to flush them. A cache outage only skips this.
    usage_flush()
    context = build_charts(team=team, days=days, mode=mode)
    context.update({"team": team, "area": "dashboard", "form": form, "days": days, "mode": mode})
    return render(request, "console/dashboard/index.html", context)
