"""`POST /lifecycle/extract-graph`: entities and relations from an agent's recent memories.

Two engines, chosen like the lifecycle's: with an LLM configured (`llm.get_client()`, from
`LLM_BASE_URL`) the LLM proposes entities and relations as JSON; without, the offline rules of
`graph.offline`.
Either way the proposals go through the same validation and resolution before anything is
written:

* types must be in the enums (a few unambiguous synonyms are mapped: "company" →
  organization); anything else is skipped with a warning, never stored;
* every entity and relation is tied to the memory it came from (`source_memory`, plus an
  `EntityMention` per memory); an entity the LLM cannot tie to an input memory is skipped;
* each proposal is resolved against the scope's entities (graph.resolution): the same thing
  named slightly differently merges into the existing entity; a relation is created once;
* each entity written is linked to the team-level identity of the same thing in other scopes
  (graph.identity), never merged with it.

Memory text is untrusted: the LLM prompt carries it as a JSON data block with the shared system
prompt (`llm.prompts`), which tells the model to ignore instructions inside it.

Writes are one short transaction per entity or relation (embeddings computed outside them, so a
model call never holds the SQLite write lock); a run is idempotent, so a failed run is simply
run again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from django.utils import timezone
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from llm import ChatClient, Usage, chat_messages, cut, data_block, get_client, short_error
from memories import locks
from memories.models import Memory, MemoryScope
from memories.retrieval.embeddings import embed_passages
from memories.selectors import unexpired_q
from tenants.models import Team

from . import services
from .identity import TeamLinker
from .models import ENTITY_TYPES, RELATION_TYPES, Entity, Relation
from .offline import SELF_EN, SELF_ZH, GraphDraft, extract_offline, is_chinese
from .resolution import SELF_KEY, Known, Resolver, normalise_name

logger = logging.getLogger(__name__)

# Memories per LLM call: enough context to relate them, small enough for any model's window.
LLM_BATCH = 20
MAX_ITEM_CHARS = 4000
DESCRIPTION_MAX_CHARS = 2000

_ENTITY_ALIASES = {
    "people": "person",
    "human": "person",
    "user": "person",
    "人物": "person",
    "人": "person",
    "company": "organization",
    "organisation": "organization",
    "org": "organization",
    "team": "organization",
    "组织": "organization",
    "公司": "organization",
    "place": "location",
    "city": "location",
    "country": "location",
    "地点": "location",
    "tool": "skill",
    "technology": "skill",
    "language": "skill",
    "技能": "skill",
    "工具": "skill",
    "偏好": "preference",
    "项目": "project",
    "目标": "goal",
    "事实": "fact",
    "概念": "concept",
    "topic": "concept",
    "assistant": "person",
}
_RELATION_ALIASES = {
    "works_for": "works_at",
    "employed_by": "works_at",
    "lives_in": "located_in",
    "based_in": "located_in",
    "located_at": "located_in",
    "likes": "prefers",
    "prefer": "prefers",
    "use": "uses",
    "uses_tool": "uses",
    "working_on": "works_on",
    "work_on": "works_on",
    "know": "knows",
    "member_of": "part_of",
    "belongs_to": "part_of",
    "related": "related_to",
    "goal": "has_goal",
}


def entity_type_named(name: str) -> str | None:
    """This server's entity type that `name` says (its own, case and spacing aside, or a common
    alias: "Company", "user"), None for any other: how another service's labels are read."""
    try:
        return _enum(name, ENTITY_TYPES, _ENTITY_ALIASES, "entity type")
    except ValueError:
        return None


def relation_type_named(name: str) -> str | None:
    """This server's relation type that `name` says (its own, case and spacing aside, or a
    common alias: "WORKS_FOR", "likes"), None for any other."""
    try:
        return _enum(name, RELATION_TYPES, _RELATION_ALIASES, "relation type")
    except ValueError:
        return None


def _enum(value: Any, choices: tuple[str, ...], aliases: dict[str, str], what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    key = value.strip().lower().replace(" ", "_").replace("-", "_")
    key = aliases.get(key, key)
    if key not in choices:
        raise ValueError(f"unknown {what} {value!r}")
    return key


def _ids(value: Any, info: ValidationInfo) -> list[int]:
    raw = value if isinstance(value, list) else [value] if value is not None else []
    out: list[int] = []
    for v in raw:
        if isinstance(v, bool):
            continue
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, int) and v not in out:
            out.append(v)
    known = info.context.get("memory_ids") if isinstance(info.context, dict) else None
    return [i for i in out if known is None or i in known]


def _description(value: Any) -> str:
    return value.strip()[:DESCRIPTION_MAX_CHARS] if isinstance(value, str) else ""


# The fields an entity and a relation both have, read as leniently from either.
Description = Annotated[str, BeforeValidator(_description)]
MemoryIds = Annotated[list[int], BeforeValidator(_ids)]


class LLMEntity(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    type: str
    description: Description = ""
    memory_ids: MemoryIds = Field(default_factory=list)
    properties: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, v: Any) -> Any:
        return v.strip() if isinstance(v, str) else v

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> str:
        return _enum(v, ENTITY_TYPES, _ENTITY_ALIASES, "entity type")

    @field_validator("properties", mode="before")
    @classmethod
    def _properties(cls, v: Any) -> dict[str, Any]:
        return v if isinstance(v, dict) else {}


class LLMRelation(BaseModel):
    source: str = Field(min_length=1, max_length=255)
    target: str = Field(min_length=1, max_length=255)
    type: str
    description: Description = ""
    memory_ids: MemoryIds = Field(default_factory=list)

    @field_validator("source", "target", mode="before")
    @classmethod
    def _end(cls, v: Any) -> Any:
        if isinstance(v, dict):  # {"name": "..."}
            v = v.get("name")
        return v.strip() if isinstance(v, str) else v

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> str:
        return _enum(v, RELATION_TYPES, _RELATION_ALIASES, "relation type")


def _normalise_keys(obj: Any, renames: dict[str, str]) -> Any:
    """Accepts the spellings models use for the same field ("entity_type" for "type")."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    for old, new in renames.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    if "memory_id" in out and "memory_ids" not in out:
        out["memory_ids"] = out.pop("memory_id")
    return out


# --- the LLM path ------------------------------------------------------------------------------

GRAPH_TASK = """Task: build a knowledge graph from these memories of an agent: the entities \
they mention and the relations between them.
- An entity is a specific person, organisation, place, tool or skill, project, goal, preference, \
fact or concept that is worth remembering. Skip generic words, dates and numbers.
- entity type is one of: person, preference, skill, project, goal, fact, concept, organization, \
location, custom.
- relation type is one of: prefers, works_on, knows, uses, works_at, located_in, has_goal, \
related_to, part_of. A relation goes from source to target ("Alice" works_at "Acme"; "user" \
prefers "concise answers"); both ends must be entities in your list, named exactly as there.
- When a memory speaks of the user the agent works for (or in the first person), that is the \
entity named "{self_name}" of type person.
- memory_ids: the ids (numbers from the "id" fields) of the memories an entity or relation comes \
from; only ids from the records.
- description: one short sentence of what the memories say about the entity ("" if nothing).
- {language_rule}

Reply with JSON exactly like:
{{"entities": [{{"name": "...", "type": "person", "description": "...", "memory_ids": [12]}}], \
"relations": [{{"source": "...", "target": "...", "type": "works_at", "description": "...", \
"memory_ids": [12]}}]}}"""


def graph_messages(memories: list[tuple[int, str]]) -> list[dict[str, str]]:
    chinese = sum(is_chinese(t) for _, t in memories) * 2 >= len(memories)
    language_rule = (
        "Write names and descriptions in the language of the records: they are mostly Chinese, "
        "so write in Chinese (简体中文); keep Latin-script names (Redis, DeepSeek) as written."
        if chinese
        else "Write names and descriptions in the language of the records."
    )
    records = [
        {"id": memory_id, "text": cut(text, MAX_ITEM_CHARS, marker="")}
        for memory_id, text in memories
    ]
    task = GRAPH_TASK.format(self_name=SELF_ZH if chinese else SELF_EN, language_rule=language_rule)
    return chat_messages(task, data_block("memories", records))


def _items(data: Any, key: str) -> list[Any]:
    if isinstance(data, dict) and isinstance(data.get(key), list):
        return list(data[key])
    return []


def draft_from_llm(data: Any, memories: list[tuple[int, str]], draft: GraphDraft) -> None:
    """Validates one LLM answer into `draft`; what does not validate is skipped and logged."""
    if not isinstance(data, dict):
        logger.warning("LLM extract_graph: answer is not a JSON object, nothing taken")
        return
    context = {"memory_ids": {memory_id for memory_id, _ in memories}}
    texts = {memory_id: text.casefold() for memory_id, text in memories}
    by_name: dict[str, int] = {}
    for i, raw in enumerate(_items(data, "entities")):
        try:
            item = LLMEntity.model_validate(
                _normalise_keys(raw, {"entity_type": "type"}), context=context
            )
        except ValidationError as exc:
            logger.warning("LLM extract_graph: entity %d skipped (%s)", i, short_error(exc))
            continue
        memory_ids = item.memory_ids
        cited = isinstance(raw, dict) and bool(raw.get("memory_ids") or raw.get("memory_id"))
        if not memory_ids and not cited:
            # No ids given: the memories that name it, or the only memory there is. Ids given
            # but none of them an input memory: the model made them up, and likely the entity.
            memory_ids = [mid for mid, text in texts.items() if item.name.casefold() in text]
            if not memory_ids and len(memories) == 1:
                memory_ids = [memories[0][0]]
        if not memory_ids:
            logger.warning(
                "LLM extract_graph: entity %d (%r) skipped: not tied to any input memory",
                i,
                item.name[:60],
            )
            continue
        idx = -1
        for mid in memory_ids:
            idx = draft.entity(
                item.name,
                item.type,
                mid,
                description=item.description,
                properties=item.properties,
            )
        by_name[item.name.casefold()] = idx
        by_name.setdefault(normalise_name(item.name), idx)
    for i, raw in enumerate(_items(data, "relations")):
        try:
            rel = LLMRelation.model_validate(
                _normalise_keys(
                    raw,
                    {"relation_type": "type", "source_entity": "source", "target_entity": "target"},
                ),
                context=context,
            )
        except ValidationError as exc:
            logger.warning("LLM extract_graph: relation %d skipped (%s)", i, short_error(exc))
            continue
        ends = []
        for name in (rel.source, rel.target):
            idx_or_none = by_name.get(name.casefold(), by_name.get(normalise_name(name)))
            if idx_or_none is None and normalise_name(name, "person") == SELF_KEY:
                # The user, named in a relation but not listed: the one implicit entity.
                idx_or_none = draft.entity(name, "person", None)
            ends.append(idx_or_none)
        source, target = ends
        if source is None or target is None:
            logger.warning(
                "LLM extract_graph: relation %d skipped: %r or %r is not a listed entity",
                i,
                rel.source[:60],
                rel.target[:60],
            )
            continue
        memory_id: int | None = rel.memory_ids[0] if rel.memory_ids else None
        if memory_id is None:
            shared = set(draft.entities[source].memory_ids) & set(draft.entities[target].memory_ids)
            memory_id = min(shared) if shared else None
        draft.relate(source, target, rel.type, memory_id, rel.description)


def extract_with_llm(
    client: ChatClient, memories: list[tuple[int, str]]
) -> tuple[GraphDraft, Usage]:
    draft = GraphDraft()
    usage = Usage()
    for start in range(0, len(memories), LLM_BATCH):
        batch = memories[start : start + LLM_BATCH]
        # The shared JSON chat: retries, JSON-mode fallback, LLM_UNAVAILABLE mapping and
        # tolerant JSON extraction, as for the lifecycle operations.
        data, used = client.chat_json(graph_messages(batch), what="extract_graph")
        usage = usage.add(used)
        draft_from_llm(data, batch, draft)
    return draft, usage


# --- resolution and writes ---------------------------------------------------------------------


@dataclass(frozen=True)
class ExtractedEntity:
    entity: Entity
    created: bool  # False: merged into an entity that existed


@dataclass(frozen=True)
class GraphExtraction:
    """What an extraction wrote (rendered by presenters.extraction_body)."""

    entities: list[ExtractedEntity]  # each entity once, in the order first written
    relations: list[Relation]  # the relations of this run, created or found
    relations_created: int
    memories: int  # memories read
    job_id: int | None = None


def _resolver(team: Team, agent_id: str) -> Resolver:
    resolver = Resolver()
    scopes = [agent_id, ""] if agent_id else [""]
    rows = Entity.objects.filter(team=team, agent_id__in=scopes).values_list(
        "id", "name", "entity_type", "normalized_name", "agent_id"
    )
    # The agent's own entities first: resolution prefers them over team-wide ones.
    for pk, name, entity_type, key, owner in sorted(
        rows, key=lambda r: (r[4] != agent_id, str(r[0]))
    ):
        resolver.add(Known(str(pk), name, entity_type, key, owner))
    return resolver


def _memories(team: Team, agent_id: str, max_memories: int) -> list[Memory]:
    qs = Memory.objects.filter(unexpired_q(timezone.now()), team=team, superseded_by__isnull=True)
    if agent_id:
        qs = qs.filter(scope=MemoryScope.PERSONAL, agent_id=agent_id)
    else:
        qs = qs.filter(scope=MemoryScope.TEAM)
    return list(qs.order_by("-created_at", "-id")[:max_memories])


def graph_extract(
    *, team: Team, agent_id: str, max_memories: int = 20, job_id: int | None = None
) -> tuple[GraphExtraction, Usage, str]:
    """Extracts the graph of the agent's newest memories (the team's when `agent_id` is "").

    Entities are written in the agent's scope (team-wide for team memories). Returns
    `(result, usage, engine_name)` like the lifecycle operations, for the job that runs it.
    """
    memories = _memories(team, agent_id, max_memories)
    client = get_client()
    pairs = [(m.pk, m.content) for m in reversed(memories)]  # oldest first: stable names
    if client is not None:
        draft, usage = extract_with_llm(client, pairs) if pairs else (GraphDraft(), Usage())
        engine_name = client.name
    else:
        draft, usage, engine_name = extract_offline(pairs), Usage(), "offline"
    entities, relations, relations_created = _write(
        team, agent_id, draft, {m.pk: m for m in memories}, job_id
    )
    result = GraphExtraction(entities, relations, relations_created, len(memories), job_id)
    return result, usage, engine_name


@contextmanager
def _fenced(team: Team, agent_id: str, job_id: int | None) -> Iterator[None]:
    """One write of an agent's graph, under the agent's write lock and only while the agent
    exists (locks.job_agent_check): a job running while its agent is deleted stops at its next
    write instead of writing, and registering, the agent again. A write at a time, not the whole
    run: the team linker locks other agents' entities, and holding this agent's lock across it
    could deadlock with their extractions. Team-wide entities have no agent to lose."""
    if not agent_id:
        yield
        return
    with locks.agent_locked(team_id=team.id, agent_id=agent_id):
        locks.job_agent_check(team_id=team.id, agent_id=agent_id, job_id=job_id)
        yield


def _write(
    team: Team,
    agent_id: str,
    draft: GraphDraft,
    memories: dict[int, Memory],
    job_id: int | None,
) -> tuple[list[ExtractedEntity], list[Relation], int]:
    """The entities written (each once), the relations and how many of those were new."""
    # Fill the embedder's cache before any write (merges and creates embed again, cache hits).
    texts = [services.embedding_text(d.name, d.description) for d in draft.entities]
    if texts:
        embed_passages(texts)
    resolver = _resolver(team, agent_id)
    # Across scopes: the same organisation, place, project, concept or skill in another agent's
    # graph (or the team-wide one) gets the same team-level identity (graph.identity).
    linker = TeamLinker(team)
    written: dict[int, ExtractedEntity] = {}
    # Typed proposals first, so a guess in this run joins what a rule or the model typed.
    order = sorted(range(len(draft.entities)), key=lambda i: not draft.entities[i].confident)
    for i in order:
        d = draft.entities[i]
        mids = [mid for mid in d.memory_ids if mid in memories]
        if not mids:
            continue
        known = resolver.resolve(name=d.name, entity_type=d.entity_type, confident=d.confident)
        if known is not None:
            entity = Entity.objects.filter(team=team, pk=known.id).first()
            if entity is None:  # deleted meanwhile: create it afresh below
                known = None
        with _fenced(team, agent_id, job_id):
            if known is None:
                entity, created = services.entity_create_or_merge(
                    team=team,
                    name=d.name,
                    entity_type=d.entity_type,
                    agent_id=agent_id,
                    description=d.description,
                    properties={**d.properties, "source": "extraction"},
                    source_memory=memories[mids[0]],
                )
            else:
                assert entity is not None
                entity = services.entity_merge(
                    entity=entity,
                    description=d.description,
                    properties=d.properties,
                    source_memory=memories[mids[0]],
                )
                created = False
            for mid in mids[1:]:
                services.entity_mention(entity=entity, memory=memories[mid])
        if known is None:
            resolver.add(
                Known(
                    str(entity.pk),
                    entity.name,
                    entity.entity_type,
                    entity.normalized_name,
                    agent_id,
                )
            )
        linker.link(entity)
        written[i] = ExtractedEntity(entity, created)
    relations = []
    created_relations = 0
    for r in draft.relations:
        source, target = written.get(r.source), written.get(r.target)
        if source is None or target is None or source.entity.pk == target.entity.pk:
            continue
        with _fenced(team, agent_id, job_id):
            relation, created = services.relation_create(
                source=source.entity,
                target=target.entity,
                relation_type=r.relation_type,
                description=r.description,
                source_memory=memories.get(r.memory_id) if r.memory_id is not None else None,
            )
        created_relations += int(created)
        relations.append(relation)
    entities = {w.entity.pk: w for w in written.values()}
    return list(entities.values()), relations, created_relations


def draft_summary(draft: GraphDraft) -> str:
    """A readable dump of a draft (debugging and the docs' examples)."""
    lines = [f"{d.entity_type:12} {d.name}" for d in draft.entities]
    lines += [
        f"{draft.entities[r.source].name} -{r.relation_type}-> {draft.entities[r.target].name}"
        for r in draft.relations
    ]
    return json.dumps(lines, ensure_ascii=False, indent=1)
