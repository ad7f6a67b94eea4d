"""The fleet's tokenizer: prompts are counted, and its own output is written, in real BPE tokens.

A byte-level BPE (``goodput/simulator/data/tokenizer.json``, made by ``goodput.simulator.tokenizer_recipe`` from public-domain
English) loaded once through the ``tokenizers`` package (Rust), so a client's prompt of N GPT-2/Llama-style
tokens of English reaches the fleet as about N tokens, and the fleet's ``usage`` and ``/metrics`` agree with the
clients measuring it. The filler words the fleet generates are one token each, so the text of a completion
tokenizes to the count its ``usage.completion_tokens`` reports.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from tokenizers import Tokenizer

__all__ = ["EXACT_CHARS", "FILLER_WORDS", "count_tokens", "tokenizer"]

# Counting runs on the replica's event loop: text beyond this many characters (~16k tokens of English, ~50 ms) is
# counted on its first EXACT_CHARS and scaled by length, so a 4 MiB body never stalls the server for seconds
EXACT_CHARS = 65_536

# one token each (and four characters, the English rule of thumb); goodput/simulator/tests check both
FILLER_WORDS = (" the", " day", " was", " new", " and", " all", " men", " can", " see", " our", " way", " now")


@cache
def tokenizer() -> Tokenizer:
    return Tokenizer.from_str(resources.files("goodput.simulator").joinpath("data", "tokenizer.json").read_text())


def count_tokens(text: str) -> int:
    """Tokens in ``text`` (at least 1: an empty prompt still costs the engine a step); past ``EXACT_CHARS``
    an estimate from the first ``EXACT_CHARS``."""
    head = len(tokenizer().encode(text[:EXACT_CHARS], add_special_tokens=False).ids)
    if len(text) > EXACT_CHARS:
        head = round(head * len(text) / EXACT_CHARS)
    return max(1, head)
