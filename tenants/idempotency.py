"""Idempotent writes: a request sent with an `Idempotency-Key` header is answered once and its
answer replayed to every retry for IDEMPOTENCY_TTL_HOURS (docs/api.md "Retries and
Idempotency-Key"). Memory writes (`POST /memories/personal`, `/team`, their batches) and ingest
honour it; in tenants so that every app's writes can.

Two steps. `idempotency_replay` looks the key up before any work (a retry costs no LLM call).
`idempotency_record` inserts the answer in the transaction that commits the request's writes:
the unique (team, endpoint, key) makes a concurrent twin of the request, which passed the
lookup too, fail there — its writes roll back and it replays the first one's answer instead
(`Replayed`). So a request's writes and its record commit together or not at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from core.errors import DomainError, ErrorCode, ValidationFailed

from .models import IdempotentRequest, Team

MAX_KEY_LENGTH = 200
P = TypeVar("P")


@dataclass(frozen=True)
class IdempotencyKey:
    """The key a client sent for one endpoint and a fingerprint of its body."""

    endpoint: str
    key: str
    request_hash: str

    @classmethod
    def of(cls, *, endpoint: str, key: str, body: bytes) -> IdempotencyKey:
        if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
            rule = f"1..{MAX_KEY_LENGTH} printable characters"
            raise ValidationFailed({"Idempotency-Key": [rule]}, f"Idempotency-Key: {rule}")
        return cls(endpoint=endpoint, key=key, request_hash=hashlib.sha256(body).hexdigest())


def idempotency_key(header: str | None, *, endpoint: str, body: bytes) -> IdempotencyKey | None:
    """The key of a request's `Idempotency-Key` header (None without one) for `endpoint`; the
    raw body is its fingerprint. Raises ValidationFailed for a malformed key."""
    if header is None:
        return None
    return IdempotencyKey.of(endpoint=endpoint, key=header, body=body)


class Replayed(Exception):
    """The request was answered before: its status and body, to send again."""

    def __init__(self, *, status_code: int, body: Any) -> None:
        super().__init__(f"replayed ({status_code})")
        self.status_code = status_code
        self.body = body


def _fresh(team: Team, key: IdempotencyKey) -> IdempotentRequest | None:
    row = IdempotentRequest.objects.filter(team=team, endpoint=key.endpoint, key=key.key).first()
    if row is None:
        return None
    if row.created_at < timezone.now() - timedelta(hours=settings.IDEMPOTENCY_TTL_HOURS):
        # Expired: the key may be used again (pruned by `idempotency_prune` too).
        row.delete()
        return None
    return row


def _replayed(row: IdempotentRequest, key: IdempotencyKey) -> Replayed:
    if row.request_hash != key.request_hash:
        raise DomainError(
            ErrorCode.CONFLICT,
            "Idempotency-Key was already used with a different request body",
        )
    return Replayed(status_code=row.status_code, body=row.body)


def idempotency_replay(*, team: Team, key: IdempotencyKey | None) -> None:
    """Raises `Replayed` when this key was answered within the TTL (or CONFLICT when it was used
    for another body); returns when the request is new."""
    if key is None:
        return
    row = _fresh(team, key)
    if row is not None:
        raise _replayed(row, key)


def idempotency_record(
    *, team: Team, key: IdempotencyKey | None, status_code: int, body: Any
) -> None:
    """Inside the request's writing transaction: records its answer. A twin that committed first
    makes this raise `Replayed` (with its answer); the caller's transaction must then roll back."""
    if key is None:
        return
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("idempotency_record must be called inside transaction.atomic()")
    try:
        # A savepoint: the failed insert must not poison the caller's transaction on PostgreSQL.
        with transaction.atomic():
            IdempotentRequest.objects.create(
                team=team,
                endpoint=key.endpoint,
                key=key.key,
                request_hash=key.request_hash,
                status_code=status_code,
                body=body,
            )
    except IntegrityError:
        row = IdempotentRequest.objects.filter(
            team=team, endpoint=key.endpoint, key=key.key
        ).first()
        if row is None:  # pragma: no cover - deleted between the insert and this read
            raise
        raise _replayed(row, key) from None


def idempotent(
    *,
    team: Team,
    key: IdempotencyKey | None,
    prepare: Callable[[], P],
    answer: Callable[[P], tuple[int, Any]],
) -> tuple[int, Any]:
    """Runs a request's writes once per key: `answer(prepare())` returns its (status, body).

    Raises `Replayed` when the key was answered before, before any work; otherwise runs
    `prepare` (what must not run inside the transaction: embeddings, lock rows, index loads),
    then `answer` and the record of its answer in one transaction, so a twin that committed
    first rolls this one's writes back and replays instead. An error raised by `answer` records
    nothing: a retry runs again. Without a key, the two run as they would anyway.
    """
    idempotency_replay(team=team, key=key)
    prepared = prepare()
    if key is None:
        return answer(prepared)
    with transaction.atomic():
        status_code, body = answer(prepared)
        idempotency_record(team=team, key=key, status_code=status_code, body=body)
    return status_code, body


def idempotency_prune() -> int:
    """Deletes the records older than the TTL; returns how many."""
    cutoff = timezone.now() - timedelta(hours=settings.IDEMPOTENCY_TTL_HOURS)
    deleted, _ = IdempotentRequest.objects.filter(created_at__lt=cutoff).delete()
    return deleted


# The most `holds_any` strings idempotency_rewrite asks the database to look for.
HOLDS_ANY_MAX = 32


def idempotency_rewrite(
    *,
    team_id: str,
    endpoint_prefixes: Collection[str],
    rewrite: Callable[[Any], Any | None],
    keys: Collection[tuple[str, str]] | None = None,
    may_change: Callable[[str], bool] | None = None,
    holds_any: Collection[str] = (),
) -> int:
    """Rewrites the team's recorded answers (of the endpoints starting with one of
    `endpoint_prefixes`, or only these `(endpoint, key)` pairs) that `rewrite` changes: it
    returns the new body, or None for one it leaves alone. How an erasure reaches the answers
    kept for retries, expired ones not pruned yet included; returns how many changed.
    `may_change`, a cheap test of an answer's stored JSON text, may be False only for one that
    `rewrite` leaves alone: the others are not decoded (decoding and walking every kept answer
    was most of an erasure's cost). `holds_any`, strings one of which the stored text of every
    answer `rewrite` changes holds, lets the database leave the others out before they are read
    (reading every kept answer's text over the connection was most of what was left on MariaDB);
    more than HOLDS_ANY_MAX of them are ignored (a long OR of patterns costs more than it saves).

    Read without locks first (most answers show nothing erased), then each one to change again
    under its row lock, so two erasures of one batch's memories at once both hold."""
    if not endpoint_prefixes or (keys is not None and not keys):
        return 0
    where = Q()
    for prefix in endpoint_prefixes:
        where |= Q(endpoint__startswith=prefix)
    answers = IdempotentRequest.objects.filter(where, team_id=team_id)
    # Many pairs are asked for a few hundred at a time: one OR of thousands is a slow plan.
    given = None if keys is None else list(keys)
    batches = [answers] if given is None else []
    for start in range(0, len(given or []), 200):
        pairs = Q()
        for endpoint, key in (given or [])[start : start + 200]:
            pairs |= Q(endpoint=endpoint, key=key)
        batches.append(answers.filter(pairs))
    # The stored text, not the decoded value: decoded only when `may_change` lets it through.
    text = Cast("body", TextField())
    held = Q()
    if 0 < len(holds_any) <= HOLDS_ANY_MAX:
        for part in holds_any:
            held |= Q(stored__contains=part)
    found = [
        pk
        for batch in batches
        for pk, stored in batch.annotate(stored=text)
        .filter(held)
        .values_list("pk", "stored")
        .iterator()
        if (may_change is None or may_change(stored)) and rewrite(json.loads(stored)) is not None
    ]
    changed = 0
    with transaction.atomic():
        for row in (
            IdempotentRequest.objects.select_for_update().filter(pk__in=found).order_by("pk")
        ):
            body = rewrite(row.body)
            if body is not None:
                row.body = body
                row.save(update_fields=["body"])
                changed += 1
    return changed
