"""prober: a black-box conformance and drift prober for LLM APIs."""

__version__ = "0.1.0"
