"""What is still in flight, as every trace figure of the pages says it: a figure over requests some of which have not
finished (a live store holds only their early spans) is not final — a queue build-up's survivors are the quick
ones, so its p95 reads low and its lengths short. Each table row gets ``in_flight`` (how many of its requests are
still in flight; None: unknown) and ``final`` ("final", or "not final: N in flight"); each chart draws its buckets
that are not final dotted, apart from the final line (goodput/analyzer/completeness.py counts them)."""

from __future__ import annotations

import pandas as pd
import plotly.colors
import plotly.graph_objects as go
import streamlit as st

from goodput.analyzer.completeness import not_final
from goodput.console import data
from goodput.console.ui import Context

__all__ = ["KEYS", "lines", "mark", "say"]

COLOURS = plotly.colors.qualitative.Plotly  # Plotly's own sequence: a chart reads as it did before
KEYS = ("deployment", "tier", "tenant", "bucket")  # what a row may name that the in-flight count follows


def mark(ctx: Context, df: pd.DataFrame, bucket: str | None = None) -> pd.DataFrame:
    """``df`` with ``in_flight`` and ``final`` per row (its requests of the page's window and filters)."""
    if df.empty:
        return df.assign(in_flight=pd.Series(dtype="Int64"), final=pd.Series(dtype=str))
    keys = [k for k in KEYS if k in df.columns and (k != "bucket" or bucket)]
    rows = [{k: (v.to_pydatetime() if isinstance(v, pd.Timestamp) else v) for k, v in r.items()}
            for r in df[keys].to_dict("records")]
    since, until = ctx.window()
    f = ctx.filters
    counts = data.in_flight(ctx.db, ctx.db_version, rows, since, until, (f.deployment, f.tier, f.tenant), bucket)
    return df.assign(in_flight=pd.array(counts, dtype="Int64"), final=[not_final(n) or "final" for n in counts])


def say(ctx: Context, df: pd.DataFrame, what: str) -> None:
    """One line above a marked table or chart when some of it is not final: how many requests of the range (and
    filters) are still in flight — those of buckets no finished request has yet included."""
    if "final" not in df.columns or (df["final"] == "final").all():
        return
    since, until = ctx.window()
    f = ctx.filters
    (n,) = data.in_flight(ctx.db, ctx.db_version, [{}], since, until, (f.deployment, f.tier, f.tenant), None)
    st.warning(f"{what}: {not_final(n)} in this range; the rows or points marked not final will change as those "
               "requests finish (the queue's slowest last).", icon=":material/hourglass_top:")


def lines(x: pd.Series, y: pd.Series, final: pd.Series, name: str, index: int) -> list[go.Scatter]:
    """One series (the ``index``-th of its chart: its colour) as a solid line over its final points and a dotted one,
    in the same colour, from the last final point over the rest (named "not final"), so a partial bucket never reads
    as a recovery or a drop."""
    colour = COLOURS[index % len(COLOURS)]
    done = final.to_numpy(dtype=bool)
    out = [go.Scatter(x=x.iloc[done], y=y.iloc[done], name=name, mode="lines", legendgroup=name,
                      line={"color": colour})]
    if not done.all():
        last = [i for i, d in enumerate(done) if d][-1:]
        idx = last + [i for i, d in enumerate(done) if not d]
        out.append(go.Scatter(x=x.iloc[idx], y=y.iloc[idx], name=f"{name} (not final)", mode="lines+markers",
                              line={"dash": "dot", "color": colour}, marker={"symbol": "circle-open", "size": 8},
                              legendgroup=name))
    return out
