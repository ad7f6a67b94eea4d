"""The scenarios ``goodput plan evaluate`` replays, as the simulator's workloads and fleet events, at the plan's
peak x growth (``P``); what each one is: goodput/plan/evaluate.py's docstring and docs/capacity.md."""

from __future__ import annotations

from goodput.plan.fleetspec import stream_workload
from goodput.plan.planfile import PlannedDeployment
from goodput.simulator.config import EngineConfig

__all__ = ["COLD_START_S", "SCENARIOS", "scenario"]

SCENARIOS = ("burst", "diurnal", "diurnal_peak", "release", "replica_loss", "prefill_surge", "cold_start_10m")
DISTURBANCE_S = 3600.0
SURGE_S = 600.0
PREFILL_SURGE_INPUT_SCALE = 3.0  # longer would put a 0.5 s TTFT out of any policy's reach on the plan's GPUs
COLD_START_S = {"cold_start_10m": 600.0}  # scenarios that replace the policy's cold start
MAX_MODEL_LEN = EngineConfig().max_model_len  # the engine's default, when the candidate sets none
DIURNAL_PEAK = {"amplitude": 2 / 3, "period_s": 4 * 3600.0, "peak_at_s": 6600.0}  # 0.2 P at -10 min, P at 1 h 50


def scenario(name: str, d: PlannedDeployment, duration_s: float) -> tuple[list[dict], list[dict], float]:
    """(workloads, events, disturbance time) of a scenario for deployment ``d``."""
    g, h = d.growth, d.demand.headroom
    events: list[dict] = []
    t_d = min(DISTURBANCE_S, duration_s / 2)

    def arrival(rate: float) -> dict:
        if name in ("burst", "cold_start_10m"):
            return {"process": "burst", "rate": 0.5 * rate,
                    "bursts": [{"at": t_d, "factor": 2.0 * h.burst_factor, "duration": SURGE_S}]}
        if name == "diurnal":  # mean 0.6 P, amplitude 2/3: between 0.2 P and P, peak at 14:00
            return {"process": "diurnal", "rate": 0.6 * rate, "diurnal": {"amplitude": 2 / 3}}
        if name == "diurnal_peak":
            return {"process": "diurnal", "rate": 0.6 * rate, "diurnal": dict(DIURNAL_PEAK)}
        if name == "prefill_surge":
            return {"process": "poisson", "rate": 0.5 * rate}
        return {"process": "poisson", "rate": (0.7 if name == "release" else 0.8) * rate}

    if name in ("diurnal", "diurnal_peak"):
        t_d = 0.0
    elif name == "release":
        events.append({"at": t_d, "kind": "release", "deployment": d.name, "release_kind": "framework",
                       "from": "v1", "to": "v2", "effects": {"step_time_scale": 1.3}, "note": "a slower release"})
    elif name == "replica_loss":
        events += [{"at": t_d, "kind": "replica_lost", "deployment": d.name, "replica": i} for i in (0, 1)]
    workloads = [stream_workload(d.name, s, arrival(s.peak_rps * g)) for s in d.demand.streams]
    if name == "prefill_surge":
        workloads += [_long_prompts(d, s, wl, 0.5 * s.peak_rps * g, t_d) for s, wl in zip(d.demand.streams, workloads,
                                                                                         strict=True)]
    return workloads, events, t_d


def _long_prompts(d: PlannedDeployment, s, wl: dict, rate: float, at: float) -> dict:
    """The stream's requests with prompts PREFILL_SURGE_INPUT_SCALE x as long (within the engine's max_model_len),
    arriving at ``rate`` for SURGE_S from ``at``."""
    max_len = d.candidate.engine.get("max_model_len", MAX_MODEL_LEN)
    scale = min(PREFILL_SURGE_INPUT_SCALE, (max_len - wl["max_tokens"]) / max(s.input_tokens.values()))
    return {**wl, "name": f"{wl['name']}-long", "input_tokens": {k: v * scale for k, v in s.input_tokens.items()},
            "arrival": {"process": "step", "rate": 0.0, "steps": [{"at": at, "rate": rate},
                                                                   {"at": at + SURGE_S, "rate": 0.0}]}}
