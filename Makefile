# kctl: make setup | demo | test | test-long | test-matrix | bench | drills | swarm-check (test = lint, unit, package, integration)
SHELL := /bin/bash
VENV := .venv
KCTL := $(VENV)/bin/kctl
PYTEST := $(VENV)/bin/pytest
export TESTCONTAINERS_RYUK_DISABLED ?= true
export DOCKER_BUILDKIT ?= 0

.PHONY: setup demo test test-long test-matrix lint unit package integration bench drills swarm-check clean

setup:
	@./.ci/setup-host.sh

demo: setup
	@./.ci/demo.sh

lint: setup
	$(VENV)/bin/ruff check kctl tests
	$(VENV)/bin/mypy kctl

# pytest exits 5 when a selection collects no tests: that is not a failure here.
# unit: no Docker, no JVM (Spark tests live in tests/integration); the slow packaging test is `make package`.
# One pytest-xdist worker per core: no test shares state with another (43 s against 71 s on two cores).
unit: setup
	$(PYTEST) tests/unit -q -m "not slow" -p no:cacheprovider -n auto || [ $$? -eq 5 ]

# `pip install kctl` without extras in a fresh virtualenv gives a working core CLI.
package: setup
	$(PYTEST) tests/unit -q -m slow -p no:cacheprovider || [ $$? -eq 5 ]

# TEST_WORKERS=N runs the modules on N pytest-xdist workers, a module at a time (tests/integration/conftest.py
# says why), the slowest first. On two cores one process leaves them idle about half the time (a module's
# clusters wait on each other: 55 % busy over test_restart and test_lifecycle); two workers keep them 84 % busy
# and took 26 min 18 s against 43 min 22 s serially (2026-11-27, one run each of the same tests); three workers
# took 1,286 s against two's 1,343 s (95 % busy against 80 %, a third session cluster), so the default is 2
# (TEST_WORKERS=0: one process). Then the Swarm module alone, since leaving a swarm breaks the DNS of every
# container running on the engine. Both runs always run; either failing fails the target.
TEST_WORKERS ?= 2
INTEGRATION := $(PYTEST) -q -m "integration and not long" -p no:cacheprovider --timeout 1800 --durations=60
integration: setup
	rc=0; \
	$(INTEGRATION) tests/integration --ignore tests/integration/test_swarm.py -n $(TEST_WORKERS) --dist loadscope \
	  --no-loadscope-reorder || [ $$? -eq 5 ] || rc=1; \
	$(INTEGRATION) tests/integration/test_swarm.py || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

test: lint unit package integration

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
