"""Self-contained HTML reports for ``goodput plan``: plotly.js inlined once, every string from a file escaped.

The plan report draws each candidate's replicas stacked by headroom term; the evaluation report draws, per
policy, the replicas (ready and provisioned), the demand the autoscaler saw and the strictest tier's SLO
attainment per minute, with the side-by-side table; the overload report draws each tier's SLO attainment per minute
under the three protections and the ladder's steps coming on and going off, with the per tier and tenant tables.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from goodput.plan.pareto import describe, verdict
from goodput.plan.tables import overload_heading, overload_rows, overload_timelines

__all__ = ["write_evaluation_report", "write_overload_report", "write_plan_report"]

CSS = ("body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse;margin:.5em 0}"
       "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:right}th{background:#f4f4f4}")
TERMS = ("base", "growth", "failure_domains", "release_surge", "cold_start_buffer")
# each overload variant in one colour on every chart; the ladder dashed, so the quotas line shows beneath it
VARIANT_LINES = {"none": ("#d62728", "solid"), "quotas": ("#1f77b4", "solid"), "ladder": ("#2ca02c", "dash")}


def _e(v: Any) -> str:
    if isinstance(v, float):
        v = f"{v:.4g}"
    return html.escape("" if v is None else str(v), quote=True)


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_e(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(title: str, figures: list, tables: list[str]) -> str:
    parts: list[str] = []
    for fig in figures:
        parts.append(fig.to_html(full_html=False, include_plotlyjs=not parts, config={"displaylogo": False}))
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{_e(title)}</title><style>{CSS}</style></head>"
            f"<body><h1>{_e(title)}</h1>{''.join(parts)}{''.join(tables)}</body></html>")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_plan_report(path: Path, plan: Mapping[str, Any]) -> Path:
    import plotly.graph_objects as go

    figures, tables = [], []
    for name, d in plan["deployments"].items():
        fig = go.Figure()
        labels = [html.escape(c["name"], quote=False) for c in d["compared"]]
        for term in TERMS:
            fig.add_trace(go.Bar(name=term, x=labels, y=[c["headroom"][term] for c in d["compared"]]))
        fig.update_layout(barmode="stack", title=f"{html.escape(name, quote=False)}: replicas per headroom term",
                          yaxis_title="replicas")
        figures.append(fig)
        rows = [{"candidate": c["name"], "goodput/replica (tokens/s)": c["replica_goodput_tokens_per_second"],
                 **c["headroom"], "replicas": c["replicas"], "gpus": c["gpus"], "$/hour": c["usd_per_hour"],
                 "$/M tokens": c["usd_per_million_tokens"], "binding": c["checks"]["binding"],
                 "goodput from": c["goodput_source"]} for c in d["compared"]]
        tables.append(f"<h2>{_e(name)}: chosen {_e(d['candidate']['name'])}, {_e(d['desired_replicas'])} replicas</h2>"
                      + _table(rows))
    return _write(path, _page("goodput capacity plan", figures, tables))


def write_evaluation_report(path: Path, result: Mapping[str, Any]) -> Path:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    policies = result["policies"]
    tiers = list(result["slo_objectives"])
    strict = min(tiers)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=["replicas (provisioned)", "demand seen by the autoscaler (tokens/s)",
                                        f"{strict} SLO attainment per minute"])
    for label, r in policies.items():
        tl = r["timeline"]
        hours = [t / 3600.0 for t in tl["t"]]
        name = html.escape(label, quote=False)
        fig.add_trace(go.Scatter(x=hours, y=tl["provisioned"], name=f"{name}", legendgroup=name, mode="lines",
                                 line={"shape": "hv"}), row=1, col=1)
        fig.add_trace(go.Scatter(x=hours, y=tl["demand_tokens_per_s"], name=f"{name} demand", legendgroup=name,
                                 mode="lines", showlegend=False), row=2, col=1)
        att = r["attainment_timeline"][strict]
        fig.add_trace(go.Scatter(x=[(i + 0.5) / 60.0 for i in range(len(att))], y=att, name=f"{name} attainment",
                                 legendgroup=name, mode="lines", showlegend=False), row=3, col=1)
    fig.add_hline(y=result["slo_objectives"][strict], line_dash="dot", row=3, col=1)
    fig.update_xaxes(title_text="hours", row=3, col=1)
    fig.update_layout(height=900, title=f"scenario {html.escape(result['scenario'], quote=False)}")
    head = go.Figure(go.Bar(x=list(result["headroom"]), y=list(result["headroom"].values())))
    head.update_layout(title="the plan's replicas per headroom term", yaxis_title="replicas")
    rows = [{"policy": k, "gpu_hours": v["gpu_hours"], "usd": v["usd"], "rejected": v["rejected"],
             "time_to_recover_s": v["time_to_recover_s"], "max_replicas": v["max_replicas"],
             **{f"{t} attainment": a for t, a in v["attainment"].items()},
             **{f"{t} minutes below objective": m for t, m in v["minutes_below_objective"].items()},
             "pareto": describe(result.get("pareto", {}).get(k))} for k, v in policies.items()]
    verdicts = "".join(f"<li>{_e(verdict(b, st))}</li>" for b, st in result.get("standing", {}).items())
    return _write(path, _page(f"goodput policy evaluation: {result['deployment']}", [fig, head],
                              [_table(rows), f"<ul>{verdicts}</ul>" if verdicts else ""]))


def write_overload_report(path: Path, result: Mapping[str, Any]) -> Path:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    variants = result["variants"]
    tiers = list(next(iter(variants.values()))["tiers"])
    minutes = [(i + 0.5) for i in range(max((len(s) for v in variants.values()
                                             for s in v["timeline"]["slo_attainment"].values()), default=0))]
    start, end = (t / 60.0 for t in result["window_s"])
    att = make_subplots(rows=max(1, len(tiers)), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{t} SLO attainment per minute" for t in tiers])
    for label, v in variants.items():
        for row, t in enumerate(tiers, 1):
            color, dash = VARIANT_LINES[label]
            att.add_trace(go.Scatter(x=minutes, y=v["timeline"]["slo_attainment"][t], name=label, legendgroup=label,
                                     showlegend=row == 1, mode="lines+markers", line={"color": color, "dash": dash}),
                          row=row, col=1)
    for row, t in enumerate(tiers, 1):
        att.add_hline(y=result["slos"][t]["objective"], line_dash="dot", row=row, col=1)
        att.add_vrect(x0=start, x1=end, fillcolor="grey", opacity=0.12, line_width=0, row=row, col=1)
    att.update_xaxes(title_text="minute of the scenario", row=max(1, len(tiers)), col=1)
    att.update_layout(height=300 * max(1, len(tiers)),
                      title=f"scenario {html.escape(result['scenario'], quote=False)}: the three protections")
    tl = variants["ladder"]["timeline"]
    steps = list(tl["ladder_engaged"])  # deployment: step, in the order the ladder log first names them
    ladder = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                           subplot_titles=["share of each minute each ladder step was engaged (the ladder log)",
                                           "degraded and fallback shares per minute"])
    if steps:
        ladder.add_trace(go.Heatmap(x=minutes, y=[html.escape(s, quote=False) for s in steps], zmin=0, zmax=1,
                                    z=[tl["ladder_engaged"][s] for s in steps],
                                    colorscale="Reds", showscale=False), row=1, col=1)
        ladder.update_yaxes(autorange="reversed", row=1, col=1)  # the first step on top, as the ladder reads
    for key in ("degraded_share", "fallback_share"):
        ladder.add_trace(go.Scatter(x=minutes, y=tl[key], name=key.replace("_", " "), mode="lines"), row=2, col=1)
    for row in (1, 2):
        ladder.add_vrect(x0=start, x1=end, fillcolor="grey", opacity=0.12, line_width=0, row=row, col=1)
    ladder.update_xaxes(title_text="minute of the scenario", row=2, col=1)
    ladder.update_layout(height=550, title="the configured ladder stepping in and out"
                         + ("" if steps else ": no step was on in any minute"))
    rows_v, rows_t, rows_w, rows_n = overload_rows(result)
    tables = ["".join(f"<p>{_e(line)}</p>" for line in overload_heading(result)), _table(rows_v),
              "<h2>per tier</h2>", _table(rows_t), "<h2>per workload</h2>", _table(rows_w),
              "<h2>per tenant</h2>", _table(rows_n),
              "<h2>the configured ladder variant's timelines</h2>",
              "<pre>" + "\n".join(_e(line) for line in overload_timelines(result)) + "</pre>"]
    return _write(path, _page(f"goodput overload plan: {result['scenario']}", [att, ladder], tables))
