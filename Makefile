# The two commands the README starts with:
#   make demo   install the runtime dependencies only, build and start the local llama-server, run the
#               nightly suite (every suite, demo-sized) against it, write the HTML report, print its
#               path and what each phase cost (scripts/demo_phases.py)
#   make test   install everything the tests need (PostgreSQL, llama-server, the model) and run them
#   make test-fast  the edit-test loop: the `unit` and `emulator` tiers, needing nothing but `make install`
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PROBER := $(VENV)/bin/prober
export PROBER_CACHE_DIR ?= $(HOME)/.cache/prober

.PHONY: install runtime-install lock system-deps local-endpoint gateway demo test test-fast lint typecheck bench clean

# The versions CI tests with: requirements/ci.lock pins llm-prober[test] for Python 3.11 on linux x86-64
# (with hashes), so a run resolves nothing fresh; the project itself goes in on top, without deps.
# `pip check` fails the install when pyproject.toml asks for something the lock lacks (run `make lock`).
LOCK := requirements/ci.lock
# What `make demo` installs: prober's runtime dependencies alone (no extra: no mypy, ruff, pandas,
# statsmodels, pyarrow, pytest or stubs), pinned to the CI lock's versions by `make lock`.
RUNTIME_LOCK := requirements/runtime.lock

install: $(VENV)/.installed

runtime-install: $(VENV)/.runtime

# One lock into the venv, then the project on top without deps: $(call install_lock,LOCKFILE).
define install_lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r $(1)
	# The distribution was called prober until it became llm-prober: a venv or a tree with the old
	# metadata registers every probe twice (prober/core/probe_registry.py refuses that).
	$(PY) -m pip uninstall --quiet --yes prober
	rm -rf prober.egg-info
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m pip check
endef

# The full install satisfies the runtime one too, so it marks both done.
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(call install_lock,$(LOCK))
	touch $@ $(VENV)/.runtime

$(VENV)/.runtime: pyproject.toml $(RUNTIME_LOCK)
	$(call install_lock,$(RUNTIME_LOCK))
	touch $@

# Re-resolve the lock to the newest versions pyproject.toml allows (uv runs from the venv, not CI's deps);
# the runtime lock is then the CI lock's subset without the extras (-c: the same versions).
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --generate-hashes --quiet
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(VENV)/bin/uv pip compile pyproject.toml --extra test $(LOCK_TARGET) --upgrade -o $(LOCK)
	$(VENV)/bin/uv pip compile pyproject.toml -c $(LOCK) $(LOCK_TARGET) -o $(RUNTIME_LOCK)

system-deps:
	bash scripts/install-system-deps.sh

# LiteLLM's proxy for the gateway test (tests/gateway/), into a venv of its own under the cache,
# from requirements/litellm-lock.txt (hashes, nothing resolved); skipped when it is already there.
gateway:
	bash scripts/install-gateway.sh

# Builds llama-server with portable flags (only the server target) and smoke-tests it before caching.
local-endpoint: runtime-install
	bash scripts/install-build-deps.sh
	$(PROBER) local install

# The local model shares 2 CPU cores with the client, so the demo config shadows each built-in suite
# with a smaller grid (examples/local-demo/suites); the nightly suite itself is the built-in one.
# `prober run` exits 1 when an SLO or drift alert fires: the demo still writes the report then.
# Each phase is timed on its own (wall, CPU seconds with llama-server's own, peak memory) and the
# table printed at the end; docs/measurements.md keeps the figures. The model is unpacked before the
# build because the build's smoke test needs it (so `prober local install` then only builds). The
# demo stops the llama-server it started last, so that no later `prober run` probes it unawares.
DEMO_CONFIG := examples/local-demo/prober.toml
demo:
	$(PYTHON) scripts/demo_phases.py --server-state "$(PROBER_CACHE_DIR)/llama-server-8080.json" \
	    "install=make --no-print-directory runtime-install VENV=$(VENV) PYTHON=$(PYTHON)" \
	    "build tools=bash scripts/install-build-deps.sh" \
	    "model=$(PY) -c 'from prober.local.server import model_path; print(model_path())'" \
	    "build=$(PROBER) local install" \
	    "server start=$(PROBER) local start" \
	    "run:0,1=$(PROBER) run --config $(DEMO_CONFIG) --suite nightly --target local" \
	    "report=$(PROBER) report --config $(DEMO_CONFIG) --out prober-reports" \
	    "server stop=$(PROBER) local stop"

test: install system-deps local-endpoint gateway
	$(NO_RECOMPILE) $(PY) -m pytest -q -p no:cacheprovider

# No apt, no llama-server build, no PostgreSQL: tests/conftest.py describes the tiers. Everything but
# the timing tests runs on every core (pytest-xdist) at niceness 19; the timing tests run beside it,
# one at a time, at normal priority, so that the rest takes only the cores they leave idle while
# they wait (scripts/test_fast.py says why that is no load their bounds must absorb).
FAST := unit or emulator
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): every
# `prober` command, sample writer and xdist worker a test run starts would otherwise compile the
# project, and pytest rewrite the test modules, from source again (about 0.1 s and 4 s of CPU each).
NO_RECOMPILE := PYTHONDONTWRITEBYTECODE=
# Twice as many workers as cores: a fifth of these tests' time is spent waiting (a lease to expire,
# a stall to time out, a TTL), and another worker's test uses the core meanwhile. --dist worksteal
# keeps the tests of one shared fixture on one worker (tests/conftest.py).
FAST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))
# The timing tests' run collects only the files that can hold one (a timing test is marked through
# tests/support/timing.py or pytest.mark.timing, so its file names either): collecting all of them
# to select 19 tests took 5 s of that run's wall time. With no such file it would collect them all.
TIMING_FILES = $(shell grep -rlE 'timing_sensitive|mark\.timing' tests --include='test_*.py')
test-fast: install
	$(NO_RECOMPILE) $(PY) scripts/test_fast.py $(FAST_WORKERS) "$(FAST)" $(TIMING_FILES)

# The gates .ci/run passes before the tests: ruff's rule set and mypy's strict mode, both configured
# in pyproject.toml (where the excluded rules say why). They need only the test extra.
lint: install
	$(VENV)/bin/ruff check .

typecheck: install
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/ttft_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info
