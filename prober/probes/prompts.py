"""Prompt text shared by probe families: filler of a chosen length and cache-busting nonces."""

from __future__ import annotations

import secrets

# Common English words: most are one token in the usual BPE vocabularies, so a filler of n words
# is close to n tokens. Exact counts come back in the usage fields anyway.
_WORDS = (
    "the quick brown fox jumps over a lazy dog while river water runs past old stone walls "
    "near green hills where people walk every morning and talk about weather music books "
    "food travel work family games news history science art cities gardens trains ships"
).split()


def filler_words(n_tokens: int, offset: int = 0) -> str:
    """About `n_tokens` tokens of plain prose, deterministic for a given offset."""
    if n_tokens <= 0:
        return ""
    return " ".join(_WORDS[(offset + i) % len(_WORDS)] for i in range(n_tokens))


def nonce() -> str:
    """A short random marker placed at the very start of a prompt, so no prefix cache can match it."""
    return secrets.token_hex(6)
