"""Reading policy.yaml (``plan autoscale`` writes it; a person may tune it): one ScalingPolicy per deployment,
every key checked against the policy's fields."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping
from goodput.simulator.autoscaler import KINDS, ScalingPolicy
from goodput.simulator.config import MAX_REPLICAS

__all__ = ["load_policy_file"]

_INTS = {"min_replicas", "max_replicas", "scale_up_replicas", "scale_down_replicas", "warm_pool"}
_POSITIVE = {"goodput_tokens_per_s", "redundancy", "queue_target_s", "kv_target_ratio", "waiting_per_replica",
             "utilisation_target", "scrape_interval_s", "window_s", "scale_up_period_s", "scale_down_period_s"}
# seconds the autoscaler steps through one scrape at a time: a scrape under a second (1e-9 spun for minutes) or
# any period past a day (a typo: the scenarios last at most two) is refused
_SECONDS = {"scrape_interval_s": (1.0, 86400.0), "window_s": (1.0, 86400.0)} | dict.fromkeys(
    ("scale_up_stabilisation_s", "scale_up_period_s", "scale_down_stabilisation_s", "scale_down_period_s", "drain_s",
     "cold_start_s", "warm_start_s"), (0.0, 86400.0))


def _policy(src: str, key: str, d) -> ScalingPolicy:
    if not isinstance(d, dict):
        raise ConfigError(src, key, "expected a mapping of policy settings")
    names = {f.name for f in fields(ScalingPolicy)}
    extra = sorted(set(map(str, d)) - names)
    if extra:
        raise ConfigError(src, f"{key}.{extra[0]}", f"unknown key; allowed: {', '.join(sorted(names))}")
    kw = {}
    for name, v in d.items():
        k = f"{key}.{name}"
        if name == "kind":
            if v not in KINDS:
                raise ConfigError(src, k, f"must be one of {', '.join(KINDS)}; got {v!r}")
        elif name in _INTS:
            low = 1 if name != "warm_pool" else 0
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_REPLICAS:
                raise ConfigError(src, k, f"expected an integer in {low}..{MAX_REPLICAS}, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or \
                (name in _POSITIVE and v == 0):
            raise ConfigError(src, k, f"expected a finite number {'> 0' if name in _POSITIVE else '>= 0'}, got {v!r}")
        if name in _SECONDS and not _SECONDS[name][0] <= v <= _SECONDS[name][1]:
            raise ConfigError(src, k, f"expected seconds in {_SECONDS[name][0]:g}..{_SECONDS[name][1]:g}, got {v!r}")
        kw[name] = v
    for required in ("kind", "min_replicas", "max_replicas"):
        if required not in kw:
            raise ConfigError(src, f"{key}.{required}", "is required")
    if kw["min_replicas"] > kw["max_replicas"]:
        raise ConfigError(src, f"{key}.min_replicas", f"exceeds max_replicas ({kw['max_replicas']})")
    return ScalingPolicy(**kw)


def load_policy_file(path: str | Path) -> dict[str, ScalingPolicy]:
    src = str(path)
    data = load_mapping(path, "a policy with 'deployments' (from `goodput plan autoscale`)")
    deps = data.get("deployments")
    if not isinstance(deps, dict) or not deps:
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> policy")
    return {str(name): _policy(src, f"deployments.{name}", d) for name, d in deps.items()}
