"""The demand file a planner writes: per deployment its streams (scene, tier, peak req/s, token mix), the tiers'
SLOs, the headroom it wants, and the candidate configurations to compare.

Every bad key is one ``ConfigError(file, key.path, problem)``; unknown keys are refused with the allowed ones
named, so a typo never silently drops a headroom term. Format: ``docs/capacity.md`` (Replica plan). With
``--demand-from`` the file is the template whose stream figures ``goodput.plan.measured`` replaces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from goodput.contracts.vocabulary import SCENES, TIERS
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping
from goodput.simulator.catalog import load_model_config, resolve_gpu, resolve_model
from goodput.simulator.config import MAX_BURST_FACTOR, MAX_ENGINE_INT, MAX_REPLICAS

__all__ = ["Candidate", "Demand", "DeploymentDemand", "Headroom", "Stream", "TierSlo", "load_demand", "parse_demand",
           "parse_slos", "token_mix"]

# the SLOs when a demand file names none: rules/slos.yaml's chat objectives per tier
# Upper bounds checked when the file is read (docs/capacity.md#limits), beside the simulator's replica, token-size
# and burst limits: far above a real fleet's, far below what makes the planner size a million replicas.
MAX_PEAK_RPS = 100_000.0  # requests/s of one stream
MAX_GROWTH = 100.0
MAX_SECONDS = 86_400.0  # a latency objective, a cold start, a burst's rise
MAX_TP = 64
DEFAULT_SLOS = {"P0": (0.5, 0.05, 0.95), "P1": (1.0, 0.075, 0.95), "P2": (60.0, 0.2, 0.9)}


@dataclass(frozen=True)
class TierSlo:
    ttft_s: float
    tpot_s: float
    objective: float  # share of requests that must meet both


@dataclass(frozen=True)
class Stream:
    """One scene x tier of a deployment at its peak hour."""

    scene: str
    tier: str
    peak_rps: float
    input_tokens: dict[str, float]  # quantiles (p50, p95, ..., max), as in a fleet file
    output_tokens: dict[str, float]
    input_mean: float
    output_mean: float


@dataclass(frozen=True)
class Headroom:
    """What is added on top of the replicas the peak needs, each term shown on its own."""

    failure_domains: int = 0  # domains the replicas spread over (0: every replica is its own domain)
    tolerate: int = 1  # domains (or replicas) that may fail at once: N+k
    release_surge: float = 0.0  # share of replicas out of service at once during a rolling / canary release
    cold_start_s: float = 180.0  # time from "scale up" to a replica serving
    burst_factor: float = 1.0  # demand can rise to this x peak ...
    burst_rise_s: float = 300.0  # ... within this many seconds


@dataclass(frozen=True)
class Candidate:
    """One configuration to compare: model x GPU x TP x engine knobs (a fleet file's deployment keys)."""

    name: str
    model: str
    gpu: str
    tp: int
    engine: dict[str, Any] = field(default_factory=dict)
    model_config: str | None = None  # a Hugging Face config.json (absolute path) for a model the catalog lacks


@dataclass(frozen=True)
class DeploymentDemand:
    name: str
    streams: tuple[Stream, ...]
    headroom: Headroom
    candidates: tuple[Candidate, ...]

    def tiers(self) -> tuple[str, ...]:
        return tuple(sorted({s.tier for s in self.streams}))


@dataclass(frozen=True)
class Demand:
    source: str
    growth: float
    slos: dict[str, TierSlo]
    deployments: tuple[DeploymentDemand, ...]


def _fail(src: str, key: str, problem: str) -> NoReturn:
    raise ConfigError(src, key, problem)


def _map(src: str, key: str, v: Any, allowed: set[str] | None = None) -> dict:
    if not isinstance(v, dict):
        _fail(src, key, f"expected a mapping, got {v!r}")
    if allowed is not None:
        extra = sorted(set(map(str, v)) - allowed)
        if extra:
            _fail(src, f"{key}.{extra[0]}" if key else extra[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")
    return v


def _num(src: str, key: str, v: Any, *, minimum: float = 0.0, strict: bool = False, maximum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        _fail(src, key, f"expected a finite number, got {v!r}")
    if v < minimum or (strict and v == minimum):
        _fail(src, key, f"must be {'>' if strict else '>='} {minimum:g}, got {v!r}")
    if maximum is not None and v > maximum:
        _fail(src, key, f"must be <= {maximum:.15g}, got {v!r}")
    return float(v)


def _int(src: str, key: str, v: Any, minimum: int = 0, maximum: int = MAX_REPLICAS) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= maximum:
        _fail(src, key, f"expected an integer in {minimum}..{maximum}, got {v!r}")
    return v


def _str(src: str, key: str, v: Any, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str) or not v:
        _fail(src, key, f"expected a non-empty string, got {v!r}")
    if choices is not None and v not in choices:
        _fail(src, key, f"must be one of {', '.join(choices)}; got {v!r}")
    return v


_QUANTILE_KEYS = ("p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "max", "min")


def token_mix(src: str, key: str, v: Any) -> tuple[dict[str, float], float]:
    """A token length: a number (every request that long) or quantiles; returns (quantiles, mean)."""
    from goodput.simulator.distributions import QuantileDistribution

    if isinstance(v, int | float) and not isinstance(v, bool):
        n = _num(src, key, v, minimum=1, maximum=MAX_ENGINE_INT)
        q = {"p50": n, "max": n}
        return q, n
    q = {str(k): _num(src, f"{key}.{k}", x, minimum=1, maximum=MAX_ENGINE_INT)
         for k, x in _map(src, key, v, set(_QUANTILE_KEYS)).items()}
    try:
        dist = QuantileDistribution.from_quantiles(q)
    except ValueError as e:
        _fail(src, key, str(e))
    mean = float(np.mean(dist.quantile(np.linspace(0.0005, 0.9995, 2000))))
    return q, mean


def _stream(src: str, key: str, v: Any) -> Stream:
    d = _map(src, key, v, {"scene", "tier", "peak_rps", "input_tokens", "output_tokens"})
    for k in ("scene", "tier", "peak_rps", "input_tokens", "output_tokens"):
        if k not in d:
            _fail(src, f"{key}.{k}", "is required")
    iq, imean = token_mix(src, f"{key}.input_tokens", d["input_tokens"])
    oq, omean = token_mix(src, f"{key}.output_tokens", d["output_tokens"])
    return Stream(_str(src, f"{key}.scene", d["scene"], SCENES), _str(src, f"{key}.tier", d["tier"], TIERS),
                  _num(src, f"{key}.peak_rps", d["peak_rps"], strict=True, maximum=MAX_PEAK_RPS), iq, oq, imean, omean)


def _headroom(src: str, key: str, v: Any) -> Headroom:
    if v is None:
        return Headroom()
    d = _map(src, key, v, set(Headroom.__dataclass_fields__))
    kw: dict[str, Any] = {}
    for name in ("failure_domains", "tolerate"):
        if name in d:
            kw[name] = _int(src, f"{key}.{name}", d[name])
    if "release_surge" in d:
        kw["release_surge"] = _num(src, f"{key}.release_surge", d["release_surge"], maximum=1.0)
    if "cold_start_s" in d:
        kw["cold_start_s"] = _num(src, f"{key}.cold_start_s", d["cold_start_s"], maximum=MAX_SECONDS)
    if "burst_factor" in d:
        kw["burst_factor"] = _num(src, f"{key}.burst_factor", d["burst_factor"], minimum=1.0, maximum=MAX_BURST_FACTOR)
    if "burst_rise_s" in d:
        kw["burst_rise_s"] = _num(src, f"{key}.burst_rise_s", d["burst_rise_s"], strict=True, maximum=MAX_SECONDS)
    h = Headroom(**kw)
    if h.failure_domains and h.tolerate >= h.failure_domains:
        _fail(src, f"{key}.tolerate", f"must be less than failure_domains ({h.failure_domains}), got {h.tolerate}")
    return h


def _candidate(src: str, key: str, v: Any) -> Candidate:
    d = _map(src, key, v, {"name", "model", "model_config", "gpu", "tp", "engine"})
    for k in ("model" if "model_config" not in d else "model_config", "gpu"):
        if k not in d:
            _fail(src, f"{key}.{k}", "is required")
    config = None
    if "model_config" in d:  # relative to the demand file; the name is what the plan prints
        config = str((Path(src).parent / _str(src, f"{key}.model_config", d["model_config"])).resolve())
        model = load_model_config(config, d.get("model"), src, f"{key}.model_config").name
    else:
        model = resolve_model(_str(src, f"{key}.model", d["model"]), src, f"{key}.model").name
    gpu = resolve_gpu(_str(src, f"{key}.gpu", d["gpu"]), src, f"{key}.gpu").name
    tp = _int(src, f"{key}.tp", d.get("tp", 1), minimum=1, maximum=MAX_TP)
    engine = _map(src, f"{key}.engine", d.get("engine") or {})
    name = _str(src, f"{key}.name", d.get("name", f"{model}/{gpu}/tp{tp}"))
    return Candidate(name, model, gpu, tp, dict(engine), config)


def _deployment(src: str, name: str, v: Any) -> DeploymentDemand:
    key = f"deployments.{name}"
    d = _map(src, key, v, {"streams", "headroom", "candidates"})
    raw = d.get("streams")
    if not isinstance(raw, list) or not raw:
        _fail(src, f"{key}.streams", "expected a non-empty list of streams")
    streams = tuple(_stream(src, f"{key}.streams[{i}]", s) for i, s in enumerate(raw))
    cands = d.get("candidates") or []
    if not isinstance(cands, list):
        _fail(src, f"{key}.candidates", "expected a list of candidate configurations")
    candidates = tuple(_candidate(src, f"{key}.candidates[{i}]", c) for i, c in enumerate(cands))
    names = [c.name for c in candidates]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        _fail(src, f"{key}.candidates", f"duplicate candidate name {dup!r}")
    return DeploymentDemand(str(name), streams, _headroom(src, f"{key}.headroom", d.get("headroom")), candidates)


def parse_slos(data: Any, source: str) -> dict[str, TierSlo]:
    """A demand file's ``slos:`` section (tier -> ttft_s, tpot_s, objective), each tier or key it leaves out at
    ``DEFAULT_SLOS``."""
    slos = {t: TierSlo(*v) for t, v in DEFAULT_SLOS.items()}
    for tier, v in _map(source, "slos", data or {}, set(TIERS)).items():
        key = f"slos.{tier}"
        s = _map(source, key, v, {"ttft_s", "tpot_s", "objective"})
        base = slos[tier]
        slos[tier] = TierSlo(
            _num(source, f"{key}.ttft_s", s.get("ttft_s", base.ttft_s), strict=True, maximum=MAX_SECONDS),
            _num(source, f"{key}.tpot_s", s.get("tpot_s", base.tpot_s), strict=True, maximum=MAX_SECONDS),
            _num(source, f"{key}.objective", s.get("objective", base.objective), strict=True, maximum=1.0))
    return slos


def parse_demand(data: Any, source: str) -> Demand:
    root = _map(source, "", data, {"growth", "slos", "deployments"})
    growth = _num(source, "growth", root.get("growth", 1.0), minimum=1e-9, strict=True, maximum=MAX_GROWTH)
    slos = parse_slos(root.get("slos"), source)
    deps = _map(source, "deployments", root.get("deployments"))
    if not deps:
        _fail(source, "deployments", "at least one deployment is required")
    return Demand(source, growth, slos, tuple(_deployment(source, str(n), v) for n, v in deps.items()))


def load_demand(path: str | Path) -> Demand:
    return parse_demand(load_mapping(path, "a demand mapping with 'deployments'"), str(path))
