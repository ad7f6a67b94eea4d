"""A simulated week (``goodput.simulator.week``) written as OpenMetrics text, in the catalog's names and buckets.

These are the series the exporters would have published, one sample per step: the request exporter's
gateway counters per tenant and histograms per deployment / tier / route, and the engine exporter's
per-replica gauges and counters, replica counts and per-replica capacity. ``promtool tsdb
create-blocks-from openmetrics`` reads the file. Counters are cumulative from the first step; a lost
replica's series say ``llm_engine_up 0`` and nothing else while it is gone, as the engine exporter does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import numpy as np

from goodput.contracts.catalog import GATEWAY_BUCKETS, by_name
from goodput.simulator.week import SIGMA, WeekModel, WorkloadSeries

__all__ = ["write_openmetrics"]

_erf = np.frompyfunc(math.erf, 1, 1)
HIST_SIGMA = {"llm_gateway_queue_wait_seconds": SIGMA["queue"], "llm_gateway_time_to_first_token_seconds": 0.45,
              "llm_gateway_time_per_output_token_seconds": SIGMA["tpot"], "llm_gateway_e2e_latency_seconds": 0.35}
GOODPUT_SHARE = 0.85  # the capacity gauge: SLO goodput is this share of a replica's modelled throughput
PLANNED_COLD_START_S = 180.0  # the cold start the week's plan assumes (a demand file's default headroom)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in kv.items()) + "}"


class _Writer:
    """``week``: the steps of the reviewed week; ``sparse``: the steps counters are written at (history is coarser)."""

    def __init__(self, fh: TextIO, times: np.ndarray, week: np.ndarray, sparse: np.ndarray) -> None:
        self.fh, self.ts = fh, [f"{t:.0f}" for t in times]
        self.week, self.sparse = week, sparse
        self.samples = 0

    def family(self, name: str) -> None:
        spec = by_name(name)
        base = name.removesuffix("_total") if spec.type == "counter" else name
        self.fh.write(f"# TYPE {base} {spec.type}\n# HELP {base} {spec.help}\n")

    def series(self, name: str, labels: str, values: np.ndarray, digits: int = 0, mask: np.ndarray | None = None) -> None:
        """One series at the steps of ``mask`` (default: the week's); counters pass ``self.sparse``."""
        prefix = f"{name}{labels} "
        idx = np.flatnonzero(self.week if mask is None else mask)
        vals = (np.floor(values[idx]).astype(np.int64) if digits == 0 else np.round(values[idx], digits)).tolist()
        ts = self.ts
        self.fh.write("".join([prefix + str(v) + " " + ts[i] + "\n" for v, i in zip(vals, idx.tolist(), strict=True)]))
        self.samples += len(idx)

    def histogram(self, name: str, labels: dict[str, str], counts: np.ndarray, medians: np.ndarray, sigma: float) -> None:
        """Cumulative buckets of per-step lognormal latencies: count x P(latency <= le), summed over steps."""
        counts, medians = counts[self.week], np.maximum(medians[self.week], 1e-6)
        z = (np.log(np.array(GATEWAY_BUCKETS))[:, None] - np.log(medians)[None, :]) / (sigma * math.sqrt(2))
        rows = np.floor(np.cumsum(counts * 0.5 * (1 + _erf(z).astype(float)), axis=1))
        total = np.floor(np.cumsum(counts))
        rows = np.minimum(np.maximum.accumulate(rows, axis=0), total).astype(np.int64)  # monotone in le, <= count
        sums = np.round(np.cumsum(counts * medians * math.exp(sigma ** 2 / 2)), 3)
        prefixes = [f'{name}_bucket{_labels(**labels, le=repr(le))} ' for le in GATEWAY_BUCKETS]
        inf, cnt, sm = (f'{name}_bucket{_labels(**labels, le="+Inf")} ', f"{name}_count{_labels(**labels)} ",
                        f"{name}_sum{_labels(**labels)} ")
        cols, tot, sl = rows.T.tolist(), total.astype(np.int64).tolist(), sums.tolist()
        out = []
        for i, t in enumerate(np.flatnonzero(self.week).tolist()):
            ts = " " + self.ts[t] + "\n"
            out.extend([p + str(v) + ts for p, v in zip(prefixes, cols[i], strict=True)])
            out.append(inf + str(tot[i]) + ts + cnt + str(tot[i]) + ts + sm + str(sl[i]) + ts)
        self.fh.write("".join(out))
        self.samples += len(cols) * (len(GATEWAY_BUCKETS) + 3)


def _gateway_counters(w: _Writer, wls: list[WorkloadSeries], served: dict[str, str]) -> None:
    """Per tenant (a share of its workload's counts); ``served`` maps a deployment to its model name."""
    # per family, each series of a workload: (its labels beside the workload's, its per-step counts)
    families: dict[str, Callable[[WorkloadSeries], list[tuple[dict[str, str], np.ndarray | float]]]] = {
        "llm_gateway_requests_total": lambda s: [({"outcome": "ok"}, s.ok), ({"outcome": "timeout"}, s.timeout),
                                                 ({"outcome": "rejected"}, sum(s.rejected.values()))],
        "llm_gateway_rejections_total": lambda s: [({"reason": r}, v) for r, v in s.rejected.items()],
        "llm_gateway_requests_arrived_total": lambda s: [({}, s.ok + s.timeout + sum(s.rejected.values()))],
        "llm_gateway_input_tokens_total": lambda s: [({}, s.input_tokens)],
        "llm_gateway_output_tokens_total": lambda s: [({}, s.output_tokens)],
    }
    for name, parts in families.items():
        w.family(name)
        for s in wls:
            wl = s.workload
            for tenant, share in s.tenants:
                base = dict(model=served[wl.deployment], deployment=wl.deployment, tenant=tenant, tier=wl.tier,
                            route=wl.route)
                for extra, per_step in parts(s):
                    labels = _labels(**base, **extra)
                    w.series(name, labels, np.cumsum(per_step * share), mask=w.sparse)


def _gateway_histograms(w: _Writer, wls: list[WorkloadSeries]) -> None:
    groups: dict[tuple[str, str, str], list[WorkloadSeries]] = defaultdict(list)
    for s in wls:
        groups[(s.workload.deployment, s.workload.tier, s.workload.route)].append(s)
    fields = {"llm_gateway_queue_wait_seconds": ("queue_median", lambda s: s.ok + s.timeout),
              "llm_gateway_time_to_first_token_seconds": ("ttft_median", lambda s: s.ok),
              "llm_gateway_time_per_output_token_seconds": ("tpot_median", lambda s: s.ok),
              "llm_gateway_e2e_latency_seconds": ("e2e_median", lambda s: s.ok)}
    for name, (attr, count) in fields.items():
        w.family(name)
        for (dep, tier, route), members in sorted(groups.items()):
            counts = sum(count(s) for s in members)
            medians = sum(count(s) * getattr(s, attr) for s in members) / np.maximum(counts, 1e-9)
            w.histogram(name, dict(deployment=dep, tier=tier, route=route), counts, medians, HIST_SIGMA[name])
    _ttft_missed(w, groups)


def _ttft_missed(w: _Writer, groups: dict[tuple[str, str, str], list[WorkloadSeries]]) -> None:
    """The TTFT SLI's misses per bound: ok requests over it (the TTFT histogram's lognormal) and every timed-out or
    refused one (no first token). Each cumulative sum is floored once, so the counter never steps down."""
    name, sigma = "llm_gateway_ttft_missed_total", HIST_SIGMA["llm_gateway_time_to_first_token_seconds"]
    w.family(name)
    for (dep, tier, route), members in sorted(groups.items()):
        ok = sum(s.ok for s in members)
        medians = np.maximum(sum(s.ok * s.ttft_median for s in members) / np.maximum(ok, 1e-9), 1e-6)
        failed = sum(s.timeout + sum(s.rejected.values()) for s in members)
        for le in GATEWAY_BUCKETS:
            over = 0.5 * (1 - _erf((math.log(le) - np.log(medians)) / (sigma * math.sqrt(2))).astype(float))
            missed = np.zeros(np.shape(ok))
            missed[w.week] = np.cumsum((ok * over + failed)[w.week])
            w.series(name, _labels(deployment=dep, tier=tier, route=route, le=repr(le)), missed)


def _gpus(w: _Writer, reps: list) -> None:
    """The GPUs of each replica (its TP group) while it is up: their deployment, for GPU-hours, and their model, the
    catalog's name, which the cost rules price them by."""
    gpus = [(d, r, up, gpu) for gpu, (d, r, up) in enumerate((d, r, up) for d, r, up, _ in reps
                                                               for _ in range(d.config.tp))]
    w.family("llm_gpu_deployment_info")
    for d, r, up, gpu in gpus:
        w.series("llm_gpu_deployment_info", _labels(gpu=str(gpu), uuid=f"GPU-sim-{gpu:04d}", deployment=d.config.name,
                                                     replica=f"{d.config.name}-{r}"), up.astype(float), mask=up)
    w.family("llm_gpu_info")
    for d, _, up, gpu in gpus:
        w.series("llm_gpu_info", _labels(gpu=str(gpu), uuid=f"GPU-sim-{gpu:04d}", gpu_model=d.config.gpu,
                                          driver_version="sim", hostname="sim"), up.astype(float), mask=up)


def _engine(w: _Writer, model: WeekModel) -> None:
    reps = []  # (deployment series, replica index, mask of steps it is up, labels)
    for d in model.deployments.values():
        for r in range(d.config.replicas):
            up = w.week.copy()
            if d.lost_replica == r and model.loss is not None:
                up &= ~((model.times > model.loss["start"]) & (model.times <= model.loss["end"]))
            reps.append((d, r, up, _labels(model=d.config.model, deployment=d.config.name,
                                           replica=f"{d.config.name}-{r}")))
    wl_by_dep = defaultdict(list)
    for s in model.workloads:
        wl_by_dep[s.workload.deployment].append(s)

    def per_replica(d, up, total):  # a deployment-wide quantity split over the replicas that are up
        return np.where(up, total / d.available, 0.0)

    w.family("llm_engine_up")
    for _, _, up, lab in reps:
        w.series("llm_engine_up", lab, up.astype(float))  # 0 while lost, at every step of the week
    w.family("llm_kv_cache_usage_ratio")
    for d, _, up, lab in reps:
        w.series("llm_kv_cache_usage_ratio", lab, d.kv_usage, 4, up)
    w.family("llm_requests_waiting")
    for d, _, up, lab in reps:
        w.series("llm_requests_waiting", lab, per_replica(d, up, d.backlog), 1, up)
    for name, fn in (("llm_preemptions_total", lambda d: d.preemptions),
                     ("llm_prompt_tokens_total", lambda d: sum(s.input_tokens for s in wl_by_dep[d.config.name])),
                     ("llm_generation_tokens_total", lambda d: sum(s.output_tokens for s in wl_by_dep[d.config.name]))):
        w.family(name)
        for d, _, up, lab in reps:
            w.series(name, lab, np.cumsum(per_replica(d, up, fn(d))), mask=up)
    _gpus(w, reps)
    w.family("llm_deployment_replicas")
    for d in model.deployments.values():
        w.series("llm_deployment_replicas", _labels(deployment=d.config.name, state="desired"),
                 np.full(len(model.times), float(d.config.replicas)))
        w.series("llm_deployment_replicas", _labels(deployment=d.config.name, state="available"), d.available)
    w.family("llm_capacity_replica_goodput_tokens_per_second")
    for d in model.deployments.values():
        w.series("llm_capacity_replica_goodput_tokens_per_second", _labels(deployment=d.config.name),
                 np.full(len(model.times), d.replica_capacity_tokens * GOODPUT_SHARE), 1)
    _cold_starts(w, model, reps)


def _cold_starts(w: _Writer, model: WeekModel, reps: list) -> None:
    """The lost replica comes back as a new engine process: from the loss's end the exporter publishes its cold
    start, the in-process part of its deployment's ``cold_start`` (medians; none without one); and the plan's."""
    w.family("llm_replica_cold_start_seconds")
    loss = model.loss
    for d, r, _, lab in reps:
        cs, budget = d.config.cold_start, d.config.budget
        if loss is None or d.lost_replica != r or cs is None or budget is None:
            continue
        back = w.week & (model.times > loss["end"])
        w.series("llm_replica_cold_start_seconds", lab,
                 np.full(len(model.times), cs.median(budget.weights * d.config.tp).in_process_s), 1, back)
    w.family("llm_capacity_cold_start_seconds")
    for d in model.deployments.values():
        w.series("llm_capacity_cold_start_seconds", _labels(deployment=d.config.name),
                 np.full(len(model.times), PLANNED_COLD_START_S))


def write_openmetrics(model: WeekModel, path: Path, history_step_s: int = 300) -> int:
    """Write the week to ``path``; returns the number of samples. The weeks before it carry only the gateway
    counters (demand for the week-over-week change and the forecast), one sample per ``history_step_s``."""
    week = model.times > model.week_start.timestamp()
    sparse = week | (np.round(model.times - model.start.timestamp()) % history_step_s == 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", buffering=1 << 22) as fh:
        w = _Writer(fh, model.times, week, sparse)
        _gateway_counters(w, model.workloads, {d.name: d.model for d in model.fleet.deployments})
        _gateway_histograms(w, model.workloads)
        _engine(w, model)
        fh.write("# EOF\n")
    return w.samples
