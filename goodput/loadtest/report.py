"""``RUN_DIR/report.html``: one self-contained page a person opens offline to read a load test.

Latency vs load, goodput vs offered load with the knee marked, the per-step latency distributions, and
the tables (steps, the server's view, faults). plotly.js is inlined once, so the page needs no network.
Every string that comes from the run (labels, model names, SLO text, reasons) is HTML-escaped, both in
the tables and in the figures (plotly renders a subset of HTML in its labels).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from goodput.foundation.histogram import Quantile

__all__ = ["verdict_text", "write_report"]

LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
PERCENTILES = ("p50", "p95", "p99")
MAX_POINTS_PER_STEP = 5000  # per-step distributions draw at most this many requests (every k-th, in order)


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _p(value) -> str:
    """A label for plotly, which renders <b>, <a href> and the like: tags escaped, quotes left as typed."""
    return html.escape("" if value is None else str(value), quote=False)


def _load(step: Mapping) -> tuple[float, str]:
    """The x of a step: its offered rate, else its concurrency, else its index."""
    if step.get("offered_rate") is not None:
        return float(step["offered_rate"]), "offered load (req/s)"
    if step.get("concurrency") is not None:
        return float(step["concurrency"]), "concurrency"
    return float(step.get("index", 0)), "step"


def _num(v) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _fmt(v) -> str:
    if isinstance(v, dict) and "bound" in v:  # a histogram quantile: a bound in its edge buckets, never made up
        return _e(Quantile.from_dict(v).text(unit=" s", digits=4))
    if isinstance(v, bool) or v is None:
        return _e(v if v is not None else "")
    if isinstance(v, float):
        return _e(f"{v:.4g}")
    return _e(v)


def _table(rows: Sequence[Mapping], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _latency_figure(steps: Sequence[Mapping]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(LATENCIES), subplot_titles=[f"{n} (s)" for _, n in LATENCIES])
    xs = [_load(s)[0] for s in steps]
    for col, (key, name) in enumerate(LATENCIES, start=1):
        for p in PERCENTILES:
            ys = [_num((s.get(key) or {}).get(p)) for s in steps]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{name} {p}", legendgroup=name), row=1, col=col)
        fig.update_xaxes(title_text=_load(steps[0])[1] if steps else "", row=1, col=col)
    fig.update_layout(title="Latency vs load", height=420)
    return fig


def verdict_text(summary: Mapping) -> str:
    """The run's verdict in words (``stats.verdict``), the same on stdout and in report.html."""
    from goodput.loadtest.stats import verdict

    steps = list(summary.get("steps") or [])
    if not steps:
        return "no step measured"
    if summary.get("slo", {}) is None:
        return "no SLO given: no attainment, goodput or knee"
    v = verdict(steps)
    knee = v["knee"]
    if knee is not None:
        goodput = knee.get("goodput_requests_per_s")
        return f"knee at step {knee['step']} ({'-' if goodput is None else f'{goodput:.2f}'} req/s goodput)"
    if not v["judged"]:
        return "not judged (no per-request data)"
    return "no step meets it"


def _goodput_figure(steps: Sequence[Mapping], knee: Mapping | None, verdict: str):
    import plotly.graph_objects as go

    xs = [_load(s)[0] for s in steps]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", name="offered", line={"dash": "dot", "color": "#999"}))
    fig.add_trace(go.Scatter(x=xs, y=[_num(s.get("achieved_rate")) for s in steps], mode="lines+markers",
                             name="throughput (req/s)"))
    fig.add_trace(go.Scatter(x=xs, y=[_num(s.get("goodput_requests_per_s")) for s in steps], mode="lines+markers",
                             name="SLO goodput (req/s)"))
    step = next((s for s in steps if knee and s.get("index") == knee.get("step")), None)
    if step is not None:
        x = _load(step)[0]
        fig.add_vline(x=x, line_dash="dash", line_color="#c00")
        fig.add_annotation(x=x, y=_num(step.get("goodput_requests_per_s")) or 0, text=f"knee: {x:g}",
                           showarrow=True, arrowhead=2)
    fig.update_layout(title="SLO goodput vs offered load" + ("" if step else f" ({_p(verdict)})"), height=420,
                      xaxis_title=_load(steps[0])[1] if steps else "", yaxis_title="req/s")
    return fig


def _distribution_figure(steps: Sequence[Mapping], records) -> object | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = records.to_pandas() if hasattr(records, "to_pandas") else records
    if df is None or len(df) == 0 or "step" not in df:
        return None
    labels = {s.get("index"): _p(s.get("label") or f"step {s.get('index')}") for s in steps}
    present = [(k, n) for k, n in LATENCIES if k in df]
    fig = make_subplots(rows=len(present), cols=1, subplot_titles=[f"{n} per step (s)" for _, n in present])
    for row, (key, name) in enumerate(present, start=1):
        for index, group in df.groupby("step", sort=True):
            values = group[key].dropna()
            values = values.iloc[:: max(1, math.ceil(len(values) / MAX_POINTS_PER_STEP))]
            fig.add_trace(go.Box(y=values.tolist(), name=labels.get(index, _p(f"step {index}")), boxpoints=False,
                                 legendgroup=name, showlegend=False), row=row, col=1)
    fig.update_layout(title="Per-step distributions", height=320 * len(present))
    return fig


def _header(summary: Mapping) -> str:
    state = "complete" if summary.get("complete", True) else "INCOMPLETE (interrupted: partial results)"
    valid = "valid" if summary.get("valid", True) else "INVALID: " + "; ".join(map(str, summary.get("invalid_reasons", [])))
    comp = summary.get("comparability") or {}
    rows = [{"field": k, "value": v if not isinstance(v, dict | list) else repr(v)} for k, v in comp.items()]
    client = summary.get("client") or {}
    return (f"<h1>Load test: {_e(comp.get('model') or summary.get('tool', 'goodput'))}</h1>"
            f"<p class=state>{_e(state)} &middot; {_e(valid)} &middot; "
            + (f"SLO {_e(comp.get('slo', ''))}: {_e(verdict_text(summary))}" if summary.get("slo", {}) is not None
               else _e(verdict_text(summary))) + "</p>"
            + (_table([client], list(client)) if client else "")
            + "<details><summary>comparability</summary>" + _table(rows, ["field", "value"]) + "</details>")


STEP_COLUMNS = ("index", "label", "offered_rate", "concurrency", "requests", "completed", "achieved_rate",
                "output_tokens_per_s", "error_rate", "slo_attainment", "slo_met", "goodput_requests_per_s",
                "goodput_tokens_per_s")
CSS = ("body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse;margin:.5em 0}"
       "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:right}th{background:#f4f4f4}"
       ".state{font-weight:bold}")


def write_report(run_dir: Path, summary: dict, records_table) -> Path:
    """Write ``run_dir/report.html`` from the run's summary (summary.json's dict) and its requests (a pyarrow
    Table or pandas DataFrame with ``step`` and the latency columns; may be empty); returns the path."""
    steps = list(summary.get("steps") or [])
    figures = [_latency_figure(steps), _goodput_figure(steps, summary.get("knee"), verdict_text(summary)),
               _distribution_figure(steps, records_table)]
    parts: list[str] = []
    for fig in (f for f in figures if f is not None):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=not parts, config={"displaylogo": False}))
    step_rows = [{c: s.get(c) for c in STEP_COLUMNS} for s in steps]
    server_rows = [{"index": s.get("index"), **(s.get("server") or {})} for s in steps if s.get("server")]
    server_cols = list(dict.fromkeys(k for r in server_rows for k in r))
    faults = list(summary.get("faults") or [])
    fault_cols = list(dict.fromkeys(k for f in faults for k in f))
    doc = ["<!doctype html><html><head><meta charset=utf-8><title>goodput load test report</title>",
           f"<style>{CSS}</style></head><body>", _header(summary), *parts,
           "<h2>Steps</h2>", _table(step_rows, STEP_COLUMNS)]
    if server_rows:
        doc += ["<h2>The server's view per step</h2>", _table(server_rows, server_cols)]
    if faults:
        doc += ["<h2>Faults</h2><p>detect_s / recover_s: seconds after the fault until the SLO was missed / met "
                "again over the sliding window.</p>", _table(faults, fault_cols)]
    doc.append("</body></html>")
    path = Path(run_dir) / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(doc), encoding="utf-8")
    return path
