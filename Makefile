# memeval: `make run` starts the site on the embedded default; `make test` runs lint, types and the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Everything is installed from the lock (exact versions and hashes); `make lock` remakes it from the ranges.
LOCK := requirements-dev.lock
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform linux --custom-compile-command "make lock" --quiet
# llama-cpp-python compiles from source; the native build uses AMX instructions that crash here.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF
PORT ?= 8000

.PHONY: run test test-fast lint typecheck lock system-deps demo clean bench

$(BIN)/.installed: $(LOCK)
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "memeval needs Python 3.11+"'
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip wheel
	@echo "Installing dependencies (first time ~6-10 min: llama-cpp-python compiles llama.cpp from source)"
	$(BIN)/pip install --require-hashes -r $(LOCK)
	touch $@

lock: $(BIN)/.installed  ## re-resolve requirements.txt and requirements-dev.txt into the two lock files
	$(BIN)/uv pip compile requirements.txt $(LOCK_FLAGS) -o requirements.lock
	$(BIN)/uv pip compile requirements-dev.txt -c requirements.lock $(LOCK_FLAGS) -o $(LOCK)

system-deps:  ## PostgreSQL, Redis, Chromium and libfaketime for the test suite (apt; skipped when present)
	bash scripts/system-deps.sh

run: $(BIN)/.installed  ## SQLite + in-memory channel layer + eager Celery + local SmolLM2
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py runserver 0.0.0.0:$(PORT)

test: system-deps $(BIN)/.installed lint typecheck  ## ruff, mypy, the SQLite suite, then the PostgreSQL + Redis suite
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python -m pytest -m "not postgres"
	bash scripts/with-services.sh $(BIN)/python -m pytest -m postgres

test-fast: $(BIN)/.installed  ## skip the browser and real-model tests
	$(BIN)/python -m pytest -m "not postgres and not browser and not llm"

lint: $(BIN)/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

typecheck: $(BIN)/.installed  ## mypy (strict, django-stubs) on the production code; settings in pyproject.toml
	$(BIN)/mypy

bench: $(BIN)/.installed
	@ls bench/*.py

clean:
	rm -rf $(VENV) db.sqlite3 staticfiles .pytest_cache .mypy_cache .ruff_cache
