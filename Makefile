# The two commands of the README: `make serve` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# The session page's chart library, built from the pinned npm lock file (see web/).
VIEW_ASSETS := client/sessionlog/view/vendor/uPlot.iife.min.js
# The compiled build (setup.py, scripts/build_compiled.sh): its own venv, never in place.
COMPILED_VENV ?= .venv-compiled

.PHONY: all serve test lint typecheck pytest tstest compiled test-compiled proto bench clean

# `make` alone: the venv and the session page's chart library (what `sessionlog view` needs).
all: $(STAMP) $(VIEW_ASSETS)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

$(VIEW_ASSETS): web/package-lock.json scripts/build_view_assets.sh
	bash scripts/build_view_assets.sh

serve: $(STAMP) $(VIEW_ASSETS)  ## Run the service on the embedded SQLite default (var/sessionlog.db, 127.0.0.1:50051)
	bash scripts/check_pure_tree.sh
	$(VENV)/bin/sessionlog serve

test: lint typecheck pytest tstest  ## Lint, type-check and run the whole suite (Python and TypeScript) on SQLite and PostgreSQL

lint: $(STAMP)
	$(VENV)/bin/ruff check client server tests migrations scripts bench
	$(VENV)/bin/ruff format --check client server tests migrations scripts bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Most of the suite waits (on child processes, servers, fsync), so it runs in PYTEST_WORKERS
# processes (pytest-xdist); each has its own PostgreSQL database and SQLite files (tests/conftest.py).
PYTEST_WORKERS ?= 3

pytest: $(STAMP) $(VIEW_ASSETS)
	bash scripts/check_pure_tree.sh
	bash scripts/ensure_postgres.sh
	bash scripts/ensure_chromium.sh
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

tstest: $(STAMP)  ## The TypeScript client: npm ci, generate and build from proto/, node tests against real servers
	bash scripts/ensure_postgres.sh
	cd client/typescript && npm ci --no-audit --no-fund && npm run build \
		&& SESSIONLOG_PYTHON=$(abspath $(PY)) npm test

compiled: $(STAMP) $(VIEW_ASSETS)  ## The compiled build (mypyc, experimental: not shipped) in $(COMPILED_VENV)
	BUILD_PYTHON=$(PY) bash scripts/build_compiled.sh $(COMPILED_VENV)

test-compiled: compiled  ## The Python suite on the compiled build (not in CI: see docs/architecture/compiled-build.md)
	bash scripts/ensure_postgres.sh
	bash scripts/ensure_chromium.sh
	SESSIONLOG_TEST_BUILD=compiled $(COMPILED_VENV)/bin/pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

bench: $(STAMP)  ## sessionlog and its peers on SQLite and PostgreSQL (see bench/README.md; the compiled build: SESSIONLOG_BENCH_SERVER_PYTHON)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[bench]"
	bash scripts/ensure_postgres.sh
	$(PY) -m bench $(BENCH_ARGS)

proto: $(STAMP)  ## Regenerate client/sessionlog/v1 from proto/
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) $(COMPILED_VENV) build var .pytest_cache .mypy_cache .ruff_cache client/typescript/node_modules client/typescript/build
