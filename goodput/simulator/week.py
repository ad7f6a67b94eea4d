"""A compressed simulated week: a fleet's demand, capacity and latency per step, from a rate model.

Simulating every request of a real week would take hours, so this module does not: it evaluates the
fleet's rates step by step (one step per scrape, 60 s by default) and aggregates. Per workload the rate
is the fleet file's mix scaled so the first day's peak loads each deployment to ``peak_utilization`` of
its modelled capacity, times a diurnal profile (interactive tiers peak at 14:00 UTC on weekdays, the
offline tier at night), times a weekly growth factor, with a little seeded noise. A deployment's
capacity comes from the simulator's roofline (a replica's requests per second at its batch and the
workload's mean lengths); a fluid queue carries demand above capacity into the next steps. Latencies
are lognormal per step around the model's medians (queue wait from the backlog and an M/M/1 term,
prefill, decode per token), which is what histograms aggregated per step can carry.

Events: the fleet's releases happen mid-week (from ``release_at_h`` hours after Monday 00:00, six hours
apart) with their effects; its first ``replica_lost`` removes one replica of that deployment at
``loss_at_h`` for ``loss_hours``. The model knows the truth (releases, loss window, demand, growth),
which the review is tested against. Metric names are not this module's concern (the simulator sits
below the exporters' catalog); ``goodput.review.openmetrics`` writes the model as the catalog's series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypedDict

import numpy as np

from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import gpus
from goodput.simulator.config import DeploymentConfig, FleetConfig, WorkloadConfig
from goodput.simulator.roofline import Roofline

__all__ = ["MAX_TENANTS", "MAX_TENANT_POINTS", "MAX_WEEKS_BEFORE", "REJECT_REASONS", "Loss", "WeekModel", "WeekSpec",
           "WorkloadSeries", "parse_week", "simulate_week"]

WEEK_S = 7 * 86400
REJECT_REASONS = ("queue_full", "kv_capacity")
SIGMA = {"queue": 0.9, "prefill": 0.35, "tpot": 0.2}  # lognormal shape of each latency within a step


def parse_week(text: str, source: str = "--week") -> datetime:
    """``2026-W48`` -> that ISO week's Monday 00:00 UTC."""
    try:
        year, w = text.upper().split("-W")
        return datetime.fromisocalendar(int(year), int(w), 1).replace(tzinfo=UTC)
    except ValueError:
        raise ConfigError(source, "week", f"{text!r} is not an ISO week like 2026-W48") from None


MAX_WEEKS_BEFORE = 52  # the limits of `goodput week` (docs/review.md): checked before any array is made
MAX_TENANTS = 10_000  # per workload; the request exporter keeps 50 by default (--max-tenants)
MAX_TENANT_POINTS = 20_000_000  # steps x tenants: the lines of week.om, ~100 bytes each


@dataclass(frozen=True)
class WeekSpec:
    week: str
    weeks_before: int = 3  # history before the reviewed week (week-over-week change, forecast)
    step_s: int = 60
    growth_per_week: float = 0.06
    peak_utilization: float = 0.72
    tenants: int | None = None  # tenants per workload (Zipf shares); None keeps the fleet's
    release_at_h: float = 58.0  # Wednesday 10:00
    loss_at_h: float = 85.0  # Thursday 13:00, near the peak
    loss_hours: float = 3.0
    seed: int = 7


@dataclass
class WorkloadSeries:
    """One workload's per-step series (length = steps)."""

    workload: WorkloadConfig
    tenants: tuple[tuple[str, float], ...]
    arrivals: np.ndarray  # requests per step offered
    ok: np.ndarray
    timeout: np.ndarray
    rejected: dict[str, np.ndarray]
    input_tokens: np.ndarray  # per step, admitted requests
    output_tokens: np.ndarray
    queue_median: np.ndarray  # seconds
    ttft_median: np.ndarray
    tpot_median: np.ndarray
    e2e_median: np.ndarray


@dataclass
class DeploymentSeries:
    config: DeploymentConfig
    replica_capacity_tokens: float  # input + output tokens per second one replica finishes at the deployment's mix
    available: np.ndarray  # replicas per step
    utilization: np.ndarray  # offered work / capacity per step
    backlog: np.ndarray  # requests waiting per step
    kv_usage: np.ndarray
    preemptions: np.ndarray  # per step, whole deployment
    lost_replica: int | None = None


class Loss(TypedDict):
    """The replica lost during the week (the fleet's first ``replica_lost`` event), in unix seconds."""

    deployment: str
    replica: int
    start: float
    end: float


@dataclass
class WeekModel:
    spec: WeekSpec
    fleet: FleetConfig
    start: datetime  # first sample (history included)
    week_start: datetime  # Monday 00:00 of the reviewed week
    times: np.ndarray  # unix seconds of each step's end
    deployments: dict[str, DeploymentSeries]
    workloads: list[WorkloadSeries]
    releases: list[dict] = field(default_factory=list)  # the releases file's records
    loss: Loss | None = None

    def truth(self) -> dict:
        """What the week contained, for tests and for the demo's summary."""
        in_week = self.times > self.week_start.timestamp()
        prev = (self.times > self.week_start.timestamp() - WEEK_S) & ~in_week
        out: dict = {"week": self.spec.week, "week_start": self.week_start.isoformat(), "step_s": self.spec.step_s,
                     "growth_per_week": self.spec.growth_per_week, "releases": self.releases, "loss": self.loss,
                     "deployments": {}}
        for name, d in self.deployments.items():
            wls = [w for w in self.workloads if w.workload.deployment == name]
            req = sum((w.arrivals for w in wls), np.zeros(len(self.times)))
            hourly = req[in_week].reshape(-1, 3600 // self.spec.step_s).sum(axis=1) / 3600.0
            peak = int(np.argmax(hourly))
            out["deployments"][name] = {
                "requests": float(req[in_week].sum()),
                "requests_previous_week": float(req[prev].sum()) if prev.any() else None,
                "peak_hour": (self.week_start + timedelta(hours=peak)).isoformat(),
                "peak_requests_per_second": float(hourly[peak]),
                "replicas": d.config.replicas,
                "tiers": sorted({w.workload.tier for w in wls}),
                "timeouts": float(sum(w.timeout[in_week].sum() for w in wls)),
                "rejected": float(sum(sum(r[in_week].sum() for r in w.rejected.values()) for w in wls)),
            }
        return out


def _mean(dist, default: float) -> float:
    return float(dist.quantile(np.linspace(0.005, 0.995, 199)).mean()) if dist is not None else default


def _roofline(d: DeploymentConfig) -> Roofline:
    return Roofline.build(d.spec, gpus()[d.gpu], tp=d.tp, engine=d.engine)


def _service(d: DeploymentConfig, mean_in: float, mean_out: float) -> tuple[float, float, float, int]:
    """(prefill seconds, decode seconds per token at full batch, replica requests/s, batch) of a replica."""
    rf = _roofline(d)
    ctx = mean_in + mean_out / 2
    kv_tokens = d.budget.num_blocks * d.engine.block_size if d.budget is not None else 1e9
    batch = int(max(1, min(d.engine.max_num_seqs, kv_tokens / max(ctx, 1.0))))
    prefill = rf.step_time(int(mean_in), mean_in * mean_in / 2, mean_in)
    step = rf.step_time(batch, batch * ctx, batch * ctx)
    rps = 1.0 / (prefill + mean_out * step / batch)
    return prefill, step, rps, batch


def _diurnal(hours: np.ndarray, tier: str) -> np.ndarray:
    """Relative demand by hour of week (0 = Monday 00:00 UTC); mean about 0.6, peak 1."""
    h = hours % 24
    weekday = (hours // 24) % 7 < 5
    if tier == "P2":  # offline work runs at night, every day
        return 0.35 + 0.65 * (0.5 + 0.5 * np.cos(2 * np.pi * (h - 2) / 24)) ** 2
    day = (0.5 - 0.5 * np.cos(2 * np.pi * (h - 2) / 24)) ** 1.6  # 0 at 02:00, 1 at 14:00
    return (0.15 + 0.85 * day) * np.where(weekday, 1.0, 0.55)


def _tenants(wl: WorkloadConfig, n: int | None) -> tuple[tuple[str, float], ...]:
    if not n or n <= len(wl.tenants):
        return wl.tenants
    own = [(t, s * 0.5) for t, s in wl.tenants]  # the fleet's tenants keep half; a Zipf tail shares the rest
    k = n - len(own)
    z = 1.0 / np.arange(1, k + 1) ** 1.1
    tail = [(f"{wl.name}-t{i + 1:02d}", float(0.5 * zi / z.sum())) for i, zi in enumerate(z)]
    return tuple(own + tail)


def _lognormal_cdf(x: float, median: np.ndarray, sigma: float) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)((math.log(x) - np.log(median)) / (sigma * math.sqrt(2))))


def simulate_week(fleet: FleetConfig, spec: WeekSpec) -> WeekModel:
    """Evaluate the fleet's week (plus ``weeks_before`` of history) step by step. Pure numpy, seconds."""
    if spec.step_s <= 0 or 3600 % spec.step_s:
        raise ConfigError("--step", "step", f"{spec.step_s} s must divide an hour")
    week_start = parse_week(spec.week)
    start = week_start - timedelta(weeks=spec.weeks_before)
    n = (spec.weeks_before + 1) * WEEK_S // spec.step_s
    points = n * sum(max(spec.tenants or 0, len(w.tenants)) for w in fleet.workloads)  # _tenants' lengths
    if points > MAX_TENANT_POINTS:
        raise ConfigError("--tenants", "", f"{points:,} per-tenant samples (steps x tenants) is over the limit of "
                          f"{MAX_TENANT_POINTS:,}; use fewer --tenants or --weeks-before, or a longer --step")
    rel = np.arange(1, n + 1) * spec.step_s  # seconds since start, at each step's end
    times = start.timestamp() + rel
    hours_of_week = (rel / 3600.0) % 168
    growth = (1 + spec.growth_per_week) ** ((times - week_start.timestamp()) / WEEK_S)
    rng = np.random.default_rng(spec.seed)
    ws = week_start.timestamp()

    releases, effects = [], []  # effects: (deployment, time, {effect: value})
    for i, ev in enumerate(e for e in fleet.events if e.kind == "release"):
        at = ws + (spec.release_at_h + 6 * i) * 3600
        releases.append({"time": datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z"),
                         "deployment": ev.deployment, "kind": ev.release_kind, "from": ev.from_version,
                         "to": ev.to_version, "note": ev.note})
        effects.append((ev.deployment, at, dict(ev.effects)))
    lost = next((e for e in fleet.events if e.kind == "replica_lost"), None)
    loss: Loss | None = None
    if lost is not None:
        a = ws + spec.loss_at_h * 3600
        loss = {"deployment": lost.deployment, "replica": lost.replica if lost.replica is not None else 0,
                "start": a, "end": a + spec.loss_hours * 3600}

    def effect(dep: str, name: str) -> np.ndarray:
        out = np.ones(n)
        for d, at, eff in effects:
            if d == dep and name in eff:
                out = np.where(times >= at, out * eff[name], out)
        return out

    deployments: dict[str, DeploymentSeries] = {}
    workloads: list[WorkloadSeries] = []
    for d in fleet.deployments:
        wls = [w for w in fleet.workloads if w.deployment == d.name and w.arrival is not None]
        if not wls:
            continue
        base = np.array([w.arrival.rate for w in wls if w.arrival is not None], dtype=float)  # all of wls
        ins = np.array([_mean(w.input_tokens, 512.0) for w in wls])
        outs = np.array([_mean(w.output_tokens, 128.0) for w in wls])
        mix_in, mix_out = float((base * ins).sum() / base.sum()), float((base * outs).sum() / base.sum())
        prefill, step, rps, batch = _service(d, mix_in, mix_out)
        shapes = np.array([_diurnal(hours_of_week, w.tier) for w in wls])  # workloads x steps
        noise = 1 + 0.03 * rng.standard_normal((len(wls), n))
        first_day = rel <= 86400
        offered0 = (base[:, None] * shapes).sum(axis=0)[first_day].max()
        scale = spec.peak_utilization * d.replicas * rps / offered0
        lam = base[:, None] * scale * shapes * noise * growth  # requests/s per workload
        in_scale, out_scale = effect(d.name, "input_scale"), effect(d.name, "output_scale")
        slow = effect(d.name, "step_time_scale") * effect(d.name, "decode_time_scale")
        pre_slow = effect(d.name, "step_time_scale") * effect(d.name, "prefill_time_scale") * in_scale
        # a request's replica time grows with the release's effects
        cost = (prefill * pre_slow + mix_out * out_scale * step * slow / batch) / (prefill + mix_out * step / batch)
        available = np.full(n, float(d.replicas))
        lost_replica = None
        if loss is not None and loss["deployment"] == d.name:
            available[(times > loss["start"]) & (times <= loss["end"])] -= 1
            lost_replica = loss["replica"]
        cap = available * rps / cost  # requests/s
        offered = lam.sum(axis=0)
        limit = d.engine.max_waiting_requests * available
        backlog, rej_full = np.zeros(n), np.zeros(n)
        q = 0.0
        for i in range(n):  # the fluid queue: demand above capacity waits, beyond the queue limit it is refused
            q = max(0.0, q + (offered[i] - cap[i]) * spec.step_s)
            if q > limit[i]:
                rej_full[i], q = q - limit[i], limit[i]
            backlog[i] = q
        util = offered / cap
        rho = np.minimum(util, 0.97)
        service = 1.0 / (rps / cost)
        queue = backlog / cap + service * rho ** 2 / (1 - rho) / batch + 0.002
        kv = np.clip(0.08 + 0.85 * np.minimum(util, 1.0) + 0.06 * (backlog > 0) + 0.01 * rng.standard_normal(n), 0, 1)
        full = np.clip((kv - 0.9) / 0.1, 0, 1)
        preempt = offered * spec.step_s * 0.02 * full
        rej_kv = offered * spec.step_s * 0.004 * full
        deployments[d.name] = DeploymentSeries(d, rps * (mix_in + mix_out), available, util, backlog, kv, preempt,
                                               lost_replica)
        share = lam / offered
        for j, w in enumerate(wls):
            arrivals = lam[j] * spec.step_s
            ttft = queue + prefill * pre_slow * (ins[j] / mix_in) * (1 + 0.5 * rho)
            tpot = step * slow * (0.6 + 0.4 * rho) * (1 + 0.3 * full)
            timeout_frac = 1 - _lognormal_cdf(d.engine.max_queue_time_s, np.maximum(queue, 1e-4), SIGMA["queue"])
            rk = rej_kv * share[j]
            rf = rej_full * share[j]
            admitted = np.maximum(arrivals - rk - rf, 0)
            timeout = admitted * timeout_frac
            ok = admitted - timeout
            workloads.append(WorkloadSeries(
                w, _tenants(w, spec.tenants), arrivals, ok, timeout, {"queue_full": rf, "kv_capacity": rk},
                admitted * ins[j] * in_scale, ok * outs[j] * out_scale, queue, ttft, tpot,
                ttft + outs[j] * out_scale * tpot))
    return WeekModel(spec, fleet, start, week_start, times, deployments, workloads, releases, loss)
