"""The emulator's one tokenizer, and the deterministic pseudo-text it answers with.

A token is a run of word characters or one punctuation mark, with any whitespace before it
attached. The same rule counts input tokens, answers count_tokens and counts output, and every
generated token re-tokenizes to exactly one token, so all three counts agree.
"""

from __future__ import annotations

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


def pseudo_text(prompt: str, n_tokens: int, seed: int) -> list[str]:
    """`n_tokens` tokens of sentence-like pseudo-words derived from the prompt.

    Same prompt and seed, same tokens; the answer ends with a full stop, so a shorter max_tokens
    gives a prefix of it.
    """
    rng = random.Random(hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest())
    tokens: list[str] = []
    sentence_start = True
    for i in range(n_tokens):
        last = i == n_tokens - 1
        if last and i > 0:
            tokens.append(".")
            break
        if i > 0 and not sentence_start and rng.random() < 0.12:
            mark = "." if rng.random() < 0.5 else ","
            tokens.append(mark)
            sentence_start = mark == "."
            continue
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))
        if sentence_start:
            word = word.capitalize()
        tokens.append(word if i == 0 else " " + word)
        sentence_start = False
    return tokens
