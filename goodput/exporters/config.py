"""Files the exporters read: the engine targets file and the capacity plan.

Everything is checked at load, so a bad entry stops the exporter at start with one line naming it
(``FILE: targets[3].url: PROBLEM``) instead of failing a scrape later. ``read_plan`` is the one reader of a
plan.yaml: ``plan autoscale`` and ``plan evaluate`` (``goodput.plan.planfile``) build their richer view on its
entries, so a plan broken in what they share reads the same one line whichever command meets it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goodput.exporters.dialects import DIALECTS
from goodput.exporters.normalize import MAX_LABEL_VALUE_BYTES
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import http_url_problem
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.yamlfile import MAX_YAML_BYTES, decode, load_mapping, parse_yaml, read_bytes

__all__ = ["PLAN_EXPECTED", "Plan", "PlanEntry", "Target", "Targets", "load_plan", "load_targets", "parse_targets",
           "read_plan", "targets_document", "targets_of"]

PLAN_EXPECTED = "a plan: a mapping with 'deployments' (as `goodput plan replicas` writes it)"


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
    """The targets file at ``path`` in either format (see ``parse_targets``)."""
    return parse_targets(read_bytes(path, MAX_YAML_BYTES), str(path))


def parse_targets(data: bytes, src: str) -> Targets:
    """A targets file's bytes: goodput's mapping ``{targets: [{deployment, replica, url, ...}], deployments: ...}``
    or Prometheus' file_sd list ``[{targets: ["host:port"], labels: {...}}]``; YAML, or JSON when ``src`` ends
    in ``.json``. ``ConfigError`` names the first bad entry."""
    return targets_of(targets_document(data, src), src)


def targets_document(data: bytes, src: str) -> Any:
    """A targets file's bytes as data, unchecked: JSON when ``src`` ends in ``.json``, else YAML."""
    return parse_json(data, src, MAX_YAML_BYTES) if src.endswith(".json") else parse_yaml(decode(data, src), src)


def targets_of(doc: Any, src: str) -> Targets:
    """The targets of a targets file's data (``targets_document``), in either format."""
    if doc is None:
        raise ConfigError(src, "", f"the file is empty; expected {_EXPECTED}")
    if isinstance(doc, list):
        return _file_sd(src, doc)
    if not isinstance(doc, dict):
        raise ConfigError(src, "", f"expected {_EXPECTED}, got a {type(doc).__name__}")
    if not isinstance(doc.get("targets", []), list):
        raise ConfigError(src, "targets", "expected a list of {deployment, replica, url}")
    out = []
    for i, t in enumerate(doc.get("targets") or []):
        key = f"targets[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(src, key, "expected a mapping")
        unknown = sorted(set(t) - {"deployment", "replica", "url", "engine", "model"}, key=str)
        if unknown:
            raise ConfigError(src, f"{key}.{unknown[0]}", "unknown key; allowed: deployment, replica, url, engine, model")
        if not isinstance(t.get("url"), str):
            raise ConfigError(src, f"{key}.url", "is required (a string)")
        out.append((f"{key}.replica", _target(src, key, t.get("deployment"), t.get("replica"), t["url"],
                                              t.get("engine", "auto"), t.get("model"), f"{key}.url")))
    desired = {}
    deps = doc.get("deployments") or {}
    if not isinstance(deps, dict):
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> {desired_replicas: N}")
    for name, d in deps.items():
        key = f"deployments.{name}"
        if not isinstance(d, dict):
            raise ConfigError(src, key, "expected a mapping {desired_replicas: N}")
        desired[_label_value(src, key, str(name))] = _count(src, f"{key}.desired_replicas", d.get("desired_replicas"))
    return Targets(_unique(src, out), desired)


_EXPECTED = "a mapping with a 'targets' list, or a Prometheus file_sd list of {targets, labels}"
_ADDRESS = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")


def _file_sd(src: str, groups: list) -> Targets:
    """Prometheus file_sd groups: each address becomes a target ``{__scheme__}://ADDRESS{__metrics_path__}`` with
    the group's ``deployment`` (required), ``engine``, ``model`` and ``replica`` labels (``replica`` defaults to the
    address, as Prometheus' ``instance`` does); other labels are Prometheus' and not read."""
    out = []
    for i, g in enumerate(groups):
        key = f"[{i}]"
        if not isinstance(g, dict):
            raise ConfigError(src, key, "expected a mapping {targets: [host:port, ...], labels: {...}}")
        unknown = sorted(set(g) - {"targets", "labels"}, key=str)
        if unknown:
            raise ConfigError(src, f"{key}.{unknown[0]}", "unknown key; allowed: targets, labels")
        addresses, lab = g.get("targets"), g.get("labels") or {}
        if not isinstance(addresses, list):
            raise ConfigError(src, f"{key}.targets", "is required (a list of host:port)")
        if not isinstance(lab, dict) or not all(isinstance(v, str) for v in lab.values()):
            raise ConfigError(src, f"{key}.labels", "expected a mapping of label name -> string")
        if "replica" in lab and len(addresses) > 1:
            raise ConfigError(src, f"{key}.labels.replica", "names one replica but the group has several targets")
        scheme, path = lab.get("__scheme__", "http"), lab.get("__metrics_path__", "/metrics")
        if scheme not in ("http", "https"):
            raise ConfigError(src, f"{key}.labels.__scheme__", f"must be http or https; got {scheme!r}")
        if not path.startswith("/"):
            raise ConfigError(src, f"{key}.labels.__metrics_path__", f"must start with '/'; got {path!r}")
        for j, addr in enumerate(addresses):
            where = f"{key}.targets[{j}]"
            if not isinstance(addr, str) or not _ADDRESS.fullmatch(addr):
                raise ConfigError(src, where, f"expected host:port, got {addr!r}")
            out.append((where, _target(src, f"{key}.labels", lab.get("deployment"), lab.get("replica", addr),
                                       f"{scheme}://{addr}{path}", lab.get("engine", "auto"), lab.get("model"), where)))
    return Targets(_unique(src, out), {})


def _target(src: str, key: str, deployment: object, replica: object, url: str, engine: object, model: object,
            url_key: str) -> Target:
    """One checked target; ``key`` prefixes the fields' names in errors, ``url_key`` names where the URL came from."""
    deployment = _label_value(src, f"{key}.deployment", deployment)
    replica = _label_value(src, f"{key}.replica", replica)
    url = _url(src, url_key, url)
    if engine not in ("auto", *DIALECTS):
        raise ConfigError(src, f"{key}.engine", f"must be auto or one of {', '.join(DIALECTS)}; got {engine!r}")
    model = _label_value(src, f"{key}.model", model) if model is not None else None
    return Target(deployment, replica, url, engine, model)


def _unique(src: str, targets: list[tuple[str, Target]]) -> tuple[Target, ...]:
    """The targets, or ``ConfigError`` at the entry (``where``) that repeats a (deployment, replica) pair."""
    seen = set()
    for where, t in targets:
        if (t.deployment, t.replica) in seen:
            raise ConfigError(src, where, f"duplicate replica {t.replica!r} in {t.deployment!r}")
        seen.add((t.deployment, t.replica))
    return tuple(t for _, t in targets)


@dataclass(frozen=True)
class Plan:
    """A capacity plan: per deployment the per-replica SLO goodput (tokens/s) and, optionally, desired replicas and
    the cold start it was sized on (``cold_start_s``, else ``headroom_inputs.cold_start_s`` as `plan replicas`
    writes it).

    File format (YAML)::

        plan_version: 1
        deployments:
          chat-8b-h100: {replica_goodput_tokens_per_second: 5200, desired_replicas: 4, cold_start_s: 180}
    """

    goodput: dict[str, float]
    desired: dict[str, int]
    cold_start: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PlanEntry:
    """One deployment of a plan.yaml: the keys every reader of it needs, checked, and the entry as written, whose
    other keys (those ``plan replicas`` writes beside them) are for the readers that use them to check."""

    name: str
    key: str  # where the entry sits, for an error: ``deployments.NAME``
    goodput_tokens_per_s: float
    desired_replicas: int | None  # None: the plan leaves it out
    fields: dict[str, Any]


def read_plan(path: str | Path) -> list[PlanEntry]:
    """The deployments of the plan at ``path``, in file order: the file read within its size and nesting limits,
    each entry a mapping named by a label value, with a finite ``replica_goodput_tokens_per_second`` > 0 and, if
    given, a non-negative ``desired_replicas``; anything else is one ``ConfigError`` line naming the key."""
    src = str(path)
    data = load_mapping(path, PLAN_EXPECTED)
    if not isinstance(data.get("deployments"), dict):
        raise ConfigError(src, "deployments", "expected a mapping of deployment -> plan")
    out = []
    for name, d in data["deployments"].items():
        key = f"deployments.{name}"
        if not isinstance(d, dict):
            raise ConfigError(src, key, "expected a mapping")
        dep = _label_value(src, key, str(name))
        g = d.get("replica_goodput_tokens_per_second")
        if not isinstance(g, (int, float)) or isinstance(g, bool) or not math.isfinite(g) or g <= 0:
            raise ConfigError(src, f"{key}.replica_goodput_tokens_per_second", f"expected a finite number > 0, got {g!r}")
        desired = _count(src, f"{key}.desired_replicas", d["desired_replicas"]) if "desired_replicas" in d else None
        out.append(PlanEntry(dep, key, float(g), desired, d))
    return out


def load_plan(path: str | Path) -> Plan:
    """The engine exporter's view of a plan: per deployment its goodput and, where given, its desired replicas."""
    entries = read_plan(path)
    cold = {e.name: c for e in entries if (c := plan_cold_start(str(path), e)) is not None}
    return Plan({e.name: e.goodput_tokens_per_s for e in entries},
                {e.name: e.desired_replicas for e in entries if e.desired_replicas is not None}, cold)


def plan_cold_start(src: str, e: PlanEntry) -> float | None:
    """The cold start (s) ``e`` was sized on: its ``cold_start_s``, else its ``headroom_inputs.cold_start_s``."""
    inputs = e.fields.get("headroom_inputs")
    if "cold_start_s" in e.fields:
        key, v = f"{e.key}.cold_start_s", e.fields["cold_start_s"]
    elif isinstance(inputs, dict) and "cold_start_s" in inputs:
        key, v = f"{e.key}.headroom_inputs.cold_start_s", inputs["cold_start_s"]
    else:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ConfigError(src, key, f"expected a finite number of seconds >= 0, got {v!r}")
    return float(v)
