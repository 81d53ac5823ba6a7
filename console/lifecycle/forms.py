"""Console forms for the lifecycle area.

The pipeline config and every run-now operation are validated by the API's own DRF serializers
(lifecycle/apis.py, graph/apis.py): a Django form only turns the HTML strings into typed values,
then hands them to the serializer, whose errors come back as form errors. The bounds and rules
live in one place, so the console and the API can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from rest_framework import serializers

from lifecycle.apis import (
    AggregateInputSerializer,
    AutoConfigInputSerializer,
    CleanupInputSerializer,
    CompressInputSerializer,
    ConsolidateInputSerializer,
    ExtractFactsInputSerializer,
    ExtractGraphInputSerializer,
    PersonaInputSerializer,
    ProposeProceduresInputSerializer,
)
from lifecycle.models import JobKind, JobStatus, JobTrigger

LABELS = {
    "compress_every_n": "Compress every N working items",
    "compress_target_count": "Summaries per compression",
    "cleanup_idle_days": "Cleanup: idle days (0 = no automatic cleanup)",
    "cleanup_min_importance": "Cleanup: below importance",
    "enabled": "Enabled",
    "warmup_max_memories": "Warm-up while an agent has fewer than N memories",
    "warmup_compress_every_n": "Warm-up: compress every N items",
    "extract_graph": "Extract graph after fact extraction",
    "warmup_doubling": "Warm-up by doubling (compress after 1, 2, 4, … items)",
    "idle_extract_seconds": "Compress after this many idle seconds (0 = never)",
    "scenario_min_interval_seconds": "Scenes after extraction at most every N seconds (0 = never)",
    "persona_every_n": "Persona after every N new memories (0 = never)",
    "excluded_agents": "Excluded agents (globs, comma-separated)",
    "max_memories_per_run": "Ingest: max memories per run (0 = unlimited)",
    "consolidate_min_fragments": "Consolidate groups of N fragments after extraction (0 = never)",
    "recall_timeout_ms": "Search: answer with what is ready after N ms (0 = no limit)",
    "target_count": "Summaries",
    "max_memories": "Max memories",
    "max_items": "Max items",
    "delete_after": "Delete working items afterwards",
    "max_age_days": "Idle days",
    "min_importance": "Below importance",
    "agent_id": "Agent",
}


class CommaListField(forms.CharField):
    """A list of strings typed as one comma- or space-separated line (e.g. agent id globs)."""

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [part for part in text.replace(",", " ").split() if part]


def _form_field(name: str, field: serializers.Field) -> forms.Field:
    """A Django field that parses the HTML value into the type the serializer expects.

    Only parsing happens here; ranges and rules are the serializer's (HTML min/max attributes are
    a convenience for the browser, copied from it).
    """
    label = LABELS.get(name, name.replace("_", " ").capitalize())
    attrs: dict[str, Any] = {}
    for attr in ("min_value", "max_value"):
        value = getattr(field, attr, None)
        if value is not None:
            attrs[attr[:3]] = value
    if isinstance(field, serializers.BooleanField):
        return forms.BooleanField(required=False, label=label)
    if isinstance(field, serializers.IntegerField):
        return forms.IntegerField(required=False, label=label, widget=forms.NumberInput(attrs))
    if isinstance(field, serializers.ListField):
        return CommaListField(required=False, label=label)
    if isinstance(field, serializers.FloatField):
        return forms.FloatField(
            required=False, label=label, widget=forms.NumberInput({**attrs, "step": "any"})
        )
    return forms.CharField(required=False, label=label)


class SerializerForm(forms.Form):
    """A form whose fields mirror `serializer_class` and whose validation is that serializer's."""

    serializer_class: type[serializers.Serializer] = serializers.Serializer
    validated: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.serializer_class().fields.items():
            if name not in self.fields:
                self.fields[name] = _form_field(name, field)
            if name not in self.initial and field.default is not serializers.empty:
                self.initial[name] = field.default

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # An empty number box means "not given": the serializer applies its default, as it does
        # for a field missing from an API request.
        payload = {k: v for k, v in data.items() if v is not None and v != ""}
        serializer = self.serializer_class(data=payload)
        if not serializer.is_valid():
            for name, errors in serializer.errors.items():
                target = name if name in self.fields else None
                if target is not None and target in self.errors:
                    continue  # already refused while parsing (e.g. "required")
                for error in errors if isinstance(errors, list) else [errors]:
                    self.add_error(target, str(error))
        else:
            self.validated = dict(serializer.validated_data)
        return data


class PipelineConfigForm(SerializerForm):
    """POST /lifecycle/auto-config as a form: every field is sent (a checkbox left empty is
    false), so saving stores the whole config the lead sees."""

    serializer_class = AutoConfigInputSerializer


# --- Run now ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    kind: str
    title: str
    help: str
    serializer: type[serializers.Serializer] | None
    needs_agent: bool


OPERATIONS: list[Operation] = [
    Operation(
        "compress",
        "Compress working memory",
        "Summarise the agent's working memory into long-term memories; the items are archived.",
        CompressInputSerializer,
        True,
    ),
    Operation(
        "extract-facts",
        "Extract facts",
        "Turn the agent's working memory into atomic facts (updates supersede older facts).",
        ExtractFactsInputSerializer,
        True,
    ),
    Operation(
        "aggregate-scenes",
        "Aggregate scenes",
        "Group the agent's memories into scenarios.",
        AggregateInputSerializer,
        True,
    ),
    Operation(
        "generate-persona",
        "Generate persona",
        "Build a persona from the agent's memories and scenarios.",
        PersonaInputSerializer,
        True,
    ),
    Operation(
        "consolidate",
        "Consolidate",
        "Merge fragments that say the same thing (3 or more) into one fact; the fragments are "
        "superseded by it, not deleted.",
        ConsolidateInputSerializer,
        True,
    ),
    Operation(
        "propose-procedures",
        "Propose rules",
        "Propose a rule for feedback the agent's memories repeat; it is followed only once "
        "accepted (Agents' rules).",
        ProposeProceduresInputSerializer,
        True,
    ),
    Operation(
        "cleanup",
        "Cleanup",
        "Forget memories that are both unimportant and idle (pinned ones never). "
        "A dry run only counts them; an empty agent means the whole team.",
        CleanupInputSerializer,
        False,
    ),
    Operation(
        "extract-graph",
        "Extract graph",
        "Extract entities and relations from recent memories (empty agent: team memories).",
        ExtractGraphInputSerializer,
        False,
    ),
    Operation(
        "auto-run",
        "Whole pipeline",
        "Run now everything the team's pipeline config calls for: compress every agent over "
        "its threshold, then the cleanup (each action is its own job).",
        None,
        False,
    ),
]
OPERATIONS_BY_KIND = {op.kind: op for op in OPERATIONS}
assert set(OPERATIONS_BY_KIND) <= set(JobKind.values)


class RunForm(SerializerForm):
    """One operation's parameters, validated by that operation's API serializer."""

    def __init__(
        self, *args: Any, operation: Operation, agent_ids: list[str], **kwargs: Any
    ) -> None:
        self.operation = operation
        self.serializer_class = operation.serializer or serializers.Serializer
        super().__init__(*args, **kwargs)
        if "agent_id" in self.fields:
            choices = [(a, a) for a in agent_ids]
            if not operation.needs_agent:
                choices = [("", "(whole team)"), *choices]
            self.fields["agent_id"] = forms.ChoiceField(
                choices=choices, required=operation.needs_agent, label="Agent"
            )
        # Cleanup has two buttons (dry run / for real) that set this field.
        if "dry_run" in self.fields:
            self.fields["dry_run"].widget = forms.HiddenInput()

    @property
    def param_fields(self) -> list[forms.BoundField]:
        return [f for f in self if f.name not in ("agent_id", "dry_run")]

    def job_args(self) -> tuple[str, dict[str, Any]]:
        """(agent_id, params) for the job, from the validated values."""
        data = dict(self.validated)
        return str(data.pop("agent_id", "") or ""), data


class JobFilterForm(forms.Form):
    status = forms.ChoiceField(required=False, choices=[("", "any")])
    kind = forms.ChoiceField(required=False, label="Operation", choices=[("", "any")])
    trigger = forms.ChoiceField(required=False, choices=[("", "any")])
    agent_id = forms.ChoiceField(required=False, label="Agent", choices=[("", "any")])
    failed = forms.BooleanField(required=False, label="Failed only")

    def __init__(self, *args: Any, agent_ids: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        any_ = [("", "any")]
        self.fields["status"].choices = any_ + JobStatus.choices  # type: ignore[attr-defined]
        self.fields["kind"].choices = any_ + JobKind.choices  # type: ignore[attr-defined]
        self.fields["trigger"].choices = any_ + JobTrigger.choices  # type: ignore[attr-defined]
        self.fields["agent_id"].choices = any_ + [(a, a) for a in agent_ids]  # type: ignore[attr-defined]

    def filters(self) -> dict[str, Any]:
        if not self.is_valid():
            return {}
        d = self.cleaned_data
        return {
            "status": d["status"],
            "kind": d["kind"],
            "trigger": d["trigger"],
            "agent_id": d["agent_id"],
            "failed_only": d["failed"],
        }


class RuleEditForm(forms.Form):
    """A lead's correction of a rule's text: the limits of the API's (ProcedureInputSerializer)."""

    rule = forms.CharField(max_length=2000)
