# kctl: make setup | demo | test | test-long | test-matrix | bench | drills | swarm-check (test = lint, unit, package, integration)
SHELL := /bin/bash
VENV := .venv
KCTL := $(VENV)/bin/kctl
PYTEST := $(VENV)/bin/pytest
export TESTCONTAINERS_RYUK_DISABLED ?= true
export DOCKER_BUILDKIT ?= 0

.PHONY: setup demo test test-long test-matrix lint unit package integration bench drills swarm-check clean architecture-graph

setup:
	@./.ci/setup-host.sh

demo: setup
	@./.ci/demo.sh

# docs/architecture.md's import graph, drawn from the code (tests/unit/test_architecture_doc.py fails when stale).
architecture-graph: setup
	$(VENV)/bin/python -m tests.graph --write docs/architecture.md

LINT := $(VENV)/bin/ruff check kctl tests && $(VENV)/bin/mypy kctl
lint: setup
	$(LINT)

# pytest exits 5 when a selection collects no tests: that is not a failure here.
# unit: no Docker, no JVM (Spark tests live in tests/integration); the slow packaging test is `make package`.
# One pytest-xdist worker per core: no test shares state with another (43 s against 71 s on two cores).
UNIT := $(PYTEST) tests/unit -q -m "not slow" -p no:cacheprovider -n auto
unit: setup
	$(UNIT) || [ $$? -eq 5 ]

# `pip install kctl` without extras in a fresh virtualenv gives a working core CLI.
PACKAGE := $(PYTEST) tests/unit -q -m slow -p no:cacheprovider
package: setup
	$(PACKAGE) || [ $$? -eq 5 ]

# TEST_WORKERS=N runs the modules on N pytest-xdist workers, a module at a time (tests/integration/conftest.py
# says why), the slowest first. On two cores one process leaves them idle about half the time (a module's
# clusters wait on each other: 55 % busy over test_restart and test_lifecycle); two workers kept them 84 % busy
# and took 26 min 18 s against 43 min 22 s serially (2026-11-27, one run each of the same tests). Three workers
# keep them about 95 % busy (each holds a session cluster: a third one): the modules took 1,111.5 s on three
# against 1,241.9 s on two in the CI runs of 2026-11-28 (1,286 s against 1,343 s on 2026-11-27), so the default
# is 3 (TEST_WORKERS=0: one process). `make integration` runs the Swarm module alone after them, since leaving a
# swarm breaks the DNS of every container running on the engine. Both runs always run; either failing fails it.
TEST_WORKERS ?= 3
INTEGRATION := $(PYTEST) -q -m "integration and not long" -p no:cacheprovider --timeout 1800 --durations=60
MODULES := $(INTEGRATION) tests/integration --ignore tests/integration/test_swarm.py -n $(TEST_WORKERS) \
  --dist loadscope --no-loadscope-reorder
SWARM := $(INTEGRATION) tests/integration/test_swarm.py
integration: setup
	rc=0; \
	$(MODULES) || [ $$? -eq 5 ] || rc=1; \
	$(SWARM) || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

# `make test` runs the Swarm module first, beside lint, unit and package, which use no Docker: nothing else runs
# on the engine then, so the swarm's leave breaks no one's DNS, and mypy and the package's pip install, one
# thread each, leave a core to it (lint, unit, package and Swarm took 104 s side by side against 131 s one after
# the other, 2026-11-28; all four at once took 114 s). Then the other modules. Every part always runs; any
# failing fails the target, and its last lines end the output again (what failed and pytest's FAILED lines):
# a reader of the output's tail, as a CI page shows it, sees which part failed and why.
SUMMARY := grep -E '^(FAILED|ERROR) |^(Found|error:)|^ *--> |^[A-Z]+[0-9]+ |[0-9]+ (passed|failed|errors?)\b| error: '
test: setup
	@d=$$(mktemp -d); failed=""; \
	( $(SWARM) || [ $$? -eq 5 ] ) > $$d/swarm 2>&1 & swarm=$$!; \
	( set -x; $(LINT) ) 2>&1 | tee $$d/lint; [ $${PIPESTATUS[0]} -eq 0 ] || failed="$$failed lint"; \
	( set -x; $(UNIT) || [ $$? -eq 5 ] ) 2>&1 | tee $$d/unit; [ $${PIPESTATUS[0]} -eq 0 ] || failed="$$failed unit"; \
	( set -x; $(PACKAGE) || [ $$? -eq 5 ] ) 2>&1 | tee $$d/package; [ $${PIPESTATUS[0]} -eq 0 ] || failed="$$failed package"; \
	wait $$swarm || failed="$$failed swarm"; echo "+ the Swarm module, run beside lint, unit and package:"; cat $$d/swarm; \
	( set -x; $(MODULES) || [ $$? -eq 5 ] ) 2>&1 | tee $$d/integration; \
	[ $${PIPESTATUS[0]} -eq 0 ] || failed="$$failed integration"; \
	for part in $$failed; do echo "== make test: $$part failed:"; $(SUMMARY) $$d/$$part | tail -n 12; done; \
	rm -rf $$d; [ -z "$$failed" ] && echo "== make test: lint, unit, package, swarm and integration passed"; \
	[ -z "$$failed" ]

# The secured profile is a spec switch: every ops test on the plain and on one shared secured cluster
# (`make integration` runs the tests marked both_profiles on both, the rest on the plain one).
OPS_TESTS := tests/integration/test_ops_clients.py tests/integration/test_ops_configs.py tests/integration/test_ops_zk_topics.py
test-matrix: setup
	KCTL_MATRIX=1 $(PYTEST) $(OPS_TESTS) -q -m integration -p no:cacheprovider --timeout 1800 --durations=30

# The long scenarios (tests marked `long`) and the full profile matrix: what `make test` leaves out to stay
# within about 20 minutes on two cores.
# The Swarm module alone after the rest, as in `make integration` (leaving a swarm breaks the DNS of every
# container on the engine, the session's shared clusters included). Every run always runs.
LONG := $(PYTEST) -q -m "integration and long" -p no:cacheprovider --timeout 1800 --durations=30
test-long: setup
	rc=0; \
	$(LONG) tests/integration --ignore tests/integration/test_swarm.py || [ $$? -eq 5 ] || rc=1; \
	$(LONG) tests/integration/test_swarm.py || [ $$? -eq 5 ] || rc=1; \
	KCTL_MATRIX=1 $(PYTEST) $(OPS_TESTS) -q -m integration -p no:cacheprovider --timeout 1800 --durations=30 || rc=1; \
	exit $$rc

bench: setup
	$(VENV)/bin/python -m kctl.bench

# Every failure drill in its long form on a fresh cluster: docs/reliability.md and its leader-kill plot.
drills: setup
	$(VENV)/bin/python -m kctl.bench.drills

clean:
	-$(KCTL) down --volumes 2>/dev/null
	rm -rf .kctl .pytest_cache .mypy_cache .ruff_cache

# engine swarm across three Docker-in-Docker Swarm nodes (minutes; outside `make test`): docs/multi-host.md
swarm-check: setup
	flock /tmp/kctl-docker.lock $(VENV)/bin/python -m kctl.bench.swarm
