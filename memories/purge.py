"""Dry-run purge, its audit and the restorable trash (docs/console/purge.md).

The trash holds every removed long-term memory, not only purged ones: `memories_trash` is the one
way to remove one restorably (API DELETE, cleanup in all its triggers, the console's bulk delete
and purge), recording `removed_by` and `reason`. Only `?purge=true`, an erasure from the trash,
and team / agent deletion remove for good at once.

Flow: `purge_preview` (a selector, changes nothing) lists what the criteria would remove and signs
the exact set — every (memory id, state stamp) pair plus the criteria — into a token. The confirm
step, `purge_confirm`, recomputes the set under row locks and purges only when it is identical to
the signed one; otherwise it purges nothing and records a "changed" run. Purged memories are
copied to `TrashedMemory` (every column, the embedding, shares, revisions) and deleted through
`memories_delete`, so the index change log drops them from every process's search index.
`trash_restore` puts them back with the same ids and logs them as live again.

Protected (matching but never purged): pinned memories, and memories that supersede another one —
deleting the newer fact would null the old fact's `superseded_by` link and bring the stale fact
back into search.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from core.errors import DomainError, ErrorCode, NotFound
from tenants.models import Agent, ApiKey, Team

from . import locks
from .models import (
    Memory,
    MemoryRevision,
    MemoryScope,
    MemoryShare,
    PurgeRun,
    PurgeStatus,
    RemovedBy,
    TrashedMemory,
)
from .retrieval import index
from .retrieval.text import content_hash
from .selectors import memory_same_content_id
from .services import Actor, BulkResult, answers_forget, memories_delete, memories_erase

# One confirm moves at most this many memories: the preview lists every item and the token carries
# every id, so a bigger set must be narrowed first (by agent, scope or thresholds).
MAX_PURGE_ITEMS = 2000
# A preview older than this must be made again before it can be confirmed.
PREVIEW_MAX_AGE_SECONDS = 3600
_TOKEN_SALT = "memories.purge.preview"

SNAPSHOT_FIELDS = (
    "scope",
    "agent_id",
    "content",
    "importance",
    "category",
    "metadata",
    "embedding_model",
    "content_hash",
    "search_tokens",
    "access_count",
    "last_accessed",
    "pinned",
    "run_id",
    "superseded_by_id",
    "promoted_from_id",
    "created_at",
    "updated_at",
    "expires_at",
)
_DATETIME_FIELDS = ("last_accessed", "created_at", "updated_at", "expires_at")
# Memories one expiry transaction moves to the trash (memories_expire).
EXPIRE_BATCH = 500


@dataclass(frozen=True)
class PurgeCriteria:
    """What to purge: importance < `importance_below` AND idle for >= `idle_days` days.

    Idle counts from `last_accessed`, or from `created_at` for a never-accessed memory. An
    `agent_id` limits the purge to that agent's memories (personal ones it owns, team ones it
    wrote) within `scopes`.
    """

    idle_days: int
    importance_below: float
    scopes: tuple[str, ...] = (MemoryScope.PERSONAL, MemoryScope.TEAM)
    agent_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "idle_days": self.idle_days,
            "importance_below": self.importance_below,
            "scopes": sorted(self.scopes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PurgeCriteria:
        return cls(
            idle_days=int(data["idle_days"]),
            importance_below=float(data["importance_below"]),
            scopes=tuple(sorted(data["scopes"])),
            agent_id=str(data.get("agent_id") or ""),
        )

    def describe(self) -> str:
        who = f"agent {self.agent_id}" if self.agent_id else "all agents"
        return (
            f"{'+'.join(sorted(self.scopes))} memories of {who}, idle >= {self.idle_days} d, "
            f"importance < {self.importance_below:.2f}"
        )


@dataclass
class PurgeItem:
    memory: Memory
    idle_days: int
    reason: str
    stamp: str
    protected: str = ""  # why it is skipped, "" when it would be purged


@dataclass
class PurgePreview:
    criteria: PurgeCriteria
    items: list[PurgeItem]  # what a confirm would purge
    protected: list[PurgeItem]  # matching but skipped
    too_many: bool  # more than MAX_PURGE_ITEMS matched: narrow the criteria, no token
    token: str = ""

    @property
    def per_agent(self) -> list[tuple[str, int]]:
        counts = Counter(i.memory.agent_id for i in self.items)
        return sorted(counts.items())

    @property
    def stamps(self) -> dict[int, str]:
        return {i.memory.pk: i.stamp for i in self.items}


@dataclass
class PurgeOutcome:
    """`run.status` confirmed: `run.count` memories went to the trash. changed: nothing purged;
    `changes` says what differs and `preview` is the new one to confirm instead."""

    run: PurgeRun
    changes: dict[str, list[int]] = field(default_factory=dict)
    preview: PurgePreview | None = None


@dataclass
class RestoreResult:
    restored: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why an item stayed in the trash
    notes: list[str] = field(default_factory=list)  # restored, but something could not be


# --- preview -------------------------------------------------------------------------------------


def _stamp(m: Memory) -> str:
    # Everything a "has it changed since the preview?" check must see. last_accessed and
    # access_count matter because a search touches them without changing updated_at.
    raw = "|".join(
        str(v)
        for v in (
            m.updated_at.isoformat(),
            m.last_accessed.isoformat() if m.last_accessed else "",
            m.access_count,
            int(m.pinned),
            repr(m.importance),
            m.superseded_by_id or "",
        )
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _matching(team: Team, criteria: PurgeCriteria, now: datetime) -> QuerySet[Memory]:
    cutoff = now - timedelta(days=criteria.idle_days)
    qs = Memory.objects.filter(
        team=team, scope__in=criteria.scopes, importance__lt=criteria.importance_below
    ).filter(Q(last_accessed__lte=cutoff) | Q(last_accessed__isnull=True, created_at__lte=cutoff))
    if criteria.agent_id:
        qs = qs.filter(agent_id=criteria.agent_id)
    return qs.annotate(
        supersedes_other=Exists(Memory.objects.filter(superseded_by=OuterRef("pk")))
    ).order_by("agent_id", "scope", "id")


def _item(m: Memory, criteria: PurgeCriteria, now: datetime) -> PurgeItem:
    since = m.last_accessed or m.created_at
    idle = max(0, (now - since).days)
    reason = f"idle {idle} d, importance {m.importance:.2f} < {criteria.importance_below:.2f}"
    if m.last_accessed is None:
        reason += ", never accessed"
    if m.superseded_by_id:
        reason += f", superseded by #{m.superseded_by_id}"
    protected = ""
    if m.pinned:
        protected = "pinned"
    elif getattr(m, "supersedes_other", False):
        protected = "supersedes an older memory"
    return PurgeItem(memory=m, idle_days=idle, reason=reason, stamp=_stamp(m), protected=protected)


def _select(
    team: Team, criteria: PurgeCriteria, now: datetime, *, lock: bool
) -> tuple[list[PurgeItem], list[PurgeItem], bool]:
    qs = _matching(team, criteria, now)
    # Confirm (lock): hold the rows until the purge commits, so a concurrent search (touch), edit
    # or pin waits and cannot slip between the check and the delete (no-op on SQLite, which
    # serialises writers anyway). Preview: the vectors are not needed.
    qs = qs.select_for_update() if lock else qs.defer("embedding")
    rows = list(qs[: MAX_PURGE_ITEMS + 1])
    too_many = len(rows) > MAX_PURGE_ITEMS
    items = [_item(m, criteria, now) for m in rows[:MAX_PURGE_ITEMS]]
    return [i for i in items if not i.protected], [i for i in items if i.protected], too_many


def _sign(team: Team, criteria: PurgeCriteria, items: list[PurgeItem]) -> str:
    payload = {
        "team": team.id,
        "criteria": criteria.to_dict(),
        "items": sorted([i.memory.pk, i.stamp] for i in items),
    }
    return signing.dumps(payload, salt=_TOKEN_SALT, compress=True)


def purge_preview(
    *, team: Team, criteria: PurgeCriteria, now: datetime | None = None
) -> PurgePreview:
    """What `criteria` would purge now, with reasons, and a token naming that exact set."""
    now = now or timezone.now()
    items, protected, too_many = _select(team, criteria, now, lock=False)
    preview = PurgePreview(criteria=criteria, items=items, protected=protected, too_many=too_many)
    if not too_many and items:
        preview.token = _sign(team, criteria, items)
    return preview


def purge_token_load(*, team: Team, token: str) -> tuple[PurgeCriteria, dict[int, str]]:
    """The criteria and (id -> stamp) set a preview token names; DomainError if forged/stale."""
    try:
        payload = signing.loads(token, salt=_TOKEN_SALT, max_age=PREVIEW_MAX_AGE_SECONDS)
    except signing.SignatureExpired as exc:
        raise DomainError(
            ErrorCode.VALIDATION_ERROR, "This preview is too old: preview again."
        ) from exc
    except signing.BadSignature as exc:
        raise DomainError(
            ErrorCode.VALIDATION_ERROR, "Invalid preview token: preview again."
        ) from exc
    if payload.get("team") != team.id:
        raise DomainError(ErrorCode.VALIDATION_ERROR, "This preview belongs to another team.")
    criteria = PurgeCriteria.from_dict(payload["criteria"])
    return criteria, {int(mid): str(stamp) for mid, stamp in payload["items"]}


# --- confirm -------------------------------------------------------------------------------------


def _diff(before: dict[int, str], now: dict[int, str]) -> dict[str, list[int]]:
    return {
        "added": sorted(set(now) - set(before)),
        "removed": sorted(set(before) - set(now)),
        "modified": sorted(mid for mid in set(before) & set(now) if before[mid] != now[mid]),
    }


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


# Other apps keep rows that point at a memory and go with it (the graph's entity mentions and
# entity/relation sources). They register how to save those links into the trash and how to put
# them back on restore, so memories never imports them (imports flow tenants <- memories <- graph
# <- lifecycle). save(memory_ids) -> {memory_id: JSON data}; restore(team, memory_id, data) ->
# notes for the lead (what could not be put back).
TrashSave = Callable[[list[int]], dict[int, Any]]
TrashRestore = Callable[[Team, int, Any], list[str]]
_extensions: dict[str, tuple[TrashSave, TrashRestore]] = {}


def register_trash_extension(name: str, *, save: TrashSave, restore: TrashRestore) -> None:
    _extensions[name] = (save, restore)


def _extension_data(ids: list[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = defaultdict(dict)
    for name, (save, _) in _extensions.items():
        for mid, data in save(ids).items():
            out[mid][name] = data
    return out


def _snapshot(m: Memory, promoted_to: list[int]) -> dict[str, Any]:
    data = {f: getattr(m, f) for f in SNAPSHOT_FIELDS}
    for f in _DATETIME_FIELDS:
        data[f] = _iso(data[f])
    # Links from other memories to this one are nulled by the delete: remember them for restore.
    data["promoted_to_ids"] = promoted_to
    return data


def _related(
    ids: list[int],
) -> tuple[dict[int, list[Any]], dict[int, list[Any]], dict[int, list[int]]]:
    """Shares, revisions and promotions of many memories in three queries (not three per memory)."""
    shares: dict[int, list[Any]] = defaultdict(list)
    for s in MemoryShare.objects.filter(memory_id__in=ids).order_by("id"):
        shares[s.memory_id].append(
            {"agent_id": s.agent_id, "permission": s.permission, "created_at": _iso(s.created_at)}
        )
    revisions: dict[int, list[Any]] = defaultdict(list)
    for r in MemoryRevision.objects.filter(memory_id__in=ids).order_by("id"):
        revisions[r.memory_id].append(
            {
                "action": r.action,
                "before": r.before,
                "after": r.after,
                "api_key_id": r.api_key_id,
                "user_id": r.user_id,
                "actor": r.actor,
                "created_at": _iso(r.created_at),
            }
        )
    promoted: dict[int, list[int]] = defaultdict(list)
    for source, pk in Memory.objects.filter(promoted_from_id__in=ids).values_list(
        "promoted_from_id", "pk"
    ):
        promoted[source].append(pk)
    return shares, revisions, promoted


def memories_trash(
    *,
    team: Team,
    memories: list[Memory],
    removed_by: str,
    reason: str,
    reasons: dict[int, str] | None = None,
    purge_run: PurgeRun | None = None,
    now: datetime | None = None,
    still: QuerySet[Memory] | None = None,
) -> list[int]:
    """Moves the team's `memories` to the trash (restorable for TRASH_RETENTION_DAYS) -> their ids.

    The one way a long-term memory is removed without `purge` (API DELETE, cleanup, the console):
    each is copied to a TrashedMemory with who removed it (`removed_by`, one of
    RemovedBy) and why (`reasons[id]`, else `reason`), then deleted through
    `memories_delete`, so every process's search index drops it. The rows are re-read under lock:
    one deleted meanwhile by another request is skipped, never trashed twice. `still` is what a
    row must still match once locked (the caller's criteria, e.g. a cleanup's "unpinned, idle,
    unimportant"): one pinned, recalled or re-weighted since the caller chose it is skipped.
    """
    now = now or timezone.now()
    with transaction.atomic():
        ids = [m.pk for m in memories if m.team_id == team.id]
        base = still if still is not None else Memory.objects.all()
        rows = list(base.select_for_update().filter(team=team, pk__in=ids).order_by("id"))
        if not rows:
            return []
        live = [m.pk for m in rows]
        expires = now + timedelta(days=settings.TRASH_RETENTION_DAYS)
        shares, revisions, promoted = _related(live)
        extensions = _extension_data(live)
        reasons = reasons or {}
        TrashedMemory.objects.bulk_create(
            [
                TrashedMemory(
                    team=team,
                    purge_run=purge_run,
                    removed_by=removed_by,
                    memory_id=m.pk,
                    scope=m.scope,
                    agent_id=m.agent_id,
                    content=m.content,
                    reason=reasons.get(m.pk, reason)[:300],
                    snapshot={
                        **_snapshot(m, promoted[m.pk]),
                        "extensions": extensions.get(m.pk, {}),
                    },
                    embedding=m.embedding,
                    shares=shares[m.pk],
                    revisions=revisions[m.pk],
                    purged_at=now,
                    expires_at=expires,
                )
                for m in rows
            ],
            batch_size=500,
        )
        memories_delete(team=team, memory_ids=live)
    return live


def purge_confirm(
    *, team: Team, token: str, user: Any, now: datetime | None = None
) -> PurgeOutcome:
    """Purges exactly the set the preview token names, or nothing if the set has changed.

    Either way a PurgeRun records who asked, when and with which criteria.
    """
    criteria, previewed = purge_token_load(team=team, token=token)
    now = now or timezone.now()
    actor = f"user {user.get_username()}" if user is not None else "system"
    with transaction.atomic():
        items, _, too_many = _select(team, criteria, now, lock=True)
        current = {i.memory.pk: i.stamp for i in items}
        if too_many or current != previewed:
            changes = _diff(previewed, current)
            run = PurgeRun.objects.create(
                team=team,
                user=user,
                actor=actor,
                status=PurgeStatus.CHANGED,
                criteria=criteria.to_dict(),
                count=0,
                memory_ids=sorted(previewed),
                changes=changes,
            )
            changed = True
        else:
            run = PurgeRun.objects.create(
                team=team,
                user=user,
                actor=actor,
                status=PurgeStatus.CONFIRMED,
                criteria=criteria.to_dict(),
                count=len(items),
                memory_ids=sorted(current),
            )
            trashed = memories_trash(
                team=team,
                memories=[i.memory for i in items],
                removed_by="purge",
                reason="",
                reasons={i.memory.pk: i.reason for i in items},
                purge_run=run,
                now=now,
            )
            if len(trashed) != len(current):  # rows are locked: only a bug gets here; roll back
                raise DomainError(
                    ErrorCode.CONFLICT, "The set changed during the purge; nothing purged."
                )
            changed = False
    if changed:
        return PurgeOutcome(
            run=run, changes=changes, preview=purge_preview(team=team, criteria=criteria)
        )
    return PurgeOutcome(run=run)


# --- trash ---------------------------------------------------------------------------------------


def purge_runs(*, team: Team, limit: int = 50) -> list[PurgeRun]:
    return list(PurgeRun.objects.filter(team=team).order_by("-created_at", "-id")[:limit])


def trash_list(
    *, team: Team, purge_run: PurgeRun | None = None, agent_id: str = ""
) -> QuerySet[TrashedMemory]:
    qs = (
        TrashedMemory.objects.filter(team=team)
        .defer("embedding", "revisions")
        .select_related("purge_run")
    )
    if purge_run is not None:
        qs = qs.filter(purge_run=purge_run)
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    return qs.order_by("-purged_at", "memory_id")


def trash_agents(*, team: Team) -> list[str]:
    return list(
        TrashedMemory.objects.filter(team=team)
        .order_by("agent_id")
        .values_list("agent_id", flat=True)
        .distinct()
    )


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _restore_one(team: Team, item: TrashedMemory, result: RestoreResult) -> None:
    snap = item.snapshot
    mid = item.memory_id
    if Memory.objects.filter(pk=mid).exists():
        result.problems.append(f"#{mid}: the id is taken by another memory; left in the trash.")
        return
    if (
        item.scope == MemoryScope.PERSONAL
        and not Agent.objects.filter(team=team, agent_id=item.agent_id).exists()
    ):
        result.problems.append(
            f"#{mid}: its agent {item.agent_id} no longer exists; left in the trash."
        )
        return
    # The scope's write lock, as memory_create takes for its dedup: without it two restores of
    # different items with the same content (or a restore and a write of it) both read "no
    # duplicate" and both insert. Taken after the trash row's lock, never before it.
    locks.scope_lock(team_id=team.id, scope=item.scope, agent_id=item.agent_id)
    # The hash of the content as this version reads "the same content" (the snapshot's was made
    # by the version that trashed it).
    chash = content_hash(snap["content"])
    duplicate = memory_same_content_id(
        team=team, scope=item.scope, agent_id=item.agent_id, chash=chash
    )
    if duplicate is not None:
        # Restoring would write what the dedup of memory_create never lets in twice.
        result.problems.append(
            f"#{mid}: memory #{duplicate} says the same in this scope; left in the trash."
        )
        return
    team_ids = Memory.objects.filter(team=team)
    superseded_by = snap.get("superseded_by_id")
    if superseded_by and not team_ids.filter(pk=superseded_by).exists():
        result.notes.append(f"#{mid}: the memory that superseded it (#{superseded_by}) is gone.")
        superseded_by = None
    promoted_from = snap.get("promoted_from_id")
    if promoted_from and not team_ids.filter(pk=promoted_from).exists():
        result.notes.append(f"#{mid}: the memory it was promoted from (#{promoted_from}) is gone.")
        promoted_from = None
    expires_at = _dt(snap.get("expires_at"))
    if expires_at is not None and expires_at <= timezone.now():
        # Put back by someone who wants it: with its passed expiry it would leave search at once
        # and the trash again within the hour.
        result.notes.append(f"#{mid}: its expiry ({snap['expires_at']}) had passed; cleared.")
        expires_at = None
    Memory.objects.create(
        pk=mid,
        team=team,
        scope=snap["scope"],
        agent_id=snap["agent_id"],
        content=snap["content"],
        importance=snap["importance"],
        category=snap["category"],
        metadata=snap["metadata"],
        embedding=item.embedding,
        embedding_model=snap["embedding_model"],
        content_hash=chash,
        # Older trash items have no stored tokens: the index then tokenises the content.
        search_tokens=snap.get("search_tokens", ""),
        access_count=snap["access_count"],
        last_accessed=_dt(snap["last_accessed"]),
        pinned=snap["pinned"],
        # Trash items from before runs were recorded have none.
        run_id=snap.get("run_id", ""),
        superseded_by_id=superseded_by,
        promoted_from_id=promoted_from,
        expires_at=expires_at,
    )
    # auto_now/auto_now_add overwrote the timestamps on insert; a queryset update does not.
    Memory.objects.filter(pk=mid).update(
        created_at=_dt(snap["created_at"]), updated_at=_dt(snap["updated_at"])
    )
    Memory.objects.filter(
        team=team, pk__in=snap.get("promoted_to_ids") or [], promoted_from__isnull=True
    ).update(promoted_from_id=mid)
    live_agents = set(
        Agent.objects.filter(
            team=team, agent_id__in=[s["agent_id"] for s in item.shares]
        ).values_list("agent_id", flat=True)
    )
    for s in item.shares:
        if s["agent_id"] not in live_agents:
            result.notes.append(f"#{mid}: share with deleted agent {s['agent_id']} not restored.")
            continue
        share = MemoryShare.objects.create(
            memory_id=mid, team=team, agent_id=s["agent_id"], permission=s["permission"]
        )
        MemoryShare.objects.filter(pk=share.pk).update(created_at=_dt(s["created_at"]))
    if item.revisions:
        user_model = MemoryRevision._meta.get_field("user").related_model
        users = set(
            user_model._default_manager.filter(  # type: ignore[union-attr]
                pk__in=[r["user_id"] for r in item.revisions if r["user_id"]]
            ).values_list("pk", flat=True)
        )
        keys = set(
            ApiKey.objects.filter(
                pk__in=[r["api_key_id"] for r in item.revisions if r["api_key_id"]]
            ).values_list("pk", flat=True)
        )
        for r in item.revisions:
            rev = MemoryRevision.objects.create(
                memory_id=mid,
                team=team,
                action=r["action"],
                before=r["before"],
                after=r["after"],
                api_key_id=r["api_key_id"] if r["api_key_id"] in keys else None,
                user_id=r["user_id"] if r["user_id"] in users else None,
                actor=r["actor"],
            )
            MemoryRevision.objects.filter(pk=rev.pk).update(created_at=_dt(r["created_at"]))
    for name, data in (snap.get("extensions") or {}).items():
        extension = _extensions.get(name)
        if extension is not None:
            result.notes.extend(f"#{mid}: {note}" for note in extension[1](team, mid, data))
    # The same change log a write uses: every process's index picks the memory up again.
    index.log_changes(
        team_id=team.id, scope=item.scope, agent_id=item.agent_id, memory_ids=[mid], deleted=False
    )
    item.delete()
    result.restored.append(mid)


def trash_restore(*, team: Team, items: list[TrashedMemory]) -> RestoreResult:
    """Puts trashed memories back with their ids, fields, shares and revisions.

    An item whose id is taken again, or whose owning agent was deleted, stays in the trash and is
    reported in `problems` instead of failing the others.
    """
    result = RestoreResult()
    for item in items:
        if item.team_id != team.id:  # callers fetch by team; never restore across teams
            continue
        locks.scope_lock_prepare(team_id=team.id, scope=item.scope, agent_id=item.agent_id)
        with transaction.atomic():
            # Read again under lock, as the API's restore and erase do: an item restored or
            # erased since the caller fetched it is not put back from the copy in hand (an
            # erasure must never be undone by a restore that raced it).
            locked = TrashedMemory.objects.select_for_update().filter(team=team, pk=item.pk).first()
            if locked is None:
                result.problems.append(
                    f"#{item.memory_id}: no longer in the trash (restored or erased meanwhile)."
                )
                continue
            _restore_one(team, locked, result)
    return result


# --- trash through the API ------------------------------------------------------------------------


def trash_visible(
    *, team: Team, acting_agent: str | None, agent_id: str = "", now: datetime | None = None
) -> QuerySet[TrashedMemory]:
    """The team's trash still within its retention that the caller may see, newest first.

    An agent-scoped key (`acting_agent`) sees its own personal memories and the team-scope ones
    (every agent of the team may read, write and delete those); a team-wide key everything.
    `agent_id` narrows to one agent (the owner of a personal memory, the author of a team one).
    """
    qs = TrashedMemory.objects.filter(team=team, expires_at__gt=now or timezone.now())
    if acting_agent is not None:
        qs = qs.filter(
            Q(scope=MemoryScope.TEAM) | Q(scope=MemoryScope.PERSONAL, agent_id=acting_agent)
        )
    if agent_id:
        qs = qs.filter(agent_id=agent_id)
    return qs.order_by("-purged_at", "-id")


def trash_item_get(
    *, team: Team, memory_id: int, acting_agent: str | None, lock: bool = False
) -> TrashedMemory:
    """The visible trash item of this memory id; expired, unknown, another team's or (for an
    agent key) another agent's personal one answer the same NotFound."""
    if not 0 < memory_id < 2**63:
        raise NotFound("trashed memory")
    qs = trash_visible(team=team, acting_agent=acting_agent).filter(memory_id=memory_id)
    if lock:
        qs = qs.select_for_update()
    item = qs.first()
    if item is None:
        raise NotFound("trashed memory")
    return item


def trash_restore_one(*, team: Team, memory_id: int, acting_agent: str | None) -> RestoreResult:
    """Restores one trashed memory (API): NotFound when not visible, CONFLICT when it cannot be
    put back (a live memory says the same, its id is taken, its agent is gone)."""
    result = RestoreResult()
    seen = trash_item_get(team=team, memory_id=memory_id, acting_agent=acting_agent)
    locks.scope_lock_prepare(team_id=team.id, scope=seen.scope, agent_id=seen.agent_id)
    with transaction.atomic():
        # Locked: two concurrent restores of one item wait for each other; the second finds none.
        item = trash_item_get(team=team, memory_id=memory_id, acting_agent=acting_agent, lock=True)
        _restore_one(team, item, result)
    if result.problems:
        raise DomainError(ErrorCode.CONFLICT, result.problems[0])
    return result


def trash_erase(*, team: Team, memory_id: int, acting_agent: str | None) -> None:
    """Erases a trashed memory now (an erasure request): its snapshot, embedding, shares,
    revisions and saved graph links go; it left every search index when it was trashed."""
    with transaction.atomic():
        item = trash_item_get(team=team, memory_id=memory_id, acting_agent=acting_agent, lock=True)
        TrashedMemory.objects.filter(team=team, memory_id=item.memory_id).delete()
        answers_forget(team_id=team.id, memory_ids=[item.memory_id])


def trash_empty_expired(*, team: Team | None = None, now: datetime | None = None) -> int:
    """Deletes trash past its `expires_at` (all teams, or one), and what the answers kept for
    retries showed of it. Idempotent."""
    qs = TrashedMemory.objects.filter(expires_at__lte=now or timezone.now())
    if team is not None:
        qs = qs.filter(team=team)
    rows = list(qs.values_list("pk", "team_id", "memory_id"))
    by_team: dict[str, list[int]] = defaultdict(list)
    for _, team_id, memory_id in rows:
        by_team[team_id].append(memory_id)
    deleted = 0
    with transaction.atomic():
        for start in range(0, len(rows), 500):
            chunk = [pk for pk, _, _ in rows[start : start + 500]]
            deleted += TrashedMemory.objects.filter(pk__in=chunk).delete()[0]
        for team_id, ids in by_team.items():
            answers_forget(team_id=team_id, memory_ids=ids)
    return deleted


def memories_expire(*, team: Team | None = None, now: datetime | None = None) -> int:
    """Moves the memories (of every team, or one) whose own `expires_at` has passed to the
    trash (removed by "expiry", restorable for TRASH_RETENTION_DAYS) -> how many. Pinned ones
    are protected, as from cleanup. Search and listings leave such a memory out from its expiry
    on (selectors.unexpired_q); this pass frees its row. Idempotent: two passes at once trash
    each memory once (memories_trash re-reads the rows under lock, and one pinned, re-dated or
    removed meanwhile is skipped)."""
    now = now or timezone.now()
    due = Memory.objects.filter(expires_at__lte=now, pinned=False)
    if team is not None:
        due = due.filter(team=team)
    moved, after = 0, 0
    while True:
        rows = list(
            due.filter(pk__gt=after)
            .order_by("id")
            .values_list("pk", "team_id", "expires_at")[:EXPIRE_BATCH]
        )
        if not rows:
            return moved
        after = rows[-1][0]
        by_team: dict[str, list[int]] = defaultdict(list)
        reasons: dict[int, str] = {}
        for pk, team_id, expires_at in rows:
            by_team[team_id].append(pk)
            reasons[pk] = f"expired at {_iso(expires_at)}"
        for owner in Team.objects.filter(pk__in=by_team):
            moved += len(
                memories_trash(
                    team=owner,
                    memories=[Memory(pk=pk, team=owner) for pk in by_team[owner.pk]],
                    removed_by=RemovedBy.EXPIRY,
                    reason="expired",
                    reasons=reasons,
                    now=now,
                    still=due,
                )
            )


def memories_remove(*, team: Team, memories: list[Memory], erase: bool, reason: str) -> list[int]:
    """Removes the team's `memories` as a DELETE of each would (the API's batch delete) -> the
    ids removed: to the trash (`removed_by` api), or with `erase` erased at once
    (memories_erase). Each way in one transaction. A memory another request removed first is
    left out (the caller answers it 404), except that an erasure still erases it from the
    trash it was moved to."""
    if not erase:
        return memories_trash(team=team, memories=memories, removed_by=RemovedBy.API, reason=reason)
    return memories_erase(
        team_id=team.id, memory_ids=[m.pk for m in memories if m.team_id == team.id]
    )


def memories_bulk_delete(*, team: Team, memory_ids: list[int], actor: Actor) -> BulkResult:
    """Moves the team's memories among `memory_ids` to the trash (console bulk delete); pinned
    ones are protected and skipped."""
    rows = Memory.objects.filter(team=team, pk__in=memory_ids)
    deletable = list(rows.filter(pinned=False))
    skipped = rows.filter(pinned=True).count()
    trashed = memories_trash(
        team=team,
        memories=deletable,
        removed_by="console",
        reason=f"bulk delete by {actor.label}",
        still=Memory.objects.filter(pinned=False),  # one pinned meanwhile stays
    )
    return BulkResult(done=len(trashed), skipped=skipped, gone=len(deletable) - len(trashed))
