"""Long-term memories (personal and team), their revisions and shares; working memory rows.

Vectors live here as float32 bytes with the model that made them: the database is the source of
truth and every in-process index is rebuilt from it.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models

from core.fields import AgentIdField, ExactCharField
from tenants.models import ApiKey, Team


class MemoryScope(models.TextChoices):
    PERSONAL = "personal", "personal"
    TEAM = "team", "team"


class RevisionAction(models.TextChoices):
    UPDATE = "update", "update"  # content, importance, category, metadata or pin changed
    REVERT = "revert", "revert"  # back to a revision's "before"
    SUPERSEDE = "supersede", "supersede"  # replaced by a newer fact (lifecycle)
    PROMOTE = "promote", "promote"  # a personal memory became a team memory


class SharePermission(models.TextChoices):
    READ = "read", "read"
    WRITE = "write", "write"


class PurgeStatus(models.TextChoices):
    CONFIRMED = "confirmed", "confirmed"  # the previewed set was moved to the trash
    CHANGED = "changed", "changed"  # the set changed since the preview: nothing was purged


class MemoryTier(models.TextChoices):
    """Where a memory lives (docs/lifecycle.md, "Tiers"): hot and warm are in the search index,
    cold is kept in the database only — out of everyday search, found with `include_cold`."""

    HOT = "hot", "hot"  # recently active, important, pinned
    WARM = "warm", "warm"  # online, rarely asked for
    COLD = "cold", "cold"  # long idle: out of the in-memory index until asked for


class ColdReason(models.TextChoices):
    """Why a cold memory went cold (Memory.cold_reason): the tiering pass may warm back only what
    it cooled itself (`retier_memories --rewarm`), never a deliberate demotion."""

    IDLE = "idle", "idle"  # the tier rule: long idle (the tiering pass)
    CLEANUP = "cleanup", "cleanup"  # a cleanup candidate in its grace period before the trash
    CONSOLIDATED = "consolidated", "consolidated"  # a fragment a consolidated fact replaced


class RemovedBy(models.TextChoices):
    """Which path removed a memory into the trash (TrashedMemory.removed_by)."""

    API = "api", "api"  # DELETE of the memory
    CLEANUP = "cleanup", "cleanup"  # POST /lifecycle/cleanup
    AUTO = "auto", "auto"  # the cleanup step of auto-run
    BEAT = "beat", "beat"  # the scheduled cleanup
    COMMAND = "command", "command"  # a management command
    CONSOLE = "console", "console"  # the review console's bulk delete
    PURGE = "purge", "purge"  # the console's dry-run purge
    EXPIRY = "expiry", "expiry"  # its own `expires_at` passed (purge.memories_expire)


class Memory(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memories")
    scope = models.CharField(max_length=8, choices=MemoryScope.choices)
    # Owner of a personal memory; optional author of a team memory. A plain id, not a foreign
    # key: a team memory outlives its author, and personal memories are deleted with their agent
    # by the agent purge (memories.signals).
    agent_id = AgentIdField(blank=True, default="")
    content = models.TextField()
    importance = models.FloatField(default=0.5)
    # Compared exactly, like run_id: "Rule" and "rule" are two categories on every database.
    category = ExactCharField(max_length=64, default="general")
    metadata = models.JSONField(default=dict, blank=True)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=128, blank=True, default="")
    # sha256 of the normalised content: exact duplicates are found without vectors.
    content_hash = models.CharField(max_length=64, db_index=False)
    # Search tokens, stamped with the tokenizer version
    # (memories.retrieval.text.tokens_for_storage): an index load reads them instead of
    # tokenising every memory again. Empty = compute at load.
    search_tokens = models.TextField(blank=True, default="", editable=False)
    access_count = models.PositiveIntegerField(default=0)
    last_accessed = models.DateTimeField(null=True, blank=True)
    # Pinned memories are protected: cleanup and purges never remove them.
    pinned = models.BooleanField(default=False)
    # The agent's session ("run") the memory was written in, when the writer said so (an ingested
    # conversation, or a create body's `run_id`): search and list filter on it. An id with the
    # agent id's rules, so compared exactly too.
    run_id = ExactCharField(max_length=64, blank=True, default="")
    # Hot / warm / cold (memories.tiers): moved by the tiering task and cleanup, back to hot when
    # an agent asks for it. `tier_changed_at` dates the move (cleanup's cold grace period).
    tier = models.CharField(max_length=8, choices=MemoryTier.choices, default=MemoryTier.HOT)
    tier_changed_at = models.DateTimeField(null=True, blank=True)
    # When the writer said the memory stops being true ("on leave until Friday"): out of search
    # and listings from then on, and moved to the trash by the hourly pass (purge.memories_expire).
    # None = kept until something removes it.
    expires_at = models.DateTimeField(null=True, blank=True)
    # Why a cold memory is cold (ColdReason); "" when it is not cold, or went cold before this
    # was recorded.
    cold_reason = models.CharField(
        max_length=16, choices=ColdReason.choices, blank=True, default=""
    )
    # Set when a newer fact replaced this one (lifecycle); superseded memories stay for history
    # but are left out of default search.
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="supersedes"
    )
    # A team memory promoted from a personal one keeps the link to its original (console).
    promoted_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="promotions"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=MemoryScope.values), name="mem_scope_valid"
            ),
            # The API's range (memories.apis): cleanup thresholds and ranking assume it.
            models.CheckConstraint(
                condition=models.Q(importance__gte=0.0, importance__lte=1.0),
                name="mem_importance_range",
            ),
            models.CheckConstraint(
                condition=models.Q(tier__in=MemoryTier.values), name="mem_tier_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(cold_reason__in=["", *ColdReason.values]),
                name="mem_cold_reason_valid",
            ),
        ]
        indexes = [
            # recent: newest first within one scope
            models.Index(fields=["team", "scope", "agent_id", "-created_at"], name="mem_recent"),
            # exact-duplicate check on write and on restore (selectors.memory_same_content_id).
            # content_hash before agent_id: the team-scope check has no agent_id (a team memory's
            # agent_id is only its author); with agent_id second that check could use (team,
            # scope) alone, and MariaDB walked the primary key instead: the whole table, every
            # team's memories, on each team write, under the scope's write lock.
            models.Index(fields=["team", "scope", "content_hash", "agent_id"], name="mem_hash"),
            # cleanup: idle and unimportant
            models.Index(fields=["team", "scope", "last_accessed"], name="mem_idle"),
            # the run_id filter of list and search
            models.Index(fields=["team", "run_id"], name="mem_run"),
            # cold memories of a scope (include_cold search) and per-tier counts
            models.Index(fields=["team", "scope", "agent_id", "tier"], name="mem_tier"),
            # the hourly expiry pass, every team: only the few memories given an expiry
            models.Index(fields=["expires_at"], name="mem_expiry"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.team_id}/{self.scope}/{self.agent_id}: {self.content[:40]}"

    def expired(self, now: datetime) -> bool:
        """Past its own `expires_at` and not pinned: out of search and listings
        (selectors.unexpired_q says the same in SQL)."""
        return self.expires_at is not None and self.expires_at <= now and not self.pinned


class MemoryRevision(models.Model):
    """One change to a memory's content, importance, category or metadata: before, after, who."""

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="revisions")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    action = models.CharField(
        max_length=16, choices=RevisionAction.choices, default=RevisionAction.UPDATE
    )
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Who, readable even after the key or user is gone ("key mk_…", "user alice", "system").
    actor = models.CharField(max_length=200, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["memory", "-created_at"], name="rev_memory")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(action__in=RevisionAction.values), name="rev_action_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.action} of memory {self.memory_id} by {self.actor}"


class MemoryShare(models.Model):
    """A grant on a personal memory to another agent of the same team."""

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="shares")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    permission = models.CharField(
        max_length=5, choices=SharePermission.choices, default=SharePermission.READ
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["memory", "agent_id"], name="uniq_share"),
            models.CheckConstraint(
                condition=models.Q(permission__in=SharePermission.values),
                name="share_permission_valid",
            ),
        ]
        indexes = [models.Index(fields=["team", "agent_id"], name="share_grantee")]

    def __str__(self) -> str:
        return f"memory {self.memory_id} -> {self.agent_id} ({self.permission})"


class IndexChange(models.Model):
    """Append-only log of writes per index scope: how other processes learn what changed.

    Each in-process index remembers the last change id it applied; before a search it reads the
    newer rows of its scope (one indexed query) and applies them. Because the log is written in
    the same transaction as the memory, a committed write is visible to the next search in any
    process, and a deleted memory can never come back from a stale index.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    scope_key = ExactCharField(max_length=160)  # holds an agent id
    memory_id = models.BigIntegerField()
    deleted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["scope_key", "id"], name="idxchange_scope")]

    def __str__(self) -> str:
        return f"{self.scope_key} #{self.memory_id}{' deleted' if self.deleted else ''}"


class SearchCursor(models.Model):
    """How far an external search engine has been sent the `IndexChange` log (the outbox).

    One row per backend (`milvus`): every change up to `last_change_id` is in the engine; the
    newer ones a search reads from the log and scores from their rows (read-your-writes). The
    cursor only passes changes old enough that no lower id can still commit (the settle time of
    index.py), so a change committed out of id order is never skipped."""

    name = models.CharField(max_length=32, unique=True)
    last_change_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_change_id}"


class ScopeLock(models.Model):
    """One row per index scope, locked (SELECT … FOR UPDATE) while a write decides whether it
    duplicates an existing memory: two processes writing the same content at once must not both
    find "no duplicate" and both insert (memories.locks)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    scope_key = ExactCharField(max_length=160, unique=True)  # holds an agent id

    def __str__(self) -> str:
        return f"lock {self.scope_key}"


class WorkingMemoryItem(models.Model):
    """Working memory for the embedded mode (the production backend is Redis)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    item_id = ExactCharField(max_length=32, unique=True)
    content = models.TextField()
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    # The agent's session the item was written in ("" = none named): WorkingItem.run_id.
    run_id = ExactCharField(max_length=64, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["team", "agent_id", "created_at"], name="wm_list"),
            models.Index(fields=["expires_at"], name="wm_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id}: {self.content[:40]}"


class PurgeRun(models.Model):
    """Audit of one confirmed console purge (or of a confirm refused because the set changed).

    Previews are not recorded: a preview changes nothing; its signed token carries the previewed
    set to the confirm step (memories.purge).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Readable after the user is gone.
    actor = models.CharField(max_length=200, default="")
    status = models.CharField(max_length=10, choices=PurgeStatus.choices)
    criteria = models.JSONField(default=dict)
    count = models.PositiveIntegerField(default=0)
    memory_ids = models.JSONField(default=list)
    # For a "changed" run: what differed from the preview ({"added": [...], "removed": [...], ...}).
    changes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=PurgeStatus.values), name="purgerun_status_valid"
            )
        ]
        indexes = [models.Index(fields=["team", "-created_at"], name="purgerun_team")]

    def __str__(self) -> str:
        return f"purge {self.pk} of {self.team_id} by {self.actor} ({self.status}, {self.count})"


class TrashedMemory(models.Model):
    """A removed memory, restorable until `expires_at` (then emptied by a beat job).

    Every removal of a long-term memory lands here (memories.purge.memories_trash): the API's
    DELETE, cleanup (API, auto-run, beat, commands), the console's bulk delete and purge.
    `memory_id` is the id it had and gets back on restore. `snapshot` holds every column of the
    Memory row except the embedding (kept as bytes here), plus the ids of memories that pointed to
    it; `shares` and `revisions` are its MemoryShare / MemoryRevision rows as dicts. `purged_at`
    is when it was removed, `removed_by` which path removed it (RemovedBy), `reason` why.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    # Only for a console purge (the run that recorded it); other removals have none.
    purge_run = models.ForeignKey(
        PurgeRun, on_delete=models.CASCADE, related_name="trashed", null=True, blank=True
    )
    removed_by = models.CharField(max_length=16, choices=RemovedBy.choices, default=RemovedBy.PURGE)
    memory_id = models.BigIntegerField()
    scope = models.CharField(max_length=8, choices=MemoryScope.choices)
    agent_id = AgentIdField(blank=True, default="")
    content = models.TextField()
    reason = models.CharField(max_length=300, default="")
    snapshot = models.JSONField(default=dict)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    shares = models.JSONField(default=list)
    revisions = models.JSONField(default=list)
    purged_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["-purged_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(removed_by__in=RemovedBy.values),
                name="trash_removed_by_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(scope__in=MemoryScope.values), name="trash_scope_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["team", "-purged_at"], name="trash_team"),
            models.Index(fields=["expires_at"], name="trash_expiry"),
            models.Index(fields=["team", "memory_id"], name="trash_memory"),
        ]

    def __str__(self) -> str:
        return f"trashed memory {self.memory_id} of {self.team_id} ({self.removed_by})"


class ProcedureStatus(models.TextChoices):
    ACTIVE = "active", "active"  # the agent follows it
    PROPOSED = "proposed", "proposed"  # the lifecycle suggests it; not followed until accepted
    REJECTED = "rejected", "rejected"  # refused: kept so the same rule is not proposed again


class Procedure(models.Model):
    """Procedural memory: a rule an agent follows ("answer concisely", "run the tests before a
    commit"). The one memory the agent edits itself (`/procedures/<agent_id>`); the lifecycle may
    only propose one, from repeated feedback, for the agent or a lead to accept."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    rule = models.TextField()
    status = models.CharField(
        max_length=10, choices=ProcedureStatus.choices, default=ProcedureStatus.ACTIVE
    )
    # Who wrote it: "agent" (an agent-scoped key), "team" (a team-wide key), "lifecycle"
    # (a proposal), "console".
    source = models.CharField(max_length=20)
    # The memories a proposal was drawn from (ids; the feedback it repeats).
    evidence = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=ProcedureStatus.values), name="procedure_status_valid"
            )
        ]
        indexes = [models.Index(fields=["team", "agent_id", "status"], name="procedure_agent")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id} ({self.status}): {self.rule[:40]}"


class ProcedureChange(models.TextChoices):
    ADDED = "added", "added"  # written (by the agent, a team key, or proposed by the lifecycle)
    CHANGED = "changed", "changed"  # its text reworded, or its status decided
    REMOVED = "removed", "removed"  # deleted (a rule has no trash: its last text is kept here)
    RESTORED = "restored", "restored"  # written again from its last text, with its id


class ProcedureRevision(models.Model):
    """One change of an agent's rule: who added, reworded, accepted, rejected, removed or restored
    it, and what it said before and after. Keyed by the rule's id rather than by the row, so a removed
    rule keeps its history (its last text included); erased with its agent or team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    procedure_id = models.BigIntegerField()
    change = models.CharField(max_length=8, choices=ProcedureChange.choices)
    rule = models.TextField()  # its text after the change (a removal: the text it had)
    rule_before = models.TextField(blank=True, default="")  # a rewording: the text it had
    status = models.CharField(max_length=10, choices=ProcedureStatus.choices)
    status_before = models.CharField(max_length=10, blank=True, default="")  # "" when unchanged
    # Who: "key mk_…", "user alice", "mcp …", "lifecycle" (memories.services.Actor.label).
    by = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(change__in=ProcedureChange.values),
                name="procedure_change_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=ProcedureStatus.values)
                & models.Q(status_before__in=["", *ProcedureStatus.values]),
                name="procedure_revision_status_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "agent_id", "-at"], name="procedure_rev_agent"),
            models.Index(fields=["team", "procedure_id"], name="procedure_rev_rule"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id} rule {self.procedure_id} {self.change}"


class ProfileSource(models.TextChoices):
    """Who wrote a profile field. API and console values are a person's or an agent's word:
    extraction and ingest never overwrite them (memories.services.profile_learn)."""

    API = "api", "api"  # PUT /profile/<agent_id>
    CONSOLE = "console", "console"  # the web admin
    EXTRACTION = "extraction", "extraction"  # POST /lifecycle/extract-facts
    INGEST = "ingest", "ingest"  # POST /memories/ingest


class ProfileField(models.Model):
    """One key of an agent's profile: a slow-changing value read exactly (occupation, timezone,
    …), kept apart from the vector memories and overwritten in place, every change recorded as
    a ProfileRevision. Keys and values: memories.profile."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    key = models.CharField(max_length=64)
    value = models.TextField()
    source = models.CharField(max_length=10, choices=ProfileSource.choices)
    # The memory the value was read from (extraction, ingest); a plain id: the memory may be
    # trashed or erased while the field stays.
    source_memory_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(fields=["team", "agent_id", "key"], name="uniq_profile_key"),
            models.CheckConstraint(
                condition=models.Q(source__in=ProfileSource.values),
                name="profile_source_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id}: {self.key}"


class ProfileRevision(models.Model):
    """One change of a profile field: set (`before` empty), changed, or deleted (`after` empty);
    a value is never empty, so "" is unambiguous (the API shows it as null). Keyed by
    team/agent/key rather than by the field row, so a deleted field keeps its history."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    agent_id = AgentIdField()
    key = models.CharField(max_length=64)
    before = models.TextField(blank=True, default="")
    after = models.TextField(blank=True, default="")
    source = models.CharField(max_length=10, choices=ProfileSource.choices)
    source_memory_id = models.BigIntegerField(null=True, blank=True)
    # Who: "key mk_…", "user alice", "lifecycle" (memories.services.Actor.label).
    by = models.CharField(max_length=200)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(source__in=ProfileSource.values),
                name="profile_revision_source_valid",
            )
        ]
        indexes = [models.Index(fields=["team", "agent_id", "-id"], name="profile_history")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.agent_id}: {self.key} {self.before!r} -> {self.after!r}"
