"""Writes for teams, agents, keys and memberships, used by the API, the admin and the commands."""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.db import transaction
from django.utils import timezone

from core.errors import NotFound, ValidationFailed
from core.localcache import TTLCache
from core.rows import assign_given

from . import crypto
from .models import (
    Agent,
    ApiKey,
    McpToken,
    Team,
    TeamMembership,
    TeamRole,
    team_id_case_message,
    team_id_in_other_case,
)

logger = logging.getLogger(__name__)

# Higher apps register cleanup of what lives outside the database (Redis working memory,
# in-process indexes) so deleting a team or agent leaves no orphans, without tenants importing
# them (imports flow tenants <- memories <- graph <- lifecycle). Hooks run after commit.
TeamPurgeHook = Callable[[str], None]
AgentPurgeHook = Callable[[str, str], None]
_team_purge_hooks: list[TeamPurgeHook] = []
_agent_purge_hooks: list[AgentPurgeHook] = []


def register_team_purge_hook(hook: TeamPurgeHook) -> None:
    if hook not in _team_purge_hooks:
        _team_purge_hooks.append(hook)


def register_agent_purge_hook(hook: AgentPurgeHook) -> None:
    if hook not in _agent_purge_hooks:
        _agent_purge_hooks.append(hook)


def _run_hooks_on_commit(hooks: list[Callable[..., None]], *args: str) -> None:
    def run() -> None:
        for hook in list(hooks):
            try:
                hook(*args)
            except Exception:
                # The database rows are gone already; an unreachable Redis must not turn a
                # completed delete into an error. The leftovers expire on their own TTL.
                logger.exception(
                    "purge hook %s failed for %s", getattr(hook, "__name__", hook), args
                )

    transaction.on_commit(run)


# --- Teams ----------------------------------------------------------------------------------


def team_upsert(
    *, team_id: str, name: str, description: str | None = None, config: dict[str, Any] | None = None
) -> tuple[Team, bool]:
    """Creates the team or updates the fields given. Only those are written, on the row locked
    afresh: another request's change of a field this one did not send (a description, a config,
    the admin requiring signature v2) is never written back over with what this one read."""
    other = team_id_in_other_case(team_id)
    if other is not None:
        raise ValidationFailed({"team_id": [team_id_case_message(other)]})
    with transaction.atomic():
        team, created = Team.objects.get_or_create(id=team_id, defaults={"name": name})
        if not created:
            team = Team.objects.select_for_update().get(pk=team.pk)
        fields = assign_given(team, name=name, description=description, config=config)
        team.full_clean()
        team.save(update_fields=fields)
    return team, created


@transaction.atomic
def team_delete(*, team: Team) -> None:
    team_id = team.id
    team.delete()
    _run_hooks_on_commit(_team_purge_hooks, team_id)  # type: ignore[arg-type]


# --- Agents -------------------------------------------------------------------------------------


def agent_upsert(
    *,
    team: Team,
    agent_id: str,
    name: str,
    role: str | None = None,
    config: dict[str, Any] | None = None,
) -> tuple[Agent, bool]:
    """Creates the agent or updates the fields given, on the row locked afresh (as team_upsert):
    two updates of different fields at once both hold. One deleted while this waited for its
    row is created again, as the same request a moment later would."""
    with transaction.atomic():
        # Twice at most: the second read sees the delete (READ COMMITTED, Django's default on
        # MariaDB), unless deletes keep racing this request.
        for _ in range(2):
            agent, created = Agent.objects.get_or_create(
                team=team,
                agent_id=agent_id,
                defaults={"name": name, "role": role or "", "config": config or {}},
            )
            if created:
                return agent, True
            locked = Agent.objects.select_for_update().filter(pk=agent.pk).first()
            if locked is not None:
                locked.save(update_fields=assign_given(locked, name=name, role=role, config=config))
                return locked, False
    raise Agent.DoesNotExist("removed by another request meanwhile")


def agent_ensure(*, team: Team, agent_id: str) -> Agent:
    """The agent, registered on first use with its id as name (an unknown agent id is not an error)."""
    agent, _ = Agent.objects.get_or_create(
        team=team, agent_id=agent_id, defaults={"name": agent_id}
    )
    return agent


# Agents this process registered lately, with the deletion notice (below) it read before doing
# so: every write registers its agent, and on the working-memory write path that query was a
# tenth of the request. Only that path uses the cache (`agent_register`); long-term writes
# (memories, profile, rules, shares) call agent_ensure.
_known_agents: TTLCache[tuple[str, str], str] = TTLCache(ttl_seconds=settings.AGENT_CACHE_SECONDS)

# An agent's deletion leaves a notice in the shared cache (Redis when REDIS_URL is set), which
# outlives every process's entry made before it: an entry is trusted only while the notice it
# was made under is still the latest. So a working-memory write served by another worker than
# the deletion registers the agent again at once, and the agent is listed and erasable with
# what was written. Without a shared cache (the embedded default's per-process cache) only the
# deleting process sees the notice; another process trusts its entry for up to
# AGENT_CACHE_SECONDS before the write, so the write reads the agent's row after it instead
# (agent_registered).
_NO_NOTICE = ""


def _notices_reach_every_process() -> bool:
    """Whether an agent's deletion notice is seen by every process: one is left only while
    processes cache agents, and another process reads it only through a shared cache (not the
    per-process one of the embedded default)."""
    return settings.AGENT_CACHE_SECONDS > 0 and not isinstance(
        caches["default"], (LocMemCache, DummyCache)
    )


def _deletion_notice_key(team_id: str, agent_id: str) -> str:
    return f"agent-deleted:{team_id}:{agent_id}"


def _deletion_notice(team_id: str, agent_id: str) -> str | None:
    """The token of the agent's latest deletion ("" when none is kept), None when the cache
    cannot be read."""
    try:
        notice = cache.get(_deletion_notice_key(team_id, agent_id), _NO_NOTICE)
    except Exception:
        return None
    return str(notice)


def _leave_deletion_notice(team_id: str, agent_id: str) -> None:
    if settings.AGENT_CACHE_SECONDS <= 0:
        return  # no process caches agents
    try:
        cache.set(
            _deletion_notice_key(team_id, agent_id),
            secrets.token_hex(8),
            # Longer than any entry made before it can live.
            timeout=math.ceil(settings.AGENT_CACHE_SECONDS) + 1,
        )
    except Exception:
        logger.warning(
            "agent %s/%s deleted, but the cache is down: other processes may not register it "
            "again for up to AGENT_CACHE_SECONDS",
            team_id,
            agent_id,
        )


def agent_register(*, team: Team, agent_id: str) -> str | None:
    """agent_ensure through this process's cache of known agents, for the working-memory write
    path only, where the query was a tenth of the request: skipped while the deletion notice the
    cached entry was made under is still the latest (a cache read instead of a query). A cache
    that cannot be read is no proof, so the agent is registered then. Returns the notice read
    (None: unreadable), for `agent_registered`."""
    key = (team.id, agent_id)
    seen = _known_agents.get(key)
    notice = _deletion_notice(team.id, agent_id)
    if seen is not None and seen == notice:
        return notice
    # The notice is read before the agent is: a deletion committed in between leaves a newer
    # notice, so the entry made here is not trusted by the next write.
    agent_ensure(team=team, agent_id=agent_id)
    if notice is not None:
        _known_agents.set(key, notice)
    return notice


@contextmanager
def agent_registered(*, team: Team, agent_id: str) -> Iterator[None]:
    """agent_register around a working-memory write (the body), and the deletion notice read
    again after it. A deletion that committed after the agent was registered (or found in the
    cache) and whose purge ran before the write landed would leave the item in the working
    memory of an agent that no longer exists: not listed, and its deletion a 404. A notice that
    changed meanwhile (or cannot be read) registers the agent again, so what was written stays
    listed and erasable. One cache read per write.

    Where no notice reaches this process from another (no shared cache, or AGENT_CACHE_SECONDS
    0, when none is left), the agent's row is read instead: one indexed query per write. A
    deletion that commits after that read purges the item, which has landed by then."""
    notice = agent_register(team=team, agent_id=agent_id)
    yield
    if _notices_reach_every_process():
        after = _deletion_notice(team.id, agent_id)
        if after is not None and after == notice:
            return
    elif Agent.objects.filter(team=team, agent_id=agent_id).exists():
        return
    _known_agents.pop((team.id, agent_id))
    agent_ensure(team=team, agent_id=agent_id)


@transaction.atomic
def agent_delete(*, team: Team, agent_id: str) -> None:
    deleted, _ = Agent.objects.filter(team=team, agent_id=agent_id).delete()
    _known_agents.pop((team.id, agent_id))
    if not deleted:
        raise NotFound("agent")
    # Before the purge hooks: a write that still trusts its entry meanwhile could leave an item
    # after the purge of working memory.
    transaction.on_commit(lambda: _leave_deletion_notice(team.id, agent_id))
    _run_hooks_on_commit(_agent_purge_hooks, team.id, agent_id)  # type: ignore[arg-type]


# --- API keys -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuedKey:
    """What an operator sees exactly once: the public key id and the raw secret."""

    api_key: ApiKey
    secret: str

    @property
    def key_id(self) -> str:
        return self.api_key.key_id


def _new_key_id() -> str:
    return "mk_" + secrets.token_hex(12)


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


def api_key_issue(
    *,
    team: Team,
    agent: Agent | None = None,
    label: str = "",
    expires_at: datetime | None = None,
    rate_limit: int | None = None,
) -> IssuedKey:
    if agent is not None and agent.team_id != team.id:
        raise ValueError("an agent-scoped key must belong to the agent's team")
    secret = _new_secret()
    api_key = ApiKey.objects.create(
        key_id=_new_key_id(),
        team=team,
        agent=agent,
        label=label,
        secret_encrypted=crypto.encrypt(secret),
        expires_at=expires_at,
        rate_limit=rate_limit,
    )
    logger.info("issued API key %s for team %s", api_key.key_id, team.id)
    return IssuedKey(api_key=api_key, secret=secret)


# Old secrets a key keeps verifying at most, the previous one included: rotating more often than
# this within a grace period ends the oldest at once. Bounds the HMACs a request costs.
MAX_OLD_SECRETS = 5


@transaction.atomic
def api_key_rotate(*, api_key: ApiKey, grace_seconds: int | None = None) -> IssuedKey:
    """Gives the key a new secret; the old one keeps verifying for the grace period, and so do
    older ones still in their own grace (a second rotation must not cut off the agents still
    on the first secret). A grace of 0 ends every old secret at once: the answer to a leak."""
    api_key = ApiKey.objects.select_for_update().get(pk=api_key.pk)
    grace = settings.API_KEY_ROTATION_GRACE_SECONDS if grace_seconds is None else grace_seconds
    now = timezone.now()
    secret = _new_secret()
    if grace > 0:
        kept = api_key.old_secrets(now)[: MAX_OLD_SECRETS - 1]
        api_key.earlier_secrets = [{"secret": s, "until": u.isoformat()} for s, u in kept]
        api_key.previous_secret_encrypted = api_key.secret_encrypted
        api_key.previous_secret_expires_at = now + timedelta(seconds=grace)
    else:
        api_key.earlier_secrets = []
        api_key.previous_secret_encrypted = ""
        api_key.previous_secret_expires_at = None
    api_key.secret_encrypted = crypto.encrypt(secret)
    api_key.rotated_at = now
    api_key.save()
    logger.info("rotated API key %s (grace %s s)", api_key.key_id, grace)
    return IssuedKey(api_key=api_key, secret=secret)


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
        logger.info("revoked API key %s", api_key.key_id)
    return api_key


def api_key_touch(*, api_key: ApiKey) -> None:
    """Records use at most once per resolution window: one conditional UPDATE, not one per call."""
    now = timezone.now()
    resolution = timedelta(seconds=settings.API_KEY_LAST_USED_RESOLUTION_SECONDS)
    if api_key.last_used_at is not None and now - api_key.last_used_at < resolution:
        return
    # The condition makes concurrent workers agree: only one of them writes per window.
    from django.db.models import Q

    ApiKey.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - resolution), pk=api_key.pk
    ).update(last_used_at=now)
    api_key.last_used_at = now


def api_key_secrets(*, api_key: ApiKey) -> list[str]:
    """The secrets that currently verify for this key: the current one, then the old ones still
    in their grace, newest first."""
    return [crypto.decrypt(api_key.secret_encrypted)] + [
        crypto.decrypt(encrypted) for encrypted, _ in api_key.old_secrets()
    ]


# --- MCP tokens -----------------------------------------------------------------------------

MCP_TOKEN_PREFIX = "mcp_"


def mcp_token_hash(raw: str) -> str:
    """What is stored of a token and what a presented one is looked up by."""
    return hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest()


@dataclass(frozen=True)
class IssuedMcpToken:
    """What an operator sees exactly once: the raw bearer token."""

    mcp_token: McpToken
    token: str


def mcp_token_issue(
    *,
    team: Team,
    agent: Agent | None = None,
    label: str = "",
    expires_at: datetime | None = None,
    rate_limit: int | None = None,
) -> IssuedMcpToken:
    if agent is not None and agent.team_id != team.id:
        raise ValueError("an agent-scoped token must belong to the agent's team")
    token_id = secrets.token_hex(6)
    # 32 random bytes: brute force is out of reach, so a plain SHA-256 is enough to store.
    raw = f"{MCP_TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    token = McpToken.objects.create(
        token_id=token_id,
        token_hash=mcp_token_hash(raw),
        team=team,
        agent=agent,
        label=label,
        expires_at=expires_at,
        rate_limit=rate_limit,
    )
    logger.info("issued MCP token %s for team %s", token, team.id)
    return IssuedMcpToken(mcp_token=token, token=raw)


def mcp_token_revoke(*, mcp_token: McpToken) -> McpToken:
    if mcp_token.revoked_at is None:
        mcp_token.revoked_at = timezone.now()
        mcp_token.save(update_fields=["revoked_at"])
        logger.info("revoked MCP token %s", mcp_token)
    return mcp_token


def mcp_token_touch(*, mcp_token: McpToken) -> None:
    """Records use at most once per resolution window, as api_key_touch."""
    now = timezone.now()
    resolution = timedelta(seconds=settings.API_KEY_LAST_USED_RESOLUTION_SECONDS)
    if mcp_token.last_used_at is not None and now - mcp_token.last_used_at < resolution:
        return
    from django.db.models import Q

    McpToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - resolution), pk=mcp_token.pk
    ).update(last_used_at=now)
    mcp_token.last_used_at = now


# --- Memberships ----------------------------------------------------------------------------


def membership_set(*, team: Team, user: Any, role: str) -> TeamMembership:
    if role not in (TeamRole.LEAD, TeamRole.VIEWER):
        raise ValueError(f"unknown role {role!r}")
    membership, _ = TeamMembership.objects.update_or_create(
        team=team, user=user, defaults={"role": role}
    )
    return membership
