"""GPU prices in dollars per GPU-hour: the dated defaults shipped with goodput, overridden by a user's file."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping

__all__ = ["Price", "Prices", "load_prices"]

DEFAULTS = "prices.yaml"


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    source: str
    as_of: str


@dataclass(frozen=True)
class Prices:
    by_gpu: dict[str, Price]

    def get(self, gpu: str) -> Price | None:
        return self.by_gpu.get(gpu)

    def usd_per_gpu_hour(self, gpu: str) -> float | None:
        """The GPU's hourly price, None where none is known."""
        price = self.by_gpu.get(gpu)
        return None if price is None else price.usd_per_gpu_hour


def _parse(data: dict, src: str) -> dict[str, Price]:
    extra = sorted(set(data) - {"as_of", "gpus"})
    if extra:
        raise ConfigError(src, extra[0], "unknown key; allowed: as_of, gpus")
    as_of = data.get("as_of", "")
    if not isinstance(as_of, str) or not as_of:
        raise ConfigError(src, "as_of", f"expected the date the prices were read, e.g. \"2026-03\", got {as_of!r}")
    gpus = data.get("gpus")
    if not isinstance(gpus, dict):
        raise ConfigError(src, "gpus", "expected a mapping of GPU name -> {usd_per_gpu_hour, source}")
    out = {}
    for name, d in gpus.items():
        key = f"gpus.{name}"
        if not isinstance(d, dict):
            raise ConfigError(src, key, "expected a mapping with usd_per_gpu_hour and source")
        extra = sorted(set(d) - {"usd_per_gpu_hour", "source"})
        if extra:
            raise ConfigError(src, f"{key}.{extra[0]}", "unknown key; allowed: source, usd_per_gpu_hour")
        v = d.get("usd_per_gpu_hour")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ConfigError(src, f"{key}.usd_per_gpu_hour", f"expected a finite number > 0, got {v!r}")
        source = d.get("source")
        if not isinstance(source, str) or not source:
            raise ConfigError(src, f"{key}.source", "expected where the price comes from (a URL or a note)")
        out[str(name)] = Price(float(v), source, as_of)
    return out


def load_prices(path: str | Path | None = None) -> Prices:
    """The shipped defaults, with ``path``'s entries (if given) in their place."""
    text = resources.files("goodput.plan.data").joinpath(DEFAULTS).read_text(encoding="utf-8")
    by_gpu = _parse(yaml.safe_load(text), f"goodput/plan/data/{DEFAULTS}")
    if path is not None:
        by_gpu.update(_parse(load_mapping(path, "a mapping with as_of and gpus"), str(path)))
    return Prices(by_gpu)
