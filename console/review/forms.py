"""Forms of the review area: the same limits as the API's serializers (memories.apis)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from memories.models import MemoryScope, MemoryTier, SharePermission

ALL = [("", "all")]
PERMISSIONS = SharePermission.choices


def _importance(**kwargs: Any) -> forms.FloatField:
    return forms.FloatField(
        min_value=0.0,
        max_value=1.0,
        widget=forms.NumberInput(attrs={"step": "0.05", "min": "0", "max": "1"}),
        **kwargs,
    )


def _choices(form: forms.Form, name: str, choices: list[tuple[str, str]]) -> None:
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)
    field.choices = choices


class FilterForm(forms.Form):
    """The list's filters (GET). Choices come from the team's own agents, categories, sources."""

    q = forms.CharField(
        required=False,
        max_length=4000,
        label="Search by meaning",
        widget=forms.TextInput(
            attrs={"type": "search", "placeholder": "what are you looking for?"}
        ),
    )
    min_score = forms.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        label="min score",
        widget=forms.NumberInput(
            attrs={"step": "0.05", "min": "0", "max": "1", "placeholder": "0.3"}
        ),
    )
    agent = forms.ChoiceField(required=False)
    scope = forms.ChoiceField(required=False, choices=ALL + MemoryScope.choices)
    source = forms.ChoiceField(required=False)
    category = forms.ChoiceField(required=False)
    tier = forms.ChoiceField(required=False, choices=ALL + MemoryTier.choices)
    importance_min = _importance(required=False, label="importance ≥")
    importance_max = _importance(required=False, label="importance ≤")
    idle_days = forms.IntegerField(
        required=False, min_value=0, max_value=36500, label="idle ≥ days"
    )
    pinned = forms.ChoiceField(
        required=False, choices=[("", "all"), ("yes", "pinned"), ("no", "not pinned")]
    )
    superseded = forms.ChoiceField(
        required=False,
        choices=[("hide", "hide superseded"), ("only", "only superseded"), ("all", "all")],
    )

    def __init__(self, *args: Any, facets: dict[str, list[str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _choices(self, "agent", ALL + [(a, a) for a in facets["agents"]])
        _choices(self, "source", ALL + [(s, s) for s in facets["sources"]])
        _choices(self, "category", ALL + [(c, c) for c in facets["categories"]])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        lo, hi = data.get("importance_min"), data.get("importance_max")
        if lo is not None and hi is not None and lo > hi:
            self.add_error("importance_max", "Must not be below the minimum.")
        return data

    def selector_kwargs(self) -> dict[str, Any]:
        """The cleaned filters as memories.selectors.memory_review_queryset arguments."""
        d = self.cleaned_data
        return {
            "agent_id": d.get("agent") or "",
            "scope": d.get("scope") or "",
            "source": d.get("source") or "",
            "category": d.get("category") or "",
            "tier": d.get("tier") or "",
            "importance_min": d.get("importance_min"),
            "importance_max": d.get("importance_max"),
            "idle_days": d.get("idle_days"),
            "pinned": {"yes": True, "no": False}.get(d.get("pinned") or ""),
            "superseded": {"only": True, "all": None}.get(d.get("superseded") or "", False),
        }


def _content_field(**kwargs: Any) -> forms.CharField:
    return forms.CharField(
        max_length=settings.MEMORY_MAX_CONTENT_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        **kwargs,
    )


class CorrectionForm(forms.Form):
    """The detail page's inline correction: content, importance, category, pin state and
    expiry (blank: never), the last in UTC as the console shows it."""

    content = _content_field()
    importance = _importance()
    category = forms.CharField(max_length=64)
    pinned = forms.BooleanField(required=False)
    expires_at = forms.DateTimeField(
        required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"],
        widget=forms.DateTimeInput(
            attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"
        ),
    )

    def __init__(self, *args: Any, current_expiry: datetime | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.current_expiry = current_expiry

    def clean_expires_at(self) -> datetime | None:
        value: datetime | None = self.cleaned_data["expires_at"]
        current = self.current_expiry
        if value is None:
            return None
        if current is not None and value == current.replace(microsecond=0):
            # Shown to the second and sent back as it was: unchanged, even when already past
            # (an expired memory corrected before the trash's pass moves it).
            return current
        if value <= timezone.now():
            raise forms.ValidationError("Must be in the future; leave it blank for never.")
        return value

    def clean_content(self) -> str:
        value: str = self.cleaned_data["content"]
        if not value.strip():
            raise forms.ValidationError("Must not be empty.")
        # Browsers submit textarea line breaks as CRLF; the stored text uses LF.
        return value.replace("\r\n", "\n")


class QuickEditForm(forms.Form):
    """A row's quick correction on the list: importance and/or pin state."""

    importance = _importance(required=False)
    pinned = forms.TypedChoiceField(
        required=False,
        choices=[("", "unchanged"), ("1", "pin"), ("0", "unpin")],
        coerce=lambda v: v == "1",
        empty_value=None,
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("importance") is None and data.get("pinned") is None:
            raise forms.ValidationError("Give an importance or a pin state.")
        return data


class IdListField(forms.Field):
    """The selected rows' ids (checkboxes named `ids`); anything not a positive id is an error."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        ids: list[int] = []
        for raw in value if isinstance(value, list | tuple) else [value]:
            try:
                n = int(raw)
            except (TypeError, ValueError):
                raise forms.ValidationError("Not a memory id: %(v)s", params={"v": raw}) from None
            if not 0 < n < 2**63:
                raise forms.ValidationError("Not a memory id: %(v)s", params={"v": raw})
            ids.append(n)
        return ids

    def validate(self, value: list[int]) -> None:
        if self.required and not value:
            raise forms.ValidationError("Select at least one memory.")
        if len(value) > 1000:
            raise forms.ValidationError("At most 1000 memories at a time.")


class BulkForm(forms.Form):
    ACTIONS = [
        ("pin", "Pin"),
        ("unpin", "Unpin"),
        ("importance", "Set importance"),
        ("share", "Share with agents"),
        ("delete", "Delete (pinned ones are skipped)"),
    ]

    ids = IdListField()
    action = forms.ChoiceField(choices=ACTIONS)
    importance = _importance(required=False)
    agents = forms.MultipleChoiceField(required=False, widget=forms.SelectMultiple)
    permission = forms.ChoiceField(choices=PERMISSIONS, initial="read", required=False)

    def __init__(self, *args: Any, agents: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _choices(self, "agents", [(a, a) for a in agents])

    def clean_permission(self) -> str:
        return self.cleaned_data.get("permission") or SharePermission.READ

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        action = data.get("action")
        if action == "importance" and data.get("importance") is None:
            self.add_error("importance", "Give the importance to set (0 to 1).")
        if action == "share" and not data.get("agents"):
            self.add_error("agents", "Choose at least one agent to share with.")
        return data


class ShareForm(forms.Form):
    """Grant on one personal memory: agents of this team other than the owner, read or write."""

    agents = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    permission = forms.ChoiceField(choices=PERMISSIONS, initial="read", required=False)

    def __init__(self, *args: Any, agents: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _choices(self, "agents", [(a, a) for a in agents])

    def clean_permission(self) -> str:
        return self.cleaned_data.get("permission") or SharePermission.READ


class UnshareForm(forms.Form):
    agent = forms.CharField(max_length=64)
