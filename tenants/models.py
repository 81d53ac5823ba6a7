"""Tenancy: teams, their agents, their API keys and the admin users who govern them."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from core.fields import AgentIdField, ExactCharField
from core.validators import AGENT_ID_RE, TEAM_ID_RE

team_id_validator = RegexValidator(TEAM_ID_RE, "1 to 64 characters: letters, digits, _ and -.")
agent_id_validator = RegexValidator(AGENT_ID_RE, "1 to 64 characters: letters, digits, _ . : @ -.")


SIGNATURE_V2_HELP = (
    "Refuse v1 signatures. Turn this off only for a legacy client that cannot sign v2, and "
    "know the risk: a v1 signature covers the timestamp and the body but neither the method "
    "nor the path, so whoever captures one signed request (say GET /stats) can replay it "
    "against another endpoint (say DELETE /teams/<id>) until its timestamp is older than "
    "HMAC_MAX_SKEW_SECONDS (300 s by default). v2 signs the method, the path and a "
    "single-use nonce."
)


def new_team_requires_signature_v2() -> bool:
    """Team.require_signature_v2 of a team created now, by any path (API, commands, admin)."""
    return bool(settings.NEW_TEAMS_REQUIRE_SIGNATURE_V2)


class Team(models.Model):
    id = models.CharField(primary_key=True, max_length=64, validators=[team_id_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    config = models.JSONField(default=dict, blank=True)
    # Hardening (beyond the original API): refuse v1 signatures, which do not cover method or path and
    # can be replayed against another endpoint within the skew window. A callable default, so
    # every way of creating a team follows NEW_TEAMS_REQUIRE_SIGNATURE_V2 (on in production).
    require_signature_v2 = models.BooleanField(
        default=new_team_requires_signature_v2, help_text=SIGNATURE_V2_HELP
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.id

    def clean(self) -> None:
        super().clean()
        if self._state.adding:
            other = team_id_in_other_case(self.id)
            if other is not None:
                raise ValidationError({"id": team_id_case_message(other)})


def team_id_in_other_case(team_id: str) -> str | None:
    """The id of an existing team that differs from `team_id` by case only, if any. Team ids
    are unique regardless of case on every database: on MariaDB the default collation makes
    `Team_A` the team `team_a` (its primary key and every foreign key to it fold case), on SQLite
    it would be another team. The rule keeps one meaning for a team id everywhere."""
    ids = Team.objects.filter(id__iexact=team_id).values_list("id", flat=True)
    return next((i for i in ids if i != team_id), None)


def team_id_case_message(other: str) -> str:
    return f"The team {other!r} exists: team ids must differ by more than case."


class Agent(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="agents")
    agent_id = AgentIdField(validators=[agent_id_validator])
    name = models.CharField(max_length=200)
    role = models.CharField(max_length=200, blank=True, default="")
    config = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team_id", "agent_id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "agent_id"], name="uniq_agent_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id}"


class RevocableCredential:
    """State of a credential that may expire or be revoked (API keys, MCP tokens)."""

    revoked_at: datetime | None
    expires_at: datetime | None

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"


class ApiKey(RevocableCredential, models.Model):
    """A team's credential. `key_id` is public (X-API-Key); the secret is stored encrypted.

    The server must know the raw secret to verify an HMAC, so it is Fernet-encrypted with a key
    derived from settings, never only hashed, never logged.
    """

    key_id = models.CharField(max_length=64, unique=True)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    # Agent-scoped keys: null = a team-wide key.
    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="api_keys"
    )
    label = models.CharField(max_length=200, blank=True, default="")
    secret_encrypted = models.TextField()
    # Rotation: the previous secret keeps verifying until previous_secret_expires_at.
    previous_secret_encrypted = models.TextField(blank=True, default="")
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    # Secrets before the previous one that were still in their grace when the key was rotated
    # again, newest first: [{"secret": <encrypted>, "until": <ISO time>}]. Each keeps its own
    # grace, so a second rotation does not cut off agents still on the original secret.
    earlier_secrets = models.JSONField(default=list, blank=True)
    # Requests per window for this key; null = the API_RATE_LIMIT setting, 0 = unlimited.
    rate_limit = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team_id", "-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return self.key_id

    def old_secrets(self, now: datetime | None = None) -> list[tuple[str, datetime]]:
        """The old secrets still in their grace, newest first: (encrypted secret, until)."""
        now = now or timezone.now()
        found: list[tuple[str, datetime]] = []
        until = self.previous_secret_expires_at
        if self.previous_secret_encrypted and until is not None and until > now:
            found.append((self.previous_secret_encrypted, until))
        for item in self.earlier_secrets or []:
            until = datetime.fromisoformat(item["until"])
            if until > now:
                found.append((item["secret"], until))
        return found

    @property
    def old_secrets_until(self) -> list[datetime]:
        """When each old secret still verifying stops, latest first (what the console shows)."""
        return sorted((until for _, until in self.old_secrets()), reverse=True)


class McpToken(RevocableCredential, models.Model):
    """A bearer token for the MCP endpoint (agentmcp): one team and, optionally, one agent.

    Unlike an API key the server never needs the raw token back (nothing is signed with it),
    so only its SHA-256 is kept: the token is 32 random bytes, which a fast hash protects as
    well as a slow one. `token_id` is the public part printed in the token itself
    (`mcp_<token_id>_<secret>`), to recognise and revoke it.
    """

    token_id = models.CharField(max_length=32, unique=True)
    token_hash = models.CharField(max_length=64, unique=True)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="mcp_tokens")
    # Agent-scoped tokens: null = a team-wide token (as ApiKey.agent).
    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="mcp_tokens"
    )
    label = models.CharField(max_length=200, blank=True, default="")
    # Requests per window for this token; null = the API_RATE_LIMIT setting, 0 = unlimited.
    rate_limit = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team_id", "-created_at"]
        verbose_name = "MCP token"

    def __str__(self) -> str:
        return f"mcp_{self.token_id}"


class TeamRole(models.TextChoices):
    LEAD = "lead", "Lead"
    VIEWER = "viewer", "Viewer"


class TeamMembership(models.Model):
    """Links a Django (admin) user to a team: `lead` may change, `viewer` may only look."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=TeamRole.choices, default=TeamRole.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team_id", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="uniq_membership"),
            models.CheckConstraint(
                condition=models.Q(role__in=TeamRole.values), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.team_id} ({self.role})"


class UsageDay(models.Model):
    """API usage of one agent (or "" for team-wide calls) on one day: the dashboard's counts.

    Written only by tenants.usage.usage_flush from counters kept in the cache, never on the
    request path (usage_record counts in the cache).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    # A plain id like Memory.agent_id: usage history outlives a deleted agent.
    agent_id = AgentIdField(blank=True, default="")
    day = models.DateField()
    searches = models.PositiveIntegerField(default=0)
    writes = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "agent_id", "day"], name="uniq_usage_day")
        ]
        indexes = [models.Index(fields=["team", "day"], name="usage_team_day")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id or '*'} {self.day}: {self.searches}s {self.writes}w"


class IdempotentRequest(models.Model):
    """A write request sent with an `Idempotency-Key` header and the answer it got, so that a
    retry of it (a timeout, a crashed client) is answered the same without writing twice. Kept
    for IDEMPOTENCY_TTL_HOURS; a retry with the same key but another body is refused. Inserted
    in the transaction that commits the request's writes: of two concurrent retries, the second
    waits on the unique key and then replays the first's answer."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    endpoint = models.CharField(max_length=40)  # "ingest", "job:<id>" for a job's own run
    # Exact on every database: keys differing only by case are two keys (MariaDB's default
    # collation would make them one, and replay one request's answer to another).
    key = ExactCharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "endpoint", "key"], name="idempotent_key")
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotent_age")]

    def __str__(self) -> str:
        return f"{self.team_id} {self.endpoint} {self.key}"
