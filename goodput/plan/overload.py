"""``goodput plan overload``: a scenario replayed in virtual time under no protection, quotas only and the configured
ladder, on the same arrivals, and what each variant gave every tier and tenant.

A request counts where it arrived (the scenario's ``seconds``; the engines then drain): it meets its tier's SLO when
it finished (stop or length) within the TTFT and mean TPOT, and its TTFT when its first token came within the TTFT
whatever followed; a rejected, timed-out, failed or aborted request misses both. Attainment and goodput (the
requests that met the SLO per second of the scenario) count the clients' requests, the same arrivals in every
variant: a simulated client's retry of a failed one (``meta["attempt"]`` > 1, the fallback routes'
``gateway.retry``) is counted apart, and the request it retries stays a miss (its first token, a backoff after it
failed, is late for any interactive tier anyway); rejects, degraded and fallback shares and cost count every
attempt. The gateway's decisions come from ``Request.meta`` as goodput/simulator/gateway.py writes them (``overload_step``:
the top ladder step at the request's primary when it arrived; ``degraded``: what ``degrade_p1`` did to it when sent;
``fallback_from`` / ``fallback_reason``: the primary it left and why; absent or "": none), and the ladder's and the
breakers' own timelines (``fleet.gateway.ladder.log``, ``.circuits``) come with each variant's figures. Cost is
each deployment's GPU-hours (its live replicas x TP, integrated each ``TICK_S``) at its GPU's price; a tier's or tenant's
share of it is its share of the tokens the engines processed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from goodput.contracts.vocabulary import TIERS
from goodput.foundation.errors import ConfigError
from goodput.plan.demand import TierSlo
from goodput.plan.overload_scenarios import VARIANTS, disturbance, scenario, variants
from goodput.plan.prices import Prices
from goodput.simulator.config import FleetConfig, check_request_budget, parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.workload import generate

__all__ = ["DRAIN_S", "MINUTE_S", "Outcomes", "figures", "ladder_minutes", "minute_series", "plan_overload", "replay"]

TICK_S = 1.0  # the GPU-hours' integration step
MINUTE_S = 60.0
DRAIN_S = 600.0
OK_FINISH = ("stop", "length")
META_KEYS = ("overload_step", "degraded", "fallback_from", "fallback_reason")


@dataclass
class Outcomes:
    """A fleet sink: what each finished request needs for the figures, as columns."""

    cfg: FleetConfig
    arrival: list[float] = field(default_factory=list)
    tier: list[str] = field(default_factory=list)
    workload: list[str] = field(default_factory=list)
    tenant: list[str] = field(default_factory=list)
    deployment: list[str] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    reject_reason: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    attempt: list[int] = field(default_factory=list)  # a simulated client's retry of a failed request: 2, 3, ...
    meta: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in META_KEYS})

    def add(self, req) -> None:
        m = req.meta or {}
        self.arrival.append(req.arrival)
        self.tier.append(req.tier)
        self.workload.append(self.cfg.workloads[req.workload].name)
        self.tenant.append(m.get("tenant") or self.cfg.workloads[req.workload].tenants[req.tenant][0])
        self.deployment.append(self.cfg.deployments[req.deployment].name)
        self.ok.append(req.finish_reason in OK_FINISH)
        self.ttft.append(req.first_token - req.arrival)  # NaN: no first token
        n = req.generated
        self.tpot.append((req.last_token - req.first_token) / (n - 1) if n > 1 else 0.0)
        self.reject_reason.append(req.reject_reason or "")
        self.tokens.append(n + (req.prompt_tokens if req.scheduled == req.scheduled else 0))  # scheduled: not NaN
        self.attempt.append(int(m.get("attempt", 1)))
        for k in META_KEYS:
            self.meta[k].append(str(m.get(k) or ""))

    def columns(self) -> dict[str, np.ndarray]:
        cols = {k: np.asarray(getattr(self, k)) for k in ("arrival", "tier", "workload", "tenant", "deployment", "ok", "ttft",
                                                             "tpot", "reject_reason", "tokens", "attempt")}
        cols.update({k: np.asarray(v, dtype=str) for k, v in self.meta.items()})
        return cols


def _met(cols: Mapping[str, np.ndarray], slos: Mapping[str, TierSlo]) -> tuple[np.ndarray, np.ndarray]:
    """(met the SLO, met the TTFT) per request, each against its own tier's SLO."""
    ttft_s = np.array([slos[t].ttft_s for t in cols["tier"]], dtype=float)
    tpot_s = np.array([slos[t].tpot_s for t in cols["tier"]], dtype=float)
    ttft = np.nan_to_num(cols["ttft"].astype(float), nan=np.inf)
    in_ttft = ttft <= ttft_s
    return cols["ok"].astype(bool) & in_ttft & (cols["tpot"].astype(float) <= tpot_s), in_ttft


def _counts(values: np.ndarray) -> dict[str, int]:
    """How often each non-empty value occurs, by value."""
    return {str(v): int(c) for v, c in zip(*np.unique(values[values != ""], return_counts=True), strict=True)}


def _group(mask: np.ndarray, cols: Mapping[str, np.ndarray], met: np.ndarray, in_ttft: np.ndarray, seconds: float,
           usd: float | None, objective: float) -> dict[str, Any]:
    """The figures of the attempts ``mask`` selects: attainment and goodput over the client requests among them
    (first attempts), rejects, shares and cost over every attempt."""
    asked = mask & (cols["attempt"] == 1)
    n = int(asked.sum())
    rejects = _counts(cols["reject_reason"][mask])
    tokens = float(cols["tokens"].sum())
    slo = float(met[asked].mean()) if n else None
    return {"requests": n, "retries": int(mask.sum()) - n, "slo_attainment": slo,
            "ttft_attainment": float(in_ttft[asked].mean()) if n else None,
            "meets_objective": None if slo is None else slo >= objective,
            "goodput_rps": round(float(met[asked].sum()) / seconds, 4), "rejected": sum(rejects.values()),
            "rejects": rejects,
            "degraded_share": float((cols["degraded"][mask] != "").mean()) if mask.any() else 0.0,
            "fallback_share": float((cols["fallback_from"][mask] != "").mean()) if mask.any() else 0.0,
            "fallbacks": _counts(cols["fallback_reason"][mask]),
            "usd": None if usd is None or not tokens else round(usd * float(cols["tokens"][mask].sum()) / tokens, 4)}


def minute_series(cols: Mapping[str, np.ndarray], values: np.ndarray, mask: np.ndarray, seconds: float) -> list:
    """Per minute of arrival, the mean of ``values`` over the requests ``mask`` selects (None: a minute without)."""
    n = max(1, int(np.ceil(seconds / MINUTE_S)))
    b = np.minimum((cols["arrival"].astype(float) // MINUTE_S).astype(int), n - 1)[mask]
    tot = np.bincount(b, minlength=n)
    hit = np.bincount(b, weights=values[mask].astype(float), minlength=n)
    return [None if t == 0 else round(float(h / t), 4) for h, t in zip(hit, tot, strict=True)]


def figures(cols: Mapping[str, np.ndarray], slos: Mapping[str, TierSlo], seconds: float,
            usd: float | None) -> dict[str, Any]:
    """Per tier and per tenant x tier: attainment, goodput, rejects, degraded and fallback shares, attributed cost;
    and the minute-by-minute attainment and ladder steps."""
    met, in_ttft = _met(cols, slos)
    tiers = [t for t in TIERS if (cols["tier"] == t).any()]
    by_tier = {t: _group(cols["tier"] == t, cols, met, in_ttft, seconds, usd, slos[t].objective) for t in tiers}
    by_workload = {str(w): _group(cols["workload"] == w, cols, met, in_ttft, seconds, usd,
                                  slos[str(cols["tier"][cols["workload"] == w][0])].objective)
                   for w in dict.fromkeys(cols["workload"].tolist())}
    by_tenant: dict[str, dict[str, Any]] = {}
    for name in sorted(set(cols["tenant"].tolist())):
        for t in tiers:
            mask = (cols["tenant"] == name) & (cols["tier"] == t)
            if mask.any():
                by_tenant.setdefault(str(name), {})[t] = _group(mask, cols, met, in_ttft, seconds, usd,
                                                                slos[t].objective)
    everyone = cols["arrival"].astype(float) < seconds  # every attempt of the scenario, retries included
    asked = cols["attempt"] == 1
    on = cols["overload_step"] != ""
    first: dict[str, float] = {}  # each step's first request, by arrival: the order the ladder engaged them
    for step, t in zip(cols["overload_step"][on].tolist(), cols["arrival"][on].tolist(), strict=True):
        first[step] = min(t, first.get(step, t))
    steps = sorted(first, key=first.__getitem__)
    timeline = {"minute_s": MINUTE_S,
                "slo_attainment": {t: minute_series(cols, met, asked & (cols["tier"] == t), seconds) for t in tiers},
                "overload_step": {s: minute_series(cols, cols["overload_step"] == s, everyone, seconds) for s in steps},
                "degraded_share": minute_series(cols, cols["degraded"] != "", everyone, seconds),
                "fallback_share": minute_series(cols, cols["fallback_from"] != "", everyone, seconds)}
    served = {str(d): int(c) for d, c in zip(*np.unique(cols["deployment"][cols["ok"].astype(bool)],
                                                        return_counts=True), strict=True)}
    return {"requests": int(asked.sum()), "retries": int((~asked).sum()), "served_by_deployment": served,
            "tiers": by_tier, "workloads": by_workload, "tenants": by_tenant, "timeline": timeline}


def ladder_minutes(log: list[dict[str, Any]], seconds: float) -> dict[str, list[float]]:
    """Per deployment and step of the ladder ``log`` (``LadderChange`` rows as dicts, in time order), the share of
    each minute of the scenario it was engaged: the ladder stepping in and out as the gateway ran it."""
    n = max(1, int(np.ceil(seconds / MINUTE_S)))
    edges = np.arange(n + 1) * MINUTE_S
    on: dict[str, float] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for c in log:
        key = f"{c['deployment']}: {c['step']}"
        spans.setdefault(key, [])
        if c["on"]:
            on[key] = c["t"]
        elif key in on:
            spans[key].append((on.pop(key), c["t"]))
    for key, t in on.items():  # still engaged when the run ended
        spans[key].append((t, max(seconds, t)))
    out = {}
    for key, runs in spans.items():
        cover = np.zeros(n)
        for a, b in runs:
            cover += np.clip(np.minimum(edges[1:], b) - np.maximum(edges[:-1], a), 0.0, None)
        out[key] = [round(float(x), 4) for x in cover / np.diff(edges)]
    return out


def replay(cfg: FleetConfig, arrivals, seconds: float, progress: Callable[[float], None] | None = None
           ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, Any]]:
    """Run ``cfg`` on ``arrivals`` for ``seconds`` and drain: the finished requests' columns, each deployment's
    GPU-seconds over the scenario, and the gateway's timelines (``ladder``: its steps in and out; ``circuits``: each
    breaker's ``[t, state, why]``), in ``goodput simulate --format json``'s shape."""
    fleet = Fleet(cfg, arrivals, keep_done=False)
    out = Outcomes(cfg)
    fleet.watch(out)
    gpu_s = {d.cfg.name: 0.0 for d in fleet.deployments}
    t = 0.0
    while t < seconds:
        t1 = min(seconds, t + TICK_S)
        for d in fleet.deployments:
            gpu_s[d.cfg.name] += sum(1 for r in d.replicas if r.alive) * d.cfg.tp * (t1 - t)
        fleet.run(t1)
        t = t1
        if progress is not None:
            progress(t)
    fleet.drain(seconds + DRAIN_S)
    gw = fleet.gateway
    ladder = gw.ladder.log if gw is not None and gw.ladder is not None else []
    logs = {"ladder": [{"t": round(c.t, 3), "deployment": c.deployment, "step": c.step, "on": c.on,
                        "signal": c.signal, "value": round(c.value, 4)} for c in ladder],
            "circuits": {} if gw is None else {name: [[round(at, 3), state, why] for at, state, why in c.log]
                                                for name, c in gw.circuits.items()}}
    return out.columns(), gpu_s, logs


def _after(progress: Callable[[float], None], offset: float) -> Callable[[float], None]:
    """``progress`` told a variant's replayed seconds after the ``offset`` seconds of the variants before it."""
    return lambda t: progress(offset + t)


def _usd(costs: Iterable[tuple[float, float | None]]) -> float | None:
    """What (GPU-hours, dollars per GPU-hour) pairs cost together; None when a GPU has no price."""
    total = 0.0
    for hours, usd_per_gpu_hour in costs:
        if usd_per_gpu_hour is None:
            return None
        total += hours * usd_per_gpu_hour
    return total


def plan_overload(fleet: dict[str, Any], source: str, scenario_name: str, seconds: float, slos: Mapping[str, TierSlo],
                  prices: Prices, *, seed: int | None = None, tenant: str | None = None, deployment: str | None = None,
                  progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """The scenario under every variant of ``VARIANTS``; ``fleet`` is the fleet file's mapping (from ``source``),
    ``progress`` is told the virtual seconds replayed over all variants (3 x ``seconds``)."""
    parse_fleet(fleet, source)  # the file as written must be valid before any scenario rewrites it
    if not fleet.get("gateway"):
        raise ConfigError(source, "gateway", "missing: without a gateway the three variants (no protection, quotas "
                                             "only, as written) are one fleet; add one (examples/overload.yaml has one)")
    data = scenario(scenario_name, fleet, seconds, source, tenant=tenant, deployment=deployment)
    cfgs = {label: parse_fleet(v, source) for label, v in variants(data).items()}
    check_request_budget(cfgs["ladder"], seconds, "--seconds")
    seed = cfgs["ladder"].seed if seed is None else seed
    arrivals = generate(cfgs["ladder"], seconds, seed)  # the gateway plays no part in when requests arrive
    out: dict[str, Any] = {}
    for i, (label, cfg) in enumerate(cfgs.items()):
        cols, gpu_s, logs = replay(cfg, arrivals, seconds, None if progress is None else _after(progress, i * seconds))
        costs = {d.name: (gpu_s[d.name] / 3600.0, prices.usd_per_gpu_hour(d.gpu)) for d in cfg.deployments}
        usd = _usd(costs.values())
        out[label] = {"protection": VARIANTS[label], "gateway": cfg.gateway is not None,
                      "gpu_hours": round(sum(h for h, _ in costs.values()), 4),
                      "usd": None if usd is None else round(usd, 4), **figures(cols, slos, seconds, usd), **logs}
        out[label]["timeline"]["ladder_engaged"] = ladder_minutes(logs["ladder"], seconds)
    start, end = disturbance(scenario_name, seconds)
    gw = fleet.get("gateway") or {}
    return {"scenario": scenario_name, "fleet": source, "seconds": seconds, "window_s": [start, end], "seed": seed,
            "ladder_configured": "overload" in gw, "fallbacks_configured": "fallbacks" in gw,
            "breaker_configured": "circuit_breaker" in gw,
            "slos": {t: {"ttft_s": s.ttft_s, "tpot_s": s.tpot_s, "objective": s.objective} for t, s in slos.items()},
            "pricing": prices.pricing,
            "prices": {d.gpu: prices.usd_per_gpu_hour(d.gpu) for d in cfgs["ladder"].deployments},
            "variants": out}
