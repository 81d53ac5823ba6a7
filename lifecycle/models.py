"""Lifecycle records: per-team pipeline config, scenarios (L2), personas (L3), archived working
memory (L0) and the log of every job run."""

from __future__ import annotations

import uuid

from django.db import models

from core.fields import AgentIdField, ExactCharField
from tenants.models import Team


def _hex_id() -> str:
    return uuid.uuid4().hex


class ArchiveReason(models.TextChoices):
    """Why a working-memory item was archived (WorkingArchive.reason)."""

    CONSUMED = "consumed", "consumed"
    EVICTED = "evicted", "evicted"
    # A conversation message sent to POST /memories/ingest: never in working memory, kept as L0.
    INGESTED = "ingested", "ingested"


class JobTrigger(models.TextChoices):
    """What started a job (JobRun.trigger)."""

    API = "api", "api"
    AUTO = "auto", "auto"
    BEAT = "beat", "beat"
    ADMIN = "admin", "admin"
    COMMAND = "command", "command"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    # Its lease expired while queued or running (the worker died, or no worker took it): given
    # up, its keys released, and retried once as a new job (`retry_of`).
    ABANDONED = "abandoned", "abandoned"


class PipelineConfig(models.Model):
    """The automatic pipeline of one team (docs/lifecycle.md); defaults are the API's."""

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
    # (beyond the original API) After each fact extraction, extract graph entities and relations from the
    # new facts (a separate, recorded job).
    extract_graph = models.BooleanField(default=False)
    # Warm-up by doubling (pipeline.compress_threshold): an agent's compresses come after 1, 2,
    # 4, … items up to compress_every_n; False keeps the fixed warmup_compress_every_n.
    warmup_doubling = models.BooleanField(default=True)
    # An agent with working items and no write for this long gets a compress (0 = never).
    idle_extract_seconds = models.PositiveIntegerField(default=600)
    # aggregate-scenes after a fact extraction at most once per this interval (0 = never).
    scenario_min_interval_seconds = models.PositiveIntegerField(default=900)
    # generate-persona after every N new personal memories of the agent (0 = never).
    persona_every_n = models.PositiveIntegerField(default=50)
    # Agent ids (fnmatch globs) the automatic pipeline leaves alone.
    excluded_agents = models.JSONField(default=list, blank=True)
    # An ingest writes at most this many memories per run (session); 0 = unlimited.
    max_memories_per_run = models.PositiveIntegerField(default=0)
    # After a fact extraction, consolidate groups of at least this many fragments (0 = never).
    consolidate_min_fragments = models.PositiveIntegerField(default=0)
    # An agent's search answers with what it has after this many milliseconds rather than wait
    # for a scope's index to load (partial: true); 0 = wait as long as it takes. Not automation:
    # it applies whether or not the config was ever saved (docs/search.md, "Recall timeout").
    recall_timeout_ms = models.PositiveIntegerField(default=5000)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The API's range (lifecycle.apis): memory importance is within 0..1.
            models.CheckConstraint(
                condition=models.Q(
                    cleanup_min_importance__gte=0.0, cleanup_min_importance__lte=1.0
                ),
                name="pipeline_min_importance_range",
            )
        ]

    def __str__(self) -> str:
        return f"pipeline of {self.team_id}"


class Scenario(models.Model):
    """L2: a topic that groups memories, with the ids of the memories it was made from."""

    id = models.CharField(primary_key=True, max_length=32, default=_hex_id, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
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
    agent_id = AgentIdField()
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
    """L0: a working-memory item that left working memory other than by expiring — consumed by a
    lifecycle job (kept so derived memories stay traceable) or pushed out by the per-agent cap
    (kept so it is not lost, and restorable: lifecycle.services.archive)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    item_id = ExactCharField(max_length=32)
    content = models.TextField()
    item_created_at = models.DateTimeField()
    archived_at = models.DateTimeField(auto_now_add=True)
    job = models.ForeignKey(
        "JobRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reason = models.CharField(
        max_length=10, choices=ArchiveReason.choices, default=ArchiveReason.CONSUMED
    )
    # An evicted item put back into working memory (as a new item, whose id is kept here).
    restored_at = models.DateTimeField(null=True, blank=True)
    restored_item_id = ExactCharField(max_length=32, blank=True, default="")
    # An ingested message's role (user, assistant, system, tool), speaker name and run (session).
    role = models.CharField(max_length=10, blank=True, default="")
    name = models.CharField(max_length=64, blank=True, default="")
    run_id = ExactCharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(reason__in=ArchiveReason.values), name="archive_reason_valid"
            )
        ]
        indexes = [
            models.Index(fields=["team", "agent_id", "item_id"], name="archive_item"),
            models.Index(fields=["team", "reason"], name="archive_reason"),
            models.Index(fields=["team", "run_id"], name="archive_run"),
            # The retention's scan (lifecycle.services.archive.archive_prune).
            models.Index(fields=["archived_at"], name="archive_age"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id} item {self.item_id}"


class JobKind(models.TextChoices):
    """What a job does. The operation each kind runs is registered in
    lifecycle.services.pipeline (`HANDLERS`); labels are the values, as shown in the admin and the
    console."""

    COMPRESS = "compress", "compress"
    EXTRACT_FACTS = "extract-facts", "extract-facts"
    AGGREGATE_SCENES = "aggregate-scenes", "aggregate-scenes"
    GENERATE_PERSONA = "generate-persona", "generate-persona"
    CLEANUP = "cleanup", "cleanup"
    AUTO_RUN = "auto-run", "auto-run"
    EXTRACT_GRAPH = "extract-graph", "extract-graph"
    # POST /memories/ingest with `async`: a conversation archived and its facts decided.
    INGEST = "ingest", "ingest"
    # POST /export: a team's or agent's bundle written for download.
    EXPORT = "export", "export"
    # POST /lifecycle/propose-procedures: rules proposed from repeated feedback.
    PROPOSE_PROCEDURES = "propose-procedures", "propose-procedures"
    # POST /lifecycle/consolidate: fragments about one thing become one stable fact.
    CONSOLIDATE = "consolidate", "consolidate"
    # Not an operation: the record of working items the cap pushed into the archive.
    CAP_ARCHIVE = "cap-archive", "cap-archive"


# The kinds that may call the LLM: their queued jobs go to the `llm` queue, the others to
# `maintenance` (lifecycle.services.dispatch.enqueue).
LLM_JOB_KINDS = frozenset(
    {
        JobKind.COMPRESS,
        JobKind.EXTRACT_FACTS,
        JobKind.AGGREGATE_SCENES,
        JobKind.GENERATE_PERSONA,
        JobKind.EXTRACT_GRAPH,
        JobKind.INGEST,
        JobKind.CONSOLIDATE,
    }
)


class JobRun(models.Model):
    """Every lifecycle job, automatic or not: what ran, for whom, how it went, what it cost."""

    ACTIVE_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField(blank=True, default="")
    kind = models.CharField(max_length=20, choices=JobKind.choices)
    trigger = models.CharField(max_length=10, choices=JobTrigger.choices)
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    params = models.JSONField(default=dict)
    counts = models.JSONField(default=dict)
    # The whole result as the API answers it (GET /jobs/<id>): what an asynchronous request
    # (ingest, export) hands back. `counts` keeps its scalar fields for the console and metrics.
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    engine = models.CharField(max_length=128, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    # Set while an automatic job is queued or running ("compress:<team>:<agent>"); unique, so a
    # burst of working-memory writes can queue only one. Cleared when the job ends.
    active_key = ExactCharField(max_length=200, null=True, blank=True, unique=True)
    # The lease (lifecycle.services.jobs): while queued, the deadline for a worker to pick the job
    # up; while running, the deadline its worker's heartbeat keeps pushing back. Past it, the job
    # is abandoned and retried. `lease_token` names the current holder, so a worker that lost
    # the job (taken over after its lease expired) can no longer record or commit anything.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_token = models.CharField(max_length=32, blank=True, default="")
    # Held while the job consumes an agent's working memory ("working:<team>:<agent>"): unique,
    # so two compresses never summarise the same items; it lapses with the lease.
    claim_key = ExactCharField(max_length=200, null=True, blank=True, unique=True)
    retry_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="retries"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=JobKind.values), name="job_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(trigger__in=JobTrigger.values), name="job_trigger_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=JobStatus.values), name="job_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["team", "-created_at"], name="job_team"),
            models.Index(fields=["team", "agent_id", "kind", "-created_at"], name="job_agent_kind"),
            models.Index(fields=["status", "lease_expires_at"], name="job_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.status} ({self.team_id}/{self.agent_id or '-'})"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class ExportChunk(models.Model):
    """One piece (at most 1 MiB, lifecycle.services.bundle.CHUNK_BYTES) of an export job's gzipped bundle.

    In the database, not on a worker's disk: the job may run on any node and the download is
    answered by any other. Removed with the job's export after EXPORT_RETENTION_HOURS
    (lifecycle.services.bundle.exports_prune).
    """

    job = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="export_chunks")
    seq = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="uniq_export_chunk")]

    def __str__(self) -> str:
        return f"export {self.job_id} chunk {self.seq}"
