"""Files the exporters read: the engine targets file and the capacity plan. Bad files raise ConfigError."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporters.dialects import DIALECTS
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_yaml

__all__ = ["Plan", "Target", "Targets", "load_plan", "load_targets", "load_yaml"]


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


def load_targets(path: str | Path) -> Targets:
    src = str(path)
    data = load_yaml(path) or {}
    if not isinstance(data, dict) or not isinstance(data.get("targets", []), list):
        raise ConfigError(src, "targets", "expected a mapping with a 'targets' list")
    out = []
    seen = set()
    for i, t in enumerate(data.get("targets") or []):
        key = f"targets[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(src, key, "expected a mapping")
        for req in ("deployment", "replica", "url"):
            if not isinstance(t.get(req), str) or not t[req]:
                raise ConfigError(src, f"{key}.{req}", "is required (a string)")
        if not t["url"].startswith(("http://", "https://")):
            raise ConfigError(src, f"{key}.url", f"not an http(s) URL: {t['url']!r}")
        engine = t.get("engine", "auto")
        if engine not in ("auto", *DIALECTS):
            raise ConfigError(src, f"{key}.engine", f"must be auto or one of {', '.join(DIALECTS)}; got {engine!r}")
        if (t["deployment"], t["replica"]) in seen:
            raise ConfigError(src, f"{key}.replica", f"duplicate replica {t['replica']!r} in {t['deployment']!r}")
        seen.add((t["deployment"], t["replica"]))
        out.append(Target(t["deployment"], t["replica"], t["url"], engine, t.get("model")))
    desired = {}
    deps = data.get("deployments") or {}
    if not isinstance(deps, dict):
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> {desired_replicas: N}")
    for name, d in deps.items():
        n = d.get("desired_replicas") if isinstance(d, dict) else None
        if not isinstance(n, int) or n < 0:
            raise ConfigError(src, f"deployments.{name}.desired_replicas", "expected a non-negative integer")
        desired[str(name)] = n
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
    data = load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("deployments"), dict):
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> plan")
    goodput, desired = {}, {}
    for name, d in data["deployments"].items():
        key = f"deployments.{name}"
        if not isinstance(d, dict):
            raise ConfigError(src, key, "expected a mapping")
        g = d.get("replica_goodput_tokens_per_second")
        if not isinstance(g, (int, float)) or isinstance(g, bool) or g <= 0:
            raise ConfigError(src, f"{key}.replica_goodput_tokens_per_second", "expected a number > 0")
        goodput[str(name)] = float(g)
        if "desired_replicas" in d:
            n = d["desired_replicas"]
            if not isinstance(n, int) or n < 0:
                raise ConfigError(src, f"{key}.desired_replicas", "expected a non-negative integer")
            desired[str(name)] = n
    return Plan(goodput, desired)
