# The README's commands. `make run` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8000
# The mysql extra needs libmysqlclient headers; install it only when MariaDB/MySQL is used.
EXTRAS ?= dev$(if $(findstring mysql,$(DATABASE_URL)),$(comma)mysql,)
comma := ,
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)-$(subst $(comma),_,$(EXTRAS))

.PHONY: run dev test test-milvus lint typecheck bench install migrate demo worker beat clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

migrate: install
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py bootstrap_demo --url http://$(HOST):$(PORT)
	$(PY) manage.py load_demo_data --team demo

## run: embedded default (SQLite, in-process jobs, offline models) on http://127.0.0.1:8000,
## served by gunicorn (one process, threads: the embedded cache and job thread are per process)
run: demo
	DJANGO_SETTINGS_MODULE=memoryplatform.settings.base $(VENV)/bin/gunicorn memoryplatform.wsgi \
	  --bind $(HOST):$(PORT) --workers 1 --worker-class gthread --threads 8 --timeout 120 \
	  --access-logfile -

## dev: the same with Django's development server, reloading on code changes
dev: demo
	$(PY) manage.py runserver $(HOST):$(PORT)

## test: the whole suite (SQLite by default; set DATABASE_URL / REDIS_URL for MariaDB + Redis)
test: install
	$(PY) -m pytest -q

## test-milvus: the memories and search tests again on the milvus backend (milvus-lite per test)
MILVUS_SUITE := tests/test_search_*.py tests/test_tiers.py tests/test_memory_batch.py \
	tests/test_memory_reading.py tests/test_archive_search.py tests/test_dedup_fidelity.py \
	tests/test_index_change_order.py tests/test_memories_api.py tests/test_recall_timeout.py \
	tests/test_memory_maintenance.py tests/test_mcp.py tests/test_console_review.py \
	tests/test_reference_client_flows.py tests/test_client_live.py
test-milvus: install
	SEARCH_BACKEND=milvus $(PY) -m pytest -q $(MILVUS_SUITE)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	# PYTHONPATH=.: the layer contract is checked on this checkout's packages.
	PYTHONPATH=. $(VENV)/bin/lint-imports

typecheck: install
	$(VENV)/bin/mypy .

bench: install
	@echo "see docs/benchmarks.md for the benchmark commands"

worker: install
	$(VENV)/bin/celery -A memoryplatform worker -l info -Q celery,llm,maintenance

beat: install
	$(VENV)/bin/celery -A memoryplatform beat -l info

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
