"""Offline simulation of a fleet in virtual time, and the files it writes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from goodput.simulator.config import FleetConfig
from goodput.simulator.fleet import Fleet
from goodput.simulator.records import RequestTable
from goodput.simulator.releases import write_releases
from goodput.simulator.spans import write_spans
from goodput.simulator.workload import generate

__all__ = ["SimulationResult", "simulate", "write_outputs"]


@dataclass
class SimulationResult:
    fleet: Fleet
    table: RequestTable
    duration: float
    wall_s: float
    arrivals: int

    @property
    def speedup(self) -> float:
        return self.fleet.now / self.wall_s if self.wall_s > 0 else float("inf")


def simulate(cfg: FleetConfig, duration: float, seed: int | None = None, drain_s: float = 600.0,
             progress: Callable[[float], None] | None = None, max_run_steps: int = 1 << 60) -> SimulationResult:
    """Generate arrivals for ``duration`` seconds, run the fleet, let in-flight work drain (at most ``drain_s``)."""
    seed = cfg.seed if seed is None else seed
    arrivals = generate(cfg, duration, seed)
    fleet = Fleet(cfg, arrivals, max_run_steps=max_run_steps)
    t0 = time.perf_counter()
    fleet.run(duration, progress)
    fleet.drain(duration + drain_s, progress)
    wall = time.perf_counter() - t0
    return SimulationResult(fleet, RequestTable(cfg, fleet.done, seed), duration, wall, len(arrivals))


def write_outputs(result: SimulationResult, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"requests": out / "requests.parquet", "spans": out / "spans.otlp.jsonl", "releases": out / "releases.yaml"}
    result.table.write_parquet(paths["requests"])
    write_spans(result.table, paths["spans"])
    write_releases(result.fleet.releases, result.fleet.cfg.start_time, paths["releases"])
    return paths
