"""Where each policy of an evaluation stands: SLO attainment per tier (higher is better) against GPU-hours (lower is
better). A policy is dominated by another that is at least as good on every one of them and better on one; the
ones nobody dominates are the front. ``standing`` says, for the plan's policy against each baseline, whether it
wins (attainment per tier >= and GPU-hours <=) and, when it does not, on what it loses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["describe", "dominates", "pareto", "standing", "verdict"]


def _axes(r: Mapping[str, Any]) -> tuple[dict[str, float], float]:
    return {t: (-1.0 if a is None else a) for t, a in r["attainment"].items()}, r["gpu_hours"]


def dominates(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``a`` at least as good as ``b`` on every tier's attainment and on GPU-hours, and better on one."""
    (att_a, gh_a), (att_b, gh_b) = _axes(a), _axes(b)
    no_worse = gh_a <= gh_b and all(att_a[t] >= att_b[t] for t in att_b)
    better = gh_a < gh_b or any(att_a[t] > att_b[t] for t in att_b)
    return no_worse and better


def pareto(policies: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """label -> {"front": bool, "dominated_by": [labels], "dominates": [labels]}."""
    out = {}
    for label, r in policies.items():
        by = [o for o, ro in policies.items() if o != label and dominates(ro, r)]
        over = [o for o, ro in policies.items() if o != label and dominates(r, ro)]
        out[label] = {"front": not by, "dominated_by": by, "dominates": over}
    return out


def describe(position: Mapping[str, Any] | None) -> str:
    """One policy's position in words: "front", "dominated by a, b", or "-" when it was run alone."""
    if position is None:
        return "-"
    return "front" if position["front"] else "dominated by " + ", ".join(position["dominated_by"])


def _at_max_share(r: Mapping[str, Any]) -> float:
    desired = r["timeline"]["desired"]
    return sum(x >= r["max_replicas"] for x in desired) / len(desired) if desired else 0.0


def standing(policies: Mapping[str, Mapping[str, Any]], ours: str, baselines: list[str],
             objectives: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """baseline -> {"wins", "losses" (what ours loses on, e.g. "P0 attainment 0.9863 < 0.9913"), "why"}: ``why``
    names what the figures show about a loss: a baseline that held its largest fleet most of the time (a
    utilisation signal that reads busy whenever a sequence runs) is static peak provisioning, whose attainment a
    policy matches only by provisioning as much; whether ours still met every tier's objective."""
    r = policies[ours]
    att, gh = _axes(r)
    met = all(att[t] >= o for t, o in objectives.items())
    out = {}
    for b in baselines:
        rb = policies[b]
        batt, bgh = _axes(rb)
        losses = [f"{t} attainment {att[t]:.4f} < {batt[t]:.4f}" for t in batt if att[t] < batt[t]]
        if gh > bgh:
            losses.append(f"GPU-hours {gh:g} > {bgh:g}")
        why = []
        if losses:
            share = _at_max_share(rb)
            if share >= 0.8:
                why.append(f"{b} asked for its maximum of {rb['max_replicas']} replicas at {share:.0%} of the "
                           "scrapes: it provisions for the peak, and its attainment is the peak's")
            if gh < bgh:
                why.append(f"ours used {1 - gh / bgh:.0%} fewer GPU-hours ({gh:g} vs {bgh:g})")
            why.append("ours met every tier's objective" if met else "ours missed a tier's objective")
        out[b] = {"wins": not losses, "losses": losses, "why": "; ".join(why)}
    return out


def verdict(baseline: str, st: Mapping[str, Any]) -> str:
    """One line of the report: how the plan's policy stands against ``baseline``."""
    return f"policy vs {baseline}: " + ("wins (attainment per tier >=, GPU-hours <=)" if st["wins"]
                                        else "loses on " + "; ".join(st["losses"]) + f" ({st['why']})")
