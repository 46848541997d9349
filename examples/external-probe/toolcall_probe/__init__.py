"""A tool-call conformance probe for prober, shipped as a plugin (see README.md)."""
