"""Plain-text tables for ``goodput plan`` (``--format table``): one row per candidate, the headroom terms apart."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from goodput.plan.pareto import describe, verdict

__all__ = ["OVERLOAD_COLUMNS", "overload_heading", "overload_rows", "overload_timelines", "priced_at", "render_disagg",
           "render_evaluation", "render_overload", "render_plan", "table"]


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True)))
              for row in cells]
    return "\n".join(lines)


def priced_at(doc: Mapping[str, Any]) -> str:
    """Which pricing a report's dollars are at (``--pricing``); a plan or result written before there was a choice
    (no ``pricing`` key) was priced on demand."""
    return f"dollars at {str(doc.get('pricing') or 'on_demand').replace('_', '-')} GPU prices"


def render_plan(plan: Mapping[str, Any]) -> str:
    out = [priced_at(plan)]
    for name, d in plan["deployments"].items():
        out.append(f"deployment {name}: peak {d['peak_tokens_per_second']:,.0f} tokens/s x growth {d['growth']:g}; "
                   f"chosen {d['candidate']['name']}: {d['desired_replicas']} replicas")
        rows = []
        for c in d["compared"]:
            ch = c["checks"]
            rows.append({
                "candidate": c["name"], "goodput/replica": c["replica_goodput_tokens_per_second"], **c["headroom"],
                "replicas": c["replicas"], "gpus": c["gpus"], "$/hour": c["usd_per_hour"],
                "$/M tokens": c["usd_per_million_tokens"],
                "prefill": ch["prefill"]["replicas"], "decode": f"{ch['decode']['replicas']} ({ch['decode']['limited_by']})",
                "binding": ch["binding"] + (" (raised base)" if ch["raised_base"] else ""),
            })
        out.append(table(rows, list(rows[0])))
        if d["unmeasured_candidates"]:
            out.append(f"  no run for: {', '.join(d['unmeasured_candidates'])}")
        out.append("")
    return "\n".join(out)


def _dip(x: Mapping[str, Any]) -> str:
    return f"{x['start_s'] / 60:g}-{x['end_s'] / 60:g} min (worst {x['worst']:.3f})"


def render_evaluation(result: Mapping[str, Any], max_dips: int = 4) -> str:
    """The policies side by side (Pareto position: attainment per tier against GPU-hours), then the minutes each
    fell below a tier's objective (the first ``max_dips`` runs of them), then how the plan's policy stands."""
    rows = []
    pareto = result.get("pareto", {})
    for name, r in result["policies"].items():
        row = {"policy": name, "gpu_hours": r["gpu_hours"], "$": r["usd"], "rejected": r["rejected"],
               "time_to_recover_s": r["time_to_recover_s"], "max_replicas": r["max_replicas"]}
        row.update({f"{t} attainment": v for t, v in r["attainment"].items()})
        row.update({f"{t} min below": v for t, v in r["minutes_below_objective"].items()})
        row["pareto"] = describe(pareto.get(name))
        rows.append(row)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = [f"scenario {result['scenario']} ({result['duration_s']:g} s, deployment {result['deployment']}, "
           f"cold start {result['cold_start_s']:g} s; {priced_at(result)})", table(rows, cols), "",
           "minutes below the objective (" + ", ".join(f"{t} {o:g}" for t, o in result["slo_objectives"].items()) + "):"]
    for name, r in result["policies"].items():
        for t, runs in r["dips"].items():
            if runs:
                more = f" and {len(runs) - max_dips} more" if len(runs) > max_dips else ""
                out.append(f"  {name} {t}: " + "; ".join(_dip(x) for x in runs[:max_dips]) + more)
    out += [verdict(b, st) for b, st in result.get("standing", {}).items()]
    return "\n".join(out) + "\n"


OVERLOAD_COLUMNS = ("requests", "retries", "SLO att", "TTFT att", "met", "goodput/s", "rejects", "degraded",
                    "fallback", "fallback why", "$")  # after the columns naming the row (variant, tier, ...)


def _overload_row(names: Mapping[str, str], g: Mapping[str, Any]) -> dict[str, Any]:
    """A row of ``names`` (variant, tier, workload, tenant: those that place it) then the ``OVERLOAD_COLUMNS`` of
    the figures ``g``."""
    return {**names, "requests": g["requests"], "retries": g["retries"],
            "SLO att": g["slo_attainment"], "TTFT att": g["ttft_attainment"],
            "met": {True: "yes", False: "NO", None: "-"}[g["meets_objective"]], "goodput/s": g["goodput_rps"],
            "rejects": ", ".join(f"{r} {n}" for r, n in g["rejects"].items()) or "-",
            "degraded": g["degraded_share"], "fallback": g["fallback_share"],
            "fallback why": ", ".join(f"{r} {n}" for r, n in g["fallbacks"].items()) or "-", "$": g["usd"]}


def overload_rows(result: Mapping[str, Any]) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """(one row per variant, per variant x tier, per variant x workload, per variant x tenant x tier) of a ``plan
    overload`` result."""
    v = result["variants"]
    variants = [{"variant": k, "protection": r["protection"], "requests": r["requests"], "retries": r["retries"],
                 "gpu_hours": r["gpu_hours"],
                 "$": r["usd"], "served by": ", ".join(f"{d} {n}" for d, n in r["served_by_deployment"].items()) or "-"}
                for k, r in v.items()]
    tiers = [_overload_row({"variant": k, "tier": t}, g) for k, r in v.items() for t, g in r["tiers"].items()]
    workloads = [_overload_row({"variant": k, "workload": w}, g) for k, r in v.items()
                 for w, g in r["workloads"].items()]
    tenants = [_overload_row({"variant": k, "tenant": name, "tier": t}, g) for k, r in v.items()
               for name, ts in r["tenants"].items() for t, g in ts.items()]
    return variants, tiers, workloads, tenants


def overload_heading(result: Mapping[str, Any]) -> list[str]:
    """What was replayed, and against which SLOs."""
    start, end = result["window_s"]
    gw = [w for w, on in (("an overload ladder", result["ladder_configured"]),
                          ("fallbacks", result["fallbacks_configured"]),
                          ("a circuit breaker", result["breaker_configured"])) if on]
    protected = result["ladder_configured"] or result["breaker_configured"]
    return [f"scenario {result['scenario']} on {result['fleet']}: {result['seconds']:g} s, disturbance "
            f"{start:g}-{end:g} s, seed {result['seed']}; the fleet file configures "
            + (" and ".join([", ".join(gw[:-1]), gw[-1]] if len(gw) > 1 else gw) if gw
               else "no overload ladder, fallbacks or circuit breaker")
            + ("" if protected else " (the ladder variant is the quotas one)"),
            "SLOs: " + "; ".join(f"{t} TTFT {s['ttft_s']:g} s, TPOT {s['tpot_s']:g} s for {s['objective']:g}"
                                 for t, s in result["slos"].items()),
            priced_at(result) + ": " + (", ".join(f"{g} ${p:g}/GPU-hour" if p is not None else f"{g} unpriced"
                                                  for g, p in result["prices"].items()) or "no GPUs")]


def overload_timelines(result: Mapping[str, Any], limit: int | None = None) -> list[str]:
    """The ladder variant's ladder log (its steps in and out, in order) and breaker changes, ``limit`` lines each."""
    v = result["variants"]["ladder"]
    out = []
    for title, rows in (("ladder", [f"{c['t']:,.1f} s {c['deployment']} {c['step']} {'on' if c['on'] else 'off'} "
                                    f"({c['signal']} {c['value']:g})" for c in v["ladder"]]),
                        *((f"circuit {name}", [f"{t:,.1f} s {state}" + (f" ({why})" if why else "")
                                               for t, state, why in log[1:]]) for name, log in v["circuits"].items())):
        shown = rows if limit is None else rows[:limit]
        more = [f"  ... {len(rows) - len(shown):,} more (--format json lists them all)"] if len(rows) > len(shown) else []
        out += [f"{title}: " + ("no change" if not rows else f"{len(rows):,} changes"), *(f"  {r}" for r in shown),
                *more]
    return out


def render_overload(result: Mapping[str, Any], limit: int = 12) -> str:
    """Each variant's GPU-hours and cost, per tier, per workload and per tenant x tier the figures side by side, and
    the ladder variant's ladder and breaker timelines (the first ``limit`` changes of each)."""
    variants, tiers, workloads, tenants = overload_rows(result)
    return "\n".join([*overload_heading(result), "",
                      *(line for title, rows in (("", variants), ("per tier:", tiers), ("per workload:", workloads),
                                                 ("per tenant:", tenants))
                        for line in ([title] if title else []) + [table(rows, list(rows[0])), ""]),
                      "the configured ladder variant's timelines:", *overload_timelines(result, limit)]) + "\n"
def render_disagg(doc: Mapping[str, Any]) -> str:
    """``goodput plan disagg``: per candidate, the demand and SLO, the aggregated and disaggregated layouts side
    by side, the KV transfer, and the verdict with its reason."""
    out = [priced_at(doc)]
    for p in doc["plans"]:
        dm, a, d = p["demand"], p["aggregated"], p["disaggregated"]
        q = f"p{dm['objective'] * 100:g}"
        out.append(f"deployment {p['deployment']}, candidate {p['candidate']} ({p['model']}): {dm['rps']:g} req/s, "
                   f"prompts {dm['input_mean']:,.0f} tokens mean ({q} {dm['input_p']:,.0f}), output "
                   f"{dm['output_mean']:,.0f}; SLO {q} TTFT {dm['ttft_s'] * 1000:,.0f} ms, TPOT "
                   f"{dm['tpot_s'] * 1000:,.0f} ms")
        pf, dc = d["prefill"], d["decode"]
        rows = [
            {"layout": "aggregated", "replicas": a["replicas"], "tp": a["tp"], "gpus": a["gpus"],
             "$/hour": a["usd_per_hour"], "$/M tokens": a["usd_per_million_tokens"], "binds": a["binding"],
             "chunk": a["planned_prefill_chunk_tokens"], "batch": a["replica"]["batch"],
             f"TTFT {q} ms": a["replica"]["ttft_ms"], f"TPOT {q} ms": a["replica"]["tpot_ms"]},
            {"layout": "disaggregated", "replicas": d["ratio"], "gpus": d["gpus"], "$/hour": d["usd_per_hour"],
             "$/M tokens": d["usd_per_million_tokens"]},
            {"layout": "  prefill pool", "replicas": pf["replicas"], "tp": pf["tp"], "gpus": pf["replicas"] * pf["tp"],
             "binds": pf["binding"], "chunk": pf["replica"]["prefill_chunk_tokens"],
             f"TTFT {q} ms": pf["replica"]["ttft_ms"]},
            {"layout": "  decode pool", "replicas": dc["replicas"], "tp": dc["tp"], "gpus": dc["replicas"] * dc["tp"],
             "binds": dc["binding"], "batch": dc["batch"], f"TPOT {q} ms": dc["tpot_ms"]},
        ]
        columns = ["layout", "replicas", "tp", "gpus", "$/hour", "$/M tokens", "binds", "chunk", "batch",
                   f"TTFT {q} ms", f"TPOT {q} ms"]
        link = p["kv_link"]
        out += [table(rows, columns),
                f"KV transfer: {link['transfer_ms']:g} ms a request ({link['gbps']:g} Gbit/s per prefill GPU, "
                f"{link['latency_ms']:g} ms latency), counted in the {link['counted_in'].upper()}",
                textwrap.fill(f"verdict: {p['verdict']}: {p['reason']}", width=118, subsequent_indent="  "), ""]
    return "\n".join(out).rstrip()
