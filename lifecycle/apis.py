"""Lifecycle endpoints (docs/lifecycle.md), `POST /lifecycle/extract-graph` among them (the graph
extraction runs as a lifecycle job). Thin: validate, check the agent, run the service as a job."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import AgentResource, require_agent, require_agent_filter, require_team_wide
from core.api import validated_body
from core.errors import DomainError, ErrorCode, NotFound, ValidationFailed
from core.openapi import ERROR_DESCRIPTIONS, api_operation
from core.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from core.validators import AGENT_ID
from graph.apis import EntityOutputSerializer, RelationOutputSerializer
from memories.apis import (
    IDEMPOTENCY_PARAMETER,
    MemoryOutputSerializer,
    ProcedureOutputSerializer,
    WorkingItemFieldsSerializer,
    replayed_response,
    request_idempotency_key,
)
from memories.selectors import READ, check_memory_access, memory_get
from memories.services import Actor
from tenants.apis import principal_of
from tenants.idempotency import IdempotencyKey, Replayed, idempotency_record, idempotency_replay
from tenants.models import Team
from tenants.services import agent_ensure

from . import presenters
from .models import ArchiveReason, JobKind, JobStatus, Persona, Scenario
from .results import JobReplayed
from .selectors import (
    ArchiveQuery,
    archive_derived_memories,
    archive_item_get,
    archive_page,
    export_ready,
    job_get,
    memory_supersedes,
    memory_traces,
    persona_latest,
    persona_scenarios,
    scenarios_of_agent,
    working_sources,
)
from .services import bundle, convert, ingest, operations, pipeline

# --- output documentation (the bodies are rendered by lifecycle.presenters) ----------------------


class CompressOutputSerializer(serializers.Serializer):
    compressed = serializers.IntegerField(help_text="working items consumed")
    remaining = serializers.IntegerField(help_text="working items left afterwards")
    total_before = serializers.IntegerField()
    target_count = serializers.IntegerField()
    summary = serializers.CharField(allow_null=True, help_text="null when nothing to compress")
    memory_ids = serializers.ListField(child=serializers.IntegerField(), help_text="written")


class FactSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="the memory the fact was stored as")
    content = serializers.CharField()
    importance = serializers.FloatField()
    category = serializers.CharField()
    expires_at = serializers.DateTimeField(
        required=False, help_text="only when the fact states when it stops being true"
    )


class ExtractFactsOutputSerializer(serializers.Serializer):
    facts = FactSerializer(many=True, help_text="the facts written (duplicates are not)")
    count = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    superseded = serializers.IntegerField(help_text="older memories this run replaced")
    analyzed = serializers.IntegerField(
        required=False, help_text="working items read (absent when there were none)"
    )


class ScenarioOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    summary = serializers.CharField()
    memory_ids = serializers.ListField(child=serializers.IntegerField())
    created_at = serializers.DateTimeField()


class AggregateOutputSerializer(serializers.Serializer):
    scenarios = ScenarioOutputSerializer(many=True)
    count = serializers.IntegerField()


class PersonaOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    agent_id = serializers.CharField()
    preferences = serializers.ListField(child=serializers.CharField())
    habits = serializers.ListField(child=serializers.CharField())
    expertise = serializers.ListField(child=serializers.CharField())
    communication_style = serializers.CharField(allow_blank=True)
    summary = serializers.CharField(allow_blank=True)
    memory_ids = serializers.ListField(child=serializers.IntegerField())
    scenario_ids = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()


class GeneratePersonaOutputSerializer(serializers.Serializer):
    persona = PersonaOutputSerializer()


class CleanupCandidateSerializer(MemoryOutputSerializer):
    reason = serializers.CharField()
    action = serializers.ChoiceField(
        choices=["cold", "trash", "wait"],
        help_text="cold: goes cold first; trash: cold for CLEANUP_COLD_GRACE_DAYS, goes to the "
        "trash; wait: cold, still within the grace period",
    )


class CleanupOutputSerializer(serializers.Serializer):
    cleaned = serializers.IntegerField(
        help_text="memories moved to the trash (0 on a dry run); see `cooled` for the first step"
    )
    remaining = serializers.IntegerField(help_text="memories left in the cleaned scope")
    trashed = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        help_text="not on a dry run: ids of the memories moved to the trash (GET /memories/trash;"
        " restorable for TRASH_RETENTION_DAYS)",
    )
    cooled = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        help_text="not on a dry run: ids of the memories moved to the cold tier (the ladder's "
        "first step: out of everyday search, kept; trashed by a cleanup once cold for "
        "CLEANUP_COLD_GRACE_DAYS)",
    )
    dry_run = serializers.BooleanField(required=False, help_text="dry runs only: true")
    would_clean = serializers.IntegerField(
        required=False, help_text="dry runs only: how many would go to the trash"
    )
    would_cool = serializers.IntegerField(
        required=False, help_text="dry runs only: how many would go cold"
    )
    candidates = CleanupCandidateSerializer(
        many=True, required=False, help_text="dry runs only: at most 1000, least important first"
    )


class AutoConfigOutputSerializer(serializers.Serializer):
    team_id = serializers.CharField()
    compress_every_n = serializers.IntegerField()
    compress_target_count = serializers.IntegerField()
    cleanup_idle_days = serializers.IntegerField()
    cleanup_min_importance = serializers.FloatField()
    enabled = serializers.BooleanField()
    warmup_max_memories = serializers.IntegerField()
    warmup_compress_every_n = serializers.IntegerField()
    extract_graph = serializers.BooleanField()
    warmup_doubling = serializers.BooleanField(
        help_text="warm-up compresses after 1, 2, 4, … items up to compress_every_n"
    )
    idle_extract_seconds = serializers.IntegerField(
        help_text="compress an agent's working memory after this long without a write (0 = never)"
    )
    scenario_min_interval_seconds = serializers.IntegerField(
        help_text="aggregate-scenes after a fact extraction at most once per interval (0 = never)"
    )
    persona_every_n = serializers.IntegerField(
        help_text="generate-persona after every N new memories of the agent (0 = never)"
    )
    excluded_agents = serializers.ListField(
        child=serializers.CharField(), help_text="agent id globs with no automatic jobs"
    )
    max_memories_per_run = serializers.IntegerField(
        help_text="an ingest writes at most this many memories per run_id (0 = unlimited)"
    )
    consolidate_min_fragments = serializers.IntegerField(
        help_text="after a fact extraction, consolidate groups of at least this many (0 = never)"
    )
    recall_timeout_ms = serializers.IntegerField(
        help_text="an agent's search answers with what it has after this long, partial: true "
        "(0 = no limit)"
    )
    configured = serializers.BooleanField(help_text="false: the defaults, never saved")


class AutoRunActionSerializer(serializers.Serializer):
    """One action of the pipeline: `action` and the result of that operation."""

    action = serializers.ChoiceField(choices=["compress", "cleanup"])
    agent_id = serializers.CharField(required=False, help_text="compress only")
    # compress
    compressed = serializers.IntegerField(required=False)
    remaining = serializers.IntegerField(required=False)
    total_before = serializers.IntegerField(required=False)
    target_count = serializers.IntegerField(required=False)
    summary = serializers.CharField(required=False, allow_null=True)
    memory_ids = serializers.ListField(child=serializers.IntegerField(), required=False)
    # cleanup
    cleaned = serializers.IntegerField(required=False)
    trashed = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="ids moved to the trash"
    )


class AutoRunOutputSerializer(serializers.Serializer):
    results = AutoRunActionSerializer(many=True, help_text="empty when the pipeline is disabled")


class DeletedOutputSerializer(serializers.Serializer):
    deleted = serializers.CharField(help_text="the id deleted")


class SourceItemSerializer(WorkingItemFieldsSerializer):
    archived_at = serializers.DateTimeField()


class SourcesOutputSerializer(serializers.Serializer):
    memory_id = serializers.IntegerField()
    # A field named like Field.source: fine for DRF (declared fields leave the class), not
    # for the stubs.
    source = serializers.CharField(  # type: ignore[assignment]
        allow_null=True, help_text="compression, extraction, ..."
    )
    job_id = serializers.IntegerField(allow_null=True)
    supersedes = serializers.ListField(child=serializers.IntegerField())
    source_items = SourceItemSerializer(many=True)


def _agent(request: Request, agent_id: str) -> str:
    principal = principal_of(request)
    require_agent(
        AgentResource.PERSONAL_MEMORIES, acting_agent=principal.agent_id, agent_id=agent_id
    )
    return agent_id


def _run(request: Request, kind: JobKind, agent_id: str, params: dict[str, Any]) -> Response:
    team = principal_of(request).team
    if agent_id:
        agent_ensure(team=team, agent_id=agent_id)
    result = pipeline.run(team=team, kind=kind, trigger="api", agent_id=agent_id, params=params)
    return Response(presenters.result_body(result))


class _AgentJobApi(APIView):
    # POST `{agent_id, ...}`: runs `kind` as a job for that agent, every other input field a
    # parameter of the job. A subclass names the kind, its input and output serializers and a
    # summary; the OpenAPI operation is made from those, so what is validated and what is
    # documented cannot differ. (Comments, not a docstring: drf-spectacular would give a
    # docstring to every subclass as its operation's description.)

    kind: ClassVar[JobKind]
    input_serializer: ClassVar[type[serializers.Serializer]]
    output_serializer: ClassVar[type[serializers.Serializer]]
    operation_summary: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        operation = api_operation(
            request=cls.input_serializer,
            response=cls.output_serializer,
            errors=(403,),
            summary=cls.operation_summary,
        )
        extend_schema_view(post=operation)(cls)

    def check_agent(self, request: Request, agent_id: str) -> None:
        """Raises unless the key may act for `agent_id`."""
        _agent(request, agent_id)

    def post(self, request: Request) -> Response:
        params = dict(validated_body(request, self.input_serializer))
        agent_id = params.pop("agent_id")
        self.check_agent(request, agent_id)
        return _run(request, self.kind, agent_id, params)


class CompressInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    target_count = StrictIntegerField(required=False, default=5, min_value=1, max_value=50)


class CompressApi(_AgentJobApi):
    kind = JobKind.COMPRESS
    input_serializer = CompressInputSerializer
    output_serializer = CompressOutputSerializer
    operation_summary = "Compress working memory into long-term memories"


class CleanupInputSerializer(serializers.Serializer):
    max_age_days = StrictIntegerField(required=False, default=90, min_value=0, max_value=36500)
    min_importance = StrictFloatField(required=False, default=0.2, min_value=0.0, max_value=1.0)
    agent_id = StrictCharField(required=False, default="", allow_blank=True, validators=[AGENT_ID])
    dry_run = StrictBooleanField(required=False, default=False)


class CleanupApi(APIView):
    @api_operation(
        request=CleanupInputSerializer,
        response=CleanupOutputSerializer,
        errors=(403,),
        summary="Forget memories that are unimportant and idle (dry_run lists them)",
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, CleanupInputSerializer)
        principal = principal_of(request)
        if data["agent_id"]:
            _agent(request, data["agent_id"])
        elif principal.agent_id is not None:
            # an agent key may only clean its own memories
            require_team_wide(acting_agent=principal.agent_id)
        params = {"max_age_days": data["max_age_days"], "min_importance": data["min_importance"]}
        if data["dry_run"]:
            preview = operations.cleanup_preview(
                team=principal.team, agent_id=data["agent_id"] or None, **params
            )
            return Response(presenters.cleanup_preview_body(preview))
        return _run(request, JobKind.CLEANUP, data["agent_id"], {**params, "dry_run": False})


class ExtractFactsInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    max_memories = StrictIntegerField(required=False, default=20, min_value=1, max_value=200)
    delete_after = StrictBooleanField(required=False, default=False)


class ExtractFactsApi(_AgentJobApi):
    kind = JobKind.EXTRACT_FACTS
    input_serializer = ExtractFactsInputSerializer
    output_serializer = ExtractFactsOutputSerializer
    operation_summary = "Extract atomic facts from working memory"


class AggregateInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    max_memories = StrictIntegerField(required=False, default=50, min_value=1, max_value=500)


class AggregateApi(_AgentJobApi):
    kind = JobKind.AGGREGATE_SCENES
    input_serializer = AggregateInputSerializer
    output_serializer = AggregateOutputSerializer
    operation_summary = "Group memories into scenarios"


class ExtractGraphInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(required=False, allow_blank=True, default="", validators=[AGENT_ID])
    max_memories = StrictIntegerField(required=False, default=20, min_value=1, max_value=200)


class ExtractedEntitySerializer(EntityOutputSerializer):
    created = serializers.BooleanField(help_text="false: merged into an existing entity")


class ExtractGraphOutputSerializer(serializers.Serializer):
    entities = ExtractedEntitySerializer(many=True)
    relations = RelationOutputSerializer(many=True)
    entity_count = serializers.IntegerField()
    relation_count = serializers.IntegerField()
    entities_created = serializers.IntegerField()
    entities_merged = serializers.IntegerField()
    relations_created = serializers.IntegerField()
    memories = serializers.IntegerField(help_text="memories read")
    job_id = serializers.IntegerField(required=False)


class ExtractGraphApi(_AgentJobApi):
    """Runs extraction as a recorded lifecycle job."""

    kind = JobKind.EXTRACT_GRAPH
    input_serializer = ExtractGraphInputSerializer
    output_serializer = ExtractGraphOutputSerializer
    operation_summary = "Extract entities and relations from an agent's recent memories"

    def check_agent(self, request: Request, agent_id: str) -> None:
        # An agent key extracts from its own memories, or from the team's into team-wide
        # entities (both of which it may touch); no agent_id: the team's memories.
        require_agent_filter(
            AgentResource.ENTITIES, agent_id=agent_id, acting_agent=principal_of(request).agent_id
        )


def _delete_of_agent(
    request: Request, model: type[Scenario] | type[Persona], key: str, *, what: str
) -> Response:
    """Deletes the row `key` of the key's team (404 otherwise) if the key may act for its agent."""
    row = model.objects.filter(team=principal_of(request).team, pk=key).first()
    if row is None:
        raise NotFound(what)
    _agent(request, row.agent_id)
    row.delete()
    return Response({"deleted": key})


class ScenariosApi(APIView):
    """GET by agent id, DELETE by scenario id: the same path in the original API."""

    @api_operation(
        response=ScenarioOutputSerializer(many=True),
        errors=(403,),
        summary="An agent's scenarios, newest first",
    )
    def get(self, request: Request, key: str) -> Response:
        agent_id = _agent(request, key)
        team = principal_of(request).team
        rows = Scenario.objects.filter(team=team, agent_id=agent_id).order_by("-created_at")
        return Response([presenters.scenario_body(s) for s in rows])

    @api_operation(response=DeletedOutputSerializer, errors=(403, 404), summary="Delete a scenario")
    def delete(self, request: Request, key: str) -> Response:
        return _delete_of_agent(request, Scenario, key, what="scenario")


class PersonaInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    max_items = StrictIntegerField(required=False, default=30, min_value=1, max_value=500)


class GeneratePersonaApi(_AgentJobApi):
    kind = JobKind.GENERATE_PERSONA
    input_serializer = PersonaInputSerializer
    output_serializer = GeneratePersonaOutputSerializer
    operation_summary = "Build a persona from memories and scenarios"


class PersonaApi(APIView):
    """GET by agent id (latest persona), DELETE by persona id: the same path in the original API."""

    @api_operation(
        response=PersonaOutputSerializer, errors=(403, 404), summary="The agent's latest persona"
    )
    def get(self, request: Request, key: str) -> Response:
        agent_id = _agent(request, key)
        team = principal_of(request).team
        persona = (
            Persona.objects.filter(team=team, agent_id=agent_id).order_by("-created_at").first()
        )
        if persona is None:
            raise NotFound("persona")
        return Response(presenters.persona_body(persona))

    @api_operation(response=DeletedOutputSerializer, errors=(403, 404), summary="Delete a persona")
    def delete(self, request: Request, key: str) -> Response:
        return _delete_of_agent(request, Persona, key, what="persona")


# --- Markdown exports: persona -> scenarios -> memories -> archived sources -----------------
# Routed before `lifecycle/persona/<str:key>` and `lifecycle/scenarios/<str:key>` (urls.py),
# which would otherwise take "a1.md" for an agent id. The document is answered as itself
# (text/markdown); an error still goes through the exception handler, in the JSON envelope.

_MARKDOWN = "text/markdown; charset=utf-8"


def _markdown(text: str) -> HttpResponse:
    return HttpResponse(text, content_type=_MARKDOWN)


class PersonaMarkdownApi(APIView):
    @api_operation(
        response=OpenApiTypes.STR,
        media_type="text/markdown",
        errors=(403, 404),
        summary="The agent's latest persona as Markdown, traced down to the archived messages",
        description="Persona → the scenarios it was built from (as it saw them) → their "
        "memories (id, content) → the archived items (L0) each memory came from (id, role, "
        "time, content); then the persona's memories in no scenario. 404 without a persona.",
    )
    def get(self, request: Request, agent_id: str) -> HttpResponse:
        agent_id = _agent(request, agent_id)
        team = principal_of(request).team
        persona = persona_latest(team=team, agent_id=agent_id)
        if persona is None:
            raise NotFound("persona")
        scenarios = persona_scenarios(team=team, persona=persona)
        ids = [i for s in scenarios for i in s.memory_ids] + list(persona.memory_ids or [])
        traces = memory_traces(team=team, agent_id=agent_id, memory_ids=ids)
        text = presenters.persona_markdown(persona, scenarios=scenarios, traces=traces)
        return _markdown(text)


class ScenariosMarkdownApi(APIView):
    @api_operation(
        response=OpenApiTypes.STR,
        media_type="text/markdown",
        errors=(403,),
        summary="The agent's scenarios as Markdown, traced down to the archived messages",
        description="Each scenario, newest first → its memories (id, content) → the archived "
        "items (L0) each memory came from (id, role, time, content).",
    )
    def get(self, request: Request, agent_id: str) -> HttpResponse:
        agent_id = _agent(request, agent_id)
        team = principal_of(request).team
        scenarios = scenarios_of_agent(team=team, agent_id=agent_id)
        ids = [i for s in scenarios for i in s.memory_ids]
        traces = memory_traces(team=team, agent_id=agent_id, memory_ids=ids)
        text = presenters.scenarios_markdown(agent_id, scenarios=scenarios, traces=traces)
        return _markdown(text)


class AutoConfigInputSerializer(serializers.Serializer):
    compress_every_n = StrictIntegerField(required=False, min_value=0, max_value=10000)
    compress_target_count = StrictIntegerField(required=False, min_value=1, max_value=50)
    cleanup_idle_days = StrictIntegerField(required=False, min_value=0, max_value=36500)
    cleanup_min_importance = StrictFloatField(required=False, min_value=0.0, max_value=1.0)
    enabled = StrictBooleanField(required=False)
    warmup_max_memories = StrictIntegerField(required=False, min_value=0, max_value=10000)
    warmup_compress_every_n = StrictIntegerField(required=False, min_value=0, max_value=10000)
    extract_graph = StrictBooleanField(required=False)
    warmup_doubling = StrictBooleanField(required=False)
    idle_extract_seconds = StrictIntegerField(required=False, min_value=0, max_value=604800)
    scenario_min_interval_seconds = StrictIntegerField(
        required=False, min_value=0, max_value=604800
    )
    persona_every_n = StrictIntegerField(required=False, min_value=0, max_value=100000)
    excluded_agents = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=100,
        help_text="fnmatch globs of agent ids (e.g. `bench-judge-*`): no automatic jobs for them",
    )
    max_memories_per_run = StrictIntegerField(required=False, min_value=0, max_value=100000)
    consolidate_min_fragments = StrictIntegerField(required=False, min_value=0, max_value=50)
    recall_timeout_ms = StrictIntegerField(required=False, min_value=0, max_value=60000)

    def validate_consolidate_min_fragments(self, value: int) -> int:
        if value == 1:
            raise serializers.ValidationError("0 (never) or at least 2 fragments.")
        return value


class AutoConfigApi(APIView):
    @api_operation(response=AutoConfigOutputSerializer, summary="The team's pipeline configuration")
    def get(self, request: Request) -> Response:
        config = pipeline.config_get(team=principal_of(request).team)
        return Response(presenters.config_body(config))

    @api_operation(
        request=AutoConfigInputSerializer,
        response=AutoConfigOutputSerializer,
        errors=(403,),
        summary="Update the pipeline configuration",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_team_wide(acting_agent=principal.agent_id)
        data = validated_body(request, AutoConfigInputSerializer)
        config = pipeline.config_update(team=principal.team, **data)
        return Response(presenters.config_body(config))


class AutoRunApi(APIView):
    @api_operation(
        response=AutoRunOutputSerializer,
        errors=(403,),
        summary="Run now every action the team's pipeline config calls for",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        require_team_wide(acting_agent=principal.agent_id)
        actions = pipeline.auto_run(team=principal.team, trigger="api")
        return Response({"results": [presenters.auto_run_action_body(a) for a in actions]})


class SourcesApi(APIView):
    """Traceability through the API: the working-memory items (L0) a derived memory was made from."""

    @api_operation(
        response=SourcesOutputSerializer,
        errors=(403, 404),
        summary="The archived working-memory items a memory was derived from",
    )
    def get(self, request: Request, memory_id: int) -> Response:
        principal = principal_of(request)
        memory = memory_get(team=principal.team, memory_id=memory_id)
        check_memory_access(memory=memory, acting_agent=principal.agent_id, action=READ)
        archived = list(working_sources(team=principal.team, memory=memory))
        supersedes = memory_supersedes(memory=memory)
        return Response(presenters.sources_body(memory, supersedes=supersedes, archived=archived))


# --- the archive (L0): search it, and follow an item to what was derived from it -------------

_ARCHIVE_CURSOR_SALT = "lifecycle.archive.cursor"


class ArchiveSearchInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        validators=[AGENT_ID],
        help_text="only this agent's items (an agent-scoped key: always its own)",
    )
    run_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        validators=[AGENT_ID],
        help_text="only the messages ingested with this run_id",
    )
    role = serializers.ChoiceField(
        choices=ingest.ROLES, required=False, help_text="only ingested messages of this role"
    )
    reason = serializers.ChoiceField(
        choices=ArchiveReason.values,
        required=False,
        help_text="consumed (by compress / extract-facts), evicted (by the cap), ingested",
    )
    since = serializers.DateTimeField(
        required=False, help_text="items said or written at or after this time (ISO 8601)"
    )
    until = serializers.DateTimeField(
        required=False, help_text="items said or written at or before this time (ISO 8601)"
    )
    query = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=500,
        trim_whitespace=False,
        help_text="a case-insensitive substring of the content: a text filter, not semantic search",
    )
    cursor = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        help_text="next_cursor of the previous page (with the same filters)",
    )
    page_size = StrictIntegerField(required=False, default=50, min_value=1, max_value=200)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and since > until:
            raise serializers.ValidationError({"until": ["must not be before since"]})
        return attrs


class ArchiveItemOutputSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="the item's id, as metadata.source_items records it")
    agent_id = serializers.CharField()
    role = serializers.CharField(
        allow_blank=True, help_text="ingested messages: user, assistant, system, tool"
    )
    name = serializers.CharField(allow_blank=True, help_text="ingested messages: the speaker")
    run_id = serializers.CharField(allow_blank=True, help_text="ingested messages: the run")
    content = serializers.CharField()
    created_at = serializers.DateTimeField(help_text="when it was said or written")
    archived_at = serializers.DateTimeField()
    reason = serializers.ChoiceField(choices=ArchiveReason.values)
    job_id = serializers.IntegerField(allow_null=True, help_text="the job that archived it")


class ArchivePageSerializer(serializers.Serializer):
    items = ArchiveItemOutputSerializer(many=True, help_text="newest first")
    next_cursor = serializers.CharField(allow_null=True, help_text="null on the last page")


class ArchiveDetailOutputSerializer(ArchiveItemOutputSerializer):
    derived_memory_ids = serializers.ListField(child=serializers.IntegerField())
    derived_memories = MemoryOutputSerializer(
        many=True, help_text="memories whose metadata.source_items holds this item, by id"
    )


def _archive_cursor(raw: str) -> tuple[datetime, int] | None:
    """The opaque cursor (signed, so a made-up one is refused rather than misread)."""
    if not raw:
        return None
    invalid = ValidationFailed({"cursor": ["not a cursor this API gave"]}, "cursor: invalid")
    try:
        key = signing.loads(raw, salt=_ARCHIVE_CURSOR_SALT)
        at, pk = datetime.fromisoformat(key["at"]), key["id"]
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise invalid from None
    if not isinstance(pk, int) or pk < 1:
        raise invalid
    return at, pk


class ArchiveSearchApi(APIView):
    @api_operation(
        request=ArchiveSearchInputSerializer,
        response=ArchivePageSerializer,
        errors=(403,),
        summary="Search the archive (L0): ingested messages and consumed or evicted working items",
        description="Filters combine (AND); `query` is a case-insensitive substring match on the "
        "content (any script), not semantic search. Newest item first (by its own time), "
        "cursor-paged. An agent-scoped key sees its own agent's items only.",
    )
    def post(self, request: Request) -> Response:
        data = validated_body(request, ArchiveSearchInputSerializer)
        principal = principal_of(request)
        return Response(
            archive_search_validated(
                team=principal.team, acting_agent=principal.agent_id, data=data
            )
        )


def archive_search_validated(
    *, team: Team, acting_agent: str | None, data: dict[str, Any]
) -> dict[str, Any]:
    """Runs a validated archive search body (ArchiveSearchInputSerializer) for a key or token
    acting for `acting_agent` (None: team-wide) → the page's body. The MCP tool searches
    through here too."""
    agent_id = data["agent_id"]
    if agent_id:
        require_agent(AgentResource.PERSONAL_MEMORIES, acting_agent=acting_agent, agent_id=agent_id)
    elif acting_agent is not None:
        agent_id = acting_agent
    after = _archive_cursor(data["cursor"])
    query = ArchiveQuery(
        agent_id=agent_id,
        run_id=data["run_id"],
        role=data.get("role", ""),
        reason=data.get("reason", ""),
        since=data.get("since"),
        until=data.get("until"),
        query=data["query"],
    )
    rows, next_key = archive_page(team=team, query=query, after=after, page_size=data["page_size"])
    cursor = (
        signing.dumps({"at": next_key[0].isoformat(), "id": next_key[1]}, salt=_ARCHIVE_CURSOR_SALT)
        if next_key is not None
        else None
    )
    return {"items": [presenters.archive_item_body(r) for r in rows], "next_cursor": cursor}


class ArchiveItemApi(APIView):
    @api_operation(
        response=ArchiveDetailOutputSerializer,
        errors=(403, 404),
        summary="An archived item and the memories derived from it",
        description="`item_id` is the item's id (`metadata.source_items`, `GET "
        "/lifecycle/sources/<memory_id>`, the archive search). Derived memories are looked "
        "for among the item's agent's memories written by the same job within an hour of the "
        "archiving, at most 1000 of them.",
    )
    def get(self, request: Request, item_id: str) -> Response:
        team = principal_of(request).team
        item = archive_item_get(team=team, item_id=item_id)
        if item is None:
            raise NotFound("archive item")
        _agent(request, item.agent_id)
        derived = archive_derived_memories(team=team, item=item)
        return Response(presenters.archive_detail_body(item, derived=derived))


class JobOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField(help_text="ingest, export, compress, extract-facts, ...")
    status = serializers.CharField(help_text="queued, running, succeeded, failed, abandoned")
    agent_id = serializers.CharField(allow_null=True)
    trigger = serializers.CharField(help_text="api, auto, beat, admin, command")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    counts = serializers.DictField(help_text="the scalar fields of the result")
    result = serializers.DictField(
        allow_null=True, help_text="once succeeded: what the queuing endpoint answers"
    )
    error = serializers.CharField(allow_null=True)
    retry_of = serializers.IntegerField(
        allow_null=True, help_text="the abandoned job this one retries"
    )
    run_id = serializers.CharField(
        allow_null=True,
        help_text="the session: an ingest's run, or the run whose writes triggered a compress",
    )


class JobApi(APIView):
    """An asynchronous request's job (`async` ingest, export): poll until `status` is final."""

    @api_operation(response=JobOutputSerializer, errors=(404,), summary="A job's status and result")
    def get(self, request: Request, job_id: int) -> Response:
        principal = principal_of(request)
        job = job_get(team=principal.team, job_id=job_id)
        # An agent key sees its own agent's jobs; any other job of the team is as missing as
        # another team's.
        if job is None or (principal.agent_id is not None and job.agent_id != principal.agent_id):
            raise NotFound("job")
        return Response(presenters.job_body(job))


# --- conversation ingest --------------------------------------------------------------------


class IngestMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=ingest.ROLES)
    content = StrictCharField(max_length=settings.MEMORY_MAX_CONTENT_CHARS, trim_whitespace=False)
    at = serializers.DateTimeField(required=False, help_text="when it was said (ISO 8601)")
    name = StrictCharField(
        required=False, default="", allow_blank=True, max_length=64, help_text="the speaker"
    )

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("content is empty")
        return value


class IngestInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    messages = serializers.ListField(
        child=IngestMessageSerializer(), min_length=1, max_length=ingest.MAX_MESSAGES
    )
    run_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        validators=[AGENT_ID],
        help_text="the session: kept on every archived message and every memory made",
    )
    infer = StrictBooleanField(
        required=False, default=True, help_text="false: archive the messages only"
    )
    async_ = StrictBooleanField(
        required=False, default=False, help_text="true: 202 with a job id (GET /jobs/<id>)"
    )
    fact_roles = serializers.ListField(
        child=serializers.ChoiceField(choices=ingest.ROLES),
        required=False,
        default=list(ingest.DEFAULT_FACT_ROLES),
        min_length=1,
        help_text="whose messages facts are extracted from (default: the user's)",
    )


# The contract's field is `async`, a Python keyword: declared as `async_`, renamed here.
IngestInputSerializer._declared_fields["async"] = IngestInputSerializer._declared_fields.pop(
    "async_"
)


class IngestFactSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["ADD", "UPDATE", "NOOP"])
    memory = MemoryOutputSerializer(help_text="ADD/UPDATE: the new memory; NOOP: the known one")
    supersedes = serializers.IntegerField(required=False, help_text="UPDATE: the replaced memory")


class IngestOutputSerializer(serializers.Serializer):
    archived = serializers.IntegerField(help_text="messages kept in the archive (L0)")
    facts = IngestFactSerializer(many=True)
    facts_over_run_limit = serializers.IntegerField(
        required=False,
        help_text="only when some were: facts not written because the run already had the "
        "pipeline config's max_memories_per_run memories (their messages are archived)",
    )


class JobAcceptedSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(help_text="poll GET /jobs/<id> for the result")


def ingest_validated(
    *, team: Team, agent_id: str, data: dict[str, Any], key: IdempotencyKey | None = None
) -> tuple[int, dict[str, Any]]:
    """Runs a validated ingest body (IngestInputSerializer) for `agent_id`: `(status, data)` —
    200 and the decisions, or 202 and the job id with `async`. A request answered before under
    `key` is answered the same (`Replayed` is raised for the caller to send). The MCP tool
    ingests through here too."""
    idempotency_replay(team=team, key=key)
    agent_ensure(team=team, agent_id=agent_id)
    params: dict[str, Any] = {
        "messages": [
            {
                "role": m["role"],
                "content": m["content"],
                "at": m["at"].isoformat() if m.get("at") else None,
                "name": m.get("name", ""),
            }
            for m in data["messages"]
        ],
        "run_id": data.get("run_id", ""),
        "infer": data.get("infer", True),
        "fact_roles": data.get("fact_roles", list(ingest.DEFAULT_FACT_ROLES)),
    }
    if data.get("async"):
        with transaction.atomic():
            job = pipeline.run_later(
                team=team, kind=JobKind.INGEST, trigger="api", agent_id=agent_id, params=params
            )
            body = {"job_id": job.pk}
            idempotency_record(team=team, key=key, status_code=202, body=body)
        return 202, body
    if key is not None:
        params["idempotency"] = {"key": key.key, "hash": key.request_hash}
    result = pipeline.run(
        team=team, kind=JobKind.INGEST, trigger="api", agent_id=agent_id, params=params
    )
    if isinstance(result, JobReplayed):
        raise Replayed(status_code=result.status_code, body=result.body)
    return 200, presenters.result_body(result)


class IngestApi(APIView):
    """A conversation in one call: archived as L0, facts decided ADD / UPDATE / NOOP."""

    @api_operation(
        request=IngestInputSerializer,
        response=IngestOutputSerializer,
        extra_responses={202: JobAcceptedSerializer},
        errors=(403, 409),
        parameters=[IDEMPOTENCY_PARAMETER],
        summary="Ingest a conversation: archive the messages, decide each fact",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        data = validated_body(request, IngestInputSerializer)
        agent_id = _agent(request, data["agent_id"])
        key = request_idempotency_key(request, "ingest")
        try:
            status, body = ingest_validated(
                team=principal.team, agent_id=agent_id, data=data, key=key
            )
        except Replayed as replayed:
            return replayed_response(replayed)
        return Response(body, status=status)


# --- export / import (docs/export.md) -------------------------------------------------------------


class ExportInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(
        required=False,
        default="",
        allow_blank=True,
        allow_null=True,
        validators=[AGENT_ID],
        help_text="only this agent's memories; absent: the whole team (a team-wide key)",
    )


class ExportStartedSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(
        help_text="poll GET /jobs/<job_id>; once succeeded, its result links the download"
    )


class ExportApi(APIView):
    @api_operation(
        request=ExportInputSerializer,
        response=ExportStartedSerializer,
        statuses=(202,),
        errors=(403,),
        summary="Export the team's (or one agent's) memories as a bundle, in the background",
    )
    def post(self, request: Request) -> Response:
        agent_id = validated_body(request, ExportInputSerializer)["agent_id"] or ""
        principal = principal_of(request)
        if agent_id:
            _agent(request, agent_id)
        else:
            require_team_wide(acting_agent=principal.agent_id)
        job = pipeline.run_later(
            team=principal.team, kind=JobKind.EXPORT, trigger="api", agent_id=agent_id, params={}
        )
        return Response({"job_id": job.pk}, status=202)


class ExportDownloadApi(APIView):
    @extend_schema(
        summary="Download an export's bundle (gzip of JSON Lines)",
        responses={
            (200, "application/gzip"): OpenApiResponse(
                response=OpenApiTypes.BINARY, description="the bundle (docs/export.md)"
            ),
            404: OpenApiResponse(description=ERROR_DESCRIPTIONS[404]),
            409: OpenApiResponse(description=ERROR_DESCRIPTIONS[409]),
        },
    )
    def get(self, request: Request, job_id: int) -> StreamingHttpResponse:
        principal = principal_of(request)
        job = job_get(team=principal.team, job_id=job_id)
        # Another team's export, another agent's (for an agent key) and any other kind of job
        # are as missing as a job that does not exist.
        if (
            job is None
            or job.kind != JobKind.EXPORT
            or (principal.agent_id is not None and job.agent_id != principal.agent_id)
        ):
            raise NotFound("export")
        if job.status != JobStatus.SUCCEEDED:
            raise DomainError(
                ErrorCode.CONFLICT,
                f"export {job_id} is {job.status}: download it once GET /jobs/{job_id} says "
                "succeeded",
            )
        if not export_ready(job=job):
            raise NotFound("export (removed after EXPORT_RETENTION_HOURS)")
        name = bundle.bundle_filename(
            team=principal.team, agent_id=job.agent_id or None, job_id=job.pk
        )
        return presenters.export_download(job=job, name=name)


class ImportOutputSerializer(serializers.Serializer):
    imported = serializers.DictField(
        child=serializers.IntegerField(), help_text="records written (or overwritten), by kind"
    )
    skipped = serializers.DictField(
        child=serializers.IntegerField(), help_text="records already here, by kind"
    )
    reembedded = serializers.IntegerField(help_text="memories and entities embedded again")


def _choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = request.query_params.get(name) or default
    if value not in choices:
        raise ValidationFailed(
            {name: [f"must be one of {', '.join(choices)}"]},
            message=f"{name}: must be one of {', '.join(choices)}",
        )
    return value


class ImportApi(APIView):
    @api_operation(
        request={
            "application/gzip": OpenApiTypes.BINARY,
            "application/json": OpenApiTypes.OBJECT,
        },
        response=ImportOutputSerializer,
        errors=(403,),
        parameters=[
            OpenApiParameter(
                "on_conflict",
                str,
                enum=list(bundle.ON_CONFLICT),
                description="what to do with a record that is already here (default skip)",
            ),
            OpenApiParameter(
                "from",
                str,
                enum=list(convert.SOURCES),
                description="what the body is: a bundle (default), mem0's get_all JSON (each "
                "memory a personal memory of the agent its user_id, or agent_id, names), a "
                "Letta agent file (.af), or a Zep user's nodes, edges and threads",
            ),
            OpenApiParameter(
                "agent_from",
                str,
                enum=list(convert.AGENT_KEYS),
                description="from=mem0: the key naming a memory's agent (default user_id)",
            ),
            OpenApiParameter(
                "default_agent",
                str,
                description="from=mem0: the agent of a memory without that key",
            ),
            OpenApiParameter(
                "agent_id",
                str,
                description="from=letta: the id here of the file's one agent (default: its name); "
                "from=zep: the agent the Zep user is here (default: its user_id)",
            ),
        ],
        summary="Import a bundle, a mem0 listing, a Letta agent file or a Zep user's memory into "
        "the key's team (all or nothing)",
    )
    def post(self, request: Request) -> Response:
        on_conflict = _choice(request, "on_conflict", bundle.ON_CONFLICT, "skip")
        source = _choice(request, "from", convert.SOURCES, "bundle")
        agent_from = _choice(request, "agent_from", convert.AGENT_KEYS, "user_id")
        principal = principal_of(request)
        # The exact bytes the signature was checked over (never parsed by the framework).
        data = convert.as_bundle(
            request._request.body,
            source=source,
            agent_from=agent_from,
            default_agent=request.query_params.get("default_agent", ""),
            agent_id=request.query_params.get("agent_id", ""),
        )
        result = bundle.bundle_import(
            team=principal.team,
            data=data,
            on_conflict=on_conflict,
            acting_agent=principal.agent_id,
            actor=Actor.for_key(principal.api_key),
        )
        return Response(presenters.import_body(result))


# --- procedure proposals -------------------------------------------------------------------------


class ProposeProceduresInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    min_repeats = StrictIntegerField(required=False, default=3, min_value=2, max_value=50)
    max_memories = StrictIntegerField(required=False, default=200, min_value=1, max_value=1000)


class ProposeProceduresOutputSerializer(serializers.Serializer):
    proposals = ProcedureOutputSerializer(many=True, help_text="status proposed: accept with PUT")
    count = serializers.IntegerField()
    examined = serializers.IntegerField(help_text="preference and habit memories read")


class ProposeProceduresApi(_AgentJobApi):
    kind = JobKind.PROPOSE_PROCEDURES
    input_serializer = ProposeProceduresInputSerializer
    output_serializer = ProposeProceduresOutputSerializer
    operation_summary = "Propose rules from feedback the agent's memories repeat"


# --- consolidation -------------------------------------------------------------------------------


class ConsolidateInputSerializer(serializers.Serializer):
    agent_id = StrictCharField(validators=[AGENT_ID])
    min_fragments = StrictIntegerField(required=False, default=3, min_value=2, max_value=50)
    max_memories = StrictIntegerField(required=False, default=200, min_value=1, max_value=1000)


class ConsolidationSerializer(serializers.Serializer):
    memory = MemoryOutputSerializer(help_text="the stable fact written")
    fragments = serializers.ListField(
        child=serializers.IntegerField(), help_text="the memories it stands for, now superseded"
    )


class ConsolidateOutputSerializer(serializers.Serializer):
    consolidated = ConsolidationSerializer(many=True)
    count = serializers.IntegerField()
    examined = serializers.IntegerField(help_text="live memories read")


class ConsolidateApi(_AgentJobApi):
    kind = JobKind.CONSOLIDATE
    input_serializer = ConsolidateInputSerializer
    output_serializer = ConsolidateOutputSerializer
    operation_summary = "Consolidate fragments about one thing into one stable fact"
