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

.PHONY: run test lint typecheck bench install migrate worker beat clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

migrate: install
	$(PY) manage.py migrate --noinput

## run: embedded default (SQLite, in-process jobs, offline models) on http://127.0.0.1:8000
run: migrate
	$(PY) manage.py bootstrap_demo
	$(PY) manage.py load_demo_data --team demo
	$(PY) manage.py runserver $(HOST):$(PORT)

## test: the whole suite (SQLite by default; set DATABASE_URL / REDIS_URL for MariaDB + Redis)
test: install
	$(PY) -m pytest -q

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
