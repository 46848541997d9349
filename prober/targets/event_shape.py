"""An event's JSON text with its streamed string left out: two events with the same shape differ only
in that string.

A stream's deltas are one JSON text repeated with a different piece of output each time
(`"content":"..."` in OpenAI chunks, `"text":"..."` in Anthropic text deltas). The conformance
check validates one of them against the SDK type and reuses the verdict for the rest of the same
shape (prober/targets/conformance.py): a 20-token OpenAI stream then costs 4-5 validations (the
role chunk, one delta, the finish and usage chunks), not 23.

Why the verdict carries over. The shape is the text before and after the value of the first
`"<key>":"` that follows `{` or `,`, kept only when the value is a JSON string no parser can
refuse. Say A validated and B has A's shape: B = prefix + b + suffix, A = prefix + a + suffix.
- In a valid JSON text a `"` right after `{` or `,` opens a string: were the `{` or `,` inside a
  string, that quote would close it, and a string followed by `<key>` is not JSON. Opened after
  `{` or `,` and followed by `:`, it is an object key, here exactly `<key>`, whose value starts at
  the next `"`: `a` is that key's string value.
- B reads exactly as A through the prefix, then a complete string token (`b` stops before an
  unescaped `"`, and the suffix starts with that quote), then exactly as A again. So B is valid
  JSON of the same structure, with another string in that one place.
- The SDK types declare every `content` and `text` string as a plain `str` (no pattern, length
  or literal), so any string there is as good as A's.
A value with an escape or character some parser might refuse (a control character, an unknown
escape, a surrogate) gets no shape, and its event is validated in full.
"""

from __future__ import annotations

import re

# A JSON string's body up to (not including) its closing quote: printable characters other than
# `"` and `\`, no surrogate code point, and only the escapes JSON defines, none of them a surrogate.
_STRING_BODY = re.compile(r'(?:[^"\\\x00-\x1f\ud800-\udfff]|\\["\\/bfnrt]|\\u(?![dD][89a-fA-F])[0-9a-fA-F]{4})*"')


def event_shape(text: str, key: str) -> tuple[str, str] | None:
    """(the text before the value of `"<key>":"`, the text from its closing quote on), or None
    when the event has no such value the argument above covers."""
    opening = f'"{key}":"'
    at = text.find(opening)
    if at <= 0 or text[at - 1] not in "{,":
        return None
    start = at + len(opening)
    body = _STRING_BODY.match(text, start)
    if body is None:
        return None
    end = body.end() - 1            # the closing quote stays in the suffix
    return text[:start], text[end:]
