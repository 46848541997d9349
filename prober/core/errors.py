"""User-facing errors. Endpoint failures are never exceptions: they are samples with an error type."""


class ProberError(Exception):
    """An error shown to the user as one line, without a traceback."""

    exit_code = 2


class ConfigError(ProberError):
    """Bad configuration, unknown suite or target, missing API key: exit code 2."""

    exit_code = 2

