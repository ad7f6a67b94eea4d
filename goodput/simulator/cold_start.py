"""A replica's cold start, phase by phase: what an added replica waits through before it serves.

A deployment's ``cold_start`` in the fleet file (docs/simulator.md) gives each phase; the weights load follows from
the model's size (the deployment's weight bytes over all TP ranks) and where the weights come from (a local cache or
a remote store), and ``spread`` draws each phase from a log-normal around its median, so a deployment's replicas do
not all take the same time. Scheduling and image pull come before the engine's process starts; weights load and
engine start (CUDA graph capture, warm-up) after it, until the engine answers: that is the part the engine exporter
measures from ``process_start_time_seconds`` to its first good scrape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ColdStart", "ColdStartModel"]

GB = 1e9


@dataclass(frozen=True)
class ColdStart:
    """One replica's cold start in virtual seconds."""

    scheduling_s: float = 0.0  # node allocation and pod scheduling
    image_pull_s: float = 0.0  # the serving image, when the node has not pulled it
    weights_load_s: float = 0.0  # the process has started: weights from the cache or the store to the GPUs
    engine_start_s: float = 0.0  # engine start and warm-up (CUDA graphs) until it answers

    @property
    def before_process_s(self) -> float:
        return self.scheduling_s + self.image_pull_s

    @property
    def in_process_s(self) -> float:
        """From the engine process's start to its answering: what ``llm_replica_cold_start_seconds`` measures."""
        return self.weights_load_s + self.engine_start_s

    @property
    def total_s(self) -> float:
        return self.before_process_s + self.in_process_s

    @staticmethod
    def in_process(seconds: float) -> ColdStart:
        """An event's or the admin API's single ``cold_start_s``: all of it after the process starts."""
        return ColdStart(engine_start_s=seconds)

    def as_dict(self) -> dict[str, float]:
        return {"scheduling_s": self.scheduling_s, "image_pull_s": self.image_pull_s,
                "weights_load_s": self.weights_load_s, "engine_start_s": self.engine_start_s}


@dataclass(frozen=True)
class ColdStartModel:
    """A deployment's cold-start phases (medians) and how much they vary."""

    scheduling_s: float = 0.0
    image_pull_s: float = 0.0  # 0: the image is pre-pulled on the nodes
    weights_cached: bool = True  # weights on a local cache (NVMe, page cache) rather than a remote store
    cache_gb_per_s: float = 2.0
    remote_gb_per_s: float = 0.4
    engine_start_s: float = 0.0
    spread: float = 0.0  # sigma of each phase's log-normal; 0: every replica takes the medians

    def median(self, weight_bytes: float) -> ColdStart:
        rate = self.cache_gb_per_s if self.weights_cached else self.remote_gb_per_s
        return ColdStart(self.scheduling_s, self.image_pull_s, weight_bytes / (rate * GB), self.engine_start_s)

    def sample(self, weight_bytes: float, rng: np.random.Generator) -> ColdStart:
        m = self.median(weight_bytes)
        if self.spread <= 0:
            return m
        f = np.exp(rng.normal(0.0, self.spread, 4))
        return ColdStart(m.scheduling_s * f[0], m.image_pull_s * f[1], m.weights_load_s * f[2],
                         m.engine_start_s * f[3])
