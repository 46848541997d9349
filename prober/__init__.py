"""prober: a black-box conformance and drift prober for LLM APIs."""

import os

__version__ = "0.1.0"

# prober's numpy and scipy work is on arrays of tens of values, where OpenBLAS's pool (a thread per
# core, started when numpy loads) only spins: 0.2-0.3 CPU s of every `prober show` on 2 cores
# (bench/history_scale.py), more on more cores. One thread unless the environment says otherwise;
# set before anything imports numpy (every prober module is under this package). The processes
# prober starts inherit it: llama-server's default build (prober/local/build.py) uses no BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
