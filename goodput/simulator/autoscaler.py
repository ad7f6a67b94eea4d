"""An autoscaler in the simulator's loop: the signals Prometheus would record, sampled every scrape interval,
turned into a replica count the way a Kubernetes HPA does (stabilisation windows, rate limits, min / max), and
acted on with cold starts, a warm pool and draining.

Signals, per deployment, over the last ``window_s`` (the recording rules' rate window):

- demand  ceil(tokens/s / per-replica SLO goodput x redundancy)   input tokens at arrival, output at completion
- kv      ceil(ready replicas x mean KV usage / KV target)
- queue   ceil(ready replicas x queue wait now / target), only while it is over its target: the age of the
          oldest request waiting now, at the gateway or in an engine and not yet scheduled, as a rule reads the
          catalog's llm_gateway_oldest_queued_age_seconds at the scrape. It falls as a backlog drains, where the p95
          of the waits observed in the window (``queue_wait_p95_s``, still sampled) stays high for the window after:
          read by the vote, it kept scaling up while the added replicas were already serving the backlog
- waiting ceil(requests waiting in the engines / target per replica)
- inflight ceil(requests in the engines, running or waiting / what one replica held at its SLO knee)
- utilisation  ceil(ready replicas x mean GPU_UTIL / target)       (the baselines we compare against, read as
- sm_active    ceil(ready replicas x mean SM activity / target)     goodput/simulator/gpu_readings.py models them)

A ``signals`` policy takes the maximum of the first five, a ``utilisation`` or ``sm_active`` policy only its own
signal, ``static`` holds its replicas. Scaling down drains: the replica takes no new requests, finishes what it has (at most
``drain_s``, then aborts the rest) and is gone. Each decision that changes the count is a ``scale`` release of the
fleet (``Fleet.releases``: from / to replicas), a cause the analyzer knows. GPU-seconds count every replica from
the moment it is asked for until it is gone, warm-pool replicas included.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from goodput.simulator.gpu_readings import replica_reading
from goodput.simulator.tally import ScrapeCounts

__all__ = ["KINDS", "Autoscaler", "ScalingPolicy", "Sample"]

KINDS = ("signals", "utilisation", "sm_active", "static")
UTILISATION_KINDS = ("utilisation", "sm_active")  # the baselines: each scales on the signal of its name
# queue-wait histogram bounds when the caller has none (the request exporter's are passed in by goodput plan)
DEFAULT_WAIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class ScalingPolicy:
    kind: str
    min_replicas: int
    max_replicas: int
    goodput_tokens_per_s: float = 1.0  # per replica, from the plan
    redundancy: float = 1.2
    queue_target_s: float = 0.5
    kv_target_ratio: float = 0.8
    waiting_per_replica: float = 8.0
    inflight_per_replica: float = 0.0  # 0: no in-flight signal
    utilisation_target: float = 0.8
    scrape_interval_s: float = 15.0
    window_s: float = 60.0
    scale_up_stabilisation_s: float = 0.0
    scale_up_replicas: int = 4  # at most this many added per scale_up_period_s
    scale_up_period_s: float = 60.0
    scale_down_stabilisation_s: float = 600.0  # the cooldown: scale down to the highest recommendation of this window
    scale_down_replicas: int = 1
    scale_down_period_s: float = 300.0
    drain_s: float = 120.0
    cold_start_s: float = 180.0
    warm_pool: int = 0  # replicas kept loaded, ready after warm_start_s
    warm_start_s: float = 20.0


@dataclass
class Sample:
    t: float
    ready: int
    provisioned: int  # asked for and not gone (starting, ready, draining)
    desired: int
    signals: dict[str, float]


@dataclass
class _Window:
    """Per-scrape buckets of what happened, kept for ``span`` scrapes; ``waits`` sums the queue-wait histograms
    in the window (counts: adding and removing them is exact)."""

    span: int
    n_bounds: int
    tokens: deque = field(default_factory=deque)
    hists: deque = field(default_factory=deque)
    waits: list = field(default_factory=list)
    n_hists: int = 0

    def __post_init__(self) -> None:
        self.waits = [0] * (self.n_bounds + 1)

    def push(self, tokens: float, hist: list[int] | None) -> None:
        self.tokens.append(tokens)
        self.hists.append(hist)
        self._count(hist, 1)
        while len(self.tokens) > self.span:
            self.tokens.popleft()
            self._count(self.hists.popleft(), -1)

    def _count(self, hist: list[int] | None, sign: int) -> None:
        if hist is not None:
            self.waits = [w + sign * c for w, c in zip(self.waits, hist, strict=True)]
            self.n_hists += sign


class Autoscaler:
    """Drives ``fleet`` one scrape interval at a time, scaling deployment ``name`` by ``policy``."""

    def __init__(self, fleet, name: str, policy: ScalingPolicy, tp: int = 1,
                 wait_buckets: tuple[float, ...] = DEFAULT_WAIT_BUCKETS) -> None:
        if policy.kind not in KINDS:
            raise ValueError(f"policy kind must be one of {KINDS}, got {policy.kind!r}")
        self.fleet, self.policy, self.tp = fleet, policy, tp
        self._bounds = tuple(float(b) for b in wait_buckets)
        self.dep = fleet.by_name[name]
        self.samples: list[Sample] = []
        self.gpu_seconds = 0.0
        self._finished = ScrapeCounts(self.dep.index, tuple(wait_buckets))
        fleet.watch(self._finished)
        self._arr_seen = fleet.next_arrival
        self._win = _Window(max(1, round(policy.window_s / policy.scrape_interval_s)), len(wait_buckets))
        self._recs: deque[tuple[float, int]] = deque()  # (t, recommendation)
        self._events: deque[tuple[float, int]] = deque()  # (t, +added / -removed)
        self._draining: dict[int, float] = {}  # replica index -> drain deadline
        self._alive: list = []  # the deployment's alive replicas in index order (its list keeps the dead ones too)
        self._known = 0  # replicas of the deployment seen so far
        self._warm_ready_at: list[float] = [0.0] * policy.warm_pool  # when each warm slot is loaded again
        self.target = len(self._serving())  # the replica count last decided (a ReplicaSet restores lost ones)
        a = fleet.arrivals
        mine = np.isin(a.workload, [i for i, d in enumerate(fleet.workload_deployment) if d == self.dep.index])
        self._arr_prompt = np.where(mine, a.prompt, 0).astype(float)

    # ------------------------------------------------------------------ state

    def _live(self) -> list:
        reps = self.dep.replicas
        if len(reps) > self._known:  # added since (by this autoscaler or by a fleet event)
            self._alive += reps[self._known:]
            self._known = len(reps)
        self._alive = [r for r in self._alive if r.alive]
        return self._alive

    def _serving(self) -> list:
        """Replicas counted as the deployment's current size: alive and not draining."""
        return [r for r in self._live() if r.index not in self._draining]

    # ------------------------------------------------------------------ signals

    def _observe(self, t: float) -> dict[str, float]:
        p = self.policy
        out_tokens, counts = self._finished.take()
        end = self.fleet.next_arrival
        in_tokens = float(self._arr_prompt[self._arr_seen:end].sum())
        self._arr_seen = end
        self._win.push(in_tokens + out_tokens, counts)
        span_s = len(self._win.tokens) * p.scrape_interval_s
        tokens_per_s = sum(self._win.tokens) / span_s
        ready = [r for r in self._serving() if r.available_from <= t]
        n = len(ready)
        kv = sum(r.kv_usage for r in ready) / n if n else 0.0
        waiting = sum(r.n_waiting for r in ready)
        inflight = waiting + sum(len(r.running) for r in ready)
        since = min((r.queued_since() for r in self._live()), default=math.inf)  # draining ones still queue
        if self.fleet.gateway is not None:
            since = min(since, self.fleet.gateway.queued_since(self.dep.index))
        readings = [replica_reading(r) for r in ready]
        util = sum(g.gpu_util for g in readings) / n if n else 0.0
        sm = sum(g.sm_active for g in readings) / n if n else 0.0
        return {"tokens_per_s": tokens_per_s, "queue_wait_p95_s": self._wait_quantile(0.95),
                "queue_wait_now_s": t - since if since < math.inf else 0.0, "kv_usage": kv,
                "waiting": float(waiting), "inflight": float(inflight), "utilisation": util, "sm_active": sm,
                "ready": float(n)}

    def _wait_quantile(self, q: float) -> float:
        """``histogram_quantile`` over the window's queue-wait buckets: linear within the bucket, the highest
        finite bound when the quantile falls in +Inf, 0 without observations."""
        if not self._win.n_hists:
            return 0.0
        cum = list(accumulate(self._win.waits))
        rank = q * cum[-1]
        i = bisect_left(cum, rank)
        bounds = self._bounds
        if i >= len(bounds):
            return bounds[-1]
        lo, below = (bounds[i - 1], cum[i - 1]) if i > 0 else (0.0, 0.0)
        in_bucket = cum[i] - below
        return lo + (bounds[i] - lo) * ((rank - below) / in_bucket if in_bucket else 1.0)

    def recommend(self, s: dict[str, float]) -> int:
        """The raw replica count the policy asks for, before stabilisation and limits."""
        p, n = self.policy, max(1, int(s["ready"]))
        if p.kind == "static":
            return p.min_replicas
        if p.kind in UTILISATION_KINDS:
            return math.ceil(n * s[p.kind] / p.utilisation_target - 1e-9)
        return max(
            math.ceil(s["tokens_per_s"] / p.goodput_tokens_per_s * p.redundancy - 1e-9),
            math.ceil(n * s["kv_usage"] / p.kv_target_ratio - 1e-9),
            # only a queue over its target votes: "max(wait / target, 1)" would never let the count fall
            math.ceil(n * s["queue_wait_now_s"] / p.queue_target_s - 1e-9) if s["queue_wait_now_s"] > p.queue_target_s
            else 1,
            math.ceil(s["waiting"] / p.waiting_per_replica - 1e-9),
            math.ceil(s["inflight"] / p.inflight_per_replica - 1e-9) if p.inflight_per_replica > 0 else 1,
            1,
        )

    def _decide(self, t: float, rec: int, current: int) -> int:
        """HPA v2 behaviour: clamp, stabilise (up: lowest of the up window; down: highest of the down window),
        then rate-limit by the replicas changed within each policy period."""
        p = self.policy
        rec = min(max(rec, p.min_replicas), p.max_replicas)
        self._recs.append((t, rec))
        horizon = max(p.scale_up_stabilisation_s, p.scale_down_stabilisation_s)
        while self._recs and self._recs[0][0] < t - horizon:
            self._recs.popleft()
        up = min(r for tt, r in self._recs if tt >= t - p.scale_up_stabilisation_s)
        down = max(r for tt, r in self._recs if tt >= t - p.scale_down_stabilisation_s)
        while self._events and self._events[0][0] < t - max(p.scale_up_period_s, p.scale_down_period_s):
            self._events.popleft()
        if up > current:
            added = sum(d for tt, d in self._events if d > 0 and tt >= t - p.scale_up_period_s)
            return min(up, current + max(0, p.scale_up_replicas - added))
        if down < current:
            removed = -sum(d for tt, d in self._events if d < 0 and tt >= t - p.scale_down_period_s)
            return max(down, current - max(0, p.scale_down_replicas - removed))
        return current

    # ------------------------------------------------------------------ acting

    def _scale_up(self, t: float, k: int) -> None:
        p = self.policy
        for _ in range(k):
            slot = next((i for i, ready in enumerate(self._warm_ready_at) if ready <= t), None)
            if slot is not None:  # a warm replica: fast start, and the pool reloads behind it
                start = p.warm_start_s
                self._warm_ready_at[slot] = t + p.cold_start_s
            else:
                start = p.cold_start_s
            self.fleet.add_replica(self.dep, t + start, t, note=f"scaled by the {p.kind} policy")

    def _scale_down(self, t: float, k: int) -> None:
        """Drain the ``k`` newest serving replicas (starting ones first: they hold no requests)."""
        serving = sorted(self._serving(), key=lambda r: (-r.available_from, -r.index))
        for r in serving[:k]:
            self._draining[r.index] = t + self.policy.drain_s
            self.fleet.drain_replica(self.dep, r.index, t, note=f"scaled by the {self.policy.kind} policy")

    def _retire(self, t: float) -> None:
        for idx, deadline in list(self._draining.items()):
            if self.dep.replicas[idx].outstanding == 0 or t >= deadline:
                self.fleet.retire_replica(self.dep, idx, t)
                del self._draining[idx]

    # ------------------------------------------------------------------ loop

    def run(self, until: float, progress: Callable[[float], None] | None = None) -> None:
        """Advance the fleet to ``until``, deciding at every scrape."""
        p = self.policy
        t = self.fleet.now
        while t < until:
            t_next = min(until, t + p.scrape_interval_s)
            provisioned = len(self._live()) + len(self._warm_ready_at)
            self.fleet.run(t_next)
            self.gpu_seconds += provisioned * self.tp * (t_next - t)
            t = t_next
            self._retire(t)
            s = self._observe(t)
            current = self.target
            desired = p.min_replicas if p.kind == "static" else self._decide(t, self.recommend(s), current)
            if desired != current:
                self._events.append((t, desired - current))
            self.target = desired
            serving = len(self._serving())
            if desired > serving:
                self._scale_up(t, desired - serving)
            elif desired < serving:
                self._scale_down(t, serving - desired)
            self.samples.append(Sample(t, int(s["ready"]), len(self._live()), desired, s))
            if progress is not None:
                progress(t)
