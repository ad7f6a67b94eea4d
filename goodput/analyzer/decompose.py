"""``goodput analyze decompose``: where a group's latency went, segment by segment, with its percentiles.

Per request E2E = gateway + queue + prefill + kv_transfer + decode + send + other, where ``other`` is what the
segment spans do not cover: gaps (> 0) and, from clock skew, overlaps (< 0) — reported, not hidden. ``kv_transfer``
is the move of the KV cache from a prefill replica to a decode replica (P/D disaggregation, ``llm.kv_transfer``);
0 for a request served without one. TTFT splits the same way into gateway + queue + prefill + kv_transfer + other.
For each group the report names the segment that contributes most to its slow tail (requests at or above the
group's p95 / p99).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from goodput.analyzer.backend import Backend, backend
from goodput.foundation.errors import ConfigError

__all__ = ["DIMENSIONS", "SEGMENTS", "Decomposition", "decompose"]

# a request's path, in order (each a ``<segment>_s`` column of the requests table; ``other`` what none covers)
SEGMENTS = ("gateway", "queue", "prefill", "kv_transfer", "decode", "send", "other")
DIMENSIONS = ("deployment", "tenant", "tier", "route", "model", "replica", "scene", "outcome")
BUCKETS = {"1m": "1 minute", "5m": "5 minutes", "15m": "15 minutes", "1h": "1 hour", "1d": "1 day"}


@dataclass
class Decomposition:
    columns: list[str]
    rows: list[tuple]
    percentiles: list[float]

    def group_columns(self) -> list[str]:
        """The grouping dimensions (and ``bucket``), in order."""
        return [c for c in self.columns if c not in _REST and not c.endswith(("_q", "_p95", "_p99"))]

    def records(self) -> list[dict]:
        out = []
        for row in self.rows:
            rec = dict(zip(self.columns, row, strict=True))
            for name in ("e2e_q", "ttft_q"):
                values = rec.pop(name) or [None] * len(self.percentiles)
                for p, v in zip(self.percentiles, values, strict=True):
                    rec[f"{name[:-2]}_p{_pct(p)}_s"] = v
            for name in ("e2e_p95", "e2e_p99", "ttft_p95", "ttft_p99"):
                rec.pop(name, None)
            lead = [*self.group_columns(), "requests", "all_requests", *(k for k in rec if k.startswith(("e2e_p", "ttft_p"))
                                                            and k.endswith("_s"))]
            out.append({k: rec[k] for k in dict.fromkeys([*lead, *_REST]) if k in rec})
        return out


_REST = (*(f"{s}_s" for s in SEGMENTS), "e2e_p95_top_segment",
         "e2e_p99_top_segment", "ttft_p95_top_segment", "ttft_p99_top_segment", "gaps", "overlaps", "requests",
         "all_requests")


def _pct(p: float) -> str:
    return f"{p * 100:g}".replace(".", "_")


def decompose(con: Backend | duckdb.DuckDBPyConnection, by: list[str], *, since: datetime | None = None,
              until: datetime | None = None, percentiles: Sequence[float] = (0.5, 0.95, 0.99),
              bucket: str | None = None, deployment: str | None = None) -> Decomposition:
    for d in by:
        if d not in DIMENSIONS:
            raise ConfigError("--by", d, f"unknown dimension; use {', '.join(DIMENSIONS)}")
    if bucket is not None and bucket not in BUCKETS:
        raise ConfigError("--bucket", bucket, f"use one of {', '.join(BUCKETS)}")
    if not all(0 < p < 1 for p in percentiles):
        raise ConfigError("--percentiles", ",".join(f"{p * 100:g}" for p in percentiles), "each must be in (0, 100)")
    dims = list(dict.fromkeys(by)) or ["deployment"]
    b = backend(con)
    select = list(dims)
    if bucket is not None:
        select.append(_BUCKET[b.dialect].format(BUCKETS[bucket]) + " AS bucket")
        dims = [*dims, "bucket"]
    deployment_filter = {"duckdb": "AND deployment = $deployment", "clickhouse": "AND deployment = {deployment:String}"}
    fill = {"{dims_select}": ", ".join(select), "{dims_o}": ", ".join(f"o.{d}" for d in dims),
            "{dims_using}": ", ".join(dims), "{dims}": ", ".join(dims), "{order}": ", ".join(f"s.{d}" for d in dims),
            "{where_extra}": deployment_filter[b.dialect] if deployment else ""}
    params: dict[str, Any] = {"since": since, "until": until, "percentiles": list(percentiles)}
    if deployment:
        params["deployment"] = deployment
    res = b.rows("decompose", params, fill)
    return Decomposition(res.columns, res.rows, list(percentiles))


# the time bucket of an allow-listed width (BUCKETS, each a divisor of a day: the same buckets in both)
_BUCKET = {"duckdb": "time_bucket(INTERVAL '{}', ts)",
           "clickhouse": "toStartOfInterval(ts, INTERVAL {}, 'UTC')"}
