# The two commands the README starts with:
#   make demo   install, start the local llama-server, run the latency suite against it, print the metrics
#   make test   install everything the tests need (PostgreSQL, llama-server, the model) and run them
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PROBER := $(VENV)/bin/prober
export PROBER_CACHE_DIR ?= $(HOME)/.cache/prober

.PHONY: install system-deps local-endpoint demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

system-deps:
	bash scripts/install-system-deps.sh

local-endpoint: install
	$(PROBER) local install

# The local model shares 2 CPU cores with the client, so the demo sweeps a shorter range than the
# suite's default (1..32): enough to see queueing set in past llama-server's 4 default slots.
demo: install
	$(PROBER) local start
	$(PROBER) run --suite latency --target local --param 'levels=[1, 2, 4, 8]' --param requests_per_level=16

test: system-deps local-endpoint
	$(PY) -m pytest -q -p no:cacheprovider

bench: install
	$(PY) bench/ttft_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info
