"""The run shell: runs a suite against its targets (runner, sessions, budget, retries, lease,
loop lag, progress, the sample-writer process)."""
