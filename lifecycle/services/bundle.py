"""Export and import of a team's (or one agent's) memories as a bundle (docs/export.md).

A bundle is gzip of JSON Lines: a versioned header, then one line per record, kinds in the order
of `KINDS` (what a record refers to always comes first) and each kind by id, so the same data
exports to the same bytes apart from `exported_at`. Records carry the model's columns
generically (a new column travels without a change here), except those that belong to the server
(the team, job and key links) or are derived (content hash, search tokens, normalised name),
which the import computes again. Ids are the source's: an import never uses them as keys, it
maps them to the rows it writes and rewrites every reference.

An export is written by a job (`pipeline.HANDLERS[JobKind.EXPORT]`) into `ExportChunk` rows,
so any node answers its download; `exports_prune` removes them after EXPORT_RETENTION_HOURS.
An import runs in the request, in one transaction: all of it or nothing. What it must embed
again is embedded before that transaction opens (`_embed_ahead`), so the database's locks are
held for the writes only.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import logging
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import date, time, timedelta
from itertools import chain
from typing import IO, Any, cast

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, connection, models, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core import jsonlimits
from core.dates import in_utc, iso
from core.errors import DomainError, ErrorCode, Forbidden
from core.rows import rows_restamp
from graph.models import Entity, EntityMention, Relation
from graph.resolution import normalise_name
from graph.services import embedding_text, entities_update, entity_find, name_key
from memories import locks
from memories.models import (
    Memory,
    MemoryRevision,
    MemoryScope,
    MemoryShare,
    Procedure,
    ProcedureRevision,
    ProcedureStatus,
    ProfileField,
    ProfileRevision,
)
from memories.profile import key_error as profile_key_error
from memories.profile import value_error as profile_value_error
from memories.retrieval.embeddings import embed_passages, get_embedder, to_bytes
from memories.retrieval.text import content_hash, normalise, tokens_for_storage
from memories.services import (
    Actor,
    MemoryAttributes,
    memories_insert,
    memories_link,
    memories_update,
)
from tenants.models import Team
from tenants.services import agent_ensure

from ..models import ExportChunk, Persona, Scenario, WorkingArchive
from ..results import ExportResult, ImportResult

logger = logging.getLogger(__name__)

FORMAT = "memoryplatform-bundle"
VERSION = 1
# The order of the records in a bundle: a record only refers to kinds before its own.
KINDS = (
    "memory",
    "revision",
    "share",
    "archive",
    "scenario",
    "persona",
    "entity",
    "relation",
    "mention",
    "procedure",
    "procedure_revision",
    "profile",
    "profile_revision",
)
CHUNK_BYTES = 1024 * 1024  # one ExportChunk row at most
SPOOL_BYTES = 8 * CHUNK_BYTES  # an export job's bundle held in memory before a temporary file
ON_CONFLICT = ("skip", "overwrite", "new_ids")
_EMBED_BATCH = 64
# New revisions, shares, archive items, entities, relations and mentions are inserted this many
# at a time (`_Import.flush_rows`).
_ROW_BATCH = 500
# A held row: (line, the record's source id, the row, its columns).
_Held = tuple[int, Any, models.Model, dict[str, Any]]
# The unique columns that find a share's or a mention's row after a bulk insert (their ids are
# auto ids, which a backend may not return). The other kinds' rows are found by their id: a
# UUID known before the insert, or an auto id the backend returns (else they go in one by one).
_ROW_KEYS: dict[str, tuple[str, ...]] = {
    "share": ("memory", "agent_id"),
    "mention": ("entity", "memory"),
}
# The kinds whose rows are unique by their ends: (model, the kind of the first end, the columns
# of the key, those an overwrite writes). A record whose ends were already here (a re-import)
# may be too: `_Import.row_here` reads them by batches of first ends.
_KEYED: dict[str, tuple[type[models.Model], str, tuple[str, ...], tuple[str, ...]]] = {
    "relation": (
        Relation,
        "entity",
        ("source_id", "target_id", "relation_type"),
        ("description", "properties"),
    ),
    # By the memory: a memory mentions a few entities, while an entity of the team ("the user")
    # may be mentioned by every memory of every agent, and a bundle of one agent met it.
    "mention": (EntityMention, "memory", ("memory_id", "entity_id"), ()),
    "share": (MemoryShare, "memory", ("memory_id", "agent_id"), ("permission",)),
}
# The lifecycle's kinds, found here by a key among their agent's rows: (model, the key's column,
# the order in which the first row of a key is the one met, what an overwrite writes besides the
# times). `_Import.agent_row_here` reads the ids and keys of an agent's rows of a kind in one
# query, not a query a record (each held SQLite's write lock). The key compares exactly, on every
# database: MariaDB's collation no longer decides that "Deploys" is the scenario "deploys".
_AGENT_KEYED: dict[str, tuple[type[models.Model], str, tuple[str, ...], tuple[str, ...]]] = {
    "scenario": (Scenario, "name", ("created_at", "id"), ("summary", "memory_ids")),
    "persona": (
        Persona,
        "created_at",
        ("id",),
        (
            *("preferences", "habits", "expertise", "communication_style", "summary"),
            *("memory_ids", "scenario_ids", "scenarios_snapshot"),
        ),
    ),
    "procedure": (Procedure, "rule", ("id",), ("status", "source", "evidence")),
    "profile": (ProfileField, "key", ("id",), ("value", "source", "source_memory_id")),
}
# A row of one of those kinds held by this import, its id not known before it goes in.
_HELD = object()


def _meet_key(kind: str, value: Any) -> Any:
    """What an agent's row of `kind` is met by: a rule by its text as the API meets it
    (`normalise`: case, width and spacing aside), the other kinds by the value itself."""
    return normalise(value) if kind == "procedure" else value


# Kinds whose writers take their agent's personal-scope lock (memories.services, the lifecycle's
# scenarios and proposals): so does the import of an agent's rows of them. It reads the agent's
# rows once; a row written after that read would be written again by the import (two scenarios
# or rules of one name), or clash with it on a unique key (a profile key: the whole import 400).
# Personas are met by their creation time, which two writers never share: no lock.
_AGENT_LOCKED = ("scenario", "procedure", "procedure_revision", "profile", "profile_revision")
# Keys of JSON columns that hold memory ids (memory metadata, revision before/after): remapped on
# import like the foreign keys.
_MEMORY_ID_KEYS = ("superseded_by", "promoted_to", "promoted_from", "consolidated_into")
_MEMORY_ID_LIST_KEYS = ("related_to", "consolidated_from")


@dataclass(frozen=True)
class _Spec:
    model: type[models.Model]
    # Columns a record does not carry: the server's own links and what the import derives.
    exclude: frozenset[str]
    # Foreign keys carried as the source's id, and the kind they point to.
    refs: dict[str, str]


_COMMON_EXCLUDE = frozenset({"team", "job"})
SPECS: dict[str, _Spec] = {
    "memory": _Spec(
        Memory,
        _COMMON_EXCLUDE | {"content_hash", "search_tokens"},
        {"superseded_by": "memory", "promoted_from": "memory"},
    ),
    "revision": _Spec(MemoryRevision, _COMMON_EXCLUDE | {"api_key", "user"}, {"memory": "memory"}),
    "share": _Spec(MemoryShare, _COMMON_EXCLUDE, {"memory": "memory"}),
    "archive": _Spec(WorkingArchive, _COMMON_EXCLUDE, {}),
    "scenario": _Spec(Scenario, _COMMON_EXCLUDE, {}),
    "persona": _Spec(Persona, _COMMON_EXCLUDE, {}),
    # The team-level identity is the server's own link between entities, derived again
    # after an import (`manage.py link_team_entities`), never carried across teams.
    "entity": _Spec(
        Entity, _COMMON_EXCLUDE | {"normalized_name", "identity"}, {"source_memory": "memory"}
    ),
    "relation": _Spec(
        Relation,
        _COMMON_EXCLUDE,
        {"source": "entity", "target": "entity", "source_memory": "memory"},
    ),
    "mention": _Spec(EntityMention, _COMMON_EXCLUDE, {"entity": "entity", "memory": "memory"}),
    # Procedural memory and the agent profile: their memory ids (a proposal's evidence, the
    # memory a profile value was read from) are plain columns, remapped like metadata ids.
    "procedure": _Spec(Procedure, _COMMON_EXCLUDE, {}),
    # A rule's history names its rule by id in a plain column (a removed rule's row is gone):
    # remapped by `_Import.procedure_revision`, a removed rule's to an id reserved for it.
    "procedure_revision": _Spec(ProcedureRevision, _COMMON_EXCLUDE, {"procedure_id": "procedure"}),
    "profile": _Spec(ProfileField, _COMMON_EXCLUDE, {}),
    "profile_revision": _Spec(ProfileRevision, _COMMON_EXCLUDE, {}),
}


def _fields(spec: _Spec) -> list[models.Field[Any, Any]]:
    return [f for f in spec.model._meta.concrete_fields if f.name not in spec.exclude]


# --- export ---------------------------------------------------------------------------------------


def _querysets(*, team: Team, agent_id: str | None) -> dict[str, QuerySet[Any]]:
    """What a bundle holds, by kind, in bundle order. One agent: its personal memories, its
    archive, scenarios, personas and own entities, and what hangs on those only."""
    memories = Memory.objects.filter(team=team)
    archive = WorkingArchive.objects.filter(team=team)
    scenarios = Scenario.objects.filter(team=team)
    personas = Persona.objects.filter(team=team)
    entities = Entity.objects.filter(team=team)
    procedures = Procedure.objects.filter(team=team)
    procedure_revisions = ProcedureRevision.objects.filter(team=team)
    profile = ProfileField.objects.filter(team=team)
    profile_revisions = ProfileRevision.objects.filter(team=team)
    if agent_id is not None:
        procedures = procedures.filter(agent_id=agent_id)
        procedure_revisions = procedure_revisions.filter(agent_id=agent_id)
        profile = profile.filter(agent_id=agent_id)
        profile_revisions = profile_revisions.filter(agent_id=agent_id)
        memories = memories.filter(scope=MemoryScope.PERSONAL, agent_id=agent_id)
        archive = archive.filter(agent_id=agent_id)
        scenarios = scenarios.filter(agent_id=agent_id)
        personas = personas.filter(agent_id=agent_id)
        entities = entities.filter(agent_id=agent_id)
    # Random (uuid, hex) keys are ordered by creation first: an import writes them in bundle
    # order with their creation times, so its export comes out in the same order.
    return {
        "memory": memories.order_by("id"),
        "revision": MemoryRevision.objects.filter(team=team, memory__in=memories).order_by("id"),
        "share": MemoryShare.objects.filter(team=team, memory__in=memories).order_by("id"),
        "archive": archive.order_by("id"),
        "scenario": scenarios.order_by("created_at", "id"),
        "persona": personas.order_by("created_at", "id"),
        "entity": entities.order_by("created_at", "id"),
        "relation": Relation.objects.filter(
            team=team, source__in=entities, target__in=entities
        ).order_by("created_at", "id"),
        "mention": EntityMention.objects.filter(
            team=team, entity__in=entities, memory__in=memories
        ).order_by("id"),
        "procedure": procedures.order_by("id"),
        "procedure_revision": procedure_revisions.order_by("id"),
        "profile": profile.order_by("agent_id", "key"),
        "profile_revision": profile_revisions.order_by("id"),
    }


def bundle_counts(*, team: Team, agent_id: str | None) -> dict[str, int]:
    """How many records of each kind a bundle of this team (or agent) would hold now."""
    return {kind: qs.count() for kind, qs in _querysets(team=team, agent_id=agent_id).items()}


def _encode(f: models.Field[Any, Any], value: Any) -> Any:
    if value is None:
        return None
    if isinstance(f, models.BinaryField):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(f, models.DateTimeField):
        return iso(value)
    if isinstance(value, bool | int | float | str | dict | list):
        return value
    if isinstance(value, date | time):
        return value.isoformat()
    # A uuid (a key or a foreign key to one), a Decimal, ...: its text, which to_python reads.
    return str(value)


def record_of(kind: str, obj: models.Model) -> dict[str, Any]:
    """One bundle line: `kind`, then the model's columns in model order (foreign keys by id)."""
    out: dict[str, Any] = {"kind": kind}
    for f in _fields(SPECS[kind]):
        out[f.name] = _encode(f, getattr(obj, f.attname))
    return out


def _dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def bundle_header(
    *,
    team_id: str | None,
    agent_id: str | None,
    exported_at: str | None,
    model: str,
    dim: int,
    counts: dict[str, int],
) -> dict[str, Any]:
    """A bundle's first line. A converted listing has no team, time or vectors (model "")."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": exported_at,
        "team_id": team_id,
        "agent_id": agent_id,
        "embedding_model": model,
        "embedding_dim": dim,
        "counts": counts,
    }


def bundle_lines_write(sink: IO[bytes] | io.RawIOBase, lines: Iterable[dict[str, Any]]) -> None:
    """Writes `lines` (a header, then records) to `sink` as a bundle: gzip of JSON Lines."""
    # mtime 0 and no file name: the same records give the same bytes.
    with gzip.GzipFile(fileobj=sink, mode="wb", mtime=0, filename="") as gz:
        for line in lines:
            gz.write(_dumps(line))


def bundle_write(
    *,
    team: Team,
    agent_id: str | None,
    sink: IO[bytes] | io.RawIOBase,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Writes the bundle of `team` (or of one agent) as gzip to `sink`; returns the counts.

    Read in one snapshot (`_snapshot_transaction`), so that the header's counts and the records
    agree while agents write, and their writes do not wait for it.
    """
    embedder = get_embedder()
    with _snapshot_transaction():
        querysets = _querysets(team=team, agent_id=agent_id)
        counts = {kind: qs.count() for kind, qs in querysets.items()}
        header = bundle_header(
            team_id=team.id,
            agent_id=agent_id,
            exported_at=iso(timezone.now()),
            model=embedder.model_name,
            dim=embedder.dim,
            counts=counts,
        )
        bundle_lines_write(sink, chain([header], _records(querysets, progress)))
    return counts


def _records(
    querysets: dict[str, QuerySet[Any]], progress: Callable[[int], None] | None
) -> Iterator[dict[str, Any]]:
    for kind, qs in querysets.items():
        for obj in qs.iterator(chunk_size=500):
            yield record_of(kind, obj)
            if progress is not None:
                progress(1)


@contextmanager
def _snapshot_transaction() -> Iterator[None]:
    """A read transaction that sees one consistent snapshot, without holding writers back.

    * MariaDB: Django connects at READ COMMITTED, where each query sees what committed before
      it: an export read while agents write could hold a revision or a share whose memory it
      lacks, and records that disagree with its header's counts. The transaction is opened at
      REPEATABLE READ, as its first statement (MariaDB refuses to change the level of one in
      progress); the connection's next transactions keep its default.
    * SQLite: every transaction here begins IMMEDIATE (the database's write lock, which the
      writes' dedup relies on); an export holding it for its whole read (seconds for a large
      team) made every write wait that long. This one begins DEFERRED: under
      WAL a reader sees the snapshot of its first read while writers go on. It must not write.

    Nested in a caller's transaction, that one decides."""
    if connection.in_atomic_block:
        with transaction.atomic():
            yield
        return
    if connection.vendor == "sqlite":
        connection.ensure_connection()  # opening it would set the configured mode again
        # The SQLite wrapper's `transaction_mode` (Django 5.1+; not in django-stubs).
        mode = connection.transaction_mode  # type: ignore[attr-defined]
        connection.transaction_mode = "DEFERRED"  # type: ignore[attr-defined]
        try:
            with transaction.atomic():
                yield
        finally:
            connection.transaction_mode = mode  # type: ignore[attr-defined]
        return
    with transaction.atomic():
        if connection.vendor == "mysql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


class _ChunkSink(io.RawIOBase):
    """A write-only stream that stores what it is given as ExportChunk rows of CHUNK_BYTES."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.buffer = bytearray()
        self.seq = 0
        self.size = 0
        self.digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.buffer += data
        self.size += len(data)
        self.digest.update(data)
        while len(self.buffer) >= CHUNK_BYTES:
            self._store(bytes(self.buffer[:CHUNK_BYTES]))
            del self.buffer[:CHUNK_BYTES]
        return len(data)

    def _store(self, data: bytes) -> None:
        ExportChunk.objects.create(job_id=self.job_id, seq=self.seq, data=data)
        self.seq += 1

    def finish(self) -> None:
        if self.buffer or self.seq == 0:
            self._store(bytes(self.buffer))
            self.buffer.clear()


def export_run(*, team: Team, agent_id: str | None, job_id: int) -> ExportResult:
    """The export job: the bundle read in one snapshot (bundle_write) into a spool, then
    written into the job's chunks in a short transaction of its own (replacing any a previous
    attempt of the same job left), so the read holds no write lock."""
    sink = _ChunkSink(job_id)
    # In memory up to SPOOL_BYTES, then a temporary file: a worker's scratch, never where a
    # bundle is kept (the chunks are, in the database).
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        counts = bundle_write(team=team, agent_id=agent_id, sink=spool)
        spool.seek(0)
        with transaction.atomic():
            ExportChunk.objects.filter(job_id=job_id).delete()
            while data := spool.read(CHUNK_BYTES):
                sink.write(data)
            sink.finish()
    return ExportResult(
        job_id=job_id,
        agent_id=agent_id,
        bytes=sink.size,
        chunks=sink.seq,
        sha256=sink.digest.hexdigest(),
        counts=counts,
        expires_at=timezone.now() + timedelta(hours=settings.EXPORT_RETENTION_HOURS),
    )


def exports_prune(*, older_than_hours: int | None = None) -> int:
    """Removes the bundles of exports finished more than EXPORT_RETENTION_HOURS ago (the job
    records stay); returns the number of chunks removed."""
    hours = settings.EXPORT_RETENTION_HOURS if older_than_hours is None else older_than_hours
    cutoff = timezone.now() - timedelta(hours=hours)
    deleted, _ = ExportChunk.objects.filter(job__finished_at__lt=cutoff).delete()
    # Chunks of a job that never finished (its worker died mid-write and the rows were kept).
    stale, _ = ExportChunk.objects.filter(
        job__finished_at__isnull=True, job__created_at__lt=cutoff
    ).delete()
    return deleted + stale


# --- import ---------------------------------------------------------------------------------------


def _invalid(line: int, message: str) -> DomainError:
    return DomainError(ErrorCode.VALIDATION_ERROR, f"line {line}: {message}")


def _lines(data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    """The bundle's lines as objects, numbered from 1; a 400 naming the line for anything that
    is not gzip of JSON objects, a 413 past IMPORT_MAX_UNCOMPRESSED_BYTES."""
    if not data:
        raise DomainError(ErrorCode.VALIDATION_ERROR, "empty body: a gzipped bundle is expected")
    limit = settings.IMPORT_MAX_UNCOMPRESSED_BYTES
    total = 0
    number = 0
    with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
        while True:
            try:
                raw = gz.readline(limit - total + 1)
            except (OSError, EOFError, zlib.error) as exc:
                # BadGzipFile is an OSError; EOFError: cut short.
                raise _invalid(number + 1, f"not a complete gzip stream ({exc})") from None
            if not raw:
                return
            number += 1
            total += len(raw)
            if total > limit:
                raise DomainError(
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"the bundle decompresses to more than {limit} bytes",
                )
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (UnicodeDecodeError, ValueError) as exc:
                raise _invalid(number, f"not JSON ({exc})") from None
            except RecursionError:
                raise _invalid(number, "JSON nested too deep") from None
            if not isinstance(value, dict):
                raise _invalid(number, "not a JSON object")
            # As deep as the API lets a stored value be, plus the record's own level and a
            # revision's before/after around a memory's metadata (MariaDB refuses JSON deeper
            # than 32 levels: a 500 otherwise).
            depth = settings.MAX_JSON_DEPTH + 2
            if raw.count(b"{") + raw.count(b"[") > depth and jsonlimits.depth_exceeds(value, depth):
                raise _invalid(number, f"JSON nested deeper than {depth} levels")
            yield number, value


def _check_header(line: int, header: dict[str, Any]) -> None:
    if header.get("format") != FORMAT:
        raise _invalid(line, f'not a bundle header (format must be "{FORMAT}")')
    version = header.get("version")
    if version != VERSION:
        raise _invalid(
            line, f"bundle version {version!r} is not supported (this server reads {VERSION})"
        )
    counts = header.get("counts")
    if not isinstance(counts, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in counts.values()
    ):
        raise _invalid(line, "header: counts must be an object of integers")
    if not isinstance(header.get("embedding_model", ""), str):
        raise _invalid(line, "header: embedding_model must be a string")


def _decode(f: models.Field[Any, Any], value: Any) -> Any:
    """A record's value for column `f`, checked against the column (ValueError if it does not fit)."""
    if value is None:
        if not f.null:
            raise ValueError(f"{f.name} may not be null")
        return None
    if isinstance(f, models.BinaryField):
        if not isinstance(value, str):
            raise ValueError(f"{f.name} must be base64 text")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{f.name} is not valid base64") from None
    if isinstance(f, models.DateTimeField):
        try:
            parsed = parse_datetime(value) if isinstance(value, str) else None
        except ValueError:  # well formed, but no such day ("2031-02-30")
            parsed = None
        if parsed is None or timezone.is_naive(parsed):
            raise ValueError(f"{f.name} must be an ISO 8601 date-time with its offset")
        # Stored in UTC, within what MariaDB's DATETIME holds (years 1000-9999): one outside,
        # such as 9999-12-31 at an offset west of UTC, was a 500 when the row was written.
        utc = in_utc(parsed)
        if utc is None or utc.year < 1000:
            raise ValueError(f"{f.name} is out of range (years 1000 to 9999 in UTC)")
        return parsed
    if isinstance(f, models.BooleanField):
        if not isinstance(value, bool):
            raise ValueError(f"{f.name} must be true or false")
        return value
    if isinstance(f, models.IntegerField):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{f.name} must be an integer")
        if (
            isinstance(f, models.PositiveIntegerField | models.PositiveBigIntegerField)
            and value < 0
        ):
            raise ValueError(f"{f.name} must be >= 0")
        return value
    if isinstance(f, models.FloatField):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"{f.name} must be a number")
        return float(value)
    if isinstance(f, models.CharField | models.TextField):
        if not isinstance(value, str):
            raise ValueError(f"{f.name} must be a string")
        if f.max_length is not None and len(value) > f.max_length:
            raise ValueError(f"{f.name} is longer than {f.max_length} characters")
        allowed = {str(c[0]) for c in f.choices or ()} | ({""} if f.blank else set())
        if f.choices and value not in allowed:
            raise ValueError(f"{f.name} {value!r} is not one of the allowed values")
        return value
    if isinstance(f, models.JSONField):
        return value
    # Any other column type (a uuid, a date, a decimal, …): the field's own parsing.
    try:
        return f.to_python(value)
    except DjangoValidationError as exc:
        raise ValueError(f"{f.name}: {'; '.join(exc.messages)}") from None


def _columns(kind: str, rec: dict[str, Any]) -> dict[str, Any]:
    """The record's own columns (no id, no references), checked; absent ones take the model's
    default, unknown keys (a newer server's columns) are ignored."""
    spec = SPECS[kind]
    out: dict[str, Any] = {}
    for f in _fields(spec):
        if f.primary_key or f.name in spec.refs or f.name not in rec:
            continue
        out[f.attname] = _decode(f, rec[f.name])
    return out


def _auto_stamps(model: type[models.Model]) -> list[str]:
    return [
        f.name
        for f in model._meta.concrete_fields
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
    ]


def _insert(obj: models.Model, columns: dict[str, Any]) -> models.Model:
    """Saves a new row keeping the creation / update times the bundle gives (Django would stamp
    the insert time on auto_now(_add) columns)."""
    obj.save(force_insert=True)
    stamps = {
        name: columns[name] for name in _auto_stamps(type(obj)) if columns.get(name) is not None
    }
    if stamps:
        type(obj)._default_manager.filter(pk=obj.pk).update(**stamps)
        for name, value in stamps.items():
            setattr(obj, name, value)
    return obj


def _update(obj: models.Model, columns: dict[str, Any], names: list[str]) -> None:
    """Overwrites `names` of an existing row from the bundle (times included)."""
    for name in names:
        if name in columns:
            setattr(obj, name, columns[name])
    obj.save()
    stamps = {n: columns[n] for n in _auto_stamps(type(obj)) if columns.get(n) is not None}
    if stamps:
        type(obj)._default_manager.filter(pk=obj.pk).update(**stamps)


def _met_rows(
    model: type[models.Model], noted: list[tuple[Any, dict[str, Any]]]
) -> Iterator[list[tuple[Any, Any, dict[str, Any]]]]:
    """The noted (id, columns), _ROW_BATCH at a time, as (id, row, columns) in order, the batch's
    rows read in one query; one another writer deleted since it was met is left out, as if
    deleted after the import. A record given twice gets the same row object: a caller sets on it
    what the first will write, and the second is compared with that."""
    for start in range(0, len(noted), _ROW_BATCH):
        batch = noted[start : start + _ROW_BATCH]
        rows = model._default_manager.in_bulk([pk for pk, _ in batch])
        yield [(pk, rows[pk], columns) for pk, columns in batch if pk in rows]


@dataclass
class _Import:
    team: Team
    on_conflict: str
    acting_agent: str | None
    actor: Actor
    reembed_all: bool
    model_name: str
    dim: int
    ids: dict[str, dict[Any, Any]] = field(default_factory=lambda: {k: {} for k in KINDS})
    # Source ids of memories written as new rows (their revisions come along; an existing
    # memory's history is its own).
    new_memories: set[Any] = field(default_factory=set)
    imported: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    seen: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    reembedded: int = 0
    agents: set[str] = field(default_factory=set)
    pending: list[tuple[Any, Memory, dict[str, Any]]] = field(default_factory=list)
    links: list[tuple[Any, str, Any]] = field(default_factory=list)
    overwrites: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    metadata_of: dict[Any, Memory] = field(default_factory=dict)
    memories_done: bool = False
    sources: set[Any] = field(default_factory=set)
    # (agent, key) of the profile fields kept as they were here (skipped): their history is
    # this server's; every other key's history comes along (a deleted key's too).
    profile_kept: set[tuple[str, str]] = field(default_factory=set)
    # Vectors embedded before the transaction (`_embed_ahead`), by the text embedded.
    vectors: dict[str, bytes] = field(default_factory=dict)
    # The bundle's memory contents, their hashes and search tokens, computed before the
    # transaction too (`derive`).
    hashes: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    # (scope, agent, content hash, superseded) -> the first such memory of the team: read in one
    # pass when the transaction opens (`read_existing`: a query a memory held the lock ~1 ms
    # each), then told of each memory the import writes.
    existing: dict[tuple[str, str, str, bool], int] = field(default_factory=dict)
    # (scope, agent) of the bundle's memories, and the personal scope of each agent whose profile
    # it holds: their write locks are held by the transaction.
    scopes: set[tuple[str, str]] = field(default_factory=set)
    # The resolution keys (Entity.normalized_name) of the bundle's entities, read before the
    # transaction; in it (`read_entities`, which the pass before reads too, to embed only the
    # new entities), the team's entities of those keys by (agent, type, graph.services.name_key)
    # -> the first such entity, then told of each entity written. A lookup a record held the
    # lock for one query each, and one key shared by many names ("Sprint 12", "Sprint 13") made
    # each lookup read them all.
    entity_resolution_keys: set[str] = field(default_factory=set)
    entities_here: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    # Rows this import wrote: a relation or mention with an end among them cannot be in the
    # database yet, other than as one this import wrote (no query for it).
    new_memory_ids: set[int] = field(default_factory=set)
    new_entity_ids: set[Any] = field(default_factory=set)
    new_relations: dict[tuple[Any, Any, str], Any] = field(default_factory=dict)
    new_mentions: set[tuple[Any, Any]] = field(default_factory=set)
    new_shares: set[tuple[Any, str]] = field(default_factory=set)
    # Memories and entities of the bundle that were already here ("memory" / "entity" -> ids).
    # A relation, mention or share whose first end is one may be here too: `row_here` reads
    # those rows (kind -> key -> id) for all such ends at once, not with a query a record.
    met: dict[str, set[Any]] = field(default_factory=lambda: {"memory": set(), "entity": set()})
    here: dict[str, dict[tuple[Any, ...], Any]] = field(
        default_factory=lambda: {k: {} for k in _KEYED}
    )
    here_read: dict[str, set[Any]] = field(default_factory=lambda: {k: set() for k in _KEYED})
    # (id, columns) of those rows to overwrite (`overwrite`), written with the kind's held rows.
    rewrites: dict[str, list[tuple[Any, dict[str, Any]]]] = field(
        default_factory=lambda: {k: [] for k in (*_KEYED, *_AGENT_KEYED)}
    )
    # (id, columns) of the entities met here to overwrite, written with the held entities.
    entity_overwrites: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    # kind -> agent -> key -> id (or _HELD) of the lifecycle's rows, here or held
    # (`agent_row_here`).
    agent_rows: dict[str, dict[str, dict[Any, Any]]] = field(
        default_factory=lambda: {k: {} for k in _AGENT_KEYED}
    )
    # (agent, the bundle's rule id) -> the rule its history goes to: a row this import holds (its
    # id once inserted), the id of the rule met here that the bundle overwrites, or None for a
    # rule kept as it was here (`skip`), whose history stays its own. A rule id of the bundle's
    # history that is none of these is a removed rule's (`rule_removed`).
    rules: dict[tuple[str, Any], Procedure | int | None] = field(default_factory=dict)
    # Removed rules whose ids are to be reserved (`reserve_rule_ids`).
    reservations: list[Procedure] = field(default_factory=list)
    # agent -> a change of the agent's rules here or held (change, time, texts and statuses
    # before and after) -> the ids of the rules it was made to.
    rule_changes: dict[str, dict[tuple[Any, ...], set[int]]] = field(default_factory=dict)
    # agent -> (key, at, before, after) of the agent's profile revisions, here or held.
    profile_revisions: dict[str, set[tuple[str, Any, str, str]]] = field(default_factory=dict)
    # (agent, item id) of the bundle's archive items read so far.
    archive_keys: set[tuple[str, str]] = field(default_factory=set)
    # New rows of these kinds not inserted yet (`hold`). One INSERT and one UPDATE of its times
    # a row held SQLite's write lock ~0.4 ms each (2,000 entities, relations and mentions: 2.4 s
    # of the transaction's 5 under the profiler); `flush_rows` inserts them _ROW_BATCH at a time.
    held: dict[str, list[_Held]] = field(
        default_factory=lambda: {
            k: []
            for k in (
                *("revision", "share", "archive", "entity", "relation", "mention"),
                *("scenario", "persona", "procedure", "procedure_revision"),
                *("profile", "profile_revision"),
            )
        }
    )

    # -- helpers

    def agent(self, agent_id: str) -> None:
        if agent_id and agent_id not in self.agents:
            agent_ensure(team=self.team, agent_id=agent_id)
            self.agents.add(agent_id)

    def own(self, line: int, kind: str, agent_id: str) -> None:
        """An agent-scoped key imports its own agent's records only."""
        if self.acting_agent is not None and agent_id != self.acting_agent:
            raise Forbidden(
                f"line {line}: an agent-scoped key can only import its own agent's records "
                f"(this {kind} belongs to {agent_id or 'the team'!r})"
            )

    def ref(self, line: int, kind: str, rec: dict[str, Any], name: str, *, required: bool) -> Any:
        """The id on this server of what the record's `name` refers to."""
        target_kind = SPECS[kind].refs[name]
        source = rec.get(name)
        if source is None:
            if required:
                raise _invalid(line, f"{kind}: {name} is required")
            return None
        mapped = self.ids[target_kind].get(source)
        if mapped is None and required:
            raise _invalid(line, f"{kind}: {name} {source!r} is no {target_kind} of the bundle")
        return mapped

    def memory_id(self, source: Any) -> Any:
        return self.ids["memory"].get(source)

    def remap_memory_json(self, value: Any) -> Any:
        """Memory ids inside metadata / revision before-after, in this server's ids (unknown
        ones dropped from lists, kept as they are elsewhere: history text, not links)."""
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for key in _MEMORY_ID_KEYS:
            if key in out and out[key] is not None:
                out[key] = self.memory_id(out[key]) or out[key]
        for key in _MEMORY_ID_LIST_KEYS:
            if isinstance(out.get(key), list):
                out[key] = [m for m in (self.memory_id(s) for s in out[key]) if m is not None]
        return out

    def needs_embedding(self, raw: bytes | memoryview | None, model_name: str) -> bool:
        return (
            self.reembed_all or not raw or model_name != self.model_name or len(raw) != 4 * self.dim
        )

    def hash_of(self, content: str) -> str:
        if content not in self.hashes:
            self.hashes[content] = content_hash(content)
        return self.hashes[content]

    def derive(self, content: str, *, tokens_max: int) -> None:
        """A memory's hash and search tokens, computed before the transaction opens: tokens for
        at most `tokens_max` contents (kept until the import ends, like the vectors; those of
        the rest are computed inside the transaction, as memories_insert does without them)."""
        self.hash_of(content)
        if content not in self.tokens and len(self.tokens) < tokens_max:
            self.tokens[content] = tokens_for_storage(content)

    def read_existing(self) -> None:
        """The team's memories with a content of the bundle (inside the transaction: what it
        reads, it writes against)."""
        if self.on_conflict == "new_ids":
            return
        hashes = sorted(set(self.hashes.values()))
        for start in range(0, len(hashes), 500):
            rows = (
                Memory.objects.filter(team=self.team, content_hash__in=hashes[start : start + 500])
                .order_by("id")
                .values_list("pk", "scope", "agent_id", "content_hash", "superseded_by_id")
            )
            for pk, scope, agent_id, digest, superseded_by in rows:
                self.existing.setdefault((scope, agent_id, digest, superseded_by is not None), pk)

    def read_entities(self) -> Iterator[tuple[Any, tuple[str, str, str]]]:
        """The team's entities under the bundle's resolution keys: (id, (agent, type,
        graph.services.name_key)), the first of a key first."""
        keys = sorted(self.entity_resolution_keys)
        for start in range(0, len(keys), 500):
            rows = (
                Entity.objects.filter(team=self.team, normalized_name__in=keys[start : start + 500])
                .order_by("created_at", "id")
                .values_list("pk", "agent_id", "entity_type", "name")
            )
            for pk, agent_id, entity_type, name in rows:
                yield pk, (agent_id, entity_type, name_key(name))

    def texts_redescribed(
        self,
        here: list[tuple[Any, tuple[str, str, str]]],
        described: dict[tuple[str, str, str], str],
    ) -> list[str]:
        """The texts (embedding_text) the entities here will have once an overwrite gives them
        the bundle's description (`described`, by key), where it is not theirs already: what
        `entities_update` embeds, unless it was embedded ahead."""
        first: dict[tuple[str, str, str], Any] = {}
        for pk, key in here:
            if key in described:
                first.setdefault(key, pk)
        by_pk = {pk: described[key] for key, pk in first.items()}
        pks = list(by_pk)
        texts = []
        for start in range(0, len(pks), 500):
            rows = Entity.objects.filter(pk__in=pks[start : start + 500]).values_list(
                "pk", "name", "description"
            )
            texts += [embedding_text(n, by_pk[pk]) for pk, n, d in rows if d != by_pk[pk]]
        return texts

    def entity_here(self, *, agent_id: str, name: str, entity_type: str) -> Any | None:
        """The id of what graph.services.entity_find would return, from what `read_entities`
        read."""
        if normalise_name(name, entity_type) not in self.entity_resolution_keys:
            # Not seen by the pass before the transaction (it only skips what this pass refuses).
            found = entity_find(
                team=self.team, agent_id=agent_id, name=name, entity_type=entity_type
            )
            return None if found is None else found.pk
        key = (agent_id, entity_type, name_key(name))
        if self.entities_here.get(key) in self.new_entity_ids:
            # The bundle names it twice: the first goes in (and may meet one here instead).
            self.flush_rows("entity")
        return self.entities_here.get(key)

    def row_here(self, kind: str, key: tuple[Any, ...]) -> Any | None:
        """The id of the `kind` row (relation, mention, share) under `key` that was here before
        the import, its first end being a row the import met. The first time an end is asked
        about, the rows of every end met so far are read, _ROW_BATCH ends a query."""
        model, end_kind, columns, _ = _KEYED[kind]
        read = self.here_read[kind]
        if key[0] not in read:
            ends = list({key[0]} | (self.met[end_kind] - read))
            for start in range(0, len(ends), _ROW_BATCH):
                rows = model._default_manager.filter(
                    **{f"{columns[0]}__in": ends[start : start + _ROW_BATCH]}
                ).values_list("pk", *columns)
                for pk, *values in rows:
                    self.here[kind].setdefault(tuple(values), pk)
            read.update(ends)
        return self.here[kind].get(key)

    def row_met(self, kind: str, source: Any, pk: Any, columns: dict[str, Any]) -> None:
        """The bundle's `kind` row is `pk`, already here: skipped, or overwritten (with the
        held rows of its kind, `rewrite`)."""
        if kind == "relation":
            self.ids["relation"][source] = pk
        if self.on_conflict == "overwrite" and _KEYED[kind][3]:
            self.rewrites[kind].append((pk, columns))
            self.imported[kind] += 1
        else:
            self.skipped[kind] += 1

    def rewrite(self, kind: str) -> None:
        """Overwrites the rows `row_met` and `agent_row_overwrite` noted, as `_update` would
        each (the bundle's columns and times, `auto_now` columns stamped now otherwise): one read
        and one UPDATE run for each row (`executemany`) a batch, not a read and a save a
        record."""
        noted, self.rewrites[kind] = self.rewrites[kind], []
        if not noted:
            return
        model, overwritten = (
            (_KEYED[kind][0], _KEYED[kind][3])
            if kind in _KEYED
            else (_AGENT_KEYED[kind][0], _AGENT_KEYED[kind][3])
        )
        stamps = _auto_stamps(model)
        now = timezone.now()
        for start in range(0, len(noted), _ROW_BATCH):
            batch = noted[start : start + _ROW_BATCH]
            rows = model._default_manager.in_bulk([pk for pk, _ in batch])
            for pk, columns in batch:  # in the bundle's order: a row given twice takes the last
                row = rows.get(pk)
                if row is None:
                    continue  # deleted by another writer since it was met: as if after the import
                for name in overwritten:
                    if name in columns:
                        setattr(row, name, columns[name])
                for name in stamps:
                    if columns.get(name) is not None:
                        setattr(row, name, columns[name])
                    elif getattr(model._meta.get_field(name), "auto_now", False):
                        setattr(row, name, now)
            rows_restamp(list(rows.values()), fields=[*overwritten, *stamps])

    def agent_row_here(self, kind: str, agent_id: str, key: Any) -> Any | None:
        """The id of the agent's `kind` row under `key` (a scenario's name, a persona's creation
        time, a rule, a profile key): here before the import, or held by it (_HELD when its id
        is not known yet). The agent's rows of that kind are read the first time."""
        rows = self.agent_rows[kind].get(agent_id)
        if rows is None:
            model, column, order, _ = _AGENT_KEYED[kind]
            rows = {}
            for pk, value in (
                model._default_manager.filter(team=self.team, agent_id=agent_id)
                .order_by(*order)
                .values_list("pk", column)
            ):
                rows.setdefault(_meet_key(kind, value), pk)
            self.agent_rows[kind][agent_id] = rows
        return rows.get(_meet_key(kind, key))

    def agent_row_hold(
        self, kind: str, line: int, source: Any, row: models.Model, columns: dict[str, Any]
    ) -> None:
        """Holds a new lifecycle row; a later record of its agent and key meets it."""
        column = _AGENT_KEYED[kind][1]
        rows = self.agent_rows[kind].get(row.agent_id)  # type: ignore[attr-defined]
        if rows is not None:  # None with new_ids: nothing is met
            key = _meet_key(kind, getattr(row, column))
            rows.setdefault(key, row.pk if row.pk is not None else _HELD)
        self.hold(kind, line, source, row, columns)

    def agent_row_overwrite(
        self, kind: str, agent_id: str, key: Any, pk: Any, columns: dict[str, Any]
    ) -> Any | None:
        """Notes the lifecycle row met under `key` for `rewrite`, which overwrites the noted rows
        of its kind with the held ones, as `_update` did each: by batches. Returns its id (None:
        deleted by another writer since it was met)."""
        if pk is _HELD:  # given twice, the first copy held: its id once it is in
            self.flush_rows(kind)
            model, column, order, _ = _AGENT_KEYED[kind]
            met = _meet_key(kind, key)
            rows = (
                model._default_manager.filter(
                    team=self.team,
                    agent_id=agent_id,
                    # A rule is met by its normalised text, which no column holds.
                    **({} if kind == "procedure" else {column: key}),
                )
                .order_by(*order)
                .values_list("pk", column)
            )
            # Exactly this key: MariaDB's collation may find another too.
            pk = next((found for found, value in rows if _meet_key(kind, value) == met), None)
            if pk is None:  # deleted by another writer since: as if after the import
                return None
            self.agent_rows[kind][agent_id][met] = pk
        self.rewrites[kind].append((pk, columns))
        if len(self.rewrites[kind]) >= _ROW_BATCH:
            self.flush_rows(kind)
        return pk

    def embedded(self, texts: list[str]) -> list[bytes]:
        """The vectors of `texts`: those embedded ahead, the others now."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        for start in range(0, len(missing), _EMBED_BATCH):
            batch = missing[start : start + _EMBED_BATCH]
            for text, vector in zip(batch, embed_passages(batch), strict=True):
                self.vectors[text] = to_bytes(vector)
        self.reembedded += len(texts)
        return [self.vectors[t] for t in texts]

    # -- memories: batched (embedding) and linked once all are written

    def memory(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("memory", rec)
        source = rec.get("id")
        if source is None:
            raise _invalid(line, "memory: id is required")
        if source in self.sources:
            raise _invalid(line, f"memory: id {source!r} appears twice")
        self.sources.add(source)
        content = columns.get("content", "")
        if not content or not content.strip():
            raise _invalid(line, "memory: content is required")
        # The API's limits: what a bundle brings in must be what the API could have written.
        if len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
            raise _invalid(
                line, f"memory: content is over {settings.MEMORY_MAX_CONTENT_CHARS} characters"
            )
        if not 0.0 <= columns.get("importance", 0.5) <= 1.0:
            raise _invalid(line, "memory: importance must be within 0..1")
        scope = columns.get("scope", "")
        if not scope:
            raise _invalid(line, "memory: scope is required")
        agent_id = columns.get("agent_id", "")
        if scope == MemoryScope.PERSONAL and not agent_id:
            raise _invalid(line, "memory: a personal memory needs its agent_id")
        self.own(line, "memory", agent_id if scope == MemoryScope.PERSONAL else "")
        self.agent(agent_id)
        superseded = rec.get("superseded_by") is not None
        if self.on_conflict != "new_ids":
            existing = self.existing.get((scope, agent_id, self.hash_of(content), superseded))
            if existing is not None:
                self.ids["memory"][source] = existing
                self.met["memory"].add(existing)
                if self.on_conflict == "skip":
                    self.skipped["memory"] += 1
                else:
                    self.overwrites.append((existing, columns))
                    self.imported["memory"] += 1
                return
        memory = Memory(**columns)
        self.pending.append((source, memory, rec))
        if len(self.pending) >= 500:
            self.flush_memories()

    def flush_memories(self) -> None:
        if not self.pending:
            return
        stale = [
            m for _, m, _ in self.pending if self.needs_embedding(m.embedding, m.embedding_model)
        ]
        for m, vector in zip(stale, self.embedded([m.content for m in stale]), strict=True):
            m.embedding = vector
            m.embedding_model = self.model_name
        memories_insert(
            team=self.team,
            memories=[m for _, m, _ in self.pending],
            hashes=self.hashes,
            tokens=self.tokens,
        )
        for source, memory, rec in self.pending:
            self.ids["memory"][source] = memory.pk
            self.new_memory_ids.add(memory.pk)
            # Found by a later record of the same content, as a memory already here would be
            # (its links come at the end: not superseded yet).
            key = (memory.scope, memory.agent_id, memory.content_hash, False)
            self.existing.setdefault(key, memory.pk)
            self.new_memories.add(source)
            self.metadata_of[source] = memory
            for name in ("superseded_by", "promoted_from"):
                if rec.get(name) is not None:
                    self.links.append((source, name, rec[name]))
        self.imported["memory"] += len(self.pending)
        self.pending.clear()

    def finish_memories(self) -> None:
        """Once every memory is known: links, metadata ids, and the overwrites."""
        if self.memories_done:
            return
        self.flush_memories()
        memories_link(
            team=self.team,
            links=[
                (self.ids["memory"][s], name, self.memory_id(target))
                for s, name, target in self.links
            ],
        )
        changed = []
        for memory in self.metadata_of.values():
            remapped = self.remap_memory_json(memory.metadata)
            if remapped != memory.metadata:
                memory.metadata = remapped
                changed.append(memory)
        Memory.objects.bulk_update(changed, ["metadata"], batch_size=500)
        self.overwrite_memories()
        self.memories_done = True

    def overwrite_memories(self) -> None:
        """The memories met here, set to the bundle's values (a revision records what changed;
        content is the same by definition): one read, then one `memories_update` a batch. A
        memory that already holds those values is left out: an overwrite re-import of the same
        bundle (a client retrying) writes none. One memory_update a memory was a lock, a save and
        a revision insert each, inside the transaction."""
        noted, self.overwrites = self.overwrites, []
        for met in _met_rows(Memory, noted):
            changes: list[tuple[int, MemoryAttributes]] = []
            for pk, row, columns in met:
                metadata = columns.get("metadata")
                attributes = MemoryAttributes(
                    importance=columns.get("importance"),
                    category=columns.get("category"),
                    metadata=self.remap_memory_json(metadata) if metadata is not None else None,
                    pinned=columns.get("pinned"),
                    # Set when the bundle has one; an overwrite never clears one (None: "leave").
                    expires_at=columns.get("expires_at"),
                )
                given = {k: v for k, v in asdict(attributes).items() if v is not None}
                if all(getattr(row, k) == v for k, v in given.items()):
                    continue
                changes.append((pk, attributes))
                for name, value in given.items():
                    # What the batch's row holds once written: a later record of the same memory
                    # is compared with it.
                    setattr(row, name, value)
            memories_update(team=self.team, changes=changes, actor=self.actor)

    # -- the other kinds: their new rows held for `flush_rows`, those met noted for `rewrite`
    # (entities: `overwrite_entities`)

    def revision(self, line: int, rec: dict[str, Any]) -> None:
        memory_id = self.ref(line, "revision", rec, "memory", required=True)
        if rec["memory"] not in self.new_memories:
            self.skipped["revision"] += 1  # the existing memory keeps its own history
            return
        columns = _columns("revision", rec)
        for key in ("before", "after"):
            if key in columns:
                columns[key] = self.remap_memory_json(columns[key])
        row = MemoryRevision(team=self.team, memory_id=memory_id, **columns)
        self.hold("revision", line, None, row, columns)

    def share(self, line: int, rec: dict[str, Any]) -> None:
        memory_id = self.ref(line, "share", rec, "memory", required=True)
        columns = _columns("share", rec)
        agent_id = columns.get("agent_id", "")
        if not agent_id:
            raise _invalid(line, "share: agent_id is required")
        self.agent(agent_id)
        pair = (memory_id, agent_id)
        if pair in self.new_shares:
            self.flush_rows("share")  # given twice: the first is loaded
            pk = (
                MemoryShare.objects.filter(memory_id=memory_id, agent_id=agent_id)
                .values_list("pk", flat=True)
                .first()
            )
        elif memory_id in self.new_memory_ids:
            pk = None  # a memory this import wrote has only the shares it wrote
        else:
            pk = self.row_here("share", pair)
        if pk is not None:
            self.row_met("share", None, pk, columns)
            return
        self.new_shares.add(pair)
        self.hold(
            "share",
            line,
            None,
            MemoryShare(team=self.team, memory_id=memory_id, **columns),
            columns,
        )

    def _agent_row(self, line: int, kind: str, columns: dict[str, Any]) -> str:
        agent_id = columns.get("agent_id", "")
        if not agent_id:
            raise _invalid(line, f"{kind}: agent_id is required")
        self.own(line, kind, agent_id)
        self.agent(agent_id)
        return agent_id

    def archive(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("archive", rec)
        agent_id = self._agent_row(line, "archive", columns)
        key = (agent_id, columns.get("item_id", ""))
        if key in self.archive_keys:
            # Given twice: the first goes in, so that the second meets it (`archives_new`).
            self.flush_rows("archive")
        self.archive_keys.add(key)
        self.hold("archive", line, None, WorkingArchive(team=self.team, **columns), columns)

    def archives_new(self, held: list[_Held]) -> list[_Held]:
        """The held archive items that are not here yet. Those here (same agent and item id)
        are skipped or overwritten: one query for the batch, not one an item."""
        if self.on_conflict == "new_ids":
            return held
        rows = [cast(WorkingArchive, row) for _, _, row, _ in held]
        here: dict[tuple[str, str], int] = {}
        for pk, agent_id, item_id in (
            WorkingArchive.objects.filter(
                team=self.team, item_id__in=sorted({r.item_id for r in rows})
            )
            .order_by("id")
            .values_list("pk", "agent_id", "item_id")
        ):
            here.setdefault((agent_id, item_id), pk)
        new: list[_Held] = []
        overwrites: list[tuple[int, dict[str, Any]]] = []
        for entry, row in zip(held, rows, strict=True):
            found = here.get((row.agent_id, row.item_id))
            if found is None:
                new.append(entry)
            elif self.on_conflict == "skip":
                self.skipped["archive"] += 1
            else:
                overwrites.append((found, entry[3]))
        existing = WorkingArchive.objects.in_bulk([pk for pk, _ in overwrites])
        for pk, columns in overwrites:
            _update(existing[pk], columns, list(columns))
            self.imported["archive"] += 1
        return new

    def _memory_ids(self, value: Any) -> list[Any]:
        if not isinstance(value, list):
            return []
        return [m for m in (self.memory_id(s) for s in value) if m is not None]

    def scenario(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("scenario", rec)
        agent_id = self._agent_row(line, "scenario", columns)
        columns["memory_ids"] = self._memory_ids(columns.get("memory_ids"))
        if self.on_conflict != "new_ids":
            name = columns.get("name", "")
            existing = self.agent_row_here("scenario", agent_id, name)
            if existing is not None:
                self.ids["scenario"][rec.get("id")] = existing
                if self.on_conflict == "skip":
                    self.skipped["scenario"] += 1
                else:
                    self.agent_row_overwrite("scenario", agent_id, name, existing, columns)
                    self.imported["scenario"] += 1
                return
        row = Scenario(team=self.team, **columns)
        self.ids["scenario"][rec.get("id")] = row.pk
        self.agent_row_hold("scenario", line, rec.get("id"), row, columns)

    def persona(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("persona", rec)
        agent_id = self._agent_row(line, "persona", columns)
        columns["memory_ids"] = self._memory_ids(columns.get("memory_ids"))
        scenario_ids = columns.get("scenario_ids")
        columns["scenario_ids"] = [
            s
            for s in (
                self.ids["scenario"].get(x)
                for x in (scenario_ids if isinstance(scenario_ids, list) else [])
            )
            if s is not None
        ]
        snapshot = columns.get("scenarios_snapshot")
        if isinstance(snapshot, list):
            columns["scenarios_snapshot"] = [
                {
                    **item,
                    "id": self.ids["scenario"].get(item.get("id"), item.get("id")),
                    "memory_ids": self._memory_ids(item.get("memory_ids")),
                }
                if isinstance(item, dict)
                else item
                for item in snapshot
            ]
        if self.on_conflict != "new_ids" and columns.get("created_at") is not None:
            when = columns["created_at"]
            existing = self.agent_row_here("persona", agent_id, when)
            if existing is not None:
                if self.on_conflict == "skip":
                    self.skipped["persona"] += 1
                else:
                    self.agent_row_overwrite("persona", agent_id, when, existing, columns)
                    self.imported["persona"] += 1
                return
        self.agent_row_hold(
            "persona", line, rec.get("id"), Persona(team=self.team, **columns), columns
        )

    def entity(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("entity", rec)
        agent_id = columns.get("agent_id", "")
        self.own(line, "entity", agent_id)
        self.agent(agent_id)
        name, entity_type = columns.get("name", ""), columns.get("entity_type", "")
        if not name or not entity_type:
            raise _invalid(line, "entity: name and entity_type are required")
        # One (name, type) per scope (a unique constraint): even new_ids meets the existing one.
        existing = self.entity_here(agent_id=agent_id, name=name, entity_type=entity_type)
        if existing is None:
            source_memory = self.ref(line, "entity", rec, "source_memory", required=False)
            if self.needs_embedding(columns.get("embedding"), columns.get("embedding_model", "")):
                text = embedding_text(name, columns.get("description", ""))
                columns["embedding"] = self.embedded([text])[0]
                columns["embedding_model"] = self.model_name
            row = Entity(
                team=self.team,
                normalized_name=normalise_name(name, entity_type),
                source_memory_id=source_memory,
                **columns,
            )
            self.ids["entity"][rec.get("id")] = row.pk
            self.entities_here[(agent_id, entity_type, name_key(name))] = row.pk
            self.new_entity_ids.add(row.pk)
            self.hold("entity", line, rec.get("id"), row, columns)
            return
        self.entity_met(rec.get("id"), existing, columns)

    def entity_met(self, source: Any, existing: Any, columns: dict[str, Any]) -> None:
        """The bundle's entity `source` is the entity `existing` (its id), already here."""
        self.ids["entity"][source] = existing
        if existing not in self.new_entity_ids:
            self.met["entity"].add(existing)
        if self.on_conflict == "overwrite":
            self.entity_overwrites.append((existing, columns))
            self.imported["entity"] += 1
        else:
            self.skipped["entity"] += 1

    def hold(
        self, kind: str, line: int, source: Any, row: models.Model, columns: dict[str, Any]
    ) -> None:
        self.held[kind].append((line, source, row, columns))
        if len(self.held[kind]) >= _ROW_BATCH:
            self.flush_rows(kind)

    def flush_rows(self, kind: str) -> None:
        """Inserts the held rows of `kind` at once (none for a kind that is not held), keeping
        the times their records give; then overwrites the rows of that kind met here (a clash
        while inserting may meet one)."""
        self.insert_held(kind)
        if kind in self.rewrites:
            self.rewrite(kind)
        if kind == "entity":
            self.overwrite_entities()

    def overwrite_entities(self) -> None:
        """The entities `entity_met` noted, set to the bundle's description and properties: one
        read, then one `entities_update` a batch (a changed description is embedded again; its
        vector made ahead if `_embed_ahead` did). An entity that already holds them is left
        out; one entity_update an entity was an embedding, a lock and a save each."""
        noted, self.entity_overwrites = self.entity_overwrites, []
        for met in _met_rows(Entity, noted):
            changes: list[tuple[Any, str | None, dict[str, Any] | None]] = []
            for pk, row, columns in met:
                description, properties = columns.get("description"), columns.get("properties")
                if description is not None:
                    description = description.strip()
                if properties is not None:
                    properties = {**row.properties, **properties}
                if (description is None or description == row.description) and (
                    properties is None or properties == row.properties
                ):
                    continue
                changes.append((pk, description, columns.get("properties")))
                # What the batch's row holds once written: a later record of the same entity is
                # compared with it.
                row.description = row.description if description is None else description
                row.properties = row.properties if properties is None else properties
            entities_update(team=self.team, changes=changes, vectors=self.vectors)

    def insert_held(self, kind: str) -> None:
        if kind not in self.held:
            return
        held, self.held[kind] = self.held[kind], []
        if kind == "archive":
            held = self.archives_new(held)
        if not held:
            return
        if kind == "procedure_revision":
            # A revision held with its rule (the `source` slot): the rule's id, known now.
            self.reserve_rule_ids()
            for _, target, row, _ in held:
                if isinstance(target, Procedure):
                    row.procedure_id = target.pk  # type: ignore[attr-defined]
        model = type(held[0][2])
        if (
            kind not in _ROW_KEYS
            and model._meta.pk.default is models.NOT_PROVIDED
            and not connection.features.can_return_rows_from_bulk_insert
        ):
            for line, source, row, columns in held:  # their ids are needed for their times
                self.insert_one(kind, line, source, row, columns)
            return
        try:
            with transaction.atomic():
                model._default_manager.bulk_create([row for _, _, row, _ in held])
                stamps = _auto_stamps(model)
                restamp = []
                for _, _, row, columns in held:
                    given = [n for n in stamps if columns.get(n) is not None]
                    for name in given:
                        setattr(row, name, columns[name])
                    if given:
                        restamp.append(row)
                rows_restamp(restamp, fields=stamps, key=_ROW_KEYS.get(kind, ()))
        except IntegrityError:
            # A row clashes with one here (an entity's name, below): each on its own, to know
            # which.
            for line, source, row, columns in held:
                self.insert_one(kind, line, source, row, columns)
            return
        self.imported[kind] += len(held)

    def insert_one(
        self, kind: str, line: int, source: Any, row: models.Model, columns: dict[str, Any]
    ) -> None:
        try:
            with transaction.atomic():
                _insert(row, columns)
        except IntegrityError as exc:
            if kind in _KEYED:
                # Written by another process since this import looked (MariaDB): met as one
                # that was here.
                model, _, key_columns, _ = _KEYED[kind]
                key = tuple(getattr(row, c) for c in key_columns)
                pk = (
                    model._default_manager.filter(**dict(zip(key_columns, key, strict=True)))
                    .values_list("pk", flat=True)
                    .first()
                )
                if pk is None:
                    raise _invalid(line, f"{kind}: {exc}") from None
                if kind == "relation":
                    self.new_relations[key] = pk
                self.row_met(kind, source, pk, columns)
                return
            if not isinstance(row, Entity):
                raise _invalid(line, f"{kind}: {exc}") from None
            # A name the database calls equal to one here that Python does not (MariaDB's
            # collation), or an entity another process wrote after `read_entities`: the same
            # entity.
            existing = (
                Entity.objects.filter(
                    team=self.team,
                    agent_id=row.agent_id,
                    entity_type=row.entity_type,
                    name=row.name,
                )
                .order_by("created_at", "id")
                .first()
            )
            if existing is None:
                raise _invalid(line, f"{kind}: {exc}") from None
            self.new_entity_ids.discard(row.pk)
            self.entities_here[(row.agent_id, row.entity_type, name_key(row.name))] = existing.pk
            self.entity_met(source, existing.pk, columns)
            return
        self.imported[kind] += 1

    def relation(self, line: int, rec: dict[str, Any]) -> None:
        source = self.ref(line, "relation", rec, "source", required=True)
        target = self.ref(line, "relation", rec, "target", required=True)
        source_memory = self.ref(line, "relation", rec, "source_memory", required=False)
        columns = _columns("relation", rec)
        relation_type = columns.get("relation_type", "")
        key = (source, target, relation_type)
        if key in self.new_relations:
            self.flush_rows("relation")  # given twice: the first is loaded (or met one here)
            pk = self.new_relations[key]
        elif source in self.new_entity_ids or target in self.new_entity_ids:
            pk = None  # an entity this import wrote has only the relations it wrote
        else:
            pk = self.row_here("relation", key)
        if pk is not None:
            self.row_met("relation", rec.get("id"), pk, columns)
            return
        row = Relation(
            team=self.team,
            source_id=source,
            target_id=target,
            source_memory_id=source_memory,
            **columns,
        )
        self.ids["relation"][rec.get("id")] = row.pk
        self.new_relations[key] = row.pk
        self.hold("relation", line, rec.get("id"), row, columns)

    def mention(self, line: int, rec: dict[str, Any]) -> None:
        entity_id = self.ref(line, "mention", rec, "entity", required=True)
        memory_id = self.ref(line, "mention", rec, "memory", required=True)
        columns = _columns("mention", rec)
        pair = (entity_id, memory_id)
        if pair in self.new_mentions:
            here = True
        elif entity_id in self.new_entity_ids or memory_id in self.new_memory_ids:
            here = False
        else:
            here = self.row_here("mention", (memory_id, entity_id)) is not None
        if here:
            self.skipped["mention"] += 1
            return
        row = EntityMention(team=self.team, entity_id=entity_id, memory_id=memory_id, **columns)
        self.new_mentions.add(pair)
        self.hold("mention", line, None, row, columns)

    def procedure(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("procedure", rec)
        agent_id = self._agent_row(line, "procedure", columns)
        columns["evidence"] = self._memory_ids(columns.get("evidence"))
        rule = columns.get("rule", "")
        source = (agent_id, rec.get("id"))
        if self.on_conflict != "new_ids":
            existing = self.agent_row_here("procedure", agent_id, rule)
            if existing is not None:
                if self.on_conflict == "skip":
                    self.rules.setdefault(source, None)  # kept as it is here, with its history
                    self.skipped["procedure"] += 1
                else:
                    met = self.agent_row_overwrite("procedure", agent_id, rule, existing, columns)
                    self.rules.setdefault(source, met)
                    self.imported["procedure"] += 1
                return
        if not rule.strip():
            raise _invalid(line, "procedure: rule is required")
        row = Procedure(team=self.team, **columns)
        self.rules.setdefault(source, row)
        self.agent_row_hold("procedure", line, None, row, columns)

    def rule_changes_here(self, agent_id: str) -> dict[tuple[Any, ...], set[int]]:
        """The changes of the agent's rules here (read the first time) and held: see
        `rule_changes`."""
        changes = self.rule_changes.get(agent_id)
        if changes is None:
            changes = self.rule_changes[agent_id] = {}
            rows = ProcedureRevision.objects.filter(team=self.team, agent_id=agent_id).values_list(
                "procedure_id", "change", "at", "rule", "rule_before", "status", "status_before"
            )
            for procedure_id, *change in rows:
                changes.setdefault(tuple(change), set()).add(procedure_id)
        return changes

    def rule_removed(self, agent_id: str, source: Any, change: tuple[Any, ...]) -> Procedure | int:
        """What a rule the bundle's history names but the bundle does not hold (removed where it
        was exported) is on this server: the id of the rule here whose history holds this
        change (a bundle imported again), or else a new id, reserved when its history goes in
        (`reserve_rule_ids`), so that `POST /procedures/<agent>/<id>/restore` brings it back and
        no new rule ever takes that id."""
        target: Procedure | int | None = None
        if self.on_conflict != "new_ids":
            target = min(self.rule_changes_here(agent_id).get(change, ()), default=None)
        if target is None:
            target = Procedure(
                team=self.team,
                agent_id=agent_id,
                rule=change[2] or "-",
                status=ProcedureStatus.REJECTED,
                source="import",
            )
            self.reservations.append(target)
        self.rules[(agent_id, source)] = target
        return target

    def reserve_rule_ids(self) -> None:
        """Takes the ids of the removed rules noted so far from the table's counter: rows that
        go at once, in this transaction. Neither SQLite (AUTOINCREMENT) nor InnoDB gives an id
        twice, the guarantee a rule's restore relies on (memories.services.procedure_restore).
        Two queries, not two a rule."""
        pending, self.reservations = self.reservations, []
        if not pending:
            return
        if connection.features.can_return_rows_from_bulk_insert:
            Procedure.objects.bulk_create(pending)
        else:
            for row in pending:
                row.save(force_insert=True)
        Procedure.objects.filter(pk__in=[row.pk for row in pending]).delete()

    def procedure_revision(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("procedure_revision", rec)
        agent_id = self._agent_row(line, "procedure_revision", columns)
        source = rec.get("procedure_id")
        if not isinstance(source, int | str) or isinstance(source, bool):
            raise _invalid(line, "procedure_revision: procedure_id must be a rule's id")
        change = tuple(
            columns.get(name, "")
            for name in ("change", "at", "rule", "rule_before", "status", "status_before")
        )
        if (agent_id, source) in self.rules:
            target = self.rules[(agent_id, source)]
            if target is None:
                self.skipped["procedure_revision"] += 1  # the rule kept here has its own history
                return
        else:
            target = self.rule_removed(agent_id, source, change)
        if isinstance(target, int) and self.on_conflict != "new_ids" and change[1] is not None:
            # A rule here (met, or a removed rule whose history is here): the same change of it
            # is not written twice (a re-import).
            made_to = self.rule_changes_here(agent_id).setdefault(change, set())
            if target in made_to:
                self.skipped["procedure_revision"] += 1
                return
            made_to.add(target)
        row = ProcedureRevision(team=self.team, **columns)
        if isinstance(target, int):
            row.procedure_id = target
        # Else a rule this import writes (inserted before its history) or whose id it reserves:
        # its id is set as the held history goes in (`insert_held`).
        self.hold("procedure_revision", line, target, row, columns)

    def profile(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("profile", rec)
        agent_id = self._agent_row(line, "profile", columns)
        key, value = columns.get("key", ""), columns.get("value", "")
        if profile_key_error(key) or profile_value_error(key, value):
            raise _invalid(
                line, f"profile: {profile_key_error(key) or profile_value_error(key, value)}"
            )
        columns["source_memory_id"] = self.memory_id(columns.get("source_memory_id"))
        # One value per key (a unique constraint): even new_ids meets the existing one.
        existing = self.agent_row_here("profile", agent_id, key)
        if existing is not None:
            if self.on_conflict == "overwrite":
                self.agent_row_overwrite("profile", agent_id, key, existing, columns)
                self.imported["profile"] += 1
            else:
                self.profile_kept.add((agent_id, key))
                self.skipped["profile"] += 1
            return
        self.agent_row_hold("profile", line, None, ProfileField(team=self.team, **columns), columns)

    def profile_revision(self, line: int, rec: dict[str, Any]) -> None:
        columns = _columns("profile_revision", rec)
        agent_id = self._agent_row(line, "profile_revision", columns)
        if (agent_id, columns.get("key", "")) in self.profile_kept:
            self.skipped["profile_revision"] += 1  # the value kept here has its own history
            return
        columns["source_memory_id"] = self.memory_id(columns.get("source_memory_id"))
        if self.on_conflict != "new_ids" and columns.get("at") is not None:
            here = self.profile_revisions.get(agent_id)
            if here is None:
                here = self.profile_revisions[agent_id] = set(
                    ProfileRevision.objects.filter(team=self.team, agent_id=agent_id).values_list(
                        "key", "at", "before", "after"
                    )
                )
            event = (
                columns.get("key", ""),
                columns["at"],
                columns.get("before", ""),
                columns.get("after", ""),
            )
            if event in here:
                # The same change, here already (a re-import): a key's history is not doubled.
                self.skipped["profile_revision"] += 1
                return
            here.add(event)
        self.hold(
            "profile_revision", line, None, ProfileRevision(team=self.team, **columns), columns
        )


def _embed_ahead(
    data: bytes,
    state: _Import,
    progress: Callable[[int], Callable[[int], None]] | None = None,
) -> None:
    """Embeds, before the import's transaction opens, the texts it will embed again: memories'
    contents and entities' names whose vector is missing or of another model. Hashes every
    memory's content and reads its search tokens (inside, they held the lock ~0.4 ms a memory),
    and notes every entity's resolution key, too (`read_existing` and `read_entities` look them
    all up at once), and the scopes whose locks the transaction takes (memories', profiles').

    Embedding is the slow part of an import from a server of another model (a few ms a memory
    on 2 cores). Inside the transaction it held SQLite's write lock, so every other writer of the
    server waited, then got a 503; on MariaDB it held the new rows' locks as long. A record this
    pass cannot use is left to the transaction's pass, which checks it; a text it did not embed
    (a memory here with the same content, or an entity here, met below) is embedded there if
    needed. The vectors stay in memory until the import ends (2 KiB a text with the default
    model), so at most IMPORT_EMBED_AHEAD_MAX texts are embedded ahead, and the search tokens
    of at most as many memories are read ahead (the hashes, 64 characters each, of all).
    """
    ahead_max = max(0, settings.IMPORT_EMBED_AHEAD_MAX)
    memories: dict[str, str] = {}  # content -> its hash
    entities: dict[str, set[tuple[str, str, str]]] = {}  # text -> (agent, type, name key)s
    described: dict[tuple[str, str, str], str] = {}  # (agent, type, name key) -> description
    records = _lines(data)
    next(records, None)  # the header
    for _, rec in records:
        kind = rec.get("kind")
        if kind not in ("memory", "entity", *_AGENT_LOCKED):
            continue
        try:
            columns = _columns(kind, rec)
        except (ValueError, TypeError, DjangoValidationError):
            continue
        if kind in _AGENT_LOCKED:
            agent = columns.get("agent_id")
            if isinstance(agent, str) and agent:
                state.scopes.add((MemoryScope.PERSONAL, agent))
            continue
        content = ""
        name, entity_type = columns.get("name"), columns.get("entity_type")
        if kind == "entity" and isinstance(name, str) and isinstance(entity_type, str):
            state.entity_resolution_keys.add(normalise_name(name, entity_type))
        if kind == "memory":
            scope = columns.get("scope")
            if scope in (MemoryScope.PERSONAL, MemoryScope.TEAM):
                agent = columns.get("agent_id", "") if scope == MemoryScope.PERSONAL else ""
                state.scopes.add((scope, agent))
            content = columns.get("content") or ""
            if not isinstance(content, str) or not content.strip():
                continue
            if len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
                continue  # the transaction's pass refuses it (400): nothing to embed for it
            state.derive(content, tokens_max=ahead_max)
        description = columns.get("description")
        if (
            kind == "entity"
            and state.on_conflict == "overwrite"
            and isinstance(name, str)
            and isinstance(entity_type, str)
            and isinstance(description, str)
            and state.acting_agent in (None, columns.get("agent_id", ""))
        ):
            # An entity here gets this description: its new text is embedded ahead too.
            described[(columns.get("agent_id", ""), entity_type, name_key(name))] = (
                description.strip()
            )
        if not state.needs_embedding(columns.get("embedding"), columns.get("embedding_model", "")):
            continue
        owner = columns.get("agent_id", "")
        if kind == "memory" and columns.get("scope") != MemoryScope.PERSONAL:
            owner = ""
        if state.acting_agent is not None and owner != state.acting_agent:
            continue  # the transaction's pass refuses it (403): nothing to embed for it
        if kind == "memory":
            memories[content] = state.hash_of(content)
        elif name and isinstance(name, str) and isinstance(entity_type, str):
            text = embedding_text(columns["name"], columns.get("description", ""))
            entities.setdefault(text, set()).add((owner, entity_type, name_key(columns["name"])))
    if state.on_conflict != "new_ids":
        # A memory already here is skipped or overwritten, never embedded: a read, no lock.
        hashes = list(set(memories.values()))
        here: set[str] = set()
        for start in range(0, len(hashes), 500):
            here.update(
                Memory.objects.filter(
                    team=state.team, content_hash__in=hashes[start : start + 500]
                ).values_list("content_hash", flat=True)
            )
        memories = {c: h for c, h in memories.items() if h not in here}
    # An entity already here is met (whatever on_conflict: a name is unique in its scope): its
    # bundle text is not embedded, only, with overwrite, the text a new description gives it.
    met = list(state.read_entities())
    here_keys = {key for _, key in met}
    texts = list(
        dict.fromkeys(
            [
                *memories,
                *(t for t, keys in entities.items() if keys - here_keys),
                # With overwrite, the new texts of the entities here that change description.
                *(state.texts_redescribed(met, described) if described else []),
            ]
        )
    )
    texts = texts[:ahead_max]
    advance = progress(len(texts)) if progress is not None and texts else None
    for start in range(0, len(texts), _EMBED_BATCH):
        batch = texts[start : start + _EMBED_BATCH]
        for text, vector in zip(batch, embed_passages(batch), strict=True):
            state.vectors[text] = to_bytes(vector)
        if advance is not None:
            advance(len(batch))


def bundle_read_header(data: bytes) -> dict[str, Any]:
    """The bundle's header (checked): a command shows its counts before importing."""
    for number, header in _lines(data):
        _check_header(number, header)
        return header
    raise _invalid(1, "no header: the bundle is empty")


def bundle_import(
    *,
    team: Team,
    data: bytes,
    on_conflict: str = "skip",
    acting_agent: str | None = None,
    actor: Actor | None = None,
    progress: Callable[[int], None] | None = None,
    embedding_progress: Callable[[int], Callable[[int], None]] | None = None,
) -> ImportResult:
    """Imports a gzipped bundle into `team` (whatever team its header names): all or nothing.

    `acting_agent` (an agent-scoped key): every record must be that agent's. Memories are
    embedded again when the bundle's model is not this server's (or a vector is missing), before
    the transaction opens. `progress(n)`: n more records read; `embedding_progress(total)`, when
    there is something to embed ahead: returns the callback told of each batch embedded.
    """
    if on_conflict not in ON_CONFLICT:
        raise DomainError(
            ErrorCode.VALIDATION_ERROR, f"on_conflict must be one of {', '.join(ON_CONFLICT)}"
        )
    embedder = get_embedder()
    lines = _lines(data)
    first = next(lines, None)
    if first is None:
        raise _invalid(1, "no header: the bundle is empty")
    number, header = first
    _check_header(number, header)
    state = _Import(
        team=team,
        on_conflict=on_conflict,
        acting_agent=acting_agent,
        actor=actor or Actor(label="import"),
        reembed_all=header.get("embedding_model") != embedder.model_name
        or header.get("embedding_dim") != embedder.dim,
        model_name=embedder.model_name,
        dim=embedder.dim,
    )
    handlers: dict[str, Callable[[int, dict[str, Any]], None]] = {
        kind: getattr(state, kind) for kind in KINDS
    }
    _embed_ahead(data, state, embedding_progress)
    locks.scope_locks_prepare(team_id=team.id, scopes=state.scopes)
    position = 0
    with transaction.atomic():
        # The write locks of the scopes the bundle writes, as every write of a memory or of a
        # profile takes its own: another import of the same bundle (a client retrying one that
        # timed out), or an agent writing the same content or profile key, waits here and then
        # finds these rows, instead of both reading "not here" and both writing (MariaDB;
        # SQLite's transaction is the lock).
        locks.scope_locks(team_id=team.id, scopes=state.scopes)
        state.read_existing()
        for pk, key in state.read_entities():  # what the transaction writes against
            state.entities_here.setdefault(key, pk)
        for number, rec in lines:
            kind = rec.get("kind")
            if kind not in handlers:
                raise _invalid(number, f"unknown record kind {kind!r}")
            order = KINDS.index(kind)
            if order < position:
                raise _invalid(number, f"{kind} record after {KINDS[position]} records")
            if order > position:
                # The held rows go in before the next kind's records refer to them.
                state.flush_rows(KINDS[position])
            position = order
            if kind != "memory":
                state.finish_memories()
            try:
                handlers[kind](number, rec)
            except DomainError:
                raise
            except (ValueError, TypeError, DjangoValidationError, IntegrityError) as exc:
                raise _invalid(number, f"{kind}: {exc}") from None
            state.seen[kind] += 1
            if progress is not None:
                progress(1)
        state.finish_memories()
        state.flush_rows(KINDS[position])
        expected = header["counts"]
        for kind in KINDS:
            if int(expected.get(kind, 0)) != state.seen[kind]:
                raise DomainError(
                    ErrorCode.VALIDATION_ERROR,
                    f"the bundle has {state.seen[kind]} {kind} records, its header says "
                    f"{expected.get(kind, 0)}",
                )
    # Who brought what into the team: the operator's trail of an import (counts, never content).
    logger.info(
        "import into team %s by %s: imported %s, skipped %s",
        team.id,
        actor.label if actor is not None else "system",
        {k: n for k, n in state.imported.items() if n},
        {k: n for k, n in state.skipped.items() if n},
    )
    return ImportResult(imported=state.imported, skipped=state.skipped, reembedded=state.reembedded)


def bundle_filename(*, team: Team, agent_id: str | None, job_id: int | None = None) -> str:
    who = f"{team.id}-{agent_id}" if agent_id else team.id
    stamp = timezone.now().strftime("%Y%m%d") if job_id is None else str(job_id)
    return f"memoryplatform-{who}-{stamp}.jsonl.gz"
