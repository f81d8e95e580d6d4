# The two commands of the README: `make serve` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# The session page's chart library, built from the pinned npm lock file (see web/).
VIEW_ASSETS := client/sessionlog/view/vendor/uPlot.iife.min.js
# The compiled build (setup.py, scripts/build_compiled.sh): its own venv, never in place;
# built again when anything the wheel is made of changes.
COMPILED_VENV ?= .venv-compiled
COMPILED_STAMP := $(COMPILED_VENV)/.built
COMPILED_SOURCES := setup.py pyproject.toml scripts/build_compiled.sh scripts/build_compiled_wheel.sh \
	$(shell find client/sessionlog server/sessionlog_server migrations -type f -not -name '*.pyc')

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

test: lint typecheck pytest tstest test-compiled  ## Lint, type-check and run the whole suite (Python on both builds, TypeScript) on SQLite and PostgreSQL

lint: $(STAMP)
	$(VENV)/bin/ruff check client server tests migrations scripts bench
	$(VENV)/bin/ruff format --check client server tests migrations scripts bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Most of the suite waits (on child processes, servers, fsync), so it runs in PYTEST_WORKERS
# processes (pytest-xdist); each has its own PostgreSQL database and SQLite files (tests/conftest.py).
# A worker that runs out of tests takes some of another's (worksteal): with each worker's share
# fixed up front (xdist's default), the run waited at its end on a worker left with the long
# ones (the ping policy's 50 s, the bench smokes' 37-42 s): 330-333 s against 308-309.
PYTEST_WORKERS ?= 3
PYTEST_XDIST = -n $(PYTEST_WORKERS) --dist worksteal
# The suite starts ~600 processes (CLI commands, servers, their workers), each loading the
# repository's modules. Where PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines
# and in many container images) none of them caches what it compiles, so each compiled the
# sources again: the suite took 409 s (640 s of CPU) without the caches, 387 s (592 s) with
# them, one run each. compileall writes them whatever that setting; one whose source changed
# since is not used.
BYTECODE_CACHES = $(PY) -m compileall -q -j 0 client/sessionlog server/sessionlog_server bench tests migrations >/dev/null

pytest: $(STAMP) $(VIEW_ASSETS)
	bash scripts/check_pure_tree.sh
	bash scripts/ensure_postgres.sh
	bash scripts/ensure_chromium.sh
	$(BYTECODE_CACHES)
	$(VENV)/bin/pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

tstest: $(STAMP)  ## The TypeScript client: npm ci, generate and build from proto/, node tests against real servers
	bash scripts/ensure_postgres.sh
	cd client/typescript && npm ci --no-audit --no-fund && npm run build \
		&& SESSIONLOG_PYTHON=$(abspath $(PY)) npm test

$(COMPILED_STAMP): $(STAMP) $(VIEW_ASSETS) $(COMPILED_SOURCES)
	BUILD_PYTHON=$(PY) bash scripts/build_compiled.sh $(COMPILED_VENV)
	touch $@

compiled: $(COMPILED_STAMP)  ## The compiled build (mypyc): what the image runs and `make bench` measures, in $(COMPILED_VENV)

test-compiled: $(COMPILED_STAMP)  ## The Python suite on the compiled build (part of `make test`)
	bash scripts/ensure_postgres.sh
	bash scripts/ensure_chromium.sh
	$(BYTECODE_CACHES)
	SESSIONLOG_TEST_BUILD=compiled $(COMPILED_VENV)/bin/pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

# The servers under test run the compiled build, as the image does; to measure the interpreted
# code instead: make bench SESSIONLOG_BENCH_SERVER_PYTHON=.venv/bin/python
SESSIONLOG_BENCH_SERVER_PYTHON ?= $(COMPILED_VENV)/bin/python
bench: $(STAMP) $(COMPILED_STAMP)  ## sessionlog and its peers on SQLite and PostgreSQL (see bench/README.md)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[bench]"
	bash scripts/ensure_postgres.sh
	SESSIONLOG_BENCH_SERVER_PYTHON=$(SESSIONLOG_BENCH_SERVER_PYTHON) $(PY) -m bench $(BENCH_ARGS)

proto: $(STAMP)  ## Regenerate client/sessionlog/v1 from proto/
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) $(COMPILED_VENV) build var .pytest_cache .mypy_cache .ruff_cache client/typescript/node_modules client/typescript/build
