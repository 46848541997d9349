"""The floor every layer stands on: records, configuration, statistics, errors, redaction and the
small text helpers. It imports nothing else of the project (tests/test_layers.py checks)."""
