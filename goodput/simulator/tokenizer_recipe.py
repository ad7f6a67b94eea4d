"""How ``goodput/simulator/data/tokenizer.json`` was made: a byte-level BPE trained on public-domain English.

The fleet counts prompt tokens with this tokenizer (``goodput.simulator.tokenizer``). GPT-2/Llama-style clients build
their synthetic prompts from classic English prose (AIPerf from Shakespeare, GuideLLM from Pride and Prejudice),
so the tokenizer is trained on exactly that: Project Gutenberg #1342 (Pride and Prejudice) and the
tiny-Shakespeare selection, with 12,000 tokens: the vocabulary at which the real clients' own synthetic prompts
(AIPerf 0.13 and inference-perf 0.7, tests/fixtures/tokenizer/client_prompts.json) count, on average, 1.07 and
1.01 x what GPT-2's tokenizer counts (6,000: 1.17 and 1.11; 16,000: 1.05 and 1.00), while windows of the
training texts themselves stay within 10% (0.97 prose, 0.95 play dialogue; a larger vocabulary learns their words
whole and undercounts them).
Rebuild (the texts are not in the repository; goodput/simulator/data/SOURCES.md says where they come from)::

    python -m goodput.simulator.tokenizer_recipe pg1342.txt tinyshakespeare.txt --out goodput/simulator/data/tokenizer.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 12000


def strip_gutenberg(text: str) -> str:
    """The book without Project Gutenberg's licence header and footer (text without the markers is kept whole)."""
    if "*** START OF" in text:
        text = text.split("*** START OF", 1)[1].split("\n", 1)[1]
    return text.split("*** END OF", 1)[0]


def train(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """A GPT-2-style byte-level BPE: every byte is a token, so any text encodes; no special tokens."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([strip_gutenberg(t) for t in texts], trainer)
    return tok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m goodput.simulator.tokenizer_recipe", description=__doc__.split("\n\n")[0])
    p.add_argument("texts", nargs="+", type=Path, help="plain-text books (Project Gutenberg headers are stripped)")
    p.add_argument("--out", type=Path, required=True, help="the tokenizer.json to write")
    p.add_argument("--vocab-size", type=int, default=VOCAB_SIZE, help=f"default {VOCAB_SIZE}")
    args = p.parse_args(argv)
    train([t.read_text(encoding="utf-8") for t in args.texts], args.vocab_size).save(str(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
