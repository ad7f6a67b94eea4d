"""The fleet's tokenizer: prompts are counted, and its own output is written, in real BPE tokens.

A byte-level BPE (``goodput/simulator/data/tokenizer.json``, made by ``goodput.simulator.tokenizer_recipe`` from public-domain
English) loaded once through the ``tokenizers`` package (Rust), so a client's prompt of N GPT-2/Llama-style
tokens of English reaches the fleet as about N tokens, and the fleet's ``usage`` and ``/metrics`` agree with the
clients measuring it. The filler words the fleet generates are one token each, so the text of a completion
tokenizes to the count its ``usage.completion_tokens`` reports.

A deployment may name its served model's own ``tokenizer.json`` (the fleet file's ``tokenizer``): prompts are then
counted as that model's server counts them, so a client given the same tokenizer (GuideLLM's ``--processor``,
inference-perf's ``tokenizer``, AIPerf's ``--tokenizer``), which cuts its synthetic prompts at exactly N of its
tokens, sees N come back in ``usage.prompt_tokens``. The shipped BPE is only GPT-2/Llama-like: a client tokenizing
with something else (a small vocabulary counts more tokens per word) is counted differently, as a real server of
another model would count it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import decode, read_bytes

__all__ = ["EXACT_CHARS", "FILLER_WORDS", "MAX_TOKENIZER_BYTES", "count_tokens", "load_tokenizer", "tokenizer"]

# a model's tokenizer.json: Llama 3's is 9 MB, Qwen's 7 MB, Gemma's 33 MB
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024

# Counting runs on the replica's event loop: text beyond this many characters (~16k tokens of English, ~50 ms) is
# counted on its first EXACT_CHARS and scaled by length, so a 4 MiB body never stalls the server for seconds
EXACT_CHARS = 65_536

# one token each (and four characters, the English rule of thumb); goodput/simulator/tests check both
FILLER_WORDS = (" the", " day", " was", " new", " and", " all", " men", " can", " see", " our", " way", " now")


@cache
def tokenizer(path: str | None = None) -> Tokenizer:
    """The shipped BPE, or (``path``) a served model's ``tokenizer.json`` already checked by ``load_tokenizer``."""
    if path is None:
        return Tokenizer.from_str(resources.files("goodput.simulator").joinpath("data", "tokenizer.json").read_text())
    return Tokenizer.from_str(decode(read_bytes(path, MAX_TOKENIZER_BYTES), path))


def load_tokenizer(path: Path, source: str, key: str) -> str:
    """``path`` as a key of ``tokenizer``, once it loads: a Hugging Face ``tokenizer.json`` the ``tokenizers``
    package reads, within ``MAX_TOKENIZER_BYTES``; else ``ConfigError`` naming the fleet file's key."""
    try:
        tokenizer(str(path))
    except ConfigError as e:
        raise ConfigError(source, key, str(e)) from None
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for a file that is no tokenizer.json
        raise ConfigError(source, key, f"{path}: not a Hugging Face tokenizer.json ({str(e).splitlines()[0][:120]})") from None
    return str(path)


def count_tokens(text: str, path: str | None = None) -> int:
    """Tokens in ``text`` by the shipped BPE or the tokenizer at ``path`` (at least 1: an empty prompt still
    costs the engine a step); past ``EXACT_CHARS`` an estimate from the first ``EXACT_CHARS``."""
    head = len(tokenizer(path).encode(text[:EXACT_CHARS], add_special_tokens=False).ids)
    if len(text) > EXACT_CHARS:
        head = round(head * len(text) / EXACT_CHARS)
    return max(1, head)
