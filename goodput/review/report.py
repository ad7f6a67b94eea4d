"""The review as files: review.json (everything), review.html (one page, plotly inlined once, opens
offline) and review.md with its charts as SVG beside it in charts/ (drawn here: a static export through
kaleido needs a browser download this machine cannot make). Every string from the data is escaped.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from goodput.contracts.vocabulary import COLD_START_MEASURES
from goodput.foundation.histogram import Quantile

__all__ = ["write_review"]

# how a cold start was measured (review/cold_start.py), in the table's words
_MEASURED = dict(zip(COLD_START_MEASURES, ("pod created to Ready", "process start to first scrape"), strict=True))
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _charts(review: dict, dep: str) -> list[dict]:
    """Each chart once, for both renderers: title, y label, lines {name: values}, x = the week's grid."""
    e = review["deployments"][dep]
    out = [{"id": "demand", "title": f"{dep}: requests/s by tier", "y": "req/s",
            "lines": {t: v["requests_per_second"]["series"] for t, v in e["tiers"].items()}}]
    cap = e["capacity"]
    lines = {"demand tokens/s": e["tokens_per_second"]["series"]}
    if cap.get("plan"):
        g = cap["replica_goodput_tokens_per_second"]
        lines["capacity (available x goodput)"] = [a * g for a in e["replicas"]["available_series"]]
        lines["80 % of capacity"] = [0.8 * a * g for a in e["replicas"]["available_series"]]
    out.append({"id": "capacity", "title": f"{dep}: tokens/s against capacity" + ("" if cap.get("plan") else " (no plan)"),
                "y": "tokens/s", "lines": lines})
    slo = {f"{t} {s['route']}": s["attainment_series"] for t, v in e["tiers"].items() for s in v["slo"]}
    if slo:
        out.append({"id": "slo", "title": f"{dep}: share of requests within both SLO thresholds (5 min)", "y": "ratio",
                    "lines": slo})
    out.append({"id": "kv", "title": f"{dep}: KV-cache usage (max over replicas)", "y": "ratio",
                "lines": {"kv usage": e["kv"]["usage_max_series"]}})
    fc = e.get("forecast")
    if fc:
        out.append({"id": "forecast", "title": f"{dep}: each week's busiest hour, tokens/s, history and 4-week forecast",
                    "y": "tokens/s",
                    "x": [h["week_start"][:10] for h in fc["history"]] + [w["week_start"][:10] for w in fc["weeks"]],
                    "lines": {"observed peak": [h["peak"] for h in fc["history"]] + [None] * len(fc["weeks"]),
                              "forecast": [None] * len(fc["history"]) + [w["peak"] for w in fc["weeks"]],
                              "forecast high": [None] * len(fc["history"]) + [w["high"] for w in fc["weeks"]],
                              "forecast low": [None] * len(fc["history"]) + [w["low"] for w in fc["weeks"]]}})
    return out


def _svg(chart: dict, n_default: int, width: int = 760, height: int = 240) -> str:
    """A line chart as SVG, by hand: axes, min/max labels, one polyline per series, a legend."""
    left, right, top, bottom = 60, 10, 28, 38
    vals = [v for line in chart["lines"].values() for v in line if v is not None]
    lo, hi = (min(vals + [0.0]), max(vals + [1e-9])) if vals else (0.0, 1.0)
    n = len(chart["x"]) if "x" in chart else n_default
    sx = (width - left - right) / max(n - 1, 1)
    sy = (height - top - bottom) / ((hi - lo) or 1.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="16" font-size="13">{_e(chart["title"])}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#888"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#888"/>',
             f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{_e(_fmt(hi))}</text>',
             f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end">{_e(_fmt(lo))}</text>',
             f'<text x="12" y="{(top + height - bottom) / 2}" transform="rotate(-90 12 {(top + height - bottom) / 2})" '
             f'text-anchor="middle">{_e(chart["y"])}</text>']
    xs = chart.get("x")
    first, last = (xs[0], xs[-1]) if xs else ("Mon", "Sun")
    parts.append(f'<text x="{left}" y="{height - bottom + 14}">{_e(first)}</text>'
                 f'<text x="{width - right}" y="{height - bottom + 14}" text-anchor="end">{_e(last)}</text>')
    for k, (name, line) in enumerate(chart["lines"].items()):
        color = COLORS[k % len(COLORS)]
        pts = " ".join(f"{left + i * sx:.1f},{height - bottom - (v - lo) * sy:.1f}" for i, v in enumerate(line)
                       if v is not None)
        if pts:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{pts}"/>')
        parts.append(f'<text x="{left + 10 + 150 * k}" y="{height - 8}" fill="{color}">{_e(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _figure(chart: dict, grid: list[str], releases: list[dict], loss_windows: list[tuple[str, str]]) -> dict:
    """The chart as plotly.js data and layout (built as plain JSON: plotly's Python figures cost seconds here)."""
    x = chart.get("x", grid)
    mode = "lines+markers" if "x" in chart else "lines"
    data = [{"type": "scatter", "x": x, "y": line, "name": html.escape(name, quote=False), "mode": mode}
            for name, line in chart["lines"].items()]
    shapes, notes = [], []
    if "x" not in chart:
        for r in releases:
            shapes.append({"type": "line", "x0": r["time"], "x1": r["time"], "yref": "paper", "y0": 0, "y1": 1,
                           "line": {"dash": "dash", "color": "#888"}})
            notes.append({"x": r["time"], "y": 1, "yref": "paper", "text": html.escape(r["label"], quote=False),
                          "showarrow": False, "font": {"size": 10}})
        for a, b in loss_windows:
            shapes.append({"type": "rect", "x0": a, "x1": b, "yref": "paper", "y0": 0, "y1": 1, "fillcolor": "#d62728",
                           "opacity": 0.12, "line": {"width": 0}})
    layout = {"title": {"text": html.escape(chart["title"], quote=False)}, "yaxis": {"title": {"text": chart["y"]}},
              "height": 320, "margin": {"l": 60, "r": 20, "t": 40, "b": 30}, "legend": {"orientation": "h"},
              "shapes": shapes, "annotations": notes}
    return {"data": data, "layout": layout}


def _plot(div_id: str, fig: dict) -> str:
    """A div and the script that draws ``fig`` in it; '</' is escaped so no string can close the script."""
    payload = json.dumps(fig, separators=(",", ":")).replace("</", "<\\/")
    return (f'<div class="plotly-graph-div" id="{_e(div_id)}" style="height:320px;width:100%"></div>'
            f'<script>(function(f){{Plotly.newPlot({json.dumps(div_id)}, f.data, f.layout, '
            f'{{"displaylogo": false, "responsive": true}});}})({payload});</script>')


def _table(rows: list[dict], cols: list[str]) -> tuple[str, str]:
    """(html, markdown) of the same table."""
    h = "<table><tr>" + "".join(f"<th>{_e(c)}</th>" for c in cols) + "</tr>" + "".join(
        "<tr>" + "".join(f"<td>{_e(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows) + "</table>"
    md = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n" + "".join(
        "| " + " | ".join(_fmt(r.get(c)).replace("|", "\\|") for c in cols) + " |\n" for r in rows)
    return h, md


def _sections(review: dict, dep: str) -> list[tuple[str, list[dict], list[str]]]:
    e = review["deployments"][dep]
    demand = [{"tier": t, "req/s mean": v["requests_per_second"]["mean"], "peak hour": v["requests_per_second"]["peak_hour"],
               "peak hour req/s": v["requests_per_second"]["peak_hour_mean"], "in tok/s": v["input_tokens_per_second"],
               "out tok/s": v["output_tokens_per_second"], "requests": v["requests"],
               "WoW requests %": v["requests_week_over_week_pct"], "WoW tokens %": v["tokens_week_over_week_pct"],
               "routes": ", ".join(f"{r} {x:.2f}/s" for r, x in v["by_route"].items()),
               "top tenants": ", ".join(f"{x['tenant']} {x['requests']:,}" for x in v["tenants"][:5])}
              for t, v in e["tiers"].items()]
    slo = [{"tier": t, "route": s["route"], "objective": s["objective"], "TTFT attainment": s["ttft_attainment"],
            "TPOT attainment": s["tpot_attainment"], "met": s["met"], "error budget burn": s["error_budget_burn"],
            "goodput req/s": s["goodput_requests_per_second"]} for t, v in e["tiers"].items() for s in v["slo"]]
    cap = e["capacity"]
    capacity = [{("5-minute peak tokens/s" if k == "peak_tokens_per_second" else k): cap.get(k)
                 for k in ("replica_goodput_tokens_per_second", "desired_replicas", "capacity_tokens_per_second",
                           "peak_tokens_per_second", "headroom_pct", "hours_above_80pct", "replicas_needed_at_peak",
                           "replica_hours_needed")}
                | {"replica-hours used": e["usage"]["replica_hours"], "GPU-hours used": e["usage"]["gpu_hours"]}] \
        if cap.get("plan") else [{"capacity": cap["note"], "replica-hours used": e["usage"]["replica_hours"],
                                  "GPU-hours used": e["usage"]["gpu_hours"]}]
    cs = e.get("cold_start")
    cold = [{"replicas started": cs["replicas"], "measured": _MEASURED.get(cs.get("measured"), "-"),
             "p50 s": cs["p50_s"], "p90 s": cs["p90_s"], "max s": cs["max_s"],
             "plan s": cs["plan_s"] if cs["plan_s"] is not None else "no plan",
             "p90 over plan": {True: "yes: LLMColdStartAbovePlan", False: "no", None: "-"}[cs["p90_over_plan"]]}] \
        if cs else []
    kv = [{"KV usage p95": e["kv"]["usage_p95"], "preemptions": e["kv"]["preemptions"],
           "allocation failures": e["kv"]["allocation_failures"]}]
    refused = [{"tier": t, "timeouts": v["timeouts"], **{f"rejected: {r}": n for r, n in v["rejections"].items()},
                **{f"p95 {k} s": Quantile.from_dict(x).text(digits=4) for k, x in v["latency_p95_s"].items()}}
               for t, v in e["tiers"].items()]
    pages = [{"alert": p["alert"], "start": p["start"], "end": p["end"], "minutes": round(p["duration_s"] / 60),
              "labels": ", ".join(f"{k}={v}" for k, v in p["labels"].items() if k not in ("alertname", "deployment"))}
             for p in e["pages"]]
    fc = e.get("forecast")
    forecast = [{"week": w["week_start"][:10], "busiest hour tokens/s": w["peak"], "low": w["low"], "high": w["high"],
                 "replicas needed": w["replicas_needed"] if w["replicas_needed"] is not None else "no plan"}
                for w in fc["weeks"]] if fc else []
    regs = [{k: r.get(k) for k in ("tier", "metric", "time", "change", "segment", "cause", "release")}
            for r in e.get("regressions", [])]
    cols = lambda rows: list(dict.fromkeys(k for r in rows for k in r))  # noqa: E731
    cost, tenants = _cost_rows(e.get("cost"))
    return [("Demand", demand, cols(demand)), ("SLO attainment and error budget", slo, cols(slo)),
            ("Capacity", capacity, cols(capacity)), ("Cost", cost, cols(cost)),
            ("Cost by tenant", tenants, cols(tenants) or ["tenant"]),
            ("Cold starts against the plan", cold, cols(cold) or ["replicas started"]), ("KV pressure", kv, cols(kv)),
            ("Rejects, timeouts and latency", refused, cols(refused)),
            ("Pages", pages, cols(pages) or ["alert"]), ("Forecast of weekly peak demand", forecast, cols(forecast)),
            ("Regressions", regs, cols(regs) or ["metric"])]


def _cost_rows(c: dict | None) -> tuple[list[dict], list[dict]]:
    """The cost table (dollars, GPU-hours x price, per 1M goodput tokens, waste and its trend) and the tenants'."""
    if c is None:
        return [{"cost": "no cost series (load rules/cost.rules.yaml; docs/cost.md)"}], []
    row = {"USD": c["usd"], "GPU-hours": ", ".join(f"{t or 'unpriced'} {h:,.1f}" for t, h in c["gpu_hours"].items()),
           "$/GPU-hour": ", ".join(f"{t} {p:g}" for t, p in c["usd_per_gpu_hour"].items()),
           "GPU-hours x price": c["gpu_hours_x_price_usd"],
           "$ per 1M goodput tokens": c["usd_per_million_goodput_tokens"], "idle (waste) USD": c["idle_usd"],
           "idle share": c["idle_share"], "idle share trend pp/day": c["idle_share_trend_pp_per_day"],
           "daily idle share": ", ".join("-" if d["idle_share"] is None else f"{d['idle_share']:.2f}"
                                         for d in c["daily"])}
    return [row], [{"tier": t["tier"], "tenant": t["tenant"], "USD": t["usd"]} for t in c["tenants"]]


def _fleet_cost(review: dict) -> list[dict]:
    c = review.get("cost")
    if not c:
        return []
    return [{"USD": c["usd"], "$ per 1M goodput tokens": c["usd_per_million_goodput_tokens"],
             "idle (waste) USD": c["idle_usd"], "idle share": c["idle_share"],
             "idle share trend pp/day": c["idle_share_trend_pp_per_day"],
             **{f"day {d['day']} USD / idle": f"{d['usd']:,.2f} / {d['idle_usd']:,.2f}" for d in c["daily"]}}]


CSS = ("body{font-family:sans-serif;margin:24px;max-width:1200px}table{border-collapse:collapse;margin:6px 0 14px}"
       "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:left}h2{border-bottom:1px solid #ddd}"
       ".note{background:#fff5d6;padding:8px}")


def write_review(review: dict, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "charts").mkdir(exist_ok=True)
    paths = {"json": out / "review.json", "html": out / "review.html", "md": out / "review.md"}
    paths["json"].write_text(json.dumps(review, indent=1))
    title = f"Weekly capacity review {review['week']} ({review['start'][:10]} .. {review['end'][:10]})"
    releases = [{"time": r["time"], "label": f"{r['deployment']}: {r['kind']} {r['from']} -> {r['to']}"}
                for r in review.get("releases", [])]
    from plotly.offline import get_plotlyjs  # only the HTML needs the bundle
    h = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{CSS}</style>"
         f"<script>{get_plotlyjs()}</script></head>"
         f"<body><h1>{_e(title)}</h1><p>source: {_e(review['source'])}; pages from {_e(review['page_source'])}</p>"]
    md = [f"# {title}\n\nsource: {review['source']}; pages from {review['page_source']}\n"]
    if not review["has_data"]:
        msg = f"No data for {review['week']}: the source has no demand series between {review['start']} and {review['end']}."
        h.append(f"<p class='note'>{_e(msg)}</p>")
        md.append(f"\n> {msg}\n")
    if review.get("partial"):
        msg = (f"Partial week: {review['week']} is still in progress; every figure covers {review['start']} .. "
               f"{review['partial']['as_of']} (means over the steps that have passed), totals so far.")
        h.append(f"<p class='note'>{_e(msg)}</p>")
        md.append(f"\n> {msg}\n")
    if not review["plan"]:
        h.append("<p class='note'>no plan: capacity sections say so (pass --plan plan.yaml)</p>")
        md.append("\n> no plan: capacity sections say so (pass --plan plan.yaml)\n")
    recs = [{"deployment": r["deployment"], "action": r["action"], "reason": r["reason"],
             "numbers": ", ".join(f"{k}={_fmt(v)}" for k, v in r["numbers"].items())} for r in review["recommendations"]]
    th, tm = _table(recs, ["deployment", "action", "reason", "numbers"])
    h.append(f"<h2>Recommendations</h2>{th if recs else '<p>none</p>'}")
    md.append("\n## Recommendations\n\n" + (tm if recs else "none\n"))
    fleet = _fleet_cost(review)
    if fleet:
        th, tm = _table(fleet, list(fleet[0]))
        h.append(f"<h2>Fleet cost</h2>{th}")
        md.append("\n## Fleet cost\n\n" + tm)
    rel_rows = [{"time": r["time"], "deployment": r["deployment"], "kind": r["kind"], "from": r["from"], "to": r["to"],
                 "note": r["note"]} for r in review.get("releases", [])]
    th, tm = _table(rel_rows, ["time", "deployment", "kind", "from", "to", "note"])
    h.append(f"<h2>Releases</h2>{th if rel_rows else '<p>none given (--releases FILE)</p>'}")
    md.append("\n## Releases\n\n" + (tm if rel_rows else "none given (--releases FILE)\n"))
    for dep in review["deployments"]:
        h.append(f"<h2>{_e(dep)}</h2>")
        md.append(f"\n## {dep}\n")
        for name, rows, cols in _sections(review, dep):
            th, tm = _table(rows, cols)
            h.append(f"<h3>{_e(name)}</h3>" + (th if rows else "<p>none</p>"))
            md.append(f"\n### {name}\n\n" + (tm if rows else "none\n"))
        losses = [(p["start"], p["end"]) for p in review["deployments"][dep]["pages"] if p["alert"] == "LLMEngineDown"]
        dep_rel = [r for r, raw in zip(releases, review.get("releases", []), strict=True)
                   if raw["deployment"] in (dep, "*")]
        for chart in _charts(review, dep):
            h.append(_plot(f"chart-{dep}-{chart['id']}", _figure(chart, review["grid"], dep_rel, losses)))
            name = f"{dep}-{chart['id']}.svg".replace("/", "_")
            (out / "charts" / name).write_text(_svg(chart, len(review["grid"])))
            md.append(f"\n![{chart['title']}](charts/{name})\n")
    h.append("</body></html>")
    paths["html"].write_text("".join(h))
    paths["md"].write_text("".join(md))
    return paths
