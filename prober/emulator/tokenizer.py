"""The emulator's one tokenizer, and the deterministic pseudo-text it answers with.

A token is a run of word characters or one punctuation mark, with any whitespace before it
attached. The same rule counts input tokens, answers count_tokens and counts output, and every
generated token re-tokenizes to exactly one token, so all three counts agree.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])")
_SYLLABLES = ("ka", "lo", "mi", "ra", "te", "su", "no", "vi", "de", "pa", "ri", "zo", "ne", "ta",
              "lu", "be", "ko", "sa", "fi", "mo")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return sum(1 for _ in _TOKEN.finditer(text))


@functools.lru_cache(maxsize=4096)   # probes send the same prompts over and over
def pseudo_text(prompt: str, n_tokens: int, seed: int) -> tuple[str, ...]:
    """`n_tokens` tokens of sentence-like pseudo-words derived from the prompt.

    Same prompt and seed, same tokens. The answer ends with a full stop; a request cut short by
    max_tokens gets a prefix of it.
    """
    rng = random.Random(int.from_bytes(hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()[:16], "big"))
    tokens: list[str] = []
    sentence_start = True
    for i in range(n_tokens):
        if i == n_tokens - 1 and i > 0:
            tokens.append(".")
            break
        punctuate = rng.random()    # drawn every time, so answers of different lengths share a prefix
        if 0 < i < n_tokens - 2 and not sentence_start and punctuate < 0.12:
            mark = "." if punctuate < 0.06 else ","
            tokens.append(mark)
            sentence_start = mark == "."
            continue
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))
        if sentence_start:
            word = word.capitalize()
        tokens.append(word if i == 0 else " " + word)
        sentence_start = False
    return tuple(tokens)
