from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from graph.identity import TeamLinker
from graph.models import Entity, EntityIdentity, EntityMention, Relation
from graph.services import entity_create_or_merge, entity_mention, relation_create
from lifecycle.models import (
    ArchiveReason,
    ExportChunk,
    JobRun,
    JobStatus,
    Persona,
    PipelineConfig,
    Scenario,
    WorkingArchive,
)
from memories.models import (
    IndexChange,
    Memory,
    MemoryRevision,
    MemoryScope,
    MemoryShare,
    Procedure,
    ProcedureRevision,
    ProfileField,
    ProfileRevision,
    PurgeRun,
    PurgeStatus,
    ScopeLock,
    SearchCursor,
    SharePermission,
    TrashedMemory,
    WorkingMemoryItem,
)
from memories.purge import memories_trash
from memories.services import memory_create, memory_share
from tenants.models import (
    Agent,
    ApiKey,
    IdempotentRequest,
    McpToken,
    Team,
    TeamMembership,
    TeamRole,
    UsageDay,
)
from tenants.services import api_key_issue, mcp_token_issue


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("id",)

    id = factory.Sequence(lambda n: f"team_{n}")
    name = factory.LazyAttribute(lambda o: f"Team {o.id}")


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent

    team = factory.SubFactory(TeamFactory)
    agent_id = factory.Sequence(lambda n: f"agent_{n}")
    name = factory.LazyAttribute(lambda o: o.agent_id)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    is_staff = True
    password = factory.django.Password("pw-123456")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamMembership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = TeamRole.LEAD


# --- Factories that write through the services ---------------------------------------------------
#
# A memory, an entity, a relation, an API key, a share or a trashed memory is only valid as its
# service writes it (embedding of the configured model, content hash, search tokens, index change
# log, encrypted secret, ...). These factories therefore call the service in `_create`, and set
# only the fields the service does not take afterwards, with one UPDATE (`created_at` is
# auto_now_add: an UPDATE is the only way to back-date a row). Use them with `create()` (the
# default); `build()` would give an unsaved row without what the service computes.


def _update_after(obj: Any, fields: dict[str, Any]) -> Any:
    """Sets `fields` that the service does not take, in one UPDATE, and reloads `obj`."""
    if fields:
        type(obj).objects.filter(pk=obj.pk).update(**fields)
        obj.refresh_from_db()
    return obj


def _pop(kwargs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: kwargs.pop(name) for name in names if name in kwargs}


class _PlainFactory(factory.django.DjangoModelFactory):
    """`objects.create`, then the auto_now / auto_now_add fields given (e.g. a back-dated
    `created_at`), which Django would otherwise overwrite on save, with one UPDATE."""

    class Meta:
        abstract = True

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        stamped = {
            f.name: kwargs.pop(f.name)
            for f in model_class._meta.concrete_fields
            if (getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False))
            and f.name in kwargs
        }
        return _update_after(super()._create(model_class, *args, **kwargs), stamped)


class ApiKeyFactory(factory.django.DjangoModelFactory):
    """An API key issued by `api_key_issue`; the raw secret is on `.secret` (shown once)."""

    class Meta:
        model = ApiKey

    team = factory.SubFactory(TeamFactory)
    agent = None
    label = "tests"

    @classmethod
    def _create(cls, model_class: type[ApiKey], *args: Any, **kwargs: Any) -> ApiKey:
        issued = api_key_issue(
            **_pop(kwargs, ("team", "agent", "label", "expires_at", "rate_limit"))
        )
        api_key = _update_after(issued.api_key, kwargs)
        api_key.secret = issued.secret
        return api_key


class McpTokenFactory(factory.django.DjangoModelFactory):
    """An MCP token issued by `mcp_token_issue`; the raw token is on `.token` (shown once)."""

    class Meta:
        model = McpToken

    team = factory.SubFactory(TeamFactory)
    agent = None
    label = "tests"

    @classmethod
    def _create(cls, model_class: type[McpToken], *args: Any, **kwargs: Any) -> McpToken:
        issued = mcp_token_issue(
            **_pop(kwargs, ("team", "agent", "label", "expires_at", "rate_limit"))
        )
        token = _update_after(issued.mcp_token, kwargs)
        token.token = issued.token
        return token


class MemoryFactory(factory.django.DjangoModelFactory):
    """A long-term memory written by `memory_create`, as the API writes it (dedup off unless
    `enable_dedup=True` is passed: a factory call must always give a new memory)."""

    class Meta:
        model = Memory

    team = factory.SubFactory(TeamFactory)
    scope = MemoryScope.PERSONAL
    agent_id = "researcher"
    content = factory.Sequence(lambda n: f"Memory number {n} of the factory")
    importance = 0.5
    category = "general"
    metadata = factory.LazyFunction(dict)
    pinned = False

    @classmethod
    def _create(cls, model_class: type[Memory], *args: Any, **kwargs: Any) -> Memory:
        kwargs.setdefault("enable_dedup", False)
        memory, _ = memory_create(
            **_pop(
                kwargs,
                (
                    "team",
                    "scope",
                    "agent_id",
                    "content",
                    "importance",
                    "category",
                    "metadata",
                    "enable_dedup",
                    "dedup_threshold",
                    "pinned",
                ),
            )
        )
        return _update_after(memory, kwargs)


class MemoryRevisionFactory(_PlainFactory):
    """A revision row as the services record it (memory_update, memory_revert, ...)."""

    class Meta:
        model = MemoryRevision

    memory = factory.SubFactory(MemoryFactory)
    team = factory.SelfAttribute("memory.team")
    action = "update"
    before = factory.LazyAttribute(lambda o: {"content": o.memory.content})
    after = factory.LazyAttribute(lambda o: {"content": f"{o.memory.content} (corrected)"})
    actor = "system"


class MemoryShareFactory(factory.django.DjangoModelFactory):
    """A grant written by `memory_share` (the grantee is registered as an agent of the team)."""

    class Meta:
        model = MemoryShare

    memory = factory.SubFactory(MemoryFactory)
    agent_id = factory.Sequence(lambda n: f"grantee_{n}")
    permission = SharePermission.READ

    @classmethod
    def _create(cls, model_class: type[MemoryShare], *args: Any, **kwargs: Any) -> MemoryShare:
        kwargs.pop("team", None)  # always the memory's team
        memory, agent_id = kwargs.pop("memory"), kwargs.pop("agent_id")
        shares = memory_share(
            memory=memory, agent_ids=[agent_id], permission=kwargs.pop("permission")
        )
        if not shares:
            raise ValueError("a memory cannot be shared with its own agent")
        return _update_after(shares[0], kwargs)


class IndexChangeFactory(_PlainFactory):
    """A change-log row; memory_create writes these itself, this is for tests of the log."""

    class Meta:
        model = IndexChange

    team = factory.SubFactory(TeamFactory)
    scope_key = factory.LazyAttribute(lambda o: f"{o.team.id}:personal:researcher")
    memory_id = factory.Sequence(lambda n: n + 1)
    deleted = False


class ScopeLockFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ScopeLock
        django_get_or_create = ("scope_key",)

    team = factory.SubFactory(TeamFactory)
    scope_key = factory.LazyAttribute(lambda o: f"{o.team.id}:personal:researcher")


class SearchCursorFactory(factory.django.DjangoModelFactory):
    """How far an external search engine has been sent the change log (one row per backend)."""

    class Meta:
        model = SearchCursor
        django_get_or_create = ("name",)

    name = "milvus"
    last_change_id = 0


class WorkingMemoryItemFactory(factory.django.DjangoModelFactory):
    """A row of the database working-memory backend. The stores' `add` is the honest writer
    (memories.working); use this only to set up rows that `add` cannot make (e.g. expired)."""

    class Meta:
        model = WorkingMemoryItem

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    item_id = factory.LazyFunction(lambda: uuid.uuid4().hex)
    content = factory.Sequence(lambda n: f"working item {n}")
    created_at = factory.LazyFunction(timezone.now)
    expires_at = factory.LazyAttribute(lambda o: o.created_at + timedelta(hours=72))


class PurgeRunFactory(_PlainFactory):
    class Meta:
        model = PurgeRun

    team = factory.SubFactory(TeamFactory)
    actor = "user lead"
    status = PurgeStatus.CONFIRMED


class TrashedMemoryFactory(factory.django.DjangoModelFactory):
    """A memory written by `memory_create` and moved to the trash by `memories_trash`, as a
    DELETE of the API does (restorable: it has its snapshot and embedding)."""

    class Meta:
        model = TrashedMemory

    team = factory.SubFactory(TeamFactory)
    scope = MemoryScope.PERSONAL
    agent_id = "researcher"
    content = factory.Sequence(lambda n: f"Trashed memory number {n} of the factory")
    removed_by = "api"
    reason = ""

    @classmethod
    def _create(cls, model_class: type[TrashedMemory], *args: Any, **kwargs: Any) -> TrashedMemory:
        team = kwargs.pop("team")
        memory = MemoryFactory(
            team=team, **_pop(kwargs, ("scope", "agent_id", "content", "importance", "pinned"))
        )
        memories_trash(
            team=team,
            memories=[memory],
            **_pop(kwargs, ("removed_by", "reason", "purge_run")),
        )
        trashed = TrashedMemory.objects.get(team=team, memory_id=memory.pk)
        return _update_after(trashed, kwargs)


class EntityFactory(factory.django.DjangoModelFactory):
    """An entity written by `entity_create_or_merge` (embedding, normalised name, mention of its
    source memory); an existing `(name, entity_type)` of the same scope is merged into."""

    class Meta:
        model = Entity

    team = factory.SubFactory(TeamFactory)
    agent_id = ""
    name = factory.Sequence(lambda n: f"Entity {n}")
    entity_type = "concept"
    description = ""
    properties = factory.LazyFunction(dict)
    source_memory = None

    @classmethod
    def _create(cls, model_class: type[Entity], *args: Any, **kwargs: Any) -> Entity:
        entity, _ = entity_create_or_merge(
            **_pop(
                kwargs,
                (
                    "team",
                    "name",
                    "entity_type",
                    "agent_id",
                    "description",
                    "properties",
                    "source_memory",
                ),
            )
        )
        return _update_after(entity, kwargs)


class RelationFactory(factory.django.DjangoModelFactory):
    """A relation written by `relation_create`; both ends are entities of one team."""

    class Meta:
        model = Relation

    source = factory.SubFactory(EntityFactory)
    target = factory.SubFactory(EntityFactory, team=factory.SelfAttribute("..source.team"))
    relation_type = "related_to"
    description = ""
    properties = factory.LazyFunction(dict)
    source_memory = None

    @classmethod
    def _create(cls, model_class: type[Relation], *args: Any, **kwargs: Any) -> Relation:
        team = kwargs.pop("team", None)
        if team is not None and team.pk != kwargs["source"].team_id:
            raise ValueError("a relation belongs to its entities' team")
        relation, _ = relation_create(
            **_pop(
                kwargs,
                (
                    "source",
                    "target",
                    "relation_type",
                    "description",
                    "properties",
                    "source_memory",
                ),
            )
        )
        return _update_after(relation, kwargs)


class EntityIdentityFactory(factory.django.DjangoModelFactory):
    """A team-level identity as graph.identity writes it: linking `members` (entities of one
    team naming the same thing in different scopes), by default two agents' entities of
    `name`. The identity's label and type are the linker's, not the factory's."""

    class Meta:
        model = EntityIdentity

    team = factory.SubFactory(TeamFactory)
    name = factory.Sequence(lambda n: f"Organisation {n}")
    entity_type = "organization"

    @classmethod
    def _create(
        cls, model_class: type[EntityIdentity], *args: Any, **kwargs: Any
    ) -> EntityIdentity:
        team, name, entity_type = kwargs.pop("team"), kwargs.pop("name"), kwargs.pop("entity_type")
        members = kwargs.pop("members", None) or [
            EntityFactory(team=team, name=name, entity_type=entity_type, agent_id=agent)
            for agent in ("alice", "bob")
        ]
        linker = TeamLinker(team)
        found = {linker.link(m) for m in members}
        if len(found) != 1 or None in found:
            raise ValueError("the members do not name one thing of one team")
        return _update_after(EntityIdentity.objects.get(team=team, pk=found.pop()), kwargs)


class EntityMentionFactory(factory.django.DjangoModelFactory):
    """`memory` mentions `entity`, recorded by `entity_mention`."""

    class Meta:
        model = EntityMention

    entity = factory.SubFactory(EntityFactory)
    memory = factory.SubFactory(MemoryFactory, team=factory.SelfAttribute("..entity.team"))

    @classmethod
    def _create(cls, model_class: type[EntityMention], *args: Any, **kwargs: Any) -> EntityMention:
        entity, memory = kwargs.pop("entity"), kwargs.pop("memory")
        entity_mention(entity=entity, memory=memory)
        return EntityMention.objects.get(entity=entity, memory=memory)


# --- Plain rows ----------------------------------------------------------------------------------
#
# What the services below write is bookkeeping with no derived data (no vector, no hash): the
# services create these rows with plain `objects.create`, and so do these factories.


class UsageDayFactory(_PlainFactory):
    class Meta:
        model = UsageDay

    team = factory.SubFactory(TeamFactory)
    agent_id = ""
    day = factory.LazyFunction(timezone.localdate)
    searches = 0
    writes = 0


class PipelineConfigFactory(_PlainFactory):
    class Meta:
        model = PipelineConfig
        django_get_or_create = ("team",)

    team = factory.SubFactory(TeamFactory)


class JobRunFactory(_PlainFactory):
    """A recorded job; the job machinery (lifecycle.services.jobs) creates the same row."""

    class Meta:
        model = JobRun

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    kind = "compress"
    trigger = "api"
    status = JobStatus.SUCCEEDED


class ScenarioFactory(_PlainFactory):
    class Meta:
        model = Scenario

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    name = factory.Sequence(lambda n: f"Scenario {n}")
    summary = factory.LazyAttribute(lambda o: f"What {o.name} is about.")
    memory_ids = factory.LazyFunction(list)


class PersonaFactory(_PlainFactory):
    class Meta:
        model = Persona

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    preferences = factory.LazyFunction(lambda: ["concise answers"])
    summary = "A user who prefers concise answers."


class WorkingArchiveFactory(_PlainFactory):
    class Meta:
        model = WorkingArchive

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    item_id = factory.LazyFunction(lambda: uuid.uuid4().hex)
    content = factory.Sequence(lambda n: f"archived working item {n}")
    item_created_at = factory.LazyFunction(timezone.now)
    reason = ArchiveReason.CONSUMED


class ExportChunkFactory(factory.django.DjangoModelFactory):
    """A piece of an export job's bundle (lifecycle.services.bundle writes them)."""

    class Meta:
        model = ExportChunk

    job = factory.SubFactory(JobRunFactory, kind="export", agent_id="")
    seq = factory.Sequence(lambda n: n)
    data = b"\x1f\x8b"


class IdempotentRequestFactory(_PlainFactory):
    """An answered request kept for its Idempotency-Key retries (tenants.idempotency
    records them in the request's own transaction)."""

    class Meta:
        model = IdempotentRequest

    team = factory.SubFactory(TeamFactory)
    endpoint = "ingest"
    key = factory.Sequence(lambda n: f"key-{n}")
    request_hash = factory.LazyFunction(lambda: uuid.uuid4().hex * 2)
    status_code = 200
    body = factory.LazyFunction(lambda: {"archived": 1, "facts": []})


class ProcedureFactory(_PlainFactory):
    """A rule of an agent (procedural memory)."""

    class Meta:
        model = Procedure

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    rule = factory.Sequence(lambda n: f"Rule {n}: answer briefly")
    source = "agent"


class ProcedureRevisionFactory(_PlainFactory):
    """One change of a rule (the procedure services write them with the change)."""

    class Meta:
        model = ProcedureRevision

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    procedure_id = factory.Sequence(lambda n: n + 1)
    change = "added"
    rule = "Answer briefly."
    status = "active"
    by = "key mk_test"


class ProfileFieldFactory(_PlainFactory):
    """A key of an agent's profile (PUT /profile/<agent_id> writes them with a revision)."""

    class Meta:
        model = ProfileField

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    key = factory.Sequence(lambda n: f"key_{n}")
    value = "value"
    source = "api"


class ProfileRevisionFactory(_PlainFactory):
    class Meta:
        model = ProfileRevision

    team = factory.SubFactory(TeamFactory)
    agent_id = "researcher"
    key = factory.Sequence(lambda n: f"key_{n}")
    before = ""
    after = "value"
    source = "api"
    by = "tests"
