"""Prometheus text exposition (format 0.0.4), rendered straight from strings.

The engine exporter serves hundreds of replicas; building prometheus_client metric objects for every
sample on every scrape costs ~16 us per series, so exporters keep pre-rendered sample lines and join
them under one HELP/TYPE header per family at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from goodput.contracts.catalog import MetricSpec, by_name
from goodput.foundation.textformat import CONTENT_TYPE

__all__ = ["CONTENT_TYPE", "SELF_COLLECTION", "escape", "fmt_float", "header", "labels", "render", "self_metrics"]


def escape(value: str) -> str:
    """Label value escaping of the text format: backslash, double quote and newline."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def labels(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join(f'{n}="{escape(str(v))}"' for n, v in zip(names, values, strict=True))


def fmt_float(v: float) -> str:
    """The text format's float: Python's shortest repr, with NaN, +Inf and -Inf spelled as Prometheus does."""
    r = repr(float(v))
    return r if r[-1] in _DIGITS else _SPECIAL[r]


_DIGITS = frozenset("0123456789")
_SPECIAL = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}


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


SELF_COLLECTION = tuple(by_name(n) for n in ("llm_exporter_collection_duration_seconds", "llm_exporter_errors_total",
                                             "llm_exporter_last_success_timestamp_seconds"))


def self_metrics(exporter: str, duration_s: float, last_success: float, errors: dict[str, int]) -> dict[str, list[str]]:
    """The lines every exporter reports about its own collection (duration, errors by kind, last success)."""
    ex = f'exporter="{escape(exporter)}"'
    return {
        "llm_exporter_collection_duration_seconds": [
            f"llm_exporter_collection_duration_seconds{{{ex}}} {fmt_float(duration_s)}"],
        "llm_exporter_last_success_timestamp_seconds": [
            f"llm_exporter_last_success_timestamp_seconds{{{ex}}} {fmt_float(last_success)}"],
        "llm_exporter_errors_total": [f'llm_exporter_errors_total{{{ex},kind="{escape(k)}"}} {float(n)}'
                                      for k, n in sorted(errors.items())],
    }
