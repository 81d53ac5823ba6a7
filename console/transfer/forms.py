"""Console forms for moving memories in and out: what a lead fills in to import a file or start
an export."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from core.validators import AGENT_ID
from lifecycle.services.bundle import ON_CONFLICT
from lifecycle.services.convert import AGENT_KEYS, SOURCES
from tenants.models import Agent, Team

# What the uploaded file is: the `from` of POST /import, in words.
_SOURCES = {
    "bundle": "this server's bundle (.jsonl.gz)",
    "mem0": "mem0: get_all() JSON",
    "letta": "Letta: agent file (.af)",
    "zep": "Zep or Graphiti: nodes, edges, threads (JSON)",
}
_CONFLICTS = {
    "skip": "keep what is here",
    "overwrite": "update it from the file",
    "new_ids": "write the file's as new records beside it",
}
SOURCE_CHOICES = [(s, _SOURCES[s]) for s in SOURCES]
CONFLICT_CHOICES = [(c, f"{c}: {_CONFLICTS[c]}") for c in ON_CONFLICT]


class ImportForm(forms.Form):
    file = forms.FileField(help_text=f"at most {settings.IMPORT_MAX_BYTES // (1024 * 1024)} MiB")
    source = forms.ChoiceField(choices=SOURCE_CHOICES, initial="bundle", label="The file is")
    on_conflict = forms.ChoiceField(
        choices=CONFLICT_CHOICES,
        initial="skip",
        label="A record already here",
        help_text="a memory is already here when its agent has the same text",
    )
    agent_id = forms.CharField(
        max_length=64,
        required=False,
        validators=[AGENT_ID],
        label="Agent here",
        help_text="Letta: the id of the file's one agent (its name otherwise); Zep: the agent "
        "the user is (its user_id otherwise)",
    )
    agent_from = forms.ChoiceField(
        choices=[(k, k) for k in AGENT_KEYS],
        initial="user_id",
        label="mem0: agent from",
        help_text="the mem0 key naming each memory's agent",
    )
    default_agent = forms.CharField(
        max_length=64,
        required=False,
        validators=[AGENT_ID],
        label="mem0: default agent",
        help_text="the agent of a memory without that key",
    )

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        if upload.size > settings.IMPORT_MAX_BYTES:
            raise forms.ValidationError(
                f"The file is over the limit of {settings.IMPORT_MAX_BYTES} bytes "
                "(IMPORT_MAX_BYTES): import it with `manage.py import_team`."
            )
        return upload


class ExportForm(forms.Form):
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.none(),
        required=False,
        empty_label="(the whole team)",
        to_field_name="agent_id",
        help_text="one agent's memories, archive, graph, profile and rules; empty = the team's",
    )

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only this team's agents can be chosen: another team's agent id is an invalid choice.
        self.fields["agent"].queryset = Agent.objects.filter(team=team).order_by("agent_id")  # type: ignore[attr-defined]
