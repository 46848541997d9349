"""The command layer's orchestration, for the commands whose steps span layers: `prober run` runs a
suite, then judges and delivers. Only prober/commands/cli.py and this package import the runner
(tests/test_layers.py checks)."""
