"""Django admin for teams, agents, keys and memberships, scoped to the user's teams.

A superuser sees everything. A staff user sees only the teams they hold a TeamMembership for:
`lead` may change, `viewer` may only look. Objects of other teams answer 404 on every admin URL
(never a redirect with "does not exist", which would still be a different answer).
The role is checked per object, in the object's own team: a user who leads team A and only views
team B sees both in a changelist, but every action, save and delete on B's rows is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.response import TemplateResponse
from django.utils import timezone

from . import selectors, services
from .models import Agent, ApiKey, Team, TeamMembership, TeamRole

# Per-object permissions an action can be checked against; any other declared permission
# ("add", a custom one) means the action writes, so it needs "change" on each object too.
_OBJECT_PERMISSIONS = ("view", "change", "delete")


def _checked_per_object(func: Callable[..., Any]) -> Callable[..., Any]:
    """The admin action `func`, refusing to run unless the user may act on every selected row.

    An action declaring no permissions is treated as a change: only an action that declares
    nothing but "view" may run on the rows of a team the user only views.
    """
    declared = tuple(getattr(func, "allowed_permissions", ()) or ("change",))
    needed = tuple(p for p in declared if p in _OBJECT_PERMISSIONS)
    if any(p not in _OBJECT_PERMISSIONS for p in declared) and "change" not in needed:
        needed += ("change",)

    @wraps(func)  # keeps allowed_permissions and short_description for Django's own filtering
    def run(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        modeladmin.check_each_object(request, queryset, needed)
        return func(modeladmin, request, queryset)

    return run


class TeamScopedAdminMixin:
    """Filters every queryset, form choice and permission by the user's team memberships."""

    team_lookup = "team"  # ORM path from the model to the team id
    lead_can_add = True
    lead_can_delete = True

    def _team_ids(self, request: HttpRequest, *, lead: bool = False) -> set[str] | None:
        """None means every team (superuser)."""
        if request.user.is_superuser:
            return None
        cache_attr = "_mp_lead_teams" if lead else "_mp_teams"
        if not hasattr(request, cache_attr):
            roles = (TeamRole.LEAD,) if lead else None
            setattr(
                request, cache_attr, selectors.team_ids_for_user(user=request.user, roles=roles)
            )
        return getattr(request, cache_attr)  # type: ignore[no-any-return]

    def _obj_team_id(self, obj: Model) -> str:
        value: Any = obj
        for part in self.team_lookup.split("__"):
            value = getattr(value, part if part != "team" else "team_id")
            if part == "team":
                break
        return str(value)

    def _allowed(self, request: HttpRequest, obj: Model | None, *, lead: bool) -> bool:
        if not request.user.is_active or not request.user.is_staff:
            return False
        ids = self._team_ids(request, lead=lead)
        if ids is None:
            return True
        if obj is None:
            return bool(ids)
        return self._obj_team_id(obj) in ids

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)  # type: ignore[misc]
        ids = self._team_ids(request)
        return qs if ids is None else qs.filter(**{f"{self.team_lookup}__in": ids})

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request, None, lead=False)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._allowed(request, obj, lead=False)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._allowed(request, obj, lead=True)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        if request.user.is_superuser:
            return True
        return self.lead_can_add and self._allowed(request, None, lead=True)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if request.user.is_superuser:
            return True
        return self.lead_can_delete and self._allowed(request, obj, lead=True)

    # --- Per-object checks for every write -------------------------------------------------
    # Django asks has_change_permission(request) WITHOUT an object before an action and before
    # saving list_editable rows, and the changelist also lists the teams where the user is only a
    # viewer: a lead of team A would pass that check for rows of team B. So every action is
    # wrapped (custom ones and the site-wide delete_selected alike, present and future) to check
    # the user's role in the team of EACH selected object, and save_model checks the team of
    # what is written. A selection with one object the user may not change is refused whole.

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # get_actions, not get_action: the site-wide actions (delete_selected) never pass
        # through get_action, and response_action runs what get_actions returns.
        return {
            name: (_checked_per_object(func), name, description)
            for name, (func, _, description) in super().get_actions(request).items()  # type: ignore[misc]
        }

    def check_each_object(
        self, request: HttpRequest, queryset: QuerySet[Any], permissions: tuple[str, ...]
    ) -> None:
        """PermissionDenied unless every object passes has_<perm>_permission(request, obj)."""
        for obj in queryset:
            for perm in permissions:
                if not getattr(self, f"has_{perm}_permission")(request, obj):
                    raise PermissionDenied(
                        f"You may not {perm} {obj} (team {self._obj_team_id(obj)}): "
                        "nothing was done. Select only objects of teams you lead."
                    )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # The form's choices already hold only the user's lead teams; this is the last word for
        # any path that saves (change form, list_editable, a custom form).
        if not self._allowed(request, obj, lead=True):
            raise PermissionDenied("Only a lead of the object's team may change it.")
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        ids = self._team_ids(request, lead=True)
        if ids is not None:
            if db_field.related_model is Team:
                kwargs["queryset"] = Team.objects.filter(id__in=ids)
            elif db_field.related_model is Agent:
                kwargs["queryset"] = Agent.objects.filter(team_id__in=ids)
            elif db_field.related_model is get_user_model():
                kwargs["queryset"] = (
                    get_user_model().objects.filter(team_memberships__team_id__in=ids).distinct()
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]

    def _scoped_object_or_404(self, request: HttpRequest, object_id: str) -> None:
        # Checked before any permission test: another team's object answers exactly like a
        # missing one (404), never 403, so its existence cannot be probed.
        if self.get_object(request, unquote(object_id)) is None:  # type: ignore[attr-defined]
            raise Http404("not found")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        self._scoped_object_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)  # type: ignore[misc]

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        self._scoped_object_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)  # type: ignore[misc]

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        self._scoped_object_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)  # type: ignore[misc]

    def _get_obj_does_not_exist_redirect(
        self, request: HttpRequest, opts: Any, object_id: str
    ) -> HttpResponse:
        # Another team's object and a missing one must look the same: a plain 404.
        raise Http404("not found")


@admin.register(Team)
class TeamAdmin(TeamScopedAdminMixin, admin.ModelAdmin):
    team_lookup = "id"
    lead_can_add = False
    lead_can_delete = False
    list_display = ("id", "name", "require_signature_v2", "created_at", "updated_at")
    search_fields = ("id", "name")
    readonly_fields = ("created_at", "updated_at")

    def _obj_team_id(self, obj: Model) -> str:
        return str(obj.pk)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        # The id is the tenant key everywhere (URLs, keys, Redis): fixed once created.
        return (*self.readonly_fields, "id") if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        # From the database, not form.changed_data: a field with a callable default compares
        # against a hidden "initial" input, which a hand-made POST need not send.
        required_before = (
            Team.objects.filter(pk=obj.pk).values_list("require_signature_v2", flat=True).first()
        )
        super().save_model(request, obj, form, change)
        if not obj.require_signature_v2 and required_before is not False:
            # The switch's help text says it already; say it again once it is done.
            self.message_user(
                request,
                f"Team {obj.id} now accepts v1 signatures: a captured v1 request can be replayed "
                "against any other endpoint of this team within the timestamp window. Switch "
                "back as soon as its clients sign v2.",
                messages.WARNING,
            )

    def delete_model(self, request: HttpRequest, obj: Team) -> None:
        services.team_delete(team=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Team]) -> None:
        for team in queryset:
            services.team_delete(team=team)


@admin.register(Agent)
class AgentAdmin(TeamScopedAdminMixin, admin.ModelAdmin):
    list_display = ("agent_id", "team", "name", "role", "created_at")
    list_filter = (("team", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("agent_id", "name", "role")
    readonly_fields = ("created_at", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        return (
            (*self.readonly_fields, "team", "agent_id") if obj is not None else self.readonly_fields
        )

    def delete_model(self, request: HttpRequest, obj: Agent) -> None:
        services.agent_delete(team=obj.team, agent_id=obj.agent_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset.select_related("team"):
            services.agent_delete(team=agent.team, agent_id=agent.agent_id)


class IssueKeyForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none())
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.none(),
        required=False,
        help_text="Bind the key to one agent (agent-scoped key); empty = team-wide key.",
    )
    label = forms.CharField(max_length=200, required=False)
    expires_in_days = forms.IntegerField(min_value=1, required=False, help_text="empty = never")
    rate_limit = forms.IntegerField(
        min_value=0,
        required=False,
        help_text="requests per window; empty = server default, 0 = unlimited",
    )

    def __init__(self, *args: Any, team_ids: set[str] | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        teams = Team.objects.all() if team_ids is None else Team.objects.filter(id__in=team_ids)
        agents = (
            Agent.objects.all() if team_ids is None else Agent.objects.filter(team_id__in=team_ids)
        )
        self.fields["team"].queryset = teams  # type: ignore[attr-defined]
        self.fields["agent"].queryset = agents.select_related("team")  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        agent, team = data.get("agent"), data.get("team")
        if agent is not None and team is not None and agent.team_id != team.id:
            self.add_error("agent", "This agent belongs to another team.")
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(TeamScopedAdminMixin, admin.ModelAdmin):
    list_display = (
        "key_id",
        "team",
        "agent",
        "label",
        "status",
        "created_at",
        "last_used_at",
        "expires_at",
    )
    list_filter = (("team", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("key_id", "label")
    actions = ("revoke_keys", "rotate_keys")
    # The encrypted secrets are never shown, not even encrypted.
    fields = (
        "key_id",
        "team",
        "agent",
        "label",
        "rate_limit",
        "expires_at",
        "created_at",
        "rotated_at",
        "last_used_at",
        "previous_secret_expires_at",
        "revoked_at",
    )
    readonly_fields = (
        "key_id",
        "team",
        "agent",
        "created_at",
        "rotated_at",
        "last_used_at",
        "previous_secret_expires_at",
        "revoked_at",
    )

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        team_ids = self._team_ids(request, lead=True)
        form = IssueKeyForm(request.POST or None, team_ids=team_ids)
        if request.method == "POST" and form.is_valid():
            days = form.cleaned_data.get("expires_in_days")
            issued = services.api_key_issue(
                team=form.cleaned_data["team"],
                agent=form.cleaned_data.get("agent"),
                label=form.cleaned_data.get("label") or "",
                expires_at=timezone.now() + timedelta(days=days) if days else None,
                rate_limit=form.cleaned_data.get("rate_limit"),
            )
            self.log_addition(request, issued.api_key, "Issued API key")
            return self._render_secrets(request, [issued], "API key issued")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "form": form,
            "title": "Issue an API key",
        }
        return TemplateResponse(request, "admin/tenants/apikey/issue.html", context)

    def _render_secrets(
        self, request: HttpRequest, issued: list[services.IssuedKey], title: str
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "issued": issued,
        }
        response = render(request, "admin/tenants/apikey/issued.html", context)
        # The page carries a secret: never let a browser or proxy keep it.
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for api_key in queryset:
            services.api_key_revoke(api_key=api_key)
            count += 1
        self.message_user(request, f"Revoked {count} key(s).", messages.SUCCESS)

    @admin.action(
        description="Rotate selected keys (old secret valid for the grace period)",
        permissions=["change"],
    )
    def rotate_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> HttpResponse | None:
        active = [k for k in queryset if k.revoked_at is None]
        if not active:
            self.message_user(request, "No active key selected.", messages.WARNING)
            return None
        issued = [services.api_key_rotate(api_key=k) for k in active]
        return self._render_secrets(request, issued, "API keys rotated")


@admin.register(TeamMembership)
class TeamMembershipAdmin(TeamScopedAdminMixin, admin.ModelAdmin):
    list_display = ("user", "team", "role", "created_at")
    list_filter = ("role", ("team", admin.RelatedOnlyFieldListFilter))
    search_fields = ("user__username", "team__id")
