"""How a table reads: one human label with its unit and one rounding per column name, the columns on call needs
first, status words in their colour.

The frames keep their machine column names (the headless check and the tests read them); only what the browser
shows is labelled, through Streamlit's column config and a pandas Styler for colour.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import streamlit as st

from goodput.console.palette import CIRCUIT, DIRECTION, STATUS
from goodput.contracts.catalog import by_name
from goodput.foundation.histogram import bounded

if TYPE_CHECKING:  # Streamlit's column configs are this TypedDict; streamlit.column_config exports only its builders
    from streamlit.elements.lib.column_types import ColumnConfig

__all__ = ["COLUMNS", "label", "show"]


# a Styler formatter: called with each value of its column, whatever pandas holds there
Format = Callable[[Any], str]


@dataclass(frozen=True)
class Col:
    label: str
    # printf-style for numbers, or a function of the value (a Styler format); None: text (Streamlit's own for dates)
    format: str | Callable[[float], str] | None = None
    width: Literal["small", "medium", "large"] | None = None  # None: Streamlit sizes it by the rows it sees first


def _signed_share(v: float) -> str:
    return f"{round(v, 2) + 0.0:+.0%}"  # rounded first: -0.1% is "+0%", never "-0%"


def _residual_s(v: float) -> str:
    """The seconds a trace's spans leave unexplained: a float difference, so a zero can be -2.8e-14; never "-0.000"."""
    return f"{round(v, 3) + 0.0:.3f}"


def _bounds(histogram: str) -> tuple[float, ...]:
    """A histogram's finite bucket bounds from the catalog; a name that is no histogram there is a programming error."""
    buckets = by_name(histogram).buckets
    if buckets is None:
        raise ValueError(f"{histogram} has no buckets in the metric catalog")
    return buckets


_QUEUE_WAIT_BOUNDS = _bounds("llm_gateway_queue_wait_seconds")


def _gateway_queue_p95(v: float) -> str:
    """The rules' recorded queue-wait p95 (``histogram_quantile`` over the gateway buckets): a number between two
    finite buckets, ``<0.005`` in the first (Prometheus interpolated it there) and ``>300`` in +Inf."""
    q = bounded(v, _QUEUE_WAIT_BOUNDS)
    return MISSING if q is None else q.text(digits=2)


S, S3, SHARE, COUNT, TOKENS, RATIO = "%.2f", "%.3f", "percent", "%d", "%.0f", "%.2f"
COLUMNS: dict[str, Col] = {
    # Overview, live
    "status": Col("status"), "short": Col("replicas short"),
    "ttft_attainment": Col("TTFT met 5m", SHARE), "tpot_attainment": Col("TPOT met 5m", SHARE),
    "ttft_burn_1h": Col("TTFT burn 1h", RATIO), "tpot_burn_1h": Col("TPOT burn 1h", RATIO),
    "replicas_available": Col("replicas up", COUNT), "replicas_required": Col("replicas needed", COUNT),
    "queue_wait_p95_s": Col("p95 queue wait (s)", _gateway_queue_p95), "kv_usage": Col("KV cache used", SHARE),
    "demand_tokens_per_s": Col("demand (tok/s)", TOKENS), "capacity_tokens_per_s": Col("capacity (tok/s)", TOKENS),
    # Overview, alerts
    "alert": Col("alert"), "severity": Col("severity"), "since": Col("since (UTC)"), "until": Col("until (UTC)"),
    "summary": Col("summary"), "runbook": Col("runbook"), "state": Col("state"), "matchers": Col("matchers"),
    "created_by": Col("by"), "comment": Col("comment"), "starts": Col("starts (UTC)"), "ends": Col("ends (UTC)"),
    # Overview, traces
    "requests": Col("requests", COUNT), "TTFT attainment": Col("TTFT met", SHARE),
    "TPOT attainment": Col("TPOT met", SHARE), "p95 TTFT s": Col("p95 TTFT (s)", S),
    "p95 queue wait s": Col("p95 queue wait (s)", S), "demand tok/s": Col("demand (tok/s)", TOKENS),
    "goodput tok/s": Col("goodput (tok/s)", TOKENS), "preemptions": Col("preemptions", COUNT),
    # Latency
    "all_requests": Col("all requests", COUNT), "gateway_s": Col("gateway (s)", S3), "queue_s": Col("queue (s)", S),
    "prefill_s": Col("prefill (s)", S), "kv_transfer_s": Col("KV transfer (s)", S3),
    "prefill_replica": Col("prefill replica"), "decode_s": Col("decode (s)", S), "send_s": Col("send (s)", S3),
    "other_s": Col("other (s)", _residual_s), "e2e_s": Col("E2E (s)", S), "ttft_s": Col("TTFT (s)", S),
    "e2e_p95_top_segment": Col("p95 E2E mostly"), "e2e_p99_top_segment": Col("p99 E2E mostly"),
    "ttft_p95_top_segment": Col("p95 TTFT mostly"), "ttft_p99_top_segment": Col("p99 TTFT mostly"),
    "gaps": Col("gaps", COUNT), "overlaps": Col("overlaps", COUNT), "trace_id": Col("trace"),
    "request_id": Col("request"), "ts": Col("arrived (UTC)"), "outcome": Col("outcome"),
    "input_tokens": Col("input (tokens)", TOKENS), "output_tokens": Col("output (tokens)", TOKENS),
    "retries": Col("retries", COUNT),
    # every trace table: how many of the row's requests are still in flight (goodput/console/flight.py)
    "final": Col("final?", width="medium"), "in_flight": Col("in flight", COUNT),
    # Workload, KV, Routing
    "measure": Col("measure"), "before": Col("before"), "now": Col("now"), "change": Col("change", _signed_share),
    "shift": Col("shift?"), "bucket": Col("from (UTC)"), "kv_rejections": Col("KV rejections", COUNT),
    "rejected": Col("rejected", COUNT), "replica": Col("replica"), "replicas": Col("replicas", COUNT),
    "queue_p95_s": Col("p95 queue wait (s)", S), "cache_hit_ratio": Col("prefix-cache hits", SHARE),
    "retried": Col("retried", COUNT), "failed": Col("failed", COUNT),
    "decision": Col("decision"), "share": Col("share of the tenant's requests in its tier", SHARE),
    "requests max/min": Col("requests max/min", RATIO), "p95 queue wait max/min": Col("p95 queue wait max/min", RATIO),
    "retried share": Col("retried", SHARE), "scale": Col("scale event"), "first_seen": Col("first request (UTC)"),
    # Releases
    "metric": Col("p95 of"), "time": Col("changed at (UTC)"), "before_p95_s": Col("p95 before (s)", S),
    "after_p95_s": Col("p95 after (s)", S), "segment": Col("segment"), "cause": Col("cause"), "release": Col("release"),
    "blamed": Col("blamed"), "direction": Col("direction"), "note": Col("note"), "released": Col("released (UTC)"),
    # Capacity
    "per-replica goodput tok/s": Col("per-replica goodput (tok/s)", TOKENS), "desired (plan)": Col("planned", COUNT),
    "available": Col("up now", COUNT), "required now": Col("needed now", COUNT), "term": Col("term"),
    "step": Col("ladder step"), "step_index": Col("step (0 none)", COUNT), "path": Col("primary -> backup"),
    "requests_per_s": Col("requests/s", "%.3f"), "degraded": Col("degraded by"),
    "breaker": Col("circuit breaker"), "opened": Col("opened in the range", COUNT),
    "action": Col("action"), "reason": Col("reason"), "numbers": Col("numbers"),
    "idle share": Col("idle share", SHARE),  # of the spend, live and in the week's review
}
MISSING = "–"  # a figure the source does not have (Streamlit would write "None")
_PCT = re.compile(r"(e2e|ttft)_p(\d+)_s$")
# values a column colours by, and the colour of each
COLOURS: dict[str, Mapping[str, str]] = {"status": STATUS, "direction": DIRECTION, "severity": {"page": STATUS["paging"]},
                                         "breaker": CIRCUIT}


def _col(name: str) -> Col:
    if name in COLUMNS:
        return COLUMNS[name]
    m = _PCT.match(name)
    if m:
        return Col(f"p{m[2]} {m[1].upper()} (s)", S)
    return Col(name.replace("_", " "))


def label(name: str) -> str:
    return _col(name).label


def _number(dtype) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def _config(name: str, dtype, own_format: bool) -> ColumnConfig | str:
    c = _col(name)
    if isinstance(dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_any_dtype(dtype):
        return st.column_config.DatetimeColumn(c.label, format="YYYY-MM-DD HH:mm:ss")
    if isinstance(c.format, str) and not own_format and _number(dtype):
        return st.column_config.NumberColumn(c.label, format=c.format)
    if c.width is not None:  # a cell a later row widens ("final" above "not final: 194 in flight")
        return st.column_config.Column(c.label, width=c.width)
    return c.label


def _paint(df: pd.DataFrame, colour_by: str | None):
    """A Styler that colours each coloured column's words, and with ``colour_by`` the whole row's text."""
    styler = df.style
    for name, palette in COLOURS.items():
        if name in df.columns:
            styler = styler.map(lambda v, p=palette: f"color: {p[v]}; font-weight: bold" if v in p else "",
                                subset=[name])
    if colour_by is not None and colour_by in df.columns:
        palette = COLOURS[colour_by]
        styler = styler.apply(lambda row: [f"color: {palette[row[colour_by]]}" if row[colour_by] in palette else ""
                                           for _ in row], axis=1)
    return styler


def show(df: pd.DataFrame, key: str, first: Sequence[str] = (), colour_by: str | None = None,
         formats: Mapping[str, Format] | None = None) -> None:
    """``df`` as a table: labelled, rounded (``formats`` for a column whose rows differ in unit), ``first``
    leading (the rest in their order), coloured words."""
    formats = {**{c: fmt for c in df.columns if _number(df[c].dtype) and callable(fmt := _col(c).format)},
               **(formats or {})}
    order = [c for c in first if c in df.columns] + [c for c in df.columns if c not in first]
    if "final" in df.columns:  # "not final: N in flight" says the count; the frame keeps in_flight for readers
        order = [c for c in order if c != "in_flight"]
    config = {c: _config(c, df[c].dtype, c in formats) for c in df.columns}
    styled = formats or colour_by is not None or any(c in df.columns for c in COLOURS)
    shown = _paint(df, colour_by) if styled else df
    for c, fmt in formats.items():
        shown = shown.format(fmt, subset=[c], na_rep="")
    st.dataframe(shown, hide_index=True, width="stretch", key=key, column_order=order, column_config=config,
                 placeholder=MISSING)
