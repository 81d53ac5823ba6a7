"""Team-level identity of entities across agents (docs/graph.md "Team identity").

Extraction resolves within one scope (an agent's own entities and the team-wide ones), so two
agents that both remember Binance have two entities, and one agent's "Singapore" never meets
another's "新加坡". This module links such entities to one `EntityIdentity` of the team, with the
evidence of graph.resolution and nothing weaker: the same resolution key and type (a `concept`,
where an untyped name lands, also meets a typed entity of the same key), a near key the
embedding confirms, or — for places and organisations — a name in the other script that the
dictionary and the embedding both confirm. Only names that mean the same thing to every agent
are linked (`resolution.team_linkable`): never a person (each agent's 用户 / "the user" is its
own, and two agents' "Alice" may be two people), a preference, goal or fact.

Entities are never merged: each keeps its agent, description, relations and memories, so what
an agent sees is unchanged. Only the team-wide views read identities.

Linking is idempotent: an entity already linked stays as it is, and a second run over the same
entities links nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, QuerySet

from tenants.models import Team

from .models import Entity, EntityIdentity
from .resolution import TEAM_TYPES, Known, Resolver, team_linkable

# The type an untyped name gets: it defers to a typed member of the same identity.
_GUESS_TYPE = "concept"


@dataclass(frozen=True)
class LinkResult:
    """What `link_team` did (the management command prints it)."""

    entities: int  # linkable entities of the team
    linked: int  # entities linked to an identity by this run
    identities_created: int
    identities_pruned: int  # identities left with members of a single scope, removed


class TeamLinker:
    """Links entities of one team to identities. Reads the team's linkable entities once (on
    first use), and keeps what it links in step, so one extraction run or one backfill asks the
    database for them a single time."""

    def __init__(self, team: Team) -> None:
        self.team = team
        self.linked = 0
        self.identities_created = 0
        self._resolver: Resolver | None = None
        self._order: list[Known] = []
        self._identity: dict[str, str | None] = {}  # entity id -> identity id

    def _load(self) -> Resolver:
        if self._resolver is not None:
            return self._resolver
        rows = Entity.objects.filter(team=self.team, entity_type__in=TEAM_TYPES).values_list(
            "id", "name", "entity_type", "normalized_name", "agent_id", "identity_id", "created_at"
        )
        # Linked entities first, so a match joins the identity that exists rather than pairing
        # off into a second one; then team-wide ones (the team's own name for a thing labels the
        # identity); then the oldest.
        ordered = sorted(rows, key=lambda r: (r[5] is None, r[4] != "", r[6], str(r[0])))
        resolver = Resolver()
        for pk, name, entity_type, key, agent_id, identity_id, _created in ordered:
            if not team_linkable(name, entity_type):
                continue
            known = Known(str(pk), name, entity_type, key, agent_id)
            resolver.add(known)
            self._order.append(known)
            self._identity[known.id] = str(identity_id) if identity_id else None
        self._resolver = resolver
        return resolver

    def link(self, entity: Entity) -> str | None:
        """Links `entity` (an entity of this team, just written) to the identity of the same
        thing in another scope, if there is one. Returns its identity id (None: none)."""
        if entity.team_id != self.team.pk:
            raise ValueError("an entity is linked only within its own team")
        if entity.identity_id is not None:
            return str(entity.identity_id)
        if not team_linkable(entity.name, entity.entity_type):
            return None
        resolver = self._load()
        known = Known(
            str(entity.pk),
            entity.name,
            entity.entity_type,
            entity.normalized_name,
            entity.agent_id,
        )
        if known.id not in self._identity:  # written after the load: a candidate from now on
            resolver.add(known)
            self._order.append(known)
            self._identity[known.id] = None
        return self._link(known)

    def link_all(self) -> int:
        """Links every linkable entity of the team; returns how many were considered."""
        self._load()
        for known in list(self._order):
            self._link(known)
        return len(self._order)

    def _link(self, known: Known) -> str | None:
        current = self._identity.get(known.id)
        if current is not None:
            return current
        match = self._match(known)
        if match is None:
            return None
        return self._join(known, match)

    def _match(self, known: Known) -> Known | None:
        """The entity of another scope that names the same thing, on resolution's evidence."""
        resolver = self._load()
        guess = known.entity_type == _GUESS_TYPE
        found = resolver.resolve(
            name=known.name,
            entity_type=known.entity_type,
            confident=not guess,
            other_than=known.agent_id,
        )
        if found is None and not guess:
            # The other direction of the guess rule: another agent's `concept` with the same key
            # is this typed entity whose type that agent's extraction could not tell.
            found = next(
                (
                    k
                    for k in resolver.same_key(known.key, other_than=known.agent_id)
                    if k.entity_type == _GUESS_TYPE
                ),
                None,
            )
        return found

    def _join(self, known: Known, match: Known) -> str | None:
        """Puts `known` in `match`'s identity (made for the two when `match` has none)."""
        with transaction.atomic():
            # Locked and re-read: an extraction of another agent may be linking the same match
            # right now, and both must end in one identity, not two.
            rows = {
                str(e.pk): e
                for e in Entity.objects.select_for_update()
                .filter(team=self.team, pk__in=[known.id, match.id])
                .only(
                    "id", "team_id", "identity_id", "name", "entity_type", "agent_id", "created_at"
                )
            }
            if len(rows) < 2:
                return None  # one of them was deleted meanwhile
            if any(
                (rows[k.id].name, rows[k.id].entity_type) != (k.name, k.entity_type)
                for k in (known, match)
            ):
                # Renamed (or retyped) since the names were read: they matched by a name one
                # of them no longer has. The next run links it by the name it has now.
                return None
            mine, theirs = rows[known.id].identity_id, rows[match.id].identity_id
            if mine is not None and theirs is not None:
                # Both linked meanwhile (to one identity or, rarely, two): identities are never
                # merged here, so leave them as they are.
                self._identity[known.id], self._identity[match.id] = str(mine), str(theirs)
                return str(mine)
            existing = mine if mine is not None else theirs
            if existing is not None:
                found = (
                    EntityIdentity.objects.select_for_update()
                    .filter(team=self.team, pk=existing)
                    .first()
                )
                if found is None:
                    return None  # another team's (never written here): prune_identities undoes it
                identity = found
            else:
                # Labelled by the team-wide member when there is one, else by the older entity,
                # as identities_relabel labels it again: whichever of the two was met first.
                label = min(
                    rows.values(), key=lambda e: (e.agent_id != "", e.created_at, str(e.pk))
                )
                identity = EntityIdentity.objects.create(
                    team=self.team, name=label.name, entity_type=match.entity_type
                )
                self.identities_created += 1
            typed = [k.entity_type for k in (known, match) if k.entity_type != _GUESS_TYPE]
            if identity.entity_type == _GUESS_TYPE and typed:
                identity.entity_type = typed[0]
                identity.save(update_fields=["entity_type", "updated_at"])
            # `update`, not `save`: the entity's own data did not change (updated_at stays, and
            # the search's change check is not tripped).
            self.linked += Entity.objects.filter(
                team=self.team, pk__in=[known.id, match.id], identity__isnull=True
            ).update(identity=identity)
        self._identity[known.id] = self._identity[match.id] = str(identity.pk)
        return str(identity.pk)


def _lonely(team: Team) -> QuerySet[EntityIdentity]:
    return (
        EntityIdentity.objects.filter(team=team)
        .annotate(scopes=Count("members__agent_id", distinct=True))
        .filter(scopes__lt=2)
    )


def prune_identities(*, team: Team) -> int:
    """Removes the team's identities that no longer join two scopes (a member deleted, renamed
    or its agent gone); their remaining member is unlinked. Returns how many were removed."""
    # A link to another team's identity cannot be written by this module; undone all the same,
    # since a team view would otherwise draw another team's label.
    Entity.objects.filter(team=team, identity__isnull=False).exclude(identity__team=team).update(
        identity=None
    )
    candidates = list(_lonely(team).values_list("id", flat=True))
    if not candidates:
        return 0
    with transaction.atomic():
        # Their members locked first, in id order, as a linker locks the entities it joins
        # before their identity (TeamLinker._join); then counted again. A linker that joined a
        # member of another scope since the first count keeps its identity: removing it would
        # unlink the pair it just linked (or fail on the new member's reference).
        list(
            Entity.objects.select_for_update()
            .filter(team=team, identity__in=candidates)
            .order_by("id")
            .values_list("id", flat=True)
        )
        ids = list(_lonely(team).filter(pk__in=candidates).values_list("id", flat=True))
        if ids:
            EntityIdentity.objects.filter(team=team, pk__in=ids).delete()
    return len(ids)


def prune_all_identities() -> int:
    """prune_identities for every team that has identities (beat, `graph.prune_identities`):
    a member's deletion leaves an identity of a single scope, which nothing else removes."""
    teams = Team.objects.filter(pk__in=EntityIdentity.objects.values("team_id").distinct())
    return sum(prune_identities(team=team) for team in teams)


def link_team(*, team: Team) -> LinkResult:
    """Links the team's existing entities (`manage.py link_team_entities`). Idempotent: run
    again, it links and creates nothing."""
    pruned = prune_identities(team=team)
    linker = TeamLinker(team)
    considered = linker.link_all()
    return LinkResult(considered, linker.linked, linker.identities_created, pruned)
