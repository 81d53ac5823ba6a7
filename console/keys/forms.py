"""Console forms for API keys: what a lead fills in to issue or rotate a key."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from tenants.models import Agent, Team


class IssueKeyForm(forms.Form):
    label = forms.CharField(max_length=200, required=False)
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.none(),
        required=False,
        empty_label="(team-wide key)",
        to_field_name="agent_id",
        help_text="Bind the key to one agent (an agent-scoped key); empty = a team-wide key.",
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=36500, required=False, help_text="empty = never expires"
    )
    rate_limit = forms.IntegerField(
        min_value=0,
        max_value=10**9,
        required=False,
        help_text="requests per window; empty = server default, 0 = unlimited",
    )

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only this team's agents can be chosen: another team's agent id is an invalid choice.
        self.fields["agent"].queryset = Agent.objects.filter(team=team).order_by("agent_id")  # type: ignore[attr-defined]

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + timedelta(days=days) if days else None


class RotateKeyForm(forms.Form):
    grace_hours = forms.IntegerField(
        min_value=0,
        max_value=24 * 90,
        required=False,
        help_text="how long the old secret keeps working; empty = the server default "
        f"({settings.API_KEY_ROTATION_GRACE_SECONDS // 3600} h), 0 = it stops at once",
    )

    def grace_seconds(self) -> int | None:
        hours = self.cleaned_data.get("grace_hours")
        return None if hours is None else hours * 3600
