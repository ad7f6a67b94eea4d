"""Files the exporters read: the engine targets file and the capacity plan.

Everything is checked at load, so a bad entry stops the exporter at start with one line naming it
(``FILE: targets[3].url: PROBLEM``) instead of failing a scrape later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from exporters.dialects import DIALECTS
from exporters.normalize import MAX_LABEL_VALUE_BYTES
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import http_url_problem
from goodput.foundation.yamlfile import load_mapping

__all__ = ["Plan", "Target", "Targets", "load_plan", "load_targets"]


@dataclass(frozen=True)
class Target:
    deployment: str
    replica: str
    url: str
    engine: str = "auto"
    model: str | None = None


@dataclass(frozen=True)
class Targets:
    targets: tuple[Target, ...]
    desired: dict[str, int]


def _url(src: str, key: str, url: str) -> str:
    """The URL if httpx can request it: http(s), a host, a numeric port; else ConfigError naming the entry (and
    never echoing a password the URL carries)."""
    problem = http_url_problem(url)
    if problem is not None:
        raise ConfigError(src, key, problem)
    return url


def _label_value(src: str, key: str, v: object) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(src, key, "is required (a string)")
    if len(v.encode("utf-8", "surrogatepass")) > MAX_LABEL_VALUE_BYTES:
        raise ConfigError(src, key, f"longer than {MAX_LABEL_VALUE_BYTES} bytes (it becomes a label value)")
    return v


def _count(src: str, key: str, n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ConfigError(src, key, f"expected a non-negative integer, got {n!r}")
    return n


def load_targets(path: str | Path) -> Targets:
    src = str(path)
    data = load_mapping(path, "a mapping with a 'targets' list")
    if not isinstance(data.get("targets", []), list):
        raise ConfigError(src, "targets", "expected a list of {deployment, replica, url}")
    out = []
    seen = set()
    for i, t in enumerate(data.get("targets") or []):
        key = f"targets[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(src, key, "expected a mapping")
        unknown = sorted(set(t) - {"deployment", "replica", "url", "engine", "model"}, key=str)
        if unknown:
            raise ConfigError(src, f"{key}.{unknown[0]}", "unknown key; allowed: deployment, replica, url, engine, model")
        deployment = _label_value(src, f"{key}.deployment", t.get("deployment"))
        replica = _label_value(src, f"{key}.replica", t.get("replica"))
        if not isinstance(t.get("url"), str):
            raise ConfigError(src, f"{key}.url", "is required (a string)")
        url = _url(src, f"{key}.url", t["url"])
        engine = t.get("engine", "auto")
        if engine not in ("auto", *DIALECTS):
            raise ConfigError(src, f"{key}.engine", f"must be auto or one of {', '.join(DIALECTS)}; got {engine!r}")
        model = _label_value(src, f"{key}.model", t["model"]) if t.get("model") is not None else None
        if (deployment, replica) in seen:
            raise ConfigError(src, f"{key}.replica", f"duplicate replica {replica!r} in {deployment!r}")
        seen.add((deployment, replica))
        out.append(Target(deployment, replica, url, engine, model))
    desired = {}
    deps = data.get("deployments") or {}
    if not isinstance(deps, dict):
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> {desired_replicas: N}")
    for name, d in deps.items():
        key = f"deployments.{name}"
        if not isinstance(d, dict):
            raise ConfigError(src, key, "expected a mapping {desired_replicas: N}")
        desired[_label_value(src, key, str(name))] = _count(src, f"{key}.desired_replicas", d.get("desired_replicas"))
    return Targets(tuple(out), desired)


@dataclass(frozen=True)
class Plan:
    """A capacity plan: per deployment the per-replica SLO goodput (tokens/s) and, optionally, desired replicas.

    File format (YAML)::

        plan_version: 1
        deployments:
          chat-8b-h100: {replica_goodput_tokens_per_second: 5200, desired_replicas: 4}
    """

    goodput: dict[str, float]
    desired: dict[str, int]


def load_plan(path: str | Path) -> Plan:
    src = str(path)
    data = load_mapping(path, "a mapping with 'deployments'")
    if not isinstance(data.get("deployments"), dict):
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> plan")
    goodput, desired = {}, {}
    for name, d in data["deployments"].items():
        key = f"deployments.{name}"
        if not isinstance(d, dict):
            raise ConfigError(src, key, "expected a mapping")
        dep = _label_value(src, key, str(name))
        g = d.get("replica_goodput_tokens_per_second")
        if not isinstance(g, (int, float)) or isinstance(g, bool) or not math.isfinite(g) or g <= 0:
            raise ConfigError(src, f"{key}.replica_goodput_tokens_per_second", f"expected a finite number > 0, got {g!r}")
        goodput[dep] = float(g)
        if "desired_replicas" in d:
            desired[dep] = _count(src, f"{key}.desired_replicas", d["desired_replicas"])
    return Plan(goodput, desired)
