"""Lifecycle records: per-team pipeline config, scenarios (L2), personas (L3), archived working
memory (L0) and the log of every job run."""

from __future__ import annotations

import uuid

from django.db import models

from tenants.models import Team


def _hex_id() -> str:
    return uuid.uuid4().hex


class PipelineConfig(models.Model):
    """The automatic pipeline of one team (API.md §6.3); defaults are the API's."""

    team = models.OneToOneField(
        Team, on_delete=models.CASCADE, primary_key=True, related_name="pipeline"
    )
    compress_every_n = models.PositiveIntegerField(default=10)
    compress_target_count = models.PositiveIntegerField(default=5)
    cleanup_idle_days = models.PositiveIntegerField(default=30)
    cleanup_min_importance = models.FloatField(default=0.2)
    enabled = models.BooleanField(default=True)
    warmup_max_memories = models.PositiveIntegerField(default=5)
    warmup_compress_every_n = models.PositiveIntegerField(default=1)
    # (beyond API.md) After each fact extraction, extract graph entities and relations from the
    # new facts (a separate, recorded job).
    extract_graph = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"pipeline of {self.team_id}"


class Scenario(models.Model):
    """L2: a topic that groups memories, with the ids of the memories it was made from."""

    id = models.CharField(primary_key=True, max_length=32, default=_hex_id, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    summary = models.TextField()
    memory_ids = models.JSONField(default=list)
    job = models.ForeignKey(
        "JobRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["team", "agent_id", "-created_at"], name="scenario_agent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.team_id}/{self.agent_id})"


class Persona(models.Model):
    """L3: who the agent's user is, built from memories and scenarios (kept with their ids)."""

    id = models.CharField(primary_key=True, max_length=32, default=_hex_id, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = models.CharField(max_length=64)
    preferences = models.JSONField(default=list)
    habits = models.JSONField(default=list)
    expertise = models.JSONField(default=list)
    communication_style = models.TextField(blank=True, default="")
    summary = models.TextField(blank=True, default="")
    memory_ids = models.JSONField(default=list)
    scenario_ids = models.JSONField(default=list)
    # Scenarios are regenerated over time; the persona keeps what they said when it was built.
    scenarios_snapshot = models.JSONField(default=list)
    job = models.ForeignKey(
        "JobRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["team", "agent_id", "-created_at"], name="persona_agent")]

    def __str__(self) -> str:
        return f"persona {self.id} of {self.team_id}/{self.agent_id}"


class WorkingArchive(models.Model):
    """L0: a working-memory item consumed by the lifecycle, kept so derived memories stay traceable."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = models.CharField(max_length=64)
    item_id = models.CharField(max_length=32)
    content = models.TextField()
    item_created_at = models.DateTimeField()
    archived_at = models.DateTimeField(auto_now_add=True)
    job = models.ForeignKey(
        "JobRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        indexes = [
            models.Index(fields=["team", "agent_id", "item_id"], name="archive_item"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id} item {self.item_id}"


class JobRun(models.Model):
    """Every lifecycle job, automatic or not: what ran, for whom, how it went, what it cost."""

    KINDS = [
        "compress",
        "extract-facts",
        "aggregate-scenes",
        "generate-persona",
        "cleanup",
        "auto-run",
        "extract-graph",
    ]
    TRIGGERS = ["api", "auto", "beat", "admin", "command"]
    STATUS_QUEUED = "queued"
    STATUS_RUNNING = "running"
    STATUS_SUCCEEDED = "succeeded"
    STATUS_FAILED = "failed"
    STATUSES = [STATUS_QUEUED, STATUS_RUNNING, STATUS_SUCCEEDED, STATUS_FAILED]

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = models.CharField(max_length=64, blank=True, default="")
    kind = models.CharField(max_length=20, choices=[(k, k) for k in KINDS])
    trigger = models.CharField(max_length=10, choices=[(t, t) for t in TRIGGERS])
    status = models.CharField(
        max_length=10, choices=[(s, s) for s in STATUSES], default=STATUS_QUEUED
    )
    params = models.JSONField(default=dict)
    counts = models.JSONField(default=dict)
    error = models.TextField(blank=True, default="")
    engine = models.CharField(max_length=128, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    # Set while an automatic job is queued or running ("compress:<team>:<agent>"); unique, so a
    # burst of working-memory writes can queue only one. Cleared when the job ends.
    active_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["team", "-created_at"], name="job_team"),
            models.Index(fields=["team", "agent_id", "kind", "-created_at"], name="job_agent_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.status} ({self.team_id}/{self.agent_id or '-'})"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None
