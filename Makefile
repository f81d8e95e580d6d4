# The two commands of the README: `make serve` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: serve test lint typecheck pytest proto bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

serve: $(STAMP)  ## Run the service on the embedded SQLite default (var/sessionlog.db, 127.0.0.1:50051)
	$(VENV)/bin/sessionlog serve

test: lint typecheck pytest  ## Lint, type-check and run the whole suite on SQLite and PostgreSQL

lint: $(STAMP)
	$(VENV)/bin/ruff check client server tests migrations scripts bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	bash scripts/ensure_postgres.sh
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: $(STAMP)  ## sessionlog and its peers on SQLite and PostgreSQL (see bench/README.md)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[bench]"
	bash scripts/ensure_postgres.sh
	$(PY) -m bench $(BENCH_ARGS)

proto: $(STAMP)  ## Regenerate client/sessionlog/v1 from proto/
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
