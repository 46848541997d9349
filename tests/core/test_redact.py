"""prober/core/redact.py and prober/core/controlchars.py on canned text: what is masked, what is left
alone, and why (the end-to-end checks are in test_hostile_endpoint.py)."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from prober.core.config import load_config
from prober.core.controlchars import escape_controls
from prober.core.errors import ConfigError
from prober.core.redact import MASK, MIN_SECRET_CHARS, Redactor, is_credential_header
from tests.support.cli import prober

pytestmark = pytest.mark.unit

KEY = "sk-proj-Abc123/Def+456=xyz\"q"


def test_every_spelling_of_a_secret_is_masked():
    redactor = Redactor([KEY])
    for spelled in (KEY, json.dumps(KEY)[1:-1], quote(KEY, safe=""), repr(KEY)[1:-1]):
        assert redactor.text(f"Incorrect API key provided: Bearer {spelled}.") == \
            f"Incorrect API key provided: Bearer {MASK}."


@pytest.mark.parametrize("spell", [str.upper, str.lower, str.swapcase,
                                   lambda key: key.encode().hex(), lambda key: key.encode().hex().upper()],
                         ids=["upper", "lower", "swapcase", "hex", "HEX"])
def test_case_changed_and_hex_spellings_are_masked(spell):
    redactor = Redactor([KEY])
    spelled = spell(KEY)
    assert spelled != KEY
    assert redactor.text(f"echo: {spelled}!") == f"echo: {MASK}!"


@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["standard", "url-safe"])
@pytest.mark.parametrize("before", [b"", b"x", b"xy", b"xyz", b"Basic:"])
@pytest.mark.parametrize("after", [b"", b"!", b"!?", b"!?#"])
@pytest.mark.parametrize("padded", [True, False])
def test_base64_of_a_secret_is_masked_at_every_byte_offset_and_either_alphabet(encode, before, after, padded):
    """The key inside a longer base64 string, wherever its bytes fall in the 3-byte groups."""
    redactor = Redactor([KEY])
    encoded = encode(before + KEY.encode() + after).decode()
    if not padded:
        encoded = encoded.rstrip("=")
    masked = redactor.text(f"token {encoded} end")
    assert MASK in masked
    # Any 6 characters wholly inside the key's bytes would betray part of it: a 4-character group
    # starts at a multiple of 3 bytes; the first whole group after `before` is the key's alone.
    first = (len(before) + 2) // 3 * 4
    last = (len(before) + len(KEY)) // 3 * 4
    for at in range(first, last - 6 + 1):
        assert encoded[at:at + 6] not in masked, (at, masked)


def test_a_secret_cut_by_truncation_is_masked_at_either_end():
    redactor = Redactor([KEY])
    body = f"undecodable JSON body: b'{{\"error\": \"Bearer {KEY}\"}}'"
    cut = body[:body.index(KEY) + 12]                  # the first 200 bytes ended inside the key
    assert redactor.text(cut).endswith(f"Bearer {MASK}") and KEY[:12] not in redactor.text(cut)
    tail = KEY[-10:] + " was not accepted"             # a window that starts inside the key
    assert redactor.text(tail) == f"{MASK} was not accepted"
    # Shorter than MIN_SECRET_CHARS of the key: too likely to be a coincidence.
    assert redactor.text("ends with sk-pro") == "ends with sk-pro"


def test_short_values_are_not_searched_for_in_free_text():
    short = "test"
    assert len(short) < MIN_SECRET_CHARS
    redactor = Redactor([short])
    assert redactor.secrets == ()
    assert redactor.text("a test output, unchanged") == "a test output, unchanged"


def test_values_inside_structures_are_masked_and_other_types_kept():
    redactor = Redactor([KEY])
    value = {"headers": {KEY: KEY}, "list": [1, 2.5, None, True, f"x{KEY}y"], "tuple": (KEY,)}
    assert redactor.value(value) == {"headers": {MASK: MASK}, "list": [1, 2.5, None, True, f"x{MASK}y"],
                                     "tuple": (MASK,)}
    assert Redactor().value(value) is value        # nothing configured: nothing copied


@pytest.mark.parametrize("name", ["Authorization", "x-api-key", "Ocp-Apim-Subscription-Key", "Cookie",
                                  "X-Auth-Token", "X-Client-Secret", "Proxy-Authorization"])
def test_credential_like_header_names(name):
    assert is_credential_header(name)


@pytest.mark.parametrize("name", ["content-type", "X-Team", "anthropic-version", "OpenAI-Organization"])
def test_ordinary_header_names(name):
    assert not is_credential_header(name)


def test_a_credential_header_in_the_file_is_refused_without_echoing_it(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text('[targets.a]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9"\nmodel = "m"\n'
                    'headers = { "Ocp-Apim-Subscription-Key" = "gateway-key-in-the-file" }\n')
    with pytest.raises(ConfigError, match="headers_env") as info:
        load_config(path)
    assert "gateway-key-in-the-file" not in str(info.value)


def test_an_unset_headers_env_variable_is_a_usage_error(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text('[targets.a]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9"\nmodel = "m"\n'
                    'headers_env = { "Ocp-Apim-Subscription-Key" = "PROBER_TEST_APIM_UNSET" }\n')
    done = prober("run", "--suite", "latency", "--config", str(path), cwd=tmp_path,
                  env={"PROBER_TEST_APIM_UNSET": ""})
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "targets.a.headers_env.Ocp-Apim-Subscription-Key" in lines[0] and "PROBER_TEST_APIM_UNSET" in lines[0]


def test_control_characters_are_escaped_and_ordinary_text_kept():
    hostile = "fp_\x1b]0;pwned\x07\x1b[2J\x9b\u202e"
    assert escape_controls(hostile) == "fp_\\x1b]0;pwned\\x07\\x1b[2J\\x9b\\u202e"
    assert escape_controls("a\nb\tc") == "a\\x0ab\\x09c"
    assert escape_controls("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"
    ordinary = "Grüße, 東京, 👩\u200d💻, \\ and \"quotes\""
    assert escape_controls(ordinary) == ordinary


def test_the_cli_consoles_mask_whatever_line_prints_a_secret(capsys):
    """The runner's and the drill's own lines reach the terminal through the CLI's consoles, not
    through the table helpers: the stream itself masks."""
    import secrets

    from rich.console import Console

    from prober.core.redact import RedactingStream, register

    canary = f"sk-console-canary-{secrets.token_hex(16)}"
    register([canary])
    for stderr in (False, True):
        Console(file=RedactingStream(stderr=stderr), stderr=stderr, width=200).print(
            f"target t: 401 Incorrect API key provided: Bearer {canary}", markup=False)
    captured = capsys.readouterr()
    assert canary not in captured.out + captured.err
    assert f"Bearer {MASK}" in captured.out and f"Bearer {MASK}" in captured.err
