"""Verdicts: SLO evaluation, drift tests against comparable baseline runs, the alert lifecycle,
alert destinations (sinks) and the alerting drill. It never imports the runner, the command layer
or prober/reports/ (tests/test_layers.py checks)."""
