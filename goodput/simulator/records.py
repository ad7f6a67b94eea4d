"""Finished requests as columns: the simulator's ground truth, written to ``requests.parquet`` (the live fleet's
span sink also renders requests still in flight through it, for their early spans).

Timestamps become integer nanoseconds since the Unix epoch through one function, so the Parquet
columns and the OTLP span timestamps are bit-for-bit the same instants.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from goodput.simulator.config import FleetConfig
from goodput.simulator.request import Request

__all__ = ["DECISIONS", "OUTCOMES", "TIMESTAMPS", "RequestTable", "replica_id", "to_ns"]

TIMESTAMPS = ("arrival", "queue_start", "scheduled", "first_token", "last_token", "completed")
OUTCOMES = {"stop": "ok", "length": "ok", "rejected": "rejected", "timeout": "timeout", "error": "error",
            "abort": "cancelled"}
# the gateway's routing decisions in Request.meta (docs/simulator.md#fallback): columns of requests.parquet, "" none
DECISIONS = ("fallback_from", "fallback_reason")


def replica_id(deployment: str, role: str, index: int) -> str:
    """A replica's id: ``chat-0``; in a disaggregated deployment ``chat-prefill-0`` / ``chat-decode-0`` (``role``)."""
    return f"{deployment}-{role}-{index}" if role else f"{deployment}-{index}"


def to_ns(base_ns: int, seconds: np.ndarray) -> np.ndarray:
    """Virtual seconds -> Unix nanoseconds (int64); NaN stays a masked value (-1)."""
    s = np.asarray(seconds, dtype=float)
    out = np.full(s.shape, -1, dtype=np.int64)
    ok = ~np.isnan(s)
    out[ok] = base_ns + np.rint(s[ok] * 1e9).astype(np.int64)
    return out


class RequestTable:
    """Column arrays of every request of a run, sorted by arrival."""

    def __init__(self, fleet_cfg: FleetConfig, done: Sequence[Request], seed: int, base_ns: int | None = None,
                 run_id: str = "") -> None:
        """``base_ns``: the Unix time of virtual second 0 (default: the fleet file's ``start_time``);
        ``run_id`` makes ids unique across runs that share a seed (the live fleet passes its start time)."""
        reqs = sorted(done, key=lambda r: (r.arrival, r.rid))
        self.n = len(reqs)
        self.base_ns = base_ns if base_ns is not None else int(fleet_cfg.start_time.timestamp()) * 1_000_000_000
        salt = hashlib.blake2b(f"{fleet_cfg.name}/{seed}/{run_id}".encode(), digest_size=8).hexdigest()
        wls = fleet_cfg.workloads
        deps = fleet_cfg.deployments
        col = {
            "rid": np.fromiter((r.rid for r in reqs), dtype=np.int64, count=self.n),
            "workload": np.fromiter((r.workload for r in reqs), dtype=np.int64, count=self.n),
            "tenant_idx": np.fromiter((r.tenant for r in reqs), dtype=np.int64, count=self.n),
            "deployment_idx": np.fromiter((r.deployment for r in reqs), dtype=np.int64, count=self.n),
        }
        self.rid = col["rid"]
        self.request_id = [f"{salt}{rid:016x}" for rid in col["rid"].tolist()]
        meta = [r.meta for r in reqs]
        # a caller's W3C trace context (meta["traceparent"] = (trace id, parent span id)) is continued, as vLLM
        # does; otherwise the request is a trace of its own, its id the request id (32 hex digits)
        context = [m.get("traceparent") if m is not None else None for m in meta]
        self.trace_id = [c[0] if c else rid for c, rid in zip(context, self.request_id, strict=True)]
        self.parent_span_id = [c[1] if c else "" for c in context]
        w_idx = col["workload"].tolist()

        def pick(field: str, default: list) -> list:
            return [m[field] if m is not None and field in m else d for m, d in zip(meta, default, strict=True)]

        self.tenant = pick("tenant", [wls[w].tenants[t][0] for w, t in zip(w_idx, col["tenant_idx"].tolist(), strict=True)])
        self.tier = [r.tier for r in reqs]
        self.scene = pick("scene", [wls[w].scene for w in w_idx])
        self.route = pick("route", [wls[w].route for w in w_idx])
        self.operation = pick("operation", [wls[w].operation for w in w_idx])
        self.workload = pick("workload", [wls[w].name for w in w_idx])
        self.deployment = [deps[d].name for d in col["deployment_idx"].tolist()]
        self.model = [deps[d].model for d in col["deployment_idx"].tolist()]
        self.replica = [_replica(deps[r.deployment], r) for r in reqs]
        # prefill/decode disaggregation (None when no deployment is disaggregated: the columns are left out)
        self.disaggregated = any(d.disaggregation is not None for d in deps)
        self.prefill_replica = [replica_id(deps[r.deployment].name, "prefill", r.prefill_replica)
                                if r.prefill_replica >= 0 else "" for r in reqs]
        self.kv_transfer_s = np.fromiter((r.kv_link_s for r in reqs), dtype=float, count=self.n)
        self.kv_transfer_bytes = np.fromiter((r.kv_bytes for r in reqs), dtype=np.int64, count=self.n)
        self.decode_start = to_ns(self.base_ns, np.fromiter((r.decode_start for r in reqs), dtype=float, count=self.n))
        self.ts = {k: to_ns(self.base_ns, np.fromiter((getattr(r, k) for r in reqs), dtype=float, count=self.n))
                   for k in TIMESTAMPS}
        self.input_tokens = np.fromiter((r.prompt_tokens for r in reqs), dtype=np.int64, count=self.n)
        self.output_tokens = np.fromiter((r.generated for r in reqs), dtype=np.int64, count=self.n)
        self.cached_tokens = np.fromiter((r.cached_tokens for r in reqs), dtype=np.int64, count=self.n)
        self.preemptions = np.fromiter((r.preemptions for r in reqs), dtype=np.int64, count=self.n)
        self.finish_reason = [r.finish_reason for r in reqs]
        self.reject_reason = [r.reject_reason or None for r in reqs]
        # the gateway's decision (goodput/simulator/gateway.py), None without a gateway section
        self.admission = [m.get("admission") if m is not None else None for m in meta]
        self.gateway_wait_s = [m.get("gateway_wait_s") if m is not None else None for m in meta]
        # the overload ladder's (goodput/simulator/overload.py): its top step at admission, what degraded the request;
        # None: none
        self.overload_step = [m.get("overload_step") or None if m is not None else None for m in meta]
        self.degraded = [m.get("degraded") or None if m is not None else None for m in meta]
        # the primary's circuit breaker when the gateway routed the request (goodput/simulator/fallback.py); None: no
        # breaker there
        self.circuit_state = [m.get("circuit_state") if m is not None else None for m in meta]
        self.decisions = {k: [m.get(k, "") if m is not None else "" for m in meta] for k in DECISIONS}
        self.outcome = [OUTCOMES.get(f, "") for f in self.finish_reason]  # "": still in flight (early spans)

    def arrow(self) -> pa.Table:
        ts_type = pa.timestamp("ns", tz="UTC")
        cols = {
            "request_id": pa.array(self.request_id, pa.string()),
            "trace_id": pa.array(self.trace_id, pa.string()),
            "tenant": pa.array(self.tenant, pa.string()),
            "tier": pa.array(self.tier, pa.string()),
            "scene": pa.array(self.scene, pa.string()),
            "route": pa.array(self.route, pa.string()),
            "workload": pa.array(self.workload, pa.string()),
            "model": pa.array(self.model, pa.string()),
            "deployment": pa.array(self.deployment, pa.string()),
            "replica": pa.array(self.replica, pa.string()),
        }
        for k in TIMESTAMPS:
            v = self.ts[k]
            cols[k] = pa.array(v, pa.int64(), mask=v < 0).cast(ts_type)
        cols.update({
            "input_tokens": pa.array(self.input_tokens),
            "output_tokens": pa.array(self.output_tokens),
            "cached_tokens": pa.array(self.cached_tokens),
            "preemptions": pa.array(self.preemptions),
            "finish_reason": pa.array(self.finish_reason, pa.string()),
            "reject_reason": pa.array(self.reject_reason, pa.string()),
            "overload_step": pa.array(self.overload_step, pa.string()),
            "degraded": pa.array(self.degraded, pa.string()),
            "circuit_state": pa.array(self.circuit_state, pa.string()),
            "outcome": pa.array(self.outcome, pa.string()),
        })
        cols.update({k: pa.array(v, pa.string()) for k, v in self.decisions.items()})
        if self.disaggregated:
            handed = [bool(p) for p in self.prefill_replica]
            cols.update({
                "prefill_replica": pa.array([p or None for p in self.prefill_replica], pa.string()),
                "kv_transfer_s": pa.array(self.kv_transfer_s, pa.float64(), mask=~np.array(handed, dtype=bool)),
                "kv_transfer_bytes": pa.array(self.kv_transfer_bytes, pa.int64()),
                "decode_start": pa.array(self.decode_start, pa.int64(), mask=self.decode_start < 0).cast(ts_type),
            })
        return pa.table(cols)

    def write_parquet(self, path: Path) -> None:
        pq.write_table(self.arrow(), path, compression="zstd")


def _replica(dep, r: Request) -> str:
    if r.replica < 0:
        return ""
    if dep.disaggregation is None:
        return replica_id(dep.name, "", r.replica)
    return replica_id(dep.name, "decode" if r.kv_ready == r.kv_ready else "prefill", r.replica)
