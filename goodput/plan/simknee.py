"""Per-replica SLO goodput of a candidate without hardware: a knee search over one simulated replica.

The demand's streams keep their mix and their token lengths; only the total rate moves. A probe runs one
replica for ``duration_s`` virtual seconds of Poisson arrivals and judges the requests that arrived after
``warmup_s`` (longer at low rates, so a probe judges at least ``min_requests``): every tier must meet its
objective (share of requests within TTFT and TPOT). The knee is the
highest rate that passes, found by doubling / halving from the analytic estimate and then bisecting; its
goodput is the input + output tokens per second of the requests that met their SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from goodput.plan.demand import Candidate, Stream, TierSlo
from goodput.plan.fleetspec import fleet_config, meets_slo, stream_workload
from goodput.simulator.fleet import Fleet
from goodput.simulator.workload import generate

__all__ = ["Knee", "knee_search"]

MAX_PROBE_S = 1800.0


@dataclass(frozen=True)
class Knee:
    rate_rps: float  # total req/s one replica serves within the SLO
    goodput_tokens_per_s: float  # input + output tokens/s of the requests that met their SLO
    concurrency: float  # requests in the replica on average at the knee (Little's law: sum of latencies / time)
    attainment: dict[str, float]  # per tier, at the knee
    probes: int


def _probe(source: str, cand: Candidate, streams: Sequence[Stream], slos: dict[str, TierSlo], rate: float,
           duration_s: float, warmup_s: float, seed: int, min_requests: int) -> tuple[bool, float, dict[str, float], float]:
    total = sum(s.peak_rps for s in streams)
    duration_s = min(MAX_PROBE_S, max(duration_s, warmup_s + min_requests / rate))
    wls = [stream_workload("probe", s, {"process": "poisson", "rate": rate * s.peak_rps / total}) for s in streams]
    cfg = fleet_config(source, "probe", cand, 1, wls, seed=seed)
    fleet = Fleet(cfg, generate(cfg, duration_s, seed))
    fleet.run(duration_s)
    fleet.drain(duration_s + 120.0)
    counts: dict[str, list[int]] = {}
    good_tokens = 0
    busy_s = 0.0
    for r in fleet.done:
        if r.arrival < warmup_s or r.arrival >= duration_s:
            continue
        c = counts.setdefault(r.tier, [0, 0])
        c[0] += 1
        busy_s += r.completed - r.arrival
        if meets_slo(r, slos[r.tier]):
            c[1] += 1
            good_tokens += r.prompt_tokens + r.generated
    attainment = {t: g / n for t, (n, g) in sorted(counts.items())}
    ok = bool(attainment) and all(attainment[t] >= slos[t].objective for t in attainment)
    window = duration_s - warmup_s
    return ok, good_tokens / window, attainment, busy_s / window


def knee_search(source: str, cand: Candidate, streams: Sequence[Stream], slos: dict[str, TierSlo], guess_rps: float,
                *, duration_s: float = 120.0, warmup_s: float = 20.0, bisections: int = 5, seed: int = 0,
                min_requests: int = 400,
                step: Callable[[], None] | None = None) -> Knee:
    """The knee of ``cand`` for ``streams``' mix, starting from ``guess_rps`` (req/s); ``step`` is called per probe."""
    probes = 0
    results: dict[float, tuple[bool, float, dict[str, float], float]] = {}

    def probe(rate: float) -> bool:
        nonlocal probes
        if rate not in results:
            probes += 1
            results[rate] = _probe(source, cand, streams, slos, rate, duration_s, warmup_s, seed, min_requests)
            if step is not None:
                step()
        return results[rate][0]

    rate = max(guess_rps, 1e-3)
    lo, hi = 0.0, None
    for _ in range(8):  # bracket: lo passes, hi fails
        if probe(rate):
            lo = rate
            if hi is not None:
                break
            rate *= 2.0
        else:
            hi = rate
            if lo > 0:
                break
            rate /= 2.0
    if hi is None:
        hi = lo * 2.0
    for _ in range(bisections if lo > 0 else 0):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if probe(mid) else (lo, mid)
    if lo <= 0:
        return Knee(0.0, 0.0, 0.0, results[min(results)][2], probes)
    _, good, att, conc = results[lo]
    return Knee(lo, good, conc, att, probes)
