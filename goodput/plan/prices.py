"""GPU prices in dollars per GPU-hour: the dated defaults shipped with goodput, overridden by a user's file.

Each GPU's top-level ``usd_per_gpu_hour`` is its on-demand price; ``reserved:`` and ``spot:`` blocks (each
``{usd_per_gpu_hour, source}``) add the other pricings where a price is known. A GPU with no block for a pricing has
no price at that pricing (no cost shown), never one derived from another pricing. A user's file replaces whole GPU
entries: its H100 entry, without a ``spot:`` block, leaves the H100 with no spot price.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping

__all__ = ["ON_DEMAND", "PRICINGS", "Price", "Prices", "load_price_tables", "load_prices"]

DEFAULTS = "prices.yaml"
ON_DEMAND = "on_demand"
PRICINGS = (ON_DEMAND, "reserved", "spot")  # on-demand, a 1-year reservation or commitment, interruptible capacity


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    source: str
    as_of: str


@dataclass(frozen=True)
class Prices:
    """The prices of one pricing (``on_demand``, ``reserved`` or ``spot``) by GPU."""

    by_gpu: dict[str, Price]
    pricing: str = ON_DEMAND

    def get(self, gpu: str) -> Price | None:
        return self.by_gpu.get(gpu)

    def usd_per_gpu_hour(self, gpu: str) -> float | None:
        """The GPU's hourly price, None where none is known."""
        price = self.by_gpu.get(gpu)
        return None if price is None else price.usd_per_gpu_hour


def _price(d: dict, src: str, key: str, as_of: str, blocks: tuple[str, ...]) -> Price:
    """A ``{usd_per_gpu_hour, source}`` mapping (with the pricing ``blocks`` too at a GPU's top level)."""
    allowed = sorted({"usd_per_gpu_hour", "source", *blocks})
    extra = sorted(set(d) - set(allowed))
    if extra:
        raise ConfigError(src, f"{key}.{extra[0]}", f"unknown key; allowed: {', '.join(allowed)}")
    v = d.get("usd_per_gpu_hour")
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ConfigError(src, f"{key}.usd_per_gpu_hour", f"expected a finite number > 0, got {v!r}")
    source = d.get("source")
    if not isinstance(source, str) or not source:
        raise ConfigError(src, f"{key}.source", "expected where the price comes from (a URL or a note)")
    return Price(float(v), source, as_of)


def _parse(data: dict, src: str) -> dict[str, dict[str, Price]]:
    """GPU -> pricing -> price, as the file ``src`` gives them."""
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
        entry = {ON_DEMAND: _price(d, src, key, as_of, PRICINGS[1:])}
        for p in PRICINGS[1:]:
            if p in d:
                if not isinstance(d[p], dict):
                    raise ConfigError(src, f"{key}.{p}", "expected a mapping with usd_per_gpu_hour and source")
                entry[p] = _price(d[p], src, f"{key}.{p}", as_of, ())
        out[str(name)] = entry
    return out


def load_price_tables(path: str | Path | None = None) -> dict[str, Prices]:
    """Every pricing's prices (each of ``PRICINGS``, empty where no GPU has one): the shipped defaults, with
    ``path``'s GPU entries (if given) in their place."""
    text = resources.files("goodput.plan.data").joinpath(DEFAULTS).read_text(encoding="utf-8")
    entries = _parse(yaml.safe_load(text), f"goodput/plan/data/{DEFAULTS}")
    if path is not None:
        entries.update(_parse(load_mapping(path, "a mapping with as_of and gpus"), str(path)))
    return {p: Prices({g: e[p] for g, e in entries.items() if p in e}, p) for p in PRICINGS}


def load_prices(path: str | Path | None = None, pricing: str = ON_DEMAND) -> Prices:
    """One pricing's prices (on-demand unless told) from the shipped defaults and ``path``."""
    if pricing not in PRICINGS:
        raise ConfigError("--pricing", pricing, f"unknown pricing; known: {', '.join(PRICINGS)}")
    return load_price_tables(path)[pricing]
