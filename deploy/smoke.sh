#!/usr/bin/env bash
# Production smoke test: docs/deploy.md followed literally on this machine's MariaDB, Redis and
# RabbitMQ. A fresh database and user, the production settings, migrate + collectstatic +
# `check --deploy`, two gunicorn processes and one Celery worker, then deploy/smoke_client.py
# drives the API through both processes. Everything it started or created is removed on exit.
#
#   bash deploy/smoke.sh
#
# Overridable: PYTHON (.venv/bin/python), MYSQL (the admin client command, `mysql -h 127.0.0.1
# -uroot`), SMOKE_REDIS_URL (redis://127.0.0.1:6379/12, flushed), SMOKE_BROKER_URL
# (amqp://guest:guest@127.0.0.1:5672//).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
# This checkout's code, whatever the venv has installed (deploy/smoke_client.py runs from deploy/).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
read -r -a MYSQL <<<"${MYSQL:-mysql -h 127.0.0.1 -uroot}"
started_at=$(date +%s)

log() { printf 'smoke: %s\n' "$*"; }
fail() { printf 'smoke: FAILED: %s\n' "$*" >&2; exit 1; }

[ -x "$PYTHON" ] || fail "no python at $PYTHON (set PYTHON=)"

# --- names and secrets of this run ------------------------------------------------------------
run_id="$(date +%s)_$$"
db_name="smoke_mp_${run_id}"
db_user="smoke_mp_${run_id}"
db_password=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')
work=$(mktemp -d -t memoryplatform-smoke.XXXXXX)
pids=()

cleanup() {
  local rc=$?
  set +e
  # TERM first (gunicorn and Celery shut down gracefully), KILL what is left after 20 s.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      log "process $pid did not stop, killing it"
      kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
  done
  if [ "$rc" -ne 0 ]; then
    for f in "$work"/*.log; do
      [ -s "$f" ] || continue
      printf '\n--- last lines of %s\n' "$(basename "$f")" >&2
      tail -n 40 "$f" >&2
    done
  fi
  "${MYSQL[@]}" -e "DROP DATABASE IF EXISTS \`$db_name\`; DROP DATABASE IF EXISTS \`${db_name}_r\`;
    DROP USER IF EXISTS '$db_user'@'127.0.0.1';" \
    || echo "smoke: could not drop database $db_name / user $db_user" >&2
  redis-cli -u "$REDIS_URL" flushdb >/dev/null 2>&1
  rm -rf "$work"
  if [ "$rc" -eq 0 ]; then
    log "passed in $(( $(date +%s) - started_at )) s"
  else
    echo "smoke: FAILED (exit $rc) after $(( $(date +%s) - started_at )) s" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- services (docs/deploy.md: MariaDB, Redis, RabbitMQ) ---------------------------------------
"${MYSQL[@]}" -e 'SELECT 1' >/dev/null || fail "MariaDB is not reachable with: ${MYSQL[*]}"
export REDIS_URL=${SMOKE_REDIS_URL:-redis://127.0.0.1:6379/12}
redis-cli -u "$REDIS_URL" ping >/dev/null || fail "Redis is not reachable at $REDIS_URL"
redis-cli -u "$REDIS_URL" flushdb >/dev/null
export CELERY_BROKER_URL=${SMOKE_BROKER_URL:-amqp://guest:guest@127.0.0.1:5672//}
"$PYTHON" -c 'import sys, kombu; kombu.Connection(sys.argv[1]).ensure_connection(max_retries=1)' \
  "$CELERY_BROKER_URL" 2>/dev/null || fail "the broker is not reachable at $CELERY_BROKER_URL"

# --- database and user (docs/deploy.md, "MariaDB") ----------------------------------------------
log "database $db_name, user $db_user"
"${MYSQL[@]}" <<SQL
CREATE DATABASE \`$db_name\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER '$db_user'@'127.0.0.1' IDENTIFIED BY '$db_password';
GRANT ALL PRIVILEGES ON \`$db_name\`.* TO '$db_user'@'127.0.0.1';
SQL

# --- the production environment (docs/deploy.md, "Environment") --------------------------------
export DJANGO_SETTINGS_MODULE=memoryplatform.settings.production
SECRET_KEY=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(64))')
export SECRET_KEY
export DATABASE_URL="mysql://$db_user:$db_password@127.0.0.1:3306/$db_name"
export ALLOWED_HOSTS=127.0.0.1,localhost
export CSRF_TRUSTED_ORIGINS=https://127.0.0.1
export DATA_DIR="$work/data"
export PROMETHEUS_MULTIPROC_DIR="$work/prometheus"
export LOG_FORMAT=json
mkdir -p "$DATA_DIR" "$PROMETHEUS_MULTIPROC_DIR"

log "migrate"
"$PYTHON" manage.py migrate --noinput -v0 >"$work/migrate.log" 2>&1 || fail "migrate"
log "warm_up"
"$PYTHON" manage.py warm_up >"$work/warm_up.log" 2>&1 || fail "warm_up"
log "collectstatic"
"$PYTHON" manage.py collectstatic --noinput -v0 >"$work/collectstatic.log" 2>&1 \
  || fail "collectstatic"
log "check --deploy --fail-level WARNING"
"$PYTHON" manage.py check --deploy --fail-level WARNING >"$work/check.log" 2>&1 \
  || { cat "$work/check.log" >&2; fail "check --deploy is not clean"; }
creds=$("$PYTHON" manage.py create_api_key --team smoke --json 2>"$work/create_api_key.log") \
  || fail "create_api_key"
SMOKE_API_KEY=$(printf '%s' "$creds" | tail -n 1 | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["api_key"])')
SMOKE_SECRET=$(printf '%s' "$creds" | tail -n 1 | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["secret"])')
export SMOKE_API_KEY SMOKE_SECRET

# --- processes: two gunicorn, one Celery worker for every queue ---------------------------------
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port_a=$(free_port)
port_b=$(free_port)
for port in "$port_a" "$port_b"; do
  "$PYTHON" -m gunicorn memoryplatform.wsgi -w 1 -b "127.0.0.1:$port" --timeout 60 \
    --graceful-timeout 20 >"$work/gunicorn-$port.log" 2>&1 &
  pids+=("$!")
done
port_w=$(free_port)
# Its own /metrics too (a host with workers only); its pool process counts through the shared
# directory, so the web's page and its own both show its jobs.
WORKER_METRICS_BIND="127.0.0.1:$port_w" \
  "$PYTHON" -m celery -A memoryplatform worker -Q celery,llm,maintenance -c 1 -l info \
  >"$work/worker.log" 2>&1 &
pids+=("$!")

log "waiting for gunicorn on ports $port_a and $port_b"
for port in "$port_a" "$port_b"; do
  for i in $(seq 1 120); do
    # /health is exempt from the HTTPS redirect: what a load balancer probes.
    if "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
      "http://127.0.0.1:$port/health" 2>/dev/null; then
      break
    fi
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || fail "process $pid exited early"; done
    [ "$i" -eq 120 ] && fail "gunicorn on port $port did not answer /health in 60 s"
    sleep 0.5
  done
done

"$PYTHON" deploy/smoke_client.py "http://127.0.0.1:$port_a" "http://127.0.0.1:$port_b" \
  "http://127.0.0.1:$port_w"

for pid in "${pids[@]:0:2}"; do
  for child in $(pgrep -P "$pid"); do
    log "gunicorn worker $child: $(( $(ps -o rss= -p "$child") / 1024 )) MB resident"
  done
done

# --- backup and restore (docs/deploy.md, "Backup and restore") ---------------------------------
log "mysqldump --single-transaction as the application's user, restored into a second database"
MYSQL_PWD="$db_password" mysqldump -h 127.0.0.1 -u "$db_user" --single-transaction --no-tablespaces \
  --routines --triggers --hex-blob --default-character-set=utf8mb4 "$db_name" >"$work/backup.sql" \
  2>"$work/mysqldump.log" || fail "mysqldump"
"${MYSQL[@]}" -e "CREATE DATABASE \`${db_name}_r\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
"${MYSQL[@]}" --default-character-set=utf8mb4 "${db_name}_r" <"$work/backup.sql" \
  || fail "restoring the dump"
count() { "${MYSQL[@]}" -N -e "SELECT COUNT(*) FROM \`$1\`.memories_memory"; }
[ "$(count "$db_name")" -ge 2 ] && [ "$(count "$db_name")" = "$(count "${db_name}_r")" ] \
  || fail "the restored database does not hold the same memories"
