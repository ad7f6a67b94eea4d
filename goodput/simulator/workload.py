"""Turn workload profiles into a stream of requests: when each arrives, its tokens, tenant and prefix.

Generation is vectorised per workload (numpy), then merged by the time each request reaches its
deployment. Releases that change prompts (a template that scales input length) are applied here,
to requests arriving after the release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from goodput.simulator.arrivals import arrival_times
from goodput.simulator.config import EventConfig, FleetConfig, WorkloadConfig
from goodput.simulator.traces import Trace, load_trace

__all__ = ["Arrivals", "generate", "scaled"]


@dataclass
class Arrivals:
    """Column arrays, one row per request, sorted by ``queue_start``."""

    arrival: np.ndarray  # gateway receipt, seconds
    queue_start: np.ndarray  # reaches the engine
    workload: np.ndarray
    tenant: np.ndarray  # index into the workload's tenants
    prompt: np.ndarray
    output: np.ndarray  # tokens the model would generate before stopping (capped by max_tokens)
    natural_stop: np.ndarray  # False when max_tokens cut it (finish_reason length)
    send_s: np.ndarray
    prefix: list  # per row: tuple of prefix-block keys or None
    prefix_block_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival)

    def select(self, rows: np.ndarray) -> Arrivals:
        """The given rows (indices or a boolean mask), in that order."""
        idx = np.nonzero(rows)[0] if rows.dtype == bool else rows
        return Arrivals(**{k: getattr(self, k)[idx] for k in _ARRAYS}, prefix=[self.prefix[i] for i in idx])

    def shifted(self, dt: float) -> Arrivals:
        out = self.select(np.arange(len(self)))
        out.arrival = out.arrival + dt
        out.queue_start = out.queue_start + dt
        return out

    @staticmethod
    def concat(parts: list[Arrivals]) -> Arrivals:
        """All rows of ``parts``, sorted by ``queue_start``."""
        cols = {k: np.concatenate([getattr(p, k) for p in parts]) for k in _ARRAYS}
        prefix = [x for p in parts for x in p.prefix]
        order = np.argsort(cols["queue_start"], kind="stable")
        return Arrivals(**{k: v[order] for k, v in cols.items()}, prefix=[prefix[i] for i in order])


_ARRAYS = ("arrival", "queue_start", "workload", "tenant", "prompt", "output", "natural_stop", "send_s",
           "prefix_block_tokens")


def _release_scale(events: tuple[EventConfig, ...], wl: WorkloadConfig, times: np.ndarray, effect: str) -> np.ndarray:
    scale = np.ones(len(times))
    for ev in events:
        if ev.kind != "release" or ev.deployment not in ("*", wl.deployment):
            continue
        if ev.workload is not None and ev.workload != wl.name:
            continue
        f = ev.effect(effect)
        if f != 1.0:
            scale = np.where(times >= ev.at, scale * f, scale)
    return scale


def _trace_rows(trace: Trace, time_scale: float, loop: bool, duration: float) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times and row indices into the trace covering [0, duration)."""
    t = trace.times / time_scale
    period = (trace.span_s / time_scale) + (float(np.mean(np.diff(t))) if len(t) > 1 else 1.0)
    times, rows, k = [], [], 0
    while True:
        offset = k * period
        if offset >= duration or (k > 0 and not loop):
            break
        keep = t + offset < duration
        times.append(t[keep] + offset)
        rows.append(np.nonzero(keep)[0])
        k += 1
    if not times:
        return np.empty(0), np.empty(0, dtype=np.int64)
    return np.concatenate(times), np.concatenate(rows)


def generate(fleet: FleetConfig, duration: float, seed: int) -> Arrivals:
    rng = np.random.default_rng(seed)
    parts = []
    traces: dict[tuple[str, str], Trace] = {}
    for w_idx, wl in enumerate(fleet.workloads):
        dep = fleet.deployment(wl.deployment)
        prefix_block = 16
        prefixes: list | None = None
        if wl.trace is not None:
            key = (wl.trace.path, wl.trace.format)
            if key not in traces:
                traces[key] = load_trace(*key)
            trace = traces[key]
            times, rows = _trace_rows(trace, wl.trace.time_scale, wl.trace.loop, duration)
            prompt = trace.input_tokens[rows].astype(np.int64)
            natural = trace.output_tokens[rows].astype(np.int64)
            if trace.hash_ids is not None:
                prefix_block = trace.block_tokens
                cache: dict[int, tuple] = {}
                prefixes = []
                for r in rows.tolist():
                    if r not in cache:
                        cache[r] = tuple((w_idx, h) for h in trace.hash_ids[r])
                    prefixes.append(cache[r])
        else:
            assert wl.arrival is not None and wl.input_tokens is not None and wl.output_tokens is not None, \
                "parse_fleet requires them of a workload without a trace"
            times = arrival_times(wl.arrival, duration, rng)
            prompt = wl.input_tokens.sample(rng, len(times))
            natural = wl.output_tokens.sample(rng, len(times))
        n = len(times)
        if n == 0:
            continue
        prompt = np.maximum(1, np.rint(prompt * _release_scale(fleet.events, wl, times, "input_scale"))).astype(np.int64)
        natural = np.maximum(1, np.rint(natural * _release_scale(fleet.events, wl, times, "output_scale"))).astype(np.int64)
        if prefixes is None and wl.shared_prefix_tokens:
            shared = tuple((w_idx, k) for k in range(wl.shared_prefix_tokens // prefix_block))
            prefixes = [shared] * n
        shares = np.array([s for _, s in wl.tenants], dtype=float)
        tenant = rng.choice(len(shares), size=n, p=shares / shares.sum())
        gw = dep.gateway_latency_ms / 1000.0 * rng.lognormal(0.0, 0.25, n)
        send = dep.send_latency_ms / 1000.0 * rng.lognormal(0.0, 0.25, n)
        parts.append(dict(
            arrival=times, queue_start=times + gw, workload=np.full(n, w_idx), tenant=tenant,
            prompt=prompt, output=np.minimum(natural, wl.max_tokens), natural_stop=natural < wl.max_tokens,
            send_s=send, prefix=prefixes if prefixes is not None else [None] * n,
            prefix_block_tokens=np.full(n, prefix_block),
        ))
    if not parts:
        empty = np.empty(0)
        ints = empty.astype(np.int64)
        return Arrivals(empty, empty, ints, ints, ints, ints, empty.astype(bool), empty, [], ints)
    arrays = [Arrivals(**{k: p[k] for k in _ARRAYS}, prefix=p["prefix"]) for p in parts]
    return Arrivals.concat(arrays)


def scaled(fleet: FleetConfig, duration: float, seed: int, factor: float) -> Arrivals:
    """The fleet's workloads at ``factor`` times their rates: whole copies with other seeds, then thinning."""
    copies = max(1, int(np.ceil(factor)))
    parts = [generate(fleet, duration, seed + 7919 * k) for k in range(copies)]
    merged = Arrivals.concat(parts) if copies > 1 else parts[0]
    if factor >= copies:
        return merged
    keep = np.random.default_rng(seed).random(len(merged)) < factor / copies
    return merged.select(keep)
