# kctl: make setup | demo | test | bench
SHELL := /bin/bash
VENV := .venv
KCTL := $(VENV)/bin/kctl
PYTEST := $(VENV)/bin/pytest
export TESTCONTAINERS_RYUK_DISABLED ?= true
export DOCKER_BUILDKIT ?= 0

.PHONY: setup demo test lint unit integration bench clean

setup:
	@./.ci/setup-host.sh

demo: setup
	@./.ci/demo.sh

lint: setup
	$(VENV)/bin/ruff check kctl tests
	$(VENV)/bin/mypy kctl

# pytest exits 5 when a selection collects no tests: that is not a failure here.
unit: setup
	$(PYTEST) tests/unit -q -p no:cacheprovider || [ $$? -eq 5 ]

integration: setup
	$(PYTEST) tests/integration -q -m integration -p no:cacheprovider --timeout 1800 || [ $$? -eq 5 ]

test: lint unit integration

bench: setup
	$(VENV)/bin/python -m kctl.bench

clean:
	-$(KCTL) down --volumes 2>/dev/null
	rm -rf .kctl .pytest_cache .mypy_cache .ruff_cache
