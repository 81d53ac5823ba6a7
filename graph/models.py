"""The knowledge graph (docs/graph.md): entities, directed relations between them, and the memories
each entity was read from.

Every row belongs to one team. An entity may also belong to one agent (`agent_id`; blank = the
whole team), like a personal memory. Vectors are float32 bytes with the model that made them, as
for memories: the database is the source of truth.
"""

from __future__ import annotations

import uuid

from django.db import models

from core.fields import AgentIdField
from memories.models import Memory
from tenants.models import Team


class EntityType(models.TextChoices):
    PERSON = "person", "person"
    PREFERENCE = "preference", "preference"
    SKILL = "skill", "skill"
    PROJECT = "project", "project"
    GOAL = "goal", "goal"
    FACT = "fact", "fact"
    CONCEPT = "concept", "concept"
    ORGANIZATION = "organization", "organization"
    LOCATION = "location", "location"
    CUSTOM = "custom", "custom"


class RelationType(models.TextChoices):
    PREFERS = "prefers", "prefers"
    WORKS_ON = "works_on", "works_on"
    KNOWS = "knows", "knows"
    USES = "uses", "uses"
    WORKS_AT = "works_at", "works_at"
    LOCATED_IN = "located_in", "located_in"
    HAS_GOAL = "has_goal", "has_goal"
    RELATED_TO = "related_to", "related_to"
    PART_OF = "part_of", "part_of"


# The values in order, as the API, the extraction prompt and the console list them.
ENTITY_TYPES: tuple[str, ...] = tuple(EntityType.values)
RELATION_TYPES: tuple[str, ...] = tuple(RelationType.values)


class EntityIdentity(models.Model):
    """One thing of the team that several entities stand for (docs/graph.md "Team identity").

    Each agent keeps its own entity (its description, relations and memories stay private to it);
    an identity only says that two or more entities of the team — of different agents, or an
    agent's and a team-wide one — name the same organisation, place, project, concept or skill.
    Written by graph.identity (at extraction, and by `manage.py link_team_entities`), read by
    the team-wide views. Never by an agent-scoped key: it would tell one agent what another
    agent's memories mention.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="entity_identities")
    # How the team-wide views label the group: the first member's name and the most specific
    # type among the members (a `concept` member joins a typed one).
    name = models.CharField(max_length=255)
    entity_type = models.CharField(max_length=16, choices=EntityType.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(entity_type__in=EntityType.values),
                name="identity_type_valid",
            ),
        ]
        indexes = [models.Index(fields=["team", "-created_at"], name="identity_team_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.entity_type}) in {self.team_id}"


class Entity(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="entities")
    # Owning agent; "" = team-wide. A plain id like Memory.agent_id: entities of a deleted agent
    # are removed by graph.signals, team-wide ones outlive every agent.
    agent_id = AgentIdField(blank=True, default="")
    name = models.CharField(max_length=255)
    entity_type = models.CharField(max_length=16, choices=EntityType.choices)
    description = models.TextField(blank=True, default="")
    properties = models.JSONField(default=dict, blank=True)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=128, blank=True, default="")
    # Resolution key ("Python 3.13" -> "python"): graph.resolution.normalise_name. Also what the
    # create-or-merge lookup narrows on before comparing names exactly (case-insensitively).
    normalized_name = models.CharField(max_length=255)
    # The memory this entity was first extracted from; every later mention is an EntityMention.
    source_memory = models.ForeignKey(
        Memory, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # When that memory came from an ingested conversation (POST /memories/ingest): its run id
    # and the archived message (lifecycle's WorkingArchive item id) it was read from. Blank
    # otherwise (graph.services.message_source).
    source_conversation_id = models.CharField(max_length=64, blank=True, default="")
    source_message_id = models.CharField(max_length=32, blank=True, default="")
    # The team-level thing this entity names, shared with other agents' entities (null: none
    # found yet, or a type that is never shared, like a person). Always an identity of `team`
    # (graph.identity checks it). Not part of the entity's own data: moving it leaves
    # `updated_at` alone, and a rename clears it (the name it was linked by is gone).
    identity = models.ForeignKey(
        EntityIdentity,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="members",
    )
    access_count = models.PositiveIntegerField(default=0)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "agent_id", "name", "entity_type"], name="uniq_entity_name"
            ),
            models.CheckConstraint(
                condition=models.Q(entity_type__in=EntityType.values), name="entity_type_valid"
            ),
        ]
        indexes = [
            # list: newest first, optionally by agent and/or type
            models.Index(fields=["team", "-created_at"], name="ent_team_recent"),
            models.Index(fields=["team", "entity_type", "-created_at"], name="ent_type_recent"),
            models.Index(
                fields=["team", "agent_id", "entity_type", "-created_at"],
                name="ent_agent_recent",
            ),
            # create-or-merge and resolution: same scope, same normalised name
            models.Index(fields=["team", "agent_id", "normalized_name"], name="ent_resolve"),
            # whole-graph render: most used first
            models.Index(fields=["team", "-access_count"], name="ent_team_used"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.entity_type}) in {self.team_id}/{self.agent_id or '*'}"


class Relation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="relations")
    # Both ends are always entities of `team` (graph.services.relation_create checks it).
    source = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="outgoing")
    target = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="incoming")
    relation_type = models.CharField(max_length=16, choices=RelationType.choices)
    description = models.TextField(blank=True, default="")
    properties = models.JSONField(default=dict, blank=True)
    source_memory = models.ForeignKey(
        Memory, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # As on Entity: the conversation and message the source memory was ingested from.
    source_conversation_id = models.CharField(max_length=64, blank=True, default="")
    source_message_id = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # Also the index for "outgoing relations of these entities" (leading column).
            models.UniqueConstraint(
                fields=["source", "target", "relation_type"], name="uniq_relation"
            ),
            models.CheckConstraint(
                condition=models.Q(relation_type__in=RelationType.values),
                name="relation_type_valid",
            ),
        ]
        indexes = [
            # incoming relations of these entities (traversal, detail, list by entity)
            models.Index(fields=["target", "source"], name="rel_target"),
            # list: newest first, optionally by type
            models.Index(fields=["team", "-created_at"], name="rel_team_recent"),
            models.Index(fields=["team", "relation_type", "-created_at"], name="rel_type_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} -{self.relation_type}-> {self.target_id}"


class EntityMention(models.Model):
    """An entity was read from a memory (extraction). Search's `include_entities` reads these.

    `Entity.source_memory` keeps only the first memory; a later memory that mentions the same
    thing merges into the entity and is recorded here, so every memory finds its entities.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="mentions")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["entity", "memory"], name="uniq_entity_mention")
        ]
        indexes = [models.Index(fields=["team", "memory"], name="mention_memory")]

    def __str__(self) -> str:
        return f"entity {self.entity_id} in memory {self.memory_id}"
