"""The run shell: runs a suite against its targets (runner, the resources a run holds and its final
status, sessions, budget, retries, lease, loop lag, progress, the sample-writer process)."""
