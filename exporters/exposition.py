"""Prometheus text exposition (format 0.0.4), rendered straight from strings.

The engine exporter serves hundreds of replicas; building prometheus_client metric objects for every
sample on every scrape costs ~16 us per series, so exporters keep pre-rendered sample lines and join
them under one HELP/TYPE header per family at scrape time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from exporters.catalog import MetricSpec

__all__ = ["CONTENT_TYPE", "escape", "fmt_float", "header", "labels", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape(value: str) -> str:
    """Label value escaping of the text format: backslash, double quote and newline."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def labels(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join(f'{n}="{escape(str(v))}"' for n, v in zip(names, values, strict=True))


def fmt_float(v: float) -> str:
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def header(spec: MetricSpec) -> str:
    help_text = spec.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {spec.name} {help_text}\n# TYPE {spec.name} {spec.type}\n"


def render(families: Iterable[tuple[MetricSpec, Sequence[str]]]) -> str:
    """Families with their sample lines (each ``name{labels} value``), skipping families with none."""
    out = []
    for spec, lines in families:
        if lines:
            out.append(header(spec))
            out.append("\n".join(lines))
            out.append("\n")
    return "".join(out)
