"""The tables' words and colours, as pure functions: a verdict's direction, the Overview's status, alert rows and
silences from Alertmanager's shapes, the palette's segment order."""

from __future__ import annotations

import math

import pandas as pd

from goodput.console.columns import _paint, label
from goodput.console.palette import DIRECTION, SEGMENTS, STATUS, plain, segment_order
from goodput.console.tables import alert_rows, live_table, silence_rows, status, verdict_table


def _verdict(release: str | None, **extra) -> dict:
    return {"deployment": "rag", "tier": "P1", "metric": "decode_s", "time": "2026-11-23T08:30:00+00:00",
            "change": -0.4, "before_p95_s": 1.0, "after_p95_s": 0.6, "segment": "decode", "cause": "per-token decode cost",
            "release": release, "blamed": True, **extra}


def _colour(styler, row: int) -> set[str]:
    return {v for (r, _), props in styler._compute().ctx.items() if r == row for k, v in props if k == "color"}


def test_a_verdict_is_coloured_by_its_direction_and_a_scale_event_grey():
    found = [_verdict("framework v1 -> v2", direction="improvement"), _verdict("model a -> b", direction="regression"),
             _verdict("scale 2 -> 4", direction="improvement"), _verdict("config x -> y")]
    table = verdict_table(found, None)
    assert list(table["direction"]) == ["improvement", "regression", "scale", ""]
    styler = _paint(table, "direction")
    assert _colour(styler, 0) == {DIRECTION["improvement"]} and _colour(styler, 1) == {DIRECTION["regression"]}
    assert _colour(styler, 2) == {DIRECTION["scale"]}
    assert _colour(styler, 3) == set()  # no word from the analyzer: drawn as before


def test_status_is_paging_then_burning_then_met():
    live = pd.DataFrame([{"deployment": "a", "tier": "P0", "ttft_burn_1h": 20.0, "ttft_attainment": 0.5},
                         {"deployment": "b", "tier": "P0", "ttft_burn_1h": 3.0, "ttft_attainment": 0.9},
                         {"deployment": "c", "tier": "P0", "ttft_burn_1h": 0.5, "ttft_attainment": 0.999},
                         {"deployment": "d", "tier": "P0", "ttft_burn_1h": math.nan, "ttft_attainment": math.nan}])
    alerts = alert_rows([{"labels": {"alertname": "LLMSLOBurnRateFast", "severity": "page", "deployment": "a",
                                     "tier": "P0"}, "annotations": {}},
                         {"labels": {"alertname": "X", "severity": "ticket", "deployment": "b"}, "annotations": {}}],
                        None, None)
    assert status(live, alerts) == ["paging", "burning", "met", "no data"]
    assert set(STATUS) >= set(status(live, alerts))


def test_alert_rows_name_the_repositorys_runbook_never_a_path_from_the_alert():
    rows = alert_rows([{"labels": {"alertname": "LLMEngineDown"}, "annotations": {
                            "runbook_url": "https://example.invalid/docs/runbooks/LLMEngineDown.md"}},
                       {"labels": {"alertname": "Evil"}, "annotations": {"runbook_url": "../../../etc/passwd"}}],
                      None, None)
    assert list(rows["runbook"]) == ["LLMEngineDown", ""]


def test_silences_read_as_matchers():
    rows = silence_rows([{"status": {"state": "active"}, "startsAt": "2026-11-23T08:00:00Z", "endsAt": "x",
                          "createdBy": "me", "comment": "maintenance",
                          "matchers": [{"name": "deployment", "value": "rag", "isRegex": False, "isEqual": True},
                                       {"name": "alertname", "value": "LLM.*", "isRegex": True, "isEqual": False}]}])
    assert rows["matchers"].iloc[0] == "deployment=rag, alertname!~LLM.*"


def test_segments_keep_a_requests_order_and_labels_are_plain():
    path = ["send", "kv_transfer", "prefill", "queue", "decode", "gateway"]
    assert sorted(path, key=segment_order) == list(SEGMENTS[:6]) == ["gateway", "queue", "prefill", "kv_transfer",
                                                                    "decode", "send"]
    assert label("queue_wait_p95_s") == "p95 queue wait (s)" and label("e2e_p99_s") == "p99 E2E (s)"
    assert plain("<a href='x'>y</a>") == "&lt;a href='x'&gt;y&lt;/a&gt;"


def test_markers_draw_releases_scale_events_and_pages_in_their_style_inside_the_window():
    import plotly.graph_objects as go

    from goodput.console.markers import Marker, draw
    from goodput.console.palette import MARKER

    t = pd.Timestamp("2026-11-23T08:30:00Z").to_pydatetime()
    fig = go.Figure()
    draw(fig, [Marker(t, "release", "rag: model <b>a</b> -> b"), Marker(t, "scale", "rag: scale 2 -> 4"),
               Marker(t, "page", "page: LLMEngineDown rag"), Marker(t - pd.Timedelta(hours=2), "release", "old")],
         t - pd.Timedelta(hours=1), t + pd.Timedelta(hours=1))
    assert [(s.line.color, s.line.dash) for s in fig.layout.shapes] == [MARKER[k] for k in ("release", "scale", "page")]
    assert [a.text for a in fig.layout.annotations] == ["rag: model &lt;b&gt;a&lt;/b&gt; -&gt; b", "rag: scale 2 -&gt; 4",
                                                        "page: LLMEngineDown rag"]
    # no box behind the text, which hid the tops of the bars it crossed (an arrival bar read 1.3 req/s for 2.35);
    # a halo keeps it readable over them instead
    assert all(a.bgcolor is None and a.font.shadow for a in fig.layout.annotations), fig.layout.annotations


def test_the_live_queue_wait_p95_reads_as_a_bound_in_the_gateway_s_edge_buckets():
    """The rules' p95 is histogram_quantile over the gateway buckets (5 ms ... 300 s): 4.8 ms is Prometheus's
    interpolation inside the first bucket, 300 its answer for +Inf; the page shows them as bounds."""
    from goodput.console.columns import COLUMNS
    from goodput.console.prom import Sample

    samples = [Sample({"deployment": d, "tier": "P0"}, v) for d, v in (("a", 0.0048), ("b", 0.042), ("c", 300.0))]
    table = live_table({"queue_wait_p95_s": samples, "kv_usage": []})
    assert table["queue_wait_p95_s"].tolist() == [0.0048, 0.042, 300.0]  # the frame keeps Prometheus's numbers
    shown = table.style.format(COLUMNS["queue_wait_p95_s"].format, subset=["queue_wait_p95_s"], na_rep="")
    cells = [line.split()[3] for line in shown.to_string().splitlines()[1:]]  # as goodput.console.columns.show formats it
    assert cells == ["<0.005", "0.04", ">300"], shown.to_string()


def test_the_unexplained_seconds_of_a_trace_read_zero_not_minus_zero():
    """other_s is the request's E2E less its spans: a float difference whose zero can be -2.8e-14."""
    from goodput.console.columns import COLUMNS

    table = pd.DataFrame({"other_s": [-2.842170943040401e-14, 2.8e-14, -0.0123]})
    shown = table.style.format(COLUMNS["other_s"].format, subset=["other_s"], na_rep="")
    cells = [line.split()[1] for line in shown.to_string().splitlines()[1:]]  # as goodput.console.columns.show formats it
    assert cells == ["0.000", "0.000", "-0.012"], shown.to_string()
