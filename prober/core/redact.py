"""Secret values out of every text prober stores or prints: each occurrence becomes `***`.

The secrets are the values the configuration points at (API keys, environment-sourced headers,
webhook secrets and URLs, the database password), read from the environment of the process that
loaded the configuration and registered here. The store builds every row through this module
(prober/store/rows.py) and the CLI prints through it, so a 401 body that echoes the key is masked before
anything is written, in whichever process writes it: the sample writer's child process is handed
the same secrets when it starts (prober/run/sample_writer.py).

Only values of at least `MIN_SECRET_CHARS` characters are replaced in free text. A shorter value is
likely to occur by chance: a database password "test" would turn every "test" in stored model
outputs into `***`, changing their hashes and with them the divergence metrics. Real API keys and
webhook secrets are 32 characters and more. A password inside a URL is masked by the URL's
structure (`prober.store.engine.redacted`), whatever its length.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from prober.core.config import ProberConfig

MASK = "***"
MIN_SECRET_CHARS = 8
_SCALARS = frozenset({int, float, bool, type(None)})
_SHORT_TEXT = 64   # characters: below, one regex search beats a loop of substring tests


def _spellings(secret: str) -> set[str]:
    """The ways a secret can appear in stored text: as is, JSON-escaped (an echoed request body),
    percent-encoded (a URL), as a Python repr shows it (the first bytes of an undecodable body),
    case-changed (a server that upper-cases what it echoes), hex-encoded in either case, and
    base64-encoded (an echoed Basic credential, a token that embeds the key)."""
    raw = secret.encode("utf-8", "surrogatepass")
    hexed = raw.hex()
    return {secret, json.dumps(secret)[1:-1], quote(secret, safe=""), repr(secret)[1:-1],
            secret.upper(), secret.lower(), secret.swapcase(), hexed, hexed.upper(),
            *_base64_spellings(raw)}


def _base64_spellings(raw: bytes) -> set[str]:
    """The base64 text (standard and URL-safe alphabets) that the secret's bytes alone decide,
    wherever they sit in a longer encoded string. Base64 turns 3 bytes into 4 characters, so the
    secret starts at one of three byte offsets within a group: preceded by k unknown bytes, the
    group's first 0, 2 or 3 characters (k = 0, 1, 2) and the characters after its last whole
    byte also carry bits of the neighbours, and are left out. Encoded on its own (offset 0), the
    whole text, with and without `=` padding, is a spelling too, so that it is masked whole."""
    out: set[str] = set()
    for offset, skip in ((0, 0), (1, 2), (2, 3)):
        length = offset + len(raw)
        keep = length // 3 * 4 + (0, 1, 2)[length % 3]     # characters no byte after the secret touches
        encoded = base64.b64encode(bytes(offset) + raw).decode()
        out.add(encoded[skip:keep])
        if offset == 0:
            out.update((encoded, encoded.rstrip("=")))
    return out | {form.translate(_URL_SAFE) for form in out}


_URL_SAFE = str.maketrans("+/", "-_")


def _trie_pattern(words: Iterable[str]) -> str:
    """An alternation of `words` with common prefixes factored out ("sk-a(?:nt|pi)"): Python's
    regex engine tries every branch of a flat alternation at every position, and a secret's
    spellings (hex, base64, case-changed) made that the cost of redacting a short text."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._spelled: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self._cut_pattern: re.Pattern[str] | None = None
        self._longest = 0
        self.add(secrets)

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(sorted(self._secrets))

    def add(self, secrets: Iterable[str | None]) -> None:
        new = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS} - self._secrets
        if not new:
            return
        self._secrets |= new
        spelled = {form for s in self._secrets for form in _spellings(s) if len(form) >= MIN_SECRET_CHARS}
        # Longest first, so that a spelling containing another is masked whole.
        self._spelled = sorted(spelled, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, self._spelled)))
        # A secret's first or last MIN_SECRET_CHARS characters: where a cut one may begin or end.
        ends = {end for form in self._spelled for end in (form[:MIN_SECRET_CHARS], form[-MIN_SECRET_CHARS:])}
        self._cut_pattern = re.compile(_trie_pattern(ends))
        self._longest = len(self._spelled[0])

    def text(self, text: str) -> str:
        if self._pattern is None or len(text) < MIN_SECRET_CHARS:
            return text
        # Is a secret present? A long text is asked with `in` (a fast substring search, about 20 ns
        # per spelling on 1,500 characters), where the alternation scans every character for each
        # of the spellings (about 4x slower); a short one (most of a row's strings) with one
        # search, which costs less than a Python loop over a secret's ten-odd spellings.
        if len(text) <= _SHORT_TEXT:
            present = self._pattern.search(text) is not None
        else:
            present = any(form in text for form in self._spelled)
        if present:
            text = self._pattern.sub(MASK, text)
        return self._cut_ends(text)

    def _cut_ends(self, text: str) -> str:
        """Mask a secret cut by truncation (an error body kept to its first 200 bytes ends inside
        the key): a tail that is a secret's beginning, or a head that is its end."""
        assert self._cut_pattern is not None
        window = self._longest - 1
        if len(text) <= window:
            suspect = self._cut_pattern.search(text) is not None    # both ends are the whole text
        else:
            suspect = bool(self._cut_pattern.search(text, len(text) - window)
                           or self._cut_pattern.search(text, 0, window))
        if not suspect:
            return text   # the common case: one search at each end, nothing cut there
        for secret in self._spelled:
            start = max(0, len(text) - len(secret) + 1)
            head = secret[:MIN_SECRET_CHARS]
            at = text.find(head, start)
            while at != -1:
                if secret.startswith(text[at:]):
                    text = text[:at] + MASK
                    break
                at = text.find(head, at + 1)
            tail = secret[-MIN_SECRET_CHARS:]
            at = text.find(tail, 0, len(secret) - 1)
            while at != -1:
                end = at + MIN_SECRET_CHARS
                if secret.endswith(text[:end]):
                    text = MASK + text[end:]
                    break
                at = text.find(tail, at + 1, len(secret) - 1)
        return text

    def value(self, value: Any) -> Any:
        """Strings anywhere inside dicts, lists and tuples (keys too) masked; other values as they are."""
        if self._pattern is None:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        # Exact types first: a row holds long lists of numbers (chunk offsets), skipped cheaply.
        kind = type(value)
        if kind is str or isinstance(value, str):
            return self.text(value)
        if kind is dict or isinstance(value, dict):
            return {self._walk(k): self._walk(v) for k, v in value.items()}
        if kind is list or kind is tuple or isinstance(value, (list, tuple)):
            return type(value)(v if type(v) in _SCALARS else self._walk(v) for v in value)
        return value


# The process's redactor: every command registers its configuration's secrets before it opens
# the store, and the sample writer's child registers the parent's.
_active = Redactor()


def register(secrets: Iterable[str | None]) -> None:
    _active.add(secrets)


def active_secrets() -> tuple[str, ...]:
    return _active.secrets


def redact_text(text: str) -> str:
    return _active.text(text)


def redact_value(value: Any) -> Any:
    return _active.value(value)


def _url_password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def config_secrets(config: ProberConfig) -> list[str]:
    """Every secret value the configuration names that is set in the environment; a variable that
    is unset is left to the check that needs it (which exits 2 naming it)."""
    names: list[str | None] = []
    values: list[str | None] = [_url_password(config.store.url)]
    for target in config.targets.values():
        names.append(target.api_key_env)
        names.extend(target.headers_env.values())
        values.append(_url_password(target.base_url))
    for sink in config.sinks:
        names += [sink.secret_env, sink.url_env]
        values.append(_url_password(sink.url))
    if config.store.url.startswith("postgres"):
        names.append("PGPASSWORD")   # libpq's (and psycopg's) password, for a URL without one
    values += [os.environ.get(name) for name in names if name]
    return [v for v in values if v]


def register_config(config: ProberConfig) -> None:
    register(config_secrets(config))


# Header names that carry credentials (Authorization, X-Api-Key, Ocp-Apim-Subscription-Key,
# Cookie, X-Auth-Token, ...): their values are never stored, and the config takes them only from
# the environment (headers_env).
_CREDENTIAL_HEADER = re.compile(r"key|token|auth|secret|cookie|subscription", re.IGNORECASE)


def is_credential_header(name: str) -> bool:
    return _CREDENTIAL_HEADER.search(name) is not None


class RedactingStream:
    """A text stream for the CLI's consoles: secrets masked in everything written, whatever line
    printed it (the runner's, the drill's, an error's). The stream is looked up at each write, so
    that pytest's capture and rich's own redirection (`rich_proxied_file`) keep working."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr

    @property
    def _stream(self) -> Any:
        import sys

        stream = sys.stderr if self._stderr else sys.stdout
        return getattr(stream, "rich_proxied_file", stream)

    def write(self, text: str) -> int:
        written: int = self._stream.write(redact_text(text))
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
