"""The console's colours, one module so a segment, a status or a marker is drawn alike on every page.

Segments are listed in the order a request passes them (gateway, queue, prefill, kv_transfer, decode, send: the
analyzer's ``SEGMENTS``), which is the order every chart, legend and trace drill-down uses.
"""

from __future__ import annotations

from goodput.analyzer.decompose import SEGMENTS

__all__ = ["CIRCUIT", "DIRECTION", "MARKER", "SEGMENTS", "SEGMENT_COLOURS", "STATUS", "plain", "segment_order"]

# colour-blind safe (Okabe-Ito), one per segment
SEGMENT_COLOURS = {"gateway": "#999999", "queue": "#E69F00", "prefill": "#56B4E9", "kv_transfer": "#0072B2",
                   "decode": "#009E73", "send": "#CC79A7", "other": "#F0E442"}
# Overview status: the SLO met, the error budget burning faster than it is earned, a page firing
STATUS = {"met": "#1e8449", "burning": "#d68910", "paging": "#c0392b", "no data": "#7f8c8d"}
# a verdict's direction (analyzer rows' ``direction``; a ``scale`` cause is neither; ``backlog`` a release's queue still
# building)
DIRECTION = {"regression": "#c0392b", "improvement": "#1e8449", "scale": "#7f8c8d", "backlog": "#d68910"}
# a primary's circuit breaker (the Routing page's words): tripped, probing, serving
CIRCUIT = {"OPEN": "#c0392b", "HALF-OPEN": "#d68910", "closed": "#1e8449"}
# time-chart markers: (line colour, dash)
MARKER = {"release": ("#8e44ad", "dash"), "scale": ("#7f8c8d", "dot"), "page": ("#c0392b", "solid")}


def segment_order(name: str) -> int:
    """A segment's place in a request's path (unknown segments last)."""
    return SEGMENTS.index(name) if name in SEGMENTS else len(SEGMENTS)


def plain(text: object) -> str:
    """Text for a Plotly label: Plotly reads <b>, <a href> and entities in any label, so data's are escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
