"""A target's base_url, checked when the config is loaded: a URL the transport cannot use must be a
configuration error (exit 2) naming the key, not a traceback when the first request is built."""

from __future__ import annotations

from urllib.parse import urlsplit


def check_base_url(url: str) -> str:
    """`url` unchanged if it is http(s) with a host and a valid port; ValueError saying what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port          # parses the port: out of range or not a number raises
    except ValueError as exc:      # also a malformed IPv6 literal ("Invalid IPv6 URL")
        raise ValueError(f"{url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: the scheme must be http or https, not {parts.scheme or 'missing'!r}")
    if not parts.hostname:
        raise ValueError(f"{url!r}: no host")
    if port == 0:
        raise ValueError(f"{url!r}: port 0 is not a port a server listens on")
    return url
