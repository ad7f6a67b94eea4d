"""Arrival schedules of a load test: when each request is due, step by step. Pure and seeded.

Open-loop patterns give every arrival time up front (the runner sends each when due, never waiting for
earlier ones); closed-loop ones give a concurrency instead (``arrivals_s`` None). Rate-driven arrivals reuse
``goodput.simulator.arrivals`` (a unit-rate renewal process with Gamma gaps mapped through the cumulative rate), so
the load test and the offline simulator draw from the same processes.

``longtail`` is a length mix, not a timing: its schedule is Poisson (Gamma with ``cv``) at ``rate``, and the
runner passes the workload's input lengths through ``longtail_lengths`` to put a fraction near the context limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goodput.foundation.errors import ConfigError
from goodput.simulator.arrivals import ArrivalSpec, Burst, arrival_times
from goodput.simulator.config import MAX_BURST_FACTOR, MAX_RATE
from goodput.simulator.traces import MOONCAKE_BLOCK_TOKENS, Trace, load_trace

__all__ = ["MAX_ARRIVALS", "MAX_IN_FLIGHT", "PATTERNS", "Schedule", "Step", "longtail_lengths", "parse_burst",
           "parse_steps", "schedule"]

PATTERNS = ("concurrency", "step", "poisson", "gamma", "burst", "longtail", "replay")
MAX_ARRIVALS = 5_000_000  # checked before drawing: a schedule beyond this is a typo, not a load test
MAX_IN_FLIGHT = 10_000  # a concurrency (--concurrency, --steps, --max-in-flight): streams one client machine holds
_SRC = "--pattern"


@dataclass(frozen=True)
class Step:
    """One held load level. Times are on the run clock; ``[start_s, start_s + settle_s)`` is sent but not measured."""

    index: int
    label: str
    start_s: float
    end_s: float
    settle_s: float
    offered_rate: float | None
    concurrency: int | None
    arrivals_s: np.ndarray | None  # None: closed loop at ``concurrency``
    input_tokens: np.ndarray | None = None  # replay: the trace's lengths, one per arrival
    output_tokens: np.ndarray | None = None
    hash_ids: list[tuple[int, ...]] | None = None  # replay (Mooncake): prefix blocks; equal ids share a prompt prefix
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    @property
    def arrival_count(self) -> int:
        """The requests the step sends open loop (0 for a closed loop, whose count is the target's to set)."""
        return 0 if self.arrivals_s is None else len(self.arrivals_s)


@dataclass(frozen=True)
class Schedule:
    pattern: str
    steps: list[Step]
    seed: int

    @property
    def duration_s(self) -> float:
        return max((s.end_s for s in self.steps), default=0.0)


def _need(value, name: str, pattern: str):
    if value is None:
        raise ConfigError(_SRC, pattern, f"needs {name}")
    return value


def _positive(value: float, name: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(_SRC, name, f"must be a finite number above zero, got {value}")
    return float(value)


def _numbers(values, src: str, given: str, expected: str) -> list[float]:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise ConfigError(src, given, f"expected {expected}") from None


def _check_count(expected: float, pattern: str) -> None:
    if expected > MAX_ARRIVALS:
        raise ConfigError(_SRC, pattern, f"about {expected:.0f} requests; the limit is {MAX_ARRIVALS}")


def parse_steps(steps) -> tuple[str, list[float]]:
    """``"rate=1,2,4"`` / ``"concurrency=1,8,32"`` or a mapping ``{"rate": [...]}`` -> (kind, levels)."""
    expected = "rate=R1,R2,... or concurrency=C1,C2,..."
    if isinstance(steps, str):
        kind, _, values = steps.partition("=")
        levels = _numbers([v for v in values.split(",") if v.strip()], "--steps", steps, expected)
    elif isinstance(steps, Mapping) and len(steps) == 1 and isinstance(next(iter(steps.values())), Sequence):
        kind, levels = next(iter(steps.items()))
        levels = _numbers(levels, "--steps", str(steps), expected)
    else:
        raise ConfigError("--steps", str(steps), f"expected {expected}")
    kind = str(kind).strip()
    if kind not in ("rate", "concurrency") or not levels:
        raise ConfigError("--steps", str(steps), f"expected {expected}")
    for v in levels:
        if not 0 < v <= (MAX_IN_FLIGHT if kind == "concurrency" else MAX_RATE) or (kind == "concurrency" and v != int(v)):
            what = f"integer up to {MAX_IN_FLIGHT}" if kind == "concurrency" else f"number up to {MAX_RATE:g}"
            raise ConfigError("--steps", str(steps), f"{kind} {v:g} must be a positive {what}")
    return kind, levels


def parse_burst(burst) -> tuple[float, float, float]:
    """``"factor=4,length=10,period=60"`` (seconds) or a mapping of the same keys -> (factor, length_s, period_s)."""
    expected, given = "factor=F,length=SECONDS,period=SECONDS", str(burst)
    if isinstance(burst, str):
        try:
            fields = dict(part.split("=", 1) for part in burst.split(","))
        except ValueError:
            raise ConfigError("--burst", given, f"expected {expected}") from None
        burst = {k.strip(): v.strip().rstrip("s") for k, v in fields.items()}
    if not isinstance(burst, Mapping) or set(burst) != {"factor", "length", "period"}:
        raise ConfigError("--burst", given, f"expected {expected}")
    values = _numbers((burst[k] for k in ("factor", "length", "period")), "--burst", given, expected)
    factor, length, period = (_positive(v, f"burst {k}") for v, k in zip(values, ("factor", "length", "period"),
                                                                          strict=True))
    if length >= period:
        raise ConfigError("--burst", given, "the spike length must be shorter than the period")
    if factor > MAX_BURST_FACTOR:
        raise ConfigError("--burst", given, f"factor {factor:g} is over {MAX_BURST_FACTOR:g}")
    return factor, length, period


def _trace(trace) -> Trace:
    if isinstance(trace, Trace):
        return trace
    path = Path(trace)
    fmt = {".csv": "azure", ".jsonl": "mooncake"}.get(path.suffix)
    if fmt is None:
        raise ConfigError(str(path), "trace", "expected an Azure .csv or a Mooncake .jsonl trace")
    return load_trace(path, fmt)


def _rate_arrivals(rate: float, cv: float, start: float, end: float, rng: np.random.Generator) -> np.ndarray:
    spec = ArrivalSpec(process="gamma" if cv != 1.0 else "poisson", rate=rate, cv=cv)
    return start + arrival_times(spec, end - start, rng)


def schedule(
    pattern: str,
    *,
    duration_s: float,
    rate: float | None = None,
    cv: float | None = None,
    concurrency: int | None = None,
    steps=None,
    step_s: float | None = None,
    settle_s: float = 0,
    burst=None,
    trace=None,
    time_scale: float = 1.0,
    seed: int = 0,
) -> Schedule:
    """The schedule of ``pattern`` over ``duration_s`` seconds (see ``PATTERNS``); ``ConfigError`` on missing or bad options.

    ``step``: levels from ``steps`` (see ``parse_steps``), each held ``step_s`` (default ``duration_s / levels``),
    rate steps drawn Poisson (Gamma with ``cv``). ``burst``: baseline ``rate`` whose every period ends with a
    spike of ``factor × rate`` for ``length`` seconds. ``replay``: the trace's arrival times × ``time_scale``
    (0.5 plays it twice as fast), cut at ``duration_s``. ``settle_s`` opens every step and is not measured.
    """
    if pattern not in PATTERNS:
        raise ConfigError(_SRC, pattern, f"unknown pattern; use one of {', '.join(PATTERNS)}")
    duration_s = _positive(duration_s, "--duration")
    if settle_s < 0:
        raise ConfigError(_SRC, "--settle", f"must not be negative, got {settle_s}")
    rng = np.random.default_rng(seed)
    if pattern == "gamma" and cv is None:
        raise ConfigError(_SRC, pattern, "needs --cv")
    cv = 1.0 if cv is None else _positive(cv, "--cv")

    def single(label: str, offered: float | None, conc: int | None, arrivals, **extra) -> Schedule:
        if settle_s >= duration_s:
            raise ConfigError(_SRC, "--settle", f"{settle_s}s leaves nothing of the {duration_s}s to measure")
        return Schedule(pattern, [Step(0, label, 0.0, duration_s, float(settle_s), offered, conc, arrivals, **extra)], seed)

    if pattern == "concurrency":
        n = int(_positive(_need(concurrency, "--concurrency", pattern), "--concurrency"))
        return single(f"concurrency={n}", None, n, None)
    if pattern in ("poisson", "gamma", "longtail"):
        r = _positive(_need(rate, "--rate", pattern), "--rate")
        _check_count(r * duration_s, pattern)
        return single(f"rate={r:g}", r, None, _rate_arrivals(r, cv, 0.0, duration_s, rng))
    if pattern == "burst":
        r = _positive(_need(rate, "--rate", pattern), "--rate")
        factor, length, period = parse_burst(_need(burst, "--burst", pattern))
        periods = range(int(duration_s // period) + 1)
        spikes = tuple(Burst(at=k * period + period - length, factor=factor, duration=length) for k in periods)
        spec = ArrivalSpec(process="burst", rate=r, cv=cv, bursts=spikes)
        _check_count(r * factor * duration_s, pattern)
        return single(f"rate={r:g} burst×{factor:g}", spec.mean_rate(duration_s), None, arrival_times(spec, duration_s, rng))
    if pattern == "step":
        kind, levels = parse_steps(_need(steps, "--steps", pattern))
        hold = _positive(step_s, "--step-s") if step_s is not None else duration_s / len(levels)
        if settle_s >= hold:
            raise ConfigError(_SRC, "--settle", f"{settle_s}s leaves nothing of each {hold:g}s step to measure")
        if kind == "rate":
            _check_count(sum(levels) * hold, pattern)
        out = []
        for i, level in enumerate(levels):
            start, end = i * hold, (i + 1) * hold
            if kind == "rate":
                arrivals = _rate_arrivals(level, cv, start, end, rng)
                out.append(Step(i, f"rate={level:g}", start, end, float(settle_s), level, None, arrivals))
            else:
                out.append(Step(i, f"concurrency={int(level)}", start, end, float(settle_s), None, int(level), None))
        return Schedule(pattern, out, seed)
    # replay
    tr = _trace(_need(trace, "--trace", pattern))
    scale = _positive(time_scale, "--time-scale")
    times = tr.times * scale
    keep = times < duration_s
    hashes = [h for h, k in zip(tr.hash_ids, keep, strict=True) if k] if tr.hash_ids is not None else None
    n = int(keep.sum())
    return single(
        f"replay×{scale:g}", n / duration_s, None, times[keep],
        input_tokens=tr.input_tokens[keep], output_tokens=tr.output_tokens[keep], hash_ids=hashes, block_tokens=tr.block_tokens,
    )


def longtail_lengths(
    input_tokens: Sequence[int], rng: np.random.Generator, *, context_limit: int, fraction: float = 0.05, near: float = 0.9
) -> np.ndarray:
    """A copy of ``input_tokens`` in which ``round(fraction × n)`` requests, chosen at random, ask for
    ``near × context_limit`` to ``context_limit`` tokens (uniform): the long tail that fills the KV cache."""
    if not 0 <= fraction <= 1 or not 0 < near <= 1 or context_limit < 1:
        raise ConfigError(_SRC, "longtail", f"fraction {fraction} and near {near} must lie in [0, 1], context limit ≥ 1")
    out = np.array(input_tokens, dtype=np.int64, copy=True)
    k = round(fraction * len(out))
    if k:
        which = rng.choice(len(out), size=k, replace=False)
        out[which] = rng.integers(int(near * context_limit), context_limit + 1, size=k)
    return out
