"""What each load-test request asks for: token counts, tenant/tier/route, a shared prefix, and its prompt text.

A workload comes from a fleet file (``FILE:NAME``, the workload ``NAME`` of that fleet, or ``FILE`` when it has one
workload) or from a YAML of its own::

    name: support            # optional
    api: chat                # chat | completions
    input_tokens: {p50: 500, p95: 2000, max: 4000}
    output_tokens: {p50: 100, p95: 400}
    tiers: {P0: 0.5, P1: 0.5}
    tenants: {acme: 0.7, globex: 0.3}
    routes: {chat: 1}
    shared_prefix: {tokens: 256, fraction: 0.5}

or inline, in GuideLLM's synthetic-data style: ``prompt_tokens=256,output_tokens=128`` (fixed lengths), with
``_stdev`` / ``_min`` / ``_max`` for a normal spread clipped to its bounds (``prompt_tokens_stdev=64``), and
``api=completions``.

Prompts are synthetic text sized at **4 characters per token**: the rule of thumb for English BPE tokenizers,
and exact for the filler words (``goodput.simulator.tokenizer.FILLER_WORDS``, one token each in the simulated fleet's
tokenizer); another tokenizer will count somewhat differently, which is why records keep the server's
``usage.prompt_tokens`` when it reports one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist

import numpy as np

from goodput.contracts.vocabulary import TIERS
from goodput.foundation.errors import ConfigError
from goodput.foundation.reader import Reader
from goodput.foundation.yamlfile import load_yaml
from goodput.simulator.config import MAX_ENGINE_INT, WorkloadConfig, parse_fleet, token_distribution
from goodput.simulator.distributions import QuantileDistribution
from goodput.simulator.tokenizer import FILLER_WORDS, count_tokens

__all__ = ["CHARS_PER_TOKEN", "DEFAULT_INLINE", "RequestSpec", "SpecStream", "Workload", "inline_workload",
           "load_workload", "prompt_text"]

CHARS_PER_TOKEN = 4
CHAT_OVERHEAD_TOKENS = 7  # a one-message chat: 3 for the reply's priming + 4 for the message's framing
DEFAULT_INLINE = "prompt_tokens=256,output_tokens=128"  # ``loadtest run``'s workload when none is given
# an inline spread is a normal drawn by inverse CDF through this many knots (QuantileDistribution interpolates
# between them), clipped to its _min/_max, else to mean -/+ _NORMAL_TAIL_Z stdev (and at least 1 token)
_NORMAL_KNOTS = 199
_NORMAL_TAIL_Z = 3.5
_INLINE_LENGTHS = ("prompt_tokens", "output_tokens")
_INLINE_SUFFIXES = ("", "_stdev", "_min", "_max")
_FILLER = "".join(FILLER_WORDS)[1:] + " "  # "the day was ... now ": four characters per token


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: how long its prompt is, how many tokens to ask for, and its labels."""

    input_tokens: int
    output_tokens: int
    tenant: str
    tier: str
    route: str
    prefix_tokens: int  # the first tokens shared with every other request of the workload that has them (0: none)
    blocks: tuple[int, ...] = ()  # a replayed trace's prefix hash ids: equal ids give equal text, block by block
    block_tokens: int = 0


@dataclass(frozen=True)
class Workload:
    name: str
    chat: bool
    input_tokens: QuantileDistribution
    output_tokens: QuantileDistribution
    tiers: tuple[tuple[str, float], ...]
    tenants: tuple[tuple[str, float], ...]
    routes: tuple[tuple[str, float], ...]
    shared_prefix_tokens: int = 0
    shared_prefix_fraction: float = 0.0

    def specs(self, n: int, seed: int | list[int]) -> list[RequestSpec]:
        """``n`` request specs drawn with ``seed`` (the same seed gives the same requests)."""
        rng = np.random.default_rng(seed)
        inputs = self.input_tokens.sample(rng, n)
        outputs = self.output_tokens.sample(rng, n)
        tiers, tenants, routes = (_pick(rng, mix, n) for mix in (self.tiers, self.tenants, self.routes))
        shared = rng.random(n) < self.shared_prefix_fraction
        return [RequestSpec(int(i), int(o), te, ti, ro, min(self.shared_prefix_tokens, int(i)) if s else 0)
                for i, o, ti, te, ro, s in zip(inputs, outputs, tiers, tenants, routes, shared, strict=True)]


class SpecStream:
    """``stream(i)``: the i-th request of a run, drawn ``BLOCK`` at a time, so a closed loop of unknown length draws
    no more than it sends and the same seed sends the same requests. A replayed trace's lengths (one per arrival)
    override the draws, and its hash ids (Mooncake) become prompt blocks shared wherever the ids are equal."""

    BLOCK = 4096

    def __init__(self, workload: Workload, seed: int, inputs: Sequence[int] | np.ndarray | None = None,
                 outputs: Sequence[int] | np.ndarray | None = None, hash_ids: Sequence[tuple[int, ...]] | None = None,
                 block_tokens: int = 0) -> None:
        self.workload, self.seed = workload, seed
        self.inputs, self.outputs, self.hash_ids, self.block_tokens = inputs, outputs, hash_ids, block_tokens
        self.blocks: dict[int, list[RequestSpec]] = {}

    def __call__(self, i: int) -> RequestSpec:
        b, k = divmod(i, self.BLOCK)
        block = self.blocks.get(b)
        if block is None:
            block = self.blocks[b] = self.workload.specs(self.BLOCK, [self.seed, b])
            self.blocks.pop(b - 2, None)  # requests are asked for in order: old blocks are done with
        spec = block[k]
        if self.inputs is not None and i < len(self.inputs):
            inp = int(self.inputs[i])
            out = int(self.outputs[i]) if self.outputs is not None else spec.output_tokens
            spec = replace(spec, input_tokens=inp, output_tokens=out, prefix_tokens=min(spec.prefix_tokens, inp))
        if self.hash_ids is not None and i < len(self.hash_ids) and self.hash_ids[i]:
            ids = tuple(int(h) for h in self.hash_ids[i])
            spec = replace(spec, blocks=ids, block_tokens=self.block_tokens,
                           prefix_tokens=min(len(ids) * self.block_tokens, spec.input_tokens))
        return spec


def _pick(rng: np.random.Generator, mix: tuple[tuple[str, float], ...], n: int) -> list[str]:
    names = [k for k, _ in mix]
    weights = np.array([w for _, w in mix], dtype=float)
    return [names[i] for i in rng.choice(len(names), size=n, p=weights / weights.sum())]


def prompt_text(spec: RequestSpec, index: int, chat: bool) -> str:
    """Text of about ``spec.input_tokens`` tokens (4 characters each); the shared prefix is identical across
    requests, the rest starts with the request's index so no two requests share more than the prefix."""
    tokens = max(1, spec.input_tokens - (CHAT_OVERHEAD_TOKENS if chat else 0))
    prefix_chars = min(spec.prefix_tokens, tokens) * CHARS_PER_TOKEN
    if spec.blocks:
        size = spec.block_tokens * CHARS_PER_TOKEN
        prefix = "".join(_fill(f"block {h}: ", size) for h in spec.blocks)[:prefix_chars]
    else:
        prefix = _fill("shared prefix: ", prefix_chars)
    return prefix + _fill(f"request {index}: ", tokens * CHARS_PER_TOKEN - prefix_chars)


def _fill(head: str, chars: int) -> str:
    """``chars // 4`` tokens of text: the head's digits and punctuation cost more tokens than their characters
    suggest, so the filler gives that back."""
    if chars <= 0:
        return ""
    over = max(0, count_tokens(head) * CHARS_PER_TOKEN - len(head))
    text = head + _FILLER * (chars // len(_FILLER) + 1)
    return text[:max(0, chars - over)]


def _mix(r: Reader, key: str, default: dict[str, float], choices: tuple[str, ...] | None = None
         ) -> tuple[tuple[str, float], ...]:
    c = r.child(key, None)
    if c is None:
        return tuple(default.items())
    mix = tuple((str(k), c.get(k, (int, float), minimum=0)) for k in c.data)
    if choices is not None:
        c.unknown(set(choices))
    if not mix or sum(w for _, w in mix) <= 0:
        c.fail("", "needs at least one positive weight")
    return mix


def _from_fleet(w: WorkloadConfig) -> Workload:
    if w.input_tokens is None or w.output_tokens is None:
        raise ConfigError(w.name, "input_tokens", "a trace-driven workload has no token distributions to draw from")
    return Workload(w.name, w.operation != "text_completion", w.input_tokens, w.output_tokens, ((w.tier, 1.0),),
                    w.tenants, ((w.route, 1.0),), w.shared_prefix_tokens, 1.0 if w.shared_prefix_tokens else 0.0)


def _own(r: Reader, name: str) -> Workload:
    r.unknown({"name", "api", "input_tokens", "output_tokens", "tiers", "tenants", "routes", "shared_prefix"})
    inputs, outputs = token_distribution(r, "input_tokens"), token_distribution(r, "output_tokens")
    if inputs is None or outputs is None:
        r.fail("input_tokens" if inputs is None else "output_tokens", "is required")
    prefix = r.child("shared_prefix", None)
    tokens, fraction = 0, 0.0
    if prefix is not None:
        prefix.unknown({"tokens", "fraction"})
        tokens = prefix.get("tokens", int, minimum=1, maximum=MAX_ENGINE_INT)
        fraction = prefix.get("fraction", float, 1.0, minimum=0, maximum=1)
    return Workload(r.get("name", str, name), r.get("api", str, "chat", choices=("chat", "completions")) == "chat",
                    inputs, outputs, _mix(r, "tiers", {"P1": 1.0}, TIERS), _mix(r, "tenants", {"loadtest": 1.0}),
                    _mix(r, "routes", {"chat": 1.0}), tokens, fraction)


def _inline_lengths(terms: dict[str, float], key: str, spec: str) -> QuantileDistribution:
    """One length's distribution: fixed at ``key``, or normal with ``key_stdev`` clipped to ``key_min``..``key_max``."""
    mean, sd = terms.get(key), terms.get(f"{key}_stdev", 0.0)
    if mean is None:
        raise ConfigError("--workload", spec, f"needs {key}=N (e.g. {DEFAULT_INLINE})")
    lo, hi = terms.get(f"{key}_min", 1.0), terms.get(f"{key}_max", float(MAX_ENGINE_INT))
    if not lo <= mean <= hi:
        raise ConfigError("--workload", spec, f"{key}={mean:g} is outside {key}_min={lo:g}..{key}_max={hi:g}")
    if sd == 0:
        return QuantileDistribution.from_quantiles({"p50": mean, "max": mean})
    lo = max(lo, mean - _NORMAL_TAIL_Z * sd)
    hi = min(hi, mean + _NORMAL_TAIL_Z * sd)
    normal = NormalDist(mean, sd)
    levels = [0.0] + [(i + 0.5) / _NORMAL_KNOTS for i in range(_NORMAL_KNOTS)] + [1.0]
    values = [lo] + [min(hi, max(lo, normal.inv_cdf(q))) for q in levels[1:-1]] + [hi]
    return QuantileDistribution(tuple(levels), tuple(values))


def inline_workload(spec: str) -> Workload:
    """``prompt_tokens=256,output_tokens=128[,prompt_tokens_stdev=64,...][,api=completions]``; a bad term is a
    ConfigError naming it. The workload's name is the text itself, so runs of other lengths are not comparable."""
    known = {k + s for k in _INLINE_LENGTHS for s in _INLINE_SUFFIXES}
    terms: dict[str, float] = {}
    api = "chat"
    for raw in spec.split(","):
        key, sep, value = (x.strip() for x in raw.partition("="))
        if key == "api" and sep:
            if value not in ("chat", "completions"):
                raise ConfigError("--workload", raw.strip(), "api is chat or completions")
            api = value
            continue
        if not sep or key not in known:
            raise ConfigError("--workload", raw.strip() or repr(spec),
                              f"expected KEY=N with KEY one of {', '.join(sorted(known))} or api")
        if key in terms:
            raise ConfigError("--workload", raw.strip(), f"{key} is given twice")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        whole = key.endswith("_stdev") or number.is_integer()
        if not (math.isfinite(number) and whole and (0 if key.endswith("_stdev") else 1) <= number <= MAX_ENGINE_INT):
            raise ConfigError("--workload", raw.strip(), f"{key} must be a whole number of tokens from 1 to "
                                                         f"{MAX_ENGINE_INT}" if not key.endswith("_stdev") else
                                                         f"{key} must be a number of tokens from 0 to {MAX_ENGINE_INT}")
        terms[key] = number
    inputs, outputs = (_inline_lengths(terms, k, spec) for k in _INLINE_LENGTHS)
    return Workload(",".join(t.strip() for t in spec.split(",")), api == "chat", inputs, outputs, (("P1", 1.0),),
                    (("loadtest", 1.0),), (("chat", 1.0),))


def load_workload(spec: str) -> Workload:
    """``FILE`` (a workload YAML, or a fleet file with one workload), ``FILE:NAME`` (a fleet file's workload), or
    inline ``KEY=N,...`` terms (``inline_workload``) when no such file exists."""
    if "=" in spec and not Path(spec).exists():
        return inline_workload(spec)
    path, _, name = spec.rpartition(":") if ":" in spec and not Path(spec).exists() else (spec, "", "")
    data = load_yaml(path)
    if isinstance(data, dict) and "deployments" in data:
        fleet = parse_fleet(data, path)
        names = [w.name for w in fleet.workloads]
        if not name and len(names) == 1:
            name = names[0]
        chosen = next((w for w in fleet.workloads if w.name == name), None)
        if chosen is None:
            raise ConfigError(path, name or "workloads", f"name one workload as {path}:NAME; it has {', '.join(names)}")
        return _from_fleet(chosen)
    if name:
        raise ConfigError(path, name, "only a fleet file has named workloads")
    return _own(Reader(path, data, ""), Path(path).stem)
