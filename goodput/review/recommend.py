"""Recommendations from the summarized week: each an action, its reason and the numbers behind it.

Rules of thumb, stated where they fire: replicas follow the plan (the 5-minute peak or the forecast's weekly
peak hour x redundancy over per-replica goodput); replicas missing for at least two 5-minute samples
(``summarize.SUSTAINED_STEPS``) ask for a warm pool of that many, counting the pages that began during the
shortfall or within the hour after it; a KV cache near full with preemptions asks for a smaller ``max_num_seqs``
(fewer sequences share the cache); queueing with KV room to spare asks for a larger ``max_num_seqs`` when the
busiest replica ran at its most sequences through most of the queueing (the sequence limit binds), else for a
larger ``max_num_batched_tokens``; a tenant with more than half of a tier that missed its SLO is the one to
rate-limit or move; a p90 cold start over the plan's asks to re-plan on the measured one.
"""

from __future__ import annotations

from datetime import datetime

from goodput.foundation.histogram import Quantile
from goodput.review.summarize import PINNED_SHARE, QUEUEING_S

__all__ = ["recommend"]

KV_FULL = 0.9
TENANT_SHARE = 0.5
AFTER_S = 3600  # a page this long after a shortfall ended still followed it


def _rec(deployment: str, action: str, reason: str, **numbers) -> dict:
    return {"deployment": deployment, "action": action, "reason": reason, "numbers": numbers}


def _replicas(dep: str, e: dict) -> list[dict]:
    cap, fc = e["capacity"], e.get("forecast")
    if not cap.get("plan"):
        return []
    desired = cap["desired_replicas"] or 0
    need_now = cap["replicas_needed_at_peak"]
    need_4w = max((w["replicas_needed"] or 0 for w in fc["weeks"]), default=0) if fc else 0
    need = max(need_now, need_4w)
    out = []
    if need > desired:
        out.append(_rec(dep, f"add {need - desired} replica(s) ({desired} -> {need})",
                        f"5-minute peak {cap['peak_tokens_per_second']:,.0f} tokens/s this week"
                        + (f", busiest hour forecast up to {fc['weeks'][-1]['high']:,.0f} in 4 weeks" if fc else "")
                        + f", at {cap['replica_goodput_tokens_per_second']:,.0f} tokens/s per replica with redundancy",
                        desired=desired, needed_now=need_now, needed_in_4_weeks=need_4w,
                        headroom_pct=cap["headroom_pct"], hours_above_80pct=cap["hours_above_80pct"]))
    elif need < desired - 1 and cap["hours_above_80pct"] == 0:
        out.append(_rec(dep, f"remove {desired - need} replica(s) ({desired} -> {need})",
                        "peak demand, forecast included, fits fewer replicas and load never passed 80 %",
                        desired=desired, needed_now=need_now, needed_in_4_weeks=need_4w,
                        headroom_pct=cap["headroom_pct"]))
    if "cost" in cap:
        c = cap["cost"]
        out.append(_rec(dep, "right-size to demand", "GPU cost used vs needed at the plan's goodput",
                        used=c["used"], needed=c["needed"], gpu_hour=c["gpu_hour"]))
    return out


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _warm_pool(dep: str, e: dict) -> list[dict]:
    short = e["replicas"].get("shortfall")
    if not short:
        return []
    start, end = _t(short["start"]), _t(short["end"])
    pages = [p for p in e["pages"] if p["alert"] != "LLMEngineDown" and start <= _t(p["start"]) <= end + AFTER_S]
    return [_rec(dep, f"keep a warm pool of {short['replicas']} replica(s)",
                 f"{short['replicas']} of {e['replicas']['desired']:g} desired replicas were missing for "
                 f"{short['minutes']} min from {short['start']}" + (f"; {len(pages)} page(s) followed" if pages else ""),
                 replicas_missing=short["replicas"], minutes=short["minutes"], desired=e["replicas"]["desired"],
                 pages=len(pages))]


def _engine(dep: str, e: dict) -> list[dict]:
    kv = e["kv"]
    out = []
    if kv["usage_p95"] is not None and kv["usage_p95"] >= KV_FULL and (kv["preemptions"] or kv["allocation_failures"]):
        out.append(_rec(dep, "lower max_num_seqs by about 20 % (or add replicas)",
                        "the KV cache is near full and sequences are preempted or refused",
                        kv_usage_p95=kv["usage_p95"], preemptions=kv["preemptions"],
                        allocation_failures=kv["allocation_failures"]))
    queue = max((Quantile.from_dict(t["latency_p95_s"]["queue"]).estimate for t in e["tiers"].values()
                 if "queue" in t["latency_p95_s"]), default=0.0)
    if kv["usage_p95"] is not None and kv["usage_p95"] < 0.7 and queue > QUEUEING_S:
        run = e.get("running") or {}
        pinned = run.get("at_max_while_queueing")
        if pinned is not None and pinned >= PINNED_SHARE:
            out.append(_rec(dep, "raise max_num_seqs (or add replicas)",
                            f"requests queue while the KV cache has room and the busiest replica ran "
                            f"{run['max']:g} sequences, its most, in {pinned:.0%} of the queueing steps: the "
                            "sequence limit binds, not the token budget",
                            queue_p95_s=queue, kv_usage_p95=kv["usage_p95"], running_max=run["max"],
                            at_max_while_queueing=pinned))
        else:
            out.append(_rec(dep, "raise max_num_batched_tokens", "requests queue while the KV cache has room",
                            queue_p95_s=queue, kv_usage_p95=kv["usage_p95"]))
    return out


def _tenants(dep: str, e: dict) -> list[dict]:
    out = []
    for tier, t in e["tiers"].items():
        missed = [s for s in t["slo"] if not s["met"]]
        total = sum(x["requests"] for x in t["tenants"])
        if not missed or not total or not t["tenants"]:
            continue
        top = t["tenants"][0]
        share = top["requests"] / total
        if share > TENANT_SHARE:
            out.append(_rec(dep, f"rate-limit or move tenant {top['tenant']} ({tier})",
                            f"{share:.0%} of tier {tier}'s requests while its SLO was missed on "
                            + ", ".join(s["route"] for s in missed),
                            tenant=top["tenant"], share=round(share, 3), requests=top["requests"]))
    return out


def _cold_start(dep: str, e: dict) -> list[dict]:
    cs = e.get("cold_start")
    if not cs or not cs["p90_over_plan"]:
        return []
    return [_rec(dep, "re-plan on the measured cold start (plan replicas / autoscale --cold-start-from), or make "
                      "starts faster", "replicas started slower than the plan's cold-start buffer and warm pool assume",
                 cold_start_p90_s=cs["p90_s"], plan_s=cs["plan_s"], replicas=cs["replicas"], measured=cs.get("measured"))]


def recommend(review: dict) -> list[dict]:
    out = []
    for dep, e in review["deployments"].items():
        for fn in (_replicas, _warm_pool, _engine, _tenants, _cold_start):
            out += fn(dep, e)
    return out
