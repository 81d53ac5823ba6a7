"""Forms of the purge area: criteria (validated here, at the edge) and the trash filters."""

from __future__ import annotations

from typing import Any

from django import forms

from memories.models import MemoryScope
from memories.purge import PurgeCriteria
from tenants import selectors as tenant_selectors
from tenants.models import Team


class PurgeCriteriaForm(forms.Form):
    agent = forms.ChoiceField(required=False, label="Agent")
    idle_days = forms.IntegerField(
        min_value=0, max_value=36500, initial=90, label="Not accessed for at least (days)"
    )
    importance_below = forms.FloatField(
        min_value=0.0, max_value=1.0, initial=0.3, label="Importance below"
    )
    scopes = forms.MultipleChoiceField(
        choices=MemoryScope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[MemoryScope.PERSONAL, MemoryScope.TEAM],
        label="Scopes",
    )

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agents = tenant_selectors.agent_list(team=team).order_by("agent_id")
        self.fields["agent"].choices = [("", "all agents")] + [  # type: ignore[attr-defined]
            (a.agent_id, a.agent_id if a.name == a.agent_id else f"{a.agent_id} ({a.name})")
            for a in agents
        ]

    def clean_importance_below(self) -> float:
        value: float = self.cleaned_data["importance_below"]
        if value <= 0.0:
            raise forms.ValidationError("No importance is below 0: choose a threshold above 0.")
        return value

    def criteria(self) -> PurgeCriteria:
        data = self.cleaned_data
        return PurgeCriteria(
            idle_days=data["idle_days"],
            importance_below=data["importance_below"],
            scopes=tuple(sorted(data["scopes"])),
            agent_id=data["agent"] or "",
        )


class ConfirmForm(forms.Form):
    token = forms.CharField(widget=forms.HiddenInput, max_length=2_000_000)


class TrashFilterForm(forms.Form):
    run = forms.IntegerField(required=False, min_value=1, label="Purge run")
    agent = forms.CharField(required=False, max_length=64, label="Agent")
