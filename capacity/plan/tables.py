"""Plain-text tables for ``goodput plan`` (``--format table``): one row per candidate, the headroom terms apart."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from capacity.plan.pareto import describe, verdict

__all__ = ["render_disagg", "render_evaluation", "render_plan", "table"]


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


def render_plan(plan: Mapping[str, Any]) -> str:
    out = []
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
        row = {"policy": name, "gpu_hours": r["gpu_hours"], "rejected": r["rejected"],
               "time_to_recover_s": r["time_to_recover_s"], "max_replicas": r["max_replicas"]}
        row.update({f"{t} attainment": v for t, v in r["attainment"].items()})
        row.update({f"{t} min below": v for t, v in r["minutes_below_objective"].items()})
        row["pareto"] = describe(pareto.get(name))
        rows.append(row)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = [f"scenario {result['scenario']} ({result['duration_s']:g} s, deployment {result['deployment']}, "
           f"cold start {result['cold_start_s']:g} s)", table(rows, cols), "",
           "minutes below the objective (" + ", ".join(f"{t} {o:g}" for t, o in result["slo_objectives"].items()) + "):"]
    for name, r in result["policies"].items():
        for t, runs in r["dips"].items():
            if runs:
                more = f" and {len(runs) - max_dips} more" if len(runs) > max_dips else ""
                out.append(f"  {name} {t}: " + "; ".join(_dip(x) for x in runs[:max_dips]) + more)
    out += [verdict(b, st) for b, st in result.get("standing", {}).items()]
    return "\n".join(out) + "\n"


def render_disagg(doc: Mapping[str, Any]) -> str:
    """``goodput plan disagg``: per candidate, the demand and SLO, the aggregated and disaggregated layouts side
    by side, the KV transfer, and the verdict with its reason."""
    out = []
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
                f"KV transfer: {link['transfer_ms']:g} ms a request ({link['gbps']:g} GB/s, {link['latency_ms']:g} ms "
                f"latency), counted in the {link['counted_in'].upper()}",
                textwrap.fill(f"verdict: {p['verdict']}: {p['reason']}", width=118, subsequent_indent="  "), ""]
    return "\n".join(out).rstrip()
