"""Request exporter: OTLP request spans in, per-tenant ``llm_gateway_*`` metrics and a Parquet trace store out.

What engines cannot know — tenant, tier, route, outcome, rejection reason — comes from the gateway's
request spans (docs/design.md span model, or vLLM's single ``llm_request`` span). Counters carry
model/deployment/tenant/tier/route; histograms only deployment/tier/route. A cardinality guard keeps
the top ``max_tenants`` tenants by traffic and folds the rest into ``tenant="other"``.

OpenTelemetry exports a span when it ends, so a request's ``llm.gateway`` span (admission) and ``llm.queue`` span
(scheduling) can arrive long before its root. A gateway span that carries the request's labels counts the arrival
(``llm_gateway_requests_arrived_total``) and puts the request in flight and in the queue; its queue span observes
the queue wait at scheduling; the root, when it comes, lands it. A request without an early gateway span (vLLM's
``llm_request``, or all spans at once) arrives, schedules and lands with its root, so each is counted once.
Arrival rate and queue wait thus lead the completions during an overload instead of trailing them by the backlog.

A gateway span that carries the gateway's decision (``llm.admission``: admitted, queued, deferred, rejected) counts
it once per request in ``llm_gateway_admissions_total``, and its ``llm.gateway_wait_s`` (the time held in a tier
queue) is observed into ``llm_gateway_admission_wait_seconds``; a refused request's reason, the gateway's or the
engine's, is its root's ``llm.reject_reason`` as sent, in ``llm_gateway_rejections_total``. The overload ladder's and
the fallback routes' marks on the same span (``llm.degraded``, ``llm.fallback_from`` + ``llm.fallback_reason``) are
counted once per request beside the decision, and ``llm.overload_step`` of the newest gateway span per deployment is
the ladder's state now (``llm_gateway_overload_step``, the step's place in the catalog's ``OVERLOAD_STEPS``). So is
``llm.circuit_state`` of the newest gateway span per primary (``llm.fallback_from`` when the request fell back, else
its deployment) that primary's circuit breaker now (``llm_gateway_circuit_state``, 1 on the state it is in); a primary
no span named lately keeps the state its newest said.

Each admitted request's input tokens and each completed one's output tokens are also observed into per-request
token histograms (the catalog's ``TOKEN_BUCKETS``), the token mix measured demand reads from Prometheus.

Every label value comes from whoever sends spans, so each is bounded where it is recorded, not only when it
is rendered: values are cut to ``MAX_LABEL_CHARS``, a tier outside P0/P1/P2 reads ``unknown``, and each label
keeps at most ``LABEL_LIMITS`` distinct values (later new ones read ``other`` and are counted) — otherwise a
sender inventing a tenant per request grows the exporter's memory without end.
"""

from __future__ import annotations

import bisect
import gc
import json
import math
import os
import sys
import threading
import time
import zlib
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from goodput.contracts.catalog import GATEWAY, GATEWAY_BUCKETS, OVERLOAD_STEPS, TOKEN_BUCKETS, by_name
from goodput.contracts.vocabulary import CIRCUIT_STATE_ATTR, CIRCUIT_STATES, TIERS
from goodput.contracts.vocabulary import ROOT_SPANS as ROOT_SPANS
from goodput.exporters.exposition import fmt_float, labels, render
from goodput.exporters.otlp import RECEIVER_LIMITS, OtlpError, OtlpInvalid, OtlpTooLarge, Span, decode_json, decode_protobuf
from goodput.exporters.store_sink import Sink
from goodput.exporters.trace_store import StoreClosed, StoreFull, TraceStore, encode_spans
from goodput.foundation.errors import ConfigError
from goodput.foundation.histogram import Histogram, le_label
from goodput.foundation.http import Server, Sigterm, health_route, metrics_routes, serve_until_signal

__all__ = ["DECODE_SLOTS", "OTLP_MAX_BODY_BYTES", "PayloadTooLarge", "RequestMetrics", "TraceReceiver", "UnsupportedEncoding",
           "inflate", "open_store", "run_request_exporter"]

EXPORTER = "requests"
STOP_DRAIN_S = 5.0  # SIGTERM: posts in flight get at most this long of the grace, the store's last flush the rest
STOP_MARGIN_S = 3.0  # ... less this, kept for the metrics server, the sink's close and the process's exit
OTLP_MAX_BODY_BYTES = 32 * 1024 * 1024
DECODE_SLOTS = 2  # payloads inflated and decoded at once: what decoding may cost is this many times one payload's
DECODE_WAIT_S = 10.0  # a payload that finds no decode slot this long is answered 503 with Retry-After
# A 10,000-span payload decodes into ~500k dicts and lists, freed by reference counting; at Python's default
# thresholds (700, 10, 10) the cyclic collector ran hundreds of times per payload, traversing the buffered spans:
# ~45% of the receiver's CPU on spans of 20 attributes. The process sets these once, at start.
GC_THRESHOLDS = (100_000, 50, 100)
MAX_LABEL_CHARS = 128
LABEL_LIMITS = {"model": 256, "deployment": 1_000, "tenant": 10_000, "route": 256, "reason": 64, "decision": 16,
                "step": 16}
STEP_INDEX = {step: i for i, step in enumerate(OVERLOAD_STEPS, start=1)}
HIST = {"admission": "llm_gateway_admission_wait_seconds", "queue": "llm_gateway_queue_wait_seconds",
        "ttft": "llm_gateway_time_to_first_token_seconds",
        "tpot": "llm_gateway_time_per_output_token_seconds", "e2e": "llm_gateway_e2e_latency_seconds"}
TOKEN_HIST = {"input": "llm_gateway_request_input_tokens", "output": "llm_gateway_request_output_tokens"}


def _num(a: dict[str, Any], *keys: str) -> float | None:
    """The first of ``keys`` present, as a finite number >= 0; None for anything else (a NaN, an infinity or a
    negative count or latency would poison a sum or a histogram for good)."""
    for k in keys:
        v = a.get(k)
        if v is not None:
            try:
                f = float(v)
            except (TypeError, ValueError):
                return None
            return f if 0.0 <= f < math.inf else None
    return None


def _observe(h: Histogram, value: float | None) -> None:
    if value is not None and 0.0 <= value < math.inf:
        h.observe(value)


class _Bounded:
    """The distinct values one label has taken: the first ``limit`` are kept, later new ones read ``other``."""

    __slots__ = ("known", "limit", "overflow")

    def __init__(self, limit: int) -> None:
        self.known: set[str] = set()
        self.limit = limit
        self.overflow = 0

    def __call__(self, value: str) -> str:
        value = value[:MAX_LABEL_CHARS]
        if value in self.known:
            return value
        if len(self.known) < self.limit:
            self.known.add(value)
            return value
        self.overflow += 1
        return "other"


@dataclass(slots=True)
class _Flight:
    """A request counted at admission whose root span has not arrived yet."""

    hist_key: tuple[str, str, str]  # (deployment, tier, route)
    start_ns: int  # when the gateway received it: the time to first token runs from here
    scheduled: bool = False
    missed: int = 0  # how many of the bucket bounds its time to first token is already known to exceed


class RequestMetrics:
    """Aggregates request spans into counters, gauges and histograms; renders with the tenant cardinality guard."""

    def __init__(self, max_tenants: int = 50, buckets: tuple[float, ...] = GATEWAY_BUCKETS,
                 dedupe_window: int = 500_000) -> None:
        self.max_tenants = max_tenants
        self.buckets = buckets
        self.requests: dict[tuple, float] = defaultdict(float)  # (model, dep, tenant, tier, route, outcome)
        self.rejections: dict[tuple, float] = defaultdict(float)  # (..., reason)
        self.admissions: dict[tuple, float] = defaultdict(float)  # (..., decision)
        self.degradations: dict[tuple, float] = defaultdict(float)  # (..., step)
        self.fallbacks: dict[tuple, float] = defaultdict(float)  # (..., fallback_from, reason)
        self.overload: dict[str, tuple[int, str]] = {}  # deployment -> (end ns, step) of its newest gateway span
        self.circuits: dict[str, tuple[int, str]] = {}  # primary -> (end ns, breaker state) of its newest gateway span
        self.tokens_in: dict[tuple, float] = defaultdict(float)
        self.tokens_out: dict[tuple, float] = defaultdict(float)
        self.traffic: dict[str, float] = defaultdict(float)
        self.bounded = {label: _Bounded(max(limit, max_tenants) if label == "tenant" else limit)
                        for label, limit in LABEL_LIMITS.items()}
        self.hists: dict[tuple[str, str, str], dict[str, Histogram]] = {}
        self.seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        # segment spans usually end (and are exported) before their root: hold them until it arrives
        self.children: OrderedDict[str, dict[str, Span]] = OrderedDict()
        self.arrived: dict[tuple, float] = defaultdict(float)  # (model, dep, tenant, tier, route)
        # requests counted at admission (their llm.gateway span) whose root has not arrived: the in-flight ones
        self.flights: OrderedDict[str, _Flight] = OrderedDict()
        self.in_flight: dict[tuple[str, str, str], int] = defaultdict(int)
        # per (dep, tier, route): trace id -> when it joined the queue (ns), for those not yet scheduled
        self.queued: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
        # per (dep, tier, route): requests whose TTFT exceeded each bucket bound, counted once, as soon as known
        self.missed: dict[tuple[str, str, str], list[int]] = {}
        self.clock_ns = 0  # the newest span end seen: "now" on the senders' clock (see oldest_queued_age)
        self.max_pending_traces = 100_000
        self.dedupe_window = dedupe_window
        self.received = 0
        self.duplicates = 0
        self.rejected_payloads: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def fresh(self, spans: list[Span]) -> list[Span]:
        """The spans not seen before (by trace id and span id), without recording them yet."""
        seen = self.seen
        out, batch = [], set()
        for s in spans:
            key = (s.trace_id, s.span_id)
            if key in seen or key in batch:
                continue
            batch.add(key)
            out.append(s)
        return out

    def ingest(self, spans: list[Span]) -> None:
        """Record ``spans`` (already de-duplicated and stored) and count their requests."""
        with self.lock:
            seen = self.seen
            for s in spans:
                seen[(s.trace_id, s.span_id)] = None
            while len(seen) > self.dedupe_window:
                seen.popitem(last=False)
            self.received += len(spans)
            children = self.children
            rooted = {s.trace_id for s in spans if s.name in ROOT_SPANS and not s.parent_span_id}
            for s in spans:
                self.clock_ns = max(self.clock_ns, s.end_ns)
                if s.parent_span_id:
                    kids = children.get(s.trace_id)
                    if kids is None:
                        kids = children[s.trace_id] = {}
                    kids[s.name] = s
                    if s.trace_id not in rooted:  # its root comes later: what it tells is known now
                        self._early(s)
            for s in spans:
                if s.name in ROOT_SPANS and not s.parent_span_id:
                    self._count(s, children.pop(s.trace_id, {}))
            while len(children) > self.max_pending_traces:
                children.popitem(last=False)  # children whose root never came
            while len(self.flights) > self.max_pending_traces:
                self._land(*self.flights.popitem(last=False))  # admitted, and the root never came
            self._queued_past()

    def _labels(self, span: Span) -> tuple[str, str, str, str, str]:
        """(model, deployment, tenant, tier, route) of a request, each bounded, from the span that carries them."""
        a, bounded = span.attributes, self.bounded
        model = bounded["model"](str(a.get("gen_ai.request.model") or a.get("gen_ai.response.model") or ""))
        dep = bounded["deployment"](str(a.get("llm.deployment") or span.resource.get("llm.deployment")
                                        or span.service_name or ""))
        tenant = bounded["tenant"](str(a.get("llm.tenant") or "unknown"))
        tier = a.get("llm.tier")
        tier = tier if tier in TIERS else "unknown"
        route = bounded["route"](str(a.get("llm.route") or a.get("llm.scene") or "unknown"))
        return model, dep, tenant, tier, route

    def _arrive(self, key: tuple[str, str, str, str, str]) -> None:
        self.arrived[key] += 1
        self.traffic[key[2]] += 1  # ranked by arrivals, so a tenant's series never moves into "other" and back

    def _admit(self, gateway: Span, key: tuple[str, str, str, str, str]) -> None:
        """The gateway's decision on request ``key`` and the time it held it, where its span carries them."""
        a = gateway.attributes
        decision = a.get("llm.admission")
        if decision is None:
            return
        self.admissions[key + (self.bounded["decision"](str(decision)),)] += 1
        _observe(self._hists(key[1], key[3], key[4])["admission"], _num(a, "llm.gateway_wait_s"))
        step = str(a.get("llm.overload_step") or "")
        step = self.bounded["step"](step) if step else ""
        newest = self.overload.get(key[1])
        if newest is None or gateway.end_ns >= newest[0]:
            self.overload[key[1]] = (gateway.end_ns, step)
        state = a.get(CIRCUIT_STATE_ATTR)
        if state in CIRCUIT_STATES:  # its primary's breaker: where it fell back from, else where it went
            primary = self.bounded["deployment"](str(a["llm.fallback_from"])) if a.get("llm.fallback_from") else key[1]
            newest = self.circuits.get(primary)
            if newest is None or gateway.end_ns >= newest[0]:
                self.circuits[primary] = (gateway.end_ns, str(state))
        self._degrade(a, key)

    def _degrade(self, a: dict[str, Any], key: tuple[str, str, str, str, str]) -> None:
        """The ladder's degradation and the fallback route of request ``key``, where its span ``a`` marks them."""
        if a.get("llm.degraded"):
            self.degradations[key + (self.bounded["step"](str(a["llm.degraded"])),)] += 1
        if a.get("llm.fallback_from"):
            self.fallbacks[key + (self.bounded["deployment"](str(a["llm.fallback_from"])),
                                  self.bounded["reason"](str(a.get("llm.fallback_reason") or "unknown")))] += 1

    def _early(self, s: Span) -> None:
        """A segment span that arrived before its root: the gateway's admits the request (counted once, in flight,
        queued), the queue's schedules it (its queue wait observed now). A gateway span without the request's
        labels (``llm.deployment``) is left for the root to count, as the older all-at-once shape is."""
        flight = self.flights.get(s.trace_id)
        if s.name == "llm.gateway" and flight is None and "llm.deployment" in s.attributes:
            key = self._labels(s)
            self._arrive(key)
            self._admit(s, key)
            flight = self.flights[s.trace_id] = _Flight(key[1:2] + key[3:], s.start_ns)
            self.in_flight[flight.hist_key] += 1
            if "llm.queue" not in self.children.get(s.trace_id, {}):
                self.queued[flight.hist_key][s.trace_id] = s.end_ns
        elif s.name == "llm.queue" and flight is not None and not flight.scheduled:
            flight.scheduled = True
            self.queued[flight.hist_key].pop(s.trace_id, None)
            _observe(self._hists(*flight.hist_key)["queue"], (s.end_ns - s.start_ns) / 1e9)
            self._miss(flight, (s.end_ns - flight.start_ns) / 1e9)  # its first token comes after this

    def _miss(self, flight: _Flight, ttft_at_least: float) -> None:
        """``flight``'s time to first token is now known to exceed ``ttft_at_least`` seconds: count it as a miss
        at every bucket bound below that it was not counted at yet (so each request misses a bound once)."""
        k = bisect.bisect_left(self.buckets, ttft_at_least)
        if k > flight.missed:
            missed = self._missed(flight.hist_key)
            for i in range(flight.missed, k):
                missed[i] += 1
            flight.missed = k

    def _missed(self, key: tuple[str, str, str]) -> list[int]:
        m = self.missed.get(key)
        if m is None:
            m = self.missed[key] = [0] * len(self.buckets)
        return m

    def _queued_past(self) -> None:
        """Requests still queued whose age passed a bound have missed it now, not when they finish."""
        clock, flights = self.clock_ns, self.flights
        for queued in self.queued.values():
            for trace_id in queued:
                flight = flights[trace_id]
                self._miss(flight, (clock - flight.start_ns) / 1e9)

    def _land(self, trace_id: str, flight: _Flight) -> None:
        """``flight`` is no longer in flight (its root arrived, or it was dropped over the cap)."""
        self.in_flight[flight.hist_key] -= 1
        self.queued[flight.hist_key].pop(trace_id, None)

    def _hists(self, dep: str, tier: str, route: str) -> dict[str, Histogram]:
        h = self.hists.get((dep, tier, route))
        if h is None:
            h = self.hists[(dep, tier, route)] = {**{k: Histogram(self.buckets) for k in HIST},
                                                  **{k: Histogram(TOKEN_BUCKETS) for k in TOKEN_HIST}}
        return h

    def _count(self, root: Span, kids: dict[str, Span]) -> None:
        a = root.attributes
        key = self._labels(root)
        _, dep, _, tier, route = key
        flight = self.flights.pop(root.trace_id, None)
        if flight is None:  # no early gateway span: it arrives now (the vLLM shape, or all spans at once)
            self._arrive(key)
            if "llm.gateway" in kids and "llm.admission" in kids["llm.gateway"].attributes:
                self._admit(kids["llm.gateway"], key)
            else:  # no gateway decision (vLLM's one span): the root's marks, if any
                self._degrade(a, key)
        else:
            self._land(root.trace_id, flight)
        outcome = str(a.get("llm.outcome") or ("error" if root.status_code == 2 else "ok"))
        self.requests[key + (outcome,)] += 1
        if outcome in ("rejected", "timeout"):
            reason = str(a.get("llm.reject_reason") or ("queue_timeout" if outcome == "timeout" else "overloaded"))
            self.rejections[key + (self.bounded["reason"](reason),)] += 1
        tin = _num(a, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
        tout = _num(a, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
        self.tokens_in[key] += tin or 0.0
        self.tokens_out[key] += tout or 0.0
        h = self._hists(dep, tier, route)
        if outcome != "rejected":  # as the trace store's token mix: input of admitted requests, output of ok ones
            _observe(h["input"], tin)
        if outcome == "ok":
            _observe(h["output"], tout)
        if root.name == "llm_request":  # vLLM: latencies are attributes, in seconds
            queue, ttft, e2e = (_num(a, "gen_ai.latency.time_in_queue"), _num(a, "gen_ai.latency.time_to_first_token"),
                                _num(a, "gen_ai.latency.e2e"))
        else:
            q, p = kids.get("llm.queue"), kids.get("llm.prefill")
            queue = (q.end_ns - q.start_ns) / 1e9 if q is not None and p is not None else None
            ttft = (p.end_ns - root.start_ns) / 1e9 if p is not None and "llm.decode" in kids else None
            e2e = (root.end_ns - root.start_ns) / 1e9
        if flight is None or not flight.scheduled:  # else observed when its llm.queue span arrived
            _observe(h["queue"], queue)
        if ttft is not None or outcome != "ok":  # refused, timed out or failed before a first token: missed all
            self._miss(flight or _Flight((dep, tier, route), root.start_ns), math.inf if ttft is None else ttft)
        if outcome != "ok":
            return
        _observe(h["ttft"], ttft)
        _observe(h["e2e"], e2e)
        if e2e is not None and ttft is not None and tout is not None and tout > 1:
            _observe(h["tpot"], (e2e - ttft) / (tout - 1))

    # ------------------------------------------------------------------ exposition

    def oldest_queued_age(self, key: tuple[str, str, str]) -> float:
        """Seconds the oldest request admitted under ``key`` and not yet scheduled has queued; 0 when none.

        "Now" is the newest span end received, the senders' clock: the age is then in the seconds the latency
        histograms are in (a simulated fleet at ``--speed`` 20 included), and no clock skew between the gateway
        and this exporter enters it. Call with the lock held."""
        queued = self.queued.get(key)
        if not queued:
            return 0.0
        return max(0.0, (self.clock_ns - min(queued.values())) / 1e9)

    def _top_tenants(self) -> set[str]:
        ranked = sorted(self.traffic.items(), key=lambda kv: (-kv[1], kv[0]))
        return {t for t, _ in ranked[: self.max_tenants]}

    def render(self, store: TraceStore | None = None) -> str:
        with self.lock:
            keep = self._top_tenants()
            folded = len(self.traffic) - len(keep)
            fam: dict[str, list[str]] = defaultdict(list)
            names = ("model", "deployment", "tenant", "tier", "route")

            def fold(series: dict[tuple, float]) -> dict[tuple, float]:
                out: dict[tuple, float] = defaultdict(float)
                for k, v in series.items():
                    out[k[:2] + ((k[2] if k[2] in keep else "other"),) + k[3:]] += v
                return out

            for name, series, extra in (("llm_gateway_requests_total", self.requests, ("outcome",)),
                                        ("llm_gateway_rejections_total", self.rejections, ("reason",)),
                                        ("llm_gateway_admissions_total", self.admissions, ("decision",)),
                                        ("llm_gateway_degradations_total", self.degradations, ("step",)),
                                        ("llm_gateway_fallbacks_total", self.fallbacks, ("fallback_from", "reason")),
                                        ("llm_gateway_requests_arrived_total", self.arrived, ()),
                                        ("llm_gateway_input_tokens_total", self.tokens_in, ()),
                                        ("llm_gateway_output_tokens_total", self.tokens_out, ())):
                cols = names + extra
                for k, v in sorted(fold(series).items()):
                    fam[name].append(f"{name}{{{labels(cols, k)}}} {fmt_float(v)}")
            for (dep, tier, route), hs in sorted(self.hists.items()):
                lab = labels(("deployment", "tier", "route"), (dep, tier, route))
                for key, name in (HIST | TOKEN_HIST).items():
                    fam[name].extend(hs[key].lines(name, lab))
            for k in sorted(self.hists.keys() | self.in_flight.keys()):
                lab = labels(("deployment", "tier", "route"), k)
                fam["llm_gateway_requests_in_flight"].append(
                    f"llm_gateway_requests_in_flight{{{lab}}} {float(self.in_flight.get(k, 0))}")
                fam["llm_gateway_oldest_queued_age_seconds"].append(
                    f"llm_gateway_oldest_queued_age_seconds{{{lab}}} {fmt_float(self.oldest_queued_age(k))}")
                missed = self.missed.get(k) or [0] * len(self.buckets)
                fam["llm_gateway_ttft_missed_total"].extend(
                    f'llm_gateway_ttft_missed_total{{{lab},le="{le_label(b)}"}} {float(n)}'
                    for b, n in zip(self.buckets, missed, strict=True))
            for dep, (_, step) in sorted(self.overload.items()):
                index = STEP_INDEX.get(step, len(OVERLOAD_STEPS) + 1) if step else 0
                fam["llm_gateway_overload_step"].append(
                    f"llm_gateway_overload_step{{{labels(('deployment', 'step'), (dep, step or 'none'))}}} {float(index)}")
            for dep, (_, state) in sorted(self.circuits.items()):
                fam["llm_gateway_circuit_state"].extend(
                    f"llm_gateway_circuit_state{{{labels(('deployment', 'state'), (dep, s))}}} {float(s == state)}"
                    for s in CIRCUIT_STATES)
            ex = f'exporter="{EXPORTER}"'
            fam["llm_exporter_tenants_folded"].append(f"llm_exporter_tenants_folded{{{ex}}} {float(folded)}")
            fam["llm_exporter_spans_received_total"].append(f"llm_exporter_spans_received_total{{{ex}}} {float(self.received)}")
            fam["llm_exporter_spans_duplicate_total"].append(
                f"llm_exporter_spans_duplicate_total{{{ex}}} {float(self.duplicates)}")
            for label, b in self.bounded.items():
                fam["llm_exporter_label_overflow_total"].append(
                    f'llm_exporter_label_overflow_total{{{ex},label="{label}"}} {float(b.overflow)}')
            for reason, n in sorted(self.rejected_payloads.items()):
                fam["llm_exporter_otlp_rejected_total"].append(
                    f'llm_exporter_otlp_rejected_total{{{ex},reason="{reason}"}} {float(n)}')
        if store is not None:
            fam["llm_exporter_store_buffered_spans"].append(
                f"llm_exporter_store_buffered_spans{{{ex}}} {float(store.buffered)}")
            fam["llm_exporter_store_flushed_spans_total"].append(
                f"llm_exporter_store_flushed_spans_total{{{ex}}} {float(store.flushed_total)}")
            fam["llm_exporter_store_quarantined_total"].append(
                f"llm_exporter_store_quarantined_total{{{ex}}} {float(store.quarantined_total)}")
            fam["llm_exporter_store_write_errors_total"].append(
                f'llm_exporter_store_write_errors_total{{{ex},sink="{store.sink.kind}"}} {float(store.write_errors_total)}')
        specs = [*GATEWAY, *(by_name(n) for n in (
            "llm_exporter_tenants_folded", "llm_exporter_label_overflow_total", "llm_exporter_spans_received_total",
            "llm_exporter_spans_duplicate_total",
            "llm_exporter_otlp_rejected_total", "llm_exporter_store_buffered_spans",
            "llm_exporter_store_flushed_spans_total", "llm_exporter_store_quarantined_total",
            "llm_exporter_store_write_errors_total"))]
        return render((s, fam.get(s.name, ())) for s in specs)


class PayloadTooLarge(OtlpError):
    """A body over ``OTLP_MAX_BODY_BYTES`` once decompressed (HTTP 413)."""


class UnsupportedEncoding(OtlpError):
    """A Content-Encoding other than identity or gzip (HTTP 415)."""


def inflate(body: bytes, encoding: str, limit: int = OTLP_MAX_BODY_BYTES) -> bytes:
    """``body`` decoded per its Content-Encoding (identity or gzip, several members allowed), decompressing
    incrementally and stopping at ``limit`` bytes of output, so a small bomb never becomes a large buffer."""
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip"):
        raise UnsupportedEncoding(f"unsupported Content-Encoding {encoding!r} (identity or gzip)")
    out, size, data = [], 0, body
    try:
        while data:
            z = zlib.decompressobj(wbits=31)
            while data:
                chunk = z.decompress(data, limit + 1 - size)
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(f"decompressed body over {limit} bytes")
                out.append(chunk)
                data = z.unconsumed_tail
            if not z.eof:
                raise OtlpError("truncated gzip body")
            data = z.unused_data  # the next gzip member, if any
    except zlib.error as e:
        raise OtlpError(f"not gzip: {e}") from None
    return b"".join(out)


class TraceReceiver:
    """``POST /v1/traces``: decode, validate, de-duplicate, log durably, then answer.

    400 for bad input, 413 over the limit once decompressed or over ``RECEIVER_LIMITS`` (sized up before
    decoding), 503 with Retry-After when the store is full, shutting down, or ``DECODE_SLOTS`` payloads are
    already being decoded; every refusal is counted by reason in ``llm_exporter_otlp_rejected_total``."""

    def __init__(self, metrics: RequestMetrics, store: TraceStore, decode_slots: int = DECODE_SLOTS,
                 decode_wait_s: float = DECODE_WAIT_S) -> None:
        self.metrics, self.store = metrics, store
        self.lock = threading.Lock()
        self.decode_slots, self.decode_wait_s = decode_slots, decode_wait_s
        self.decoding = threading.BoundedSemaphore(decode_slots)

    def _refuse(self, reason: str, status: int, message: str,
                headers: dict[str, str] | None = None) -> tuple[int, str, bytes, dict[str, str]]:
        with self.metrics.lock:
            self.metrics.rejected_payloads[reason] += 1
        return status, "application/json", json.dumps({"error": message}).encode(), headers or {}

    def handle(self, content_type: str, encoding: str, body: bytes) -> tuple[int, str, bytes, dict[str, str]]:
        if not self.decoding.acquire(timeout=self.decode_wait_s):
            return self._refuse("busy", 503, f"{self.decode_slots} payloads are being decoded already; retry",
                                {"Retry-After": "1"})
        try:
            return self._handle(content_type, encoding, body)
        finally:
            self.decoding.release()

    def _handle(self, content_type: str, encoding: str, body: bytes) -> tuple[int, str, bytes, dict[str, str]]:
        proto = "protobuf" in content_type
        try:
            body = inflate(body, encoding)
        except PayloadTooLarge as e:
            return self._refuse("too_large", 413, f"bad OTLP payload: {e}")
        except UnsupportedEncoding as e:
            return self._refuse("unsupported_encoding", 415, f"bad OTLP payload: {e}")
        except OtlpError as e:
            return self._refuse("malformed", 400, f"bad OTLP payload: {e}")
        if not proto and "json" not in content_type and not body.lstrip().startswith(b"{"):
            proto = True
        try:
            spans = decode_protobuf(body, RECEIVER_LIMITS) if proto else decode_json(body, RECEIVER_LIMITS)
        except OtlpTooLarge as e:
            return self._refuse("too_large", 413, f"bad OTLP payload: {e}")
        except OtlpInvalid as e:
            return self._refuse("invalid", 400, f"bad OTLP payload: {e}")
        except OtlpError as e:
            return self._refuse("malformed", 400, f"bad OTLP payload: {e}")
        with self.lock:  # one payload at a time between the de-dup check and the log write
            new = self.metrics.fresh(spans)
            logged, kind = (body, "P" if proto else "J") if len(new) == len(spans) else (encode_spans(new), "S")
            try:
                self.store.accept(new, logged, kind)  # the log holds what the store holds: a replay cuts it alike
            except StoreClosed as e:
                return self._refuse("shutting_down", 503, str(e), {"Retry-After": f"{int(e.retry_after)}"})
            except StoreFull as e:
                return self._refuse("buffer_full", 503, str(e), {"Retry-After": f"{int(e.retry_after)}"})
            self.metrics.duplicates += len(spans) - len(new)
            self.metrics.ingest(new)
        if proto:
            return 200, "application/x-protobuf", ExportTraceServiceResponse().SerializeToString(), {}
        return 200, "application/json", b"{}", {}

    def route(self, h, body: bytes) -> tuple[int, str, bytes, dict[str, str]]:
        """``handle`` as an HTTP route: the two headers that decide how the body decodes."""
        return self.handle(h.headers.get("Content-Type", ""), (h.headers.get("Content-Encoding") or "").lower(), body)

    def routes(self) -> dict:
        """The OTLP server's routes: ``POST /v1/traces`` and a ``/healthz`` that fails while the store does."""
        return {("POST", "/v1/traces"): self.route, ("GET", "/healthz"): health_route(self.store.health)}


def open_store(args, sigterm: Sigterm | None = None) -> TraceStore:
    """The trace store ``--store`` names: a Parquet directory (its log inside), or ClickHouse with its log in ``--wal``.
    A path that is a file or cannot be written is one line naming the flag (exit 2), not a traceback. With
    ``sigterm``, a SIGTERM during the replay at start cuts the sink's writes where the shutdown's flush would end
    (a stalled ClickHouse cannot hold the start-up past the grace)."""
    from goodput.exporters.clickhouse_sink import ClickHouseSink, parse_store
    from goodput.exporters.parquet_sink import ParquetSink

    target = parse_store(args.store)
    if not isinstance(target, Path) and args.wal is None:
        raise ConfigError("--store", args.store, "a ClickHouse store needs --wal DIR for its write-ahead log")
    flag, value = ("--wal", str(args.wal)) if args.wal is not None else ("--store", args.store)
    try:
        if isinstance(target, Path):
            sink: ParquetSink | ClickHouseSink = ParquetSink(_writable_dir(target, "--store"))
            wal = args.wal or target
        else:
            wal = args.wal
            if target.kind == "chdb":
                _writable_dir(Path(target.path), "--store")
            sink = ClickHouseSink(target, timeout_s=args.insert_timeout)
        if sigterm is not None:
            _stop_by_on_signal(sink, sigterm, args.shutdown_grace - STOP_MARGIN_S)
        return TraceStore(_writable_dir(wal, flag), sink=sink,
                          max_buffered_spans=args.max_buffered_spans, flush_interval_s=args.flush_interval)
    except OSError as e:
        raise ConfigError(flag, value, f"cannot write there: {e.strerror or e}") from None


def _stop_by_on_signal(sink: Sink, sigterm: Sigterm, within_s: float) -> None:
    """``sink.stop_by`` ``within_s`` after the SIGTERM, from a thread of its own (not the handler: the thread it
    interrupts may hold the lock ``stop_by`` takes)."""
    def watch() -> None:
        sigterm.event.wait()
        sink.stop_by(sigterm.deadline(within_s))

    threading.Thread(target=watch, name="sigterm-sink", daemon=True).start()


def _writable_dir(path: Path, flag: str) -> Path:
    """``path`` made if missing; ``ConfigError`` naming ``flag`` when it is a file or cannot be written."""
    if path.exists() and not path.is_dir():
        raise ConfigError(flag, str(path), "not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(flag, str(path), f"cannot make it: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(flag, str(path), "not writable")
    return path


def run_request_exporter(args) -> int:
    from goodput.exporters.clickhouse_sink import ClickHouseSink

    sigterm = Sigterm()  # first: a SIGTERM during start-up (log open, sockets bound) drains too
    gc.set_threshold(*GC_THRESHOLDS)
    metrics = RequestMetrics(max_tenants=args.max_tenants)
    store = open_store(args, sigterm)
    problem = store.sink.dedup_problem() if isinstance(store.sink, ClickHouseSink) else None
    if problem:
        print(f"request exporter: WARNING: {store.sink} may store a retried insert twice (after a lost reply or a "
              f"kill): {problem}", file=sys.stderr, flush=True)
    store.start()
    recv = TraceReceiver(metrics, store)

    otlp = Server(args.host, args.otlp_port, recv.routes(), max_body_bytes=OTLP_MAX_BODY_BYTES,
                  retry_after_s=max(1, round(args.flush_interval))).start()
    srv = Server(args.host, args.port, metrics_routes(lambda: metrics.render(store), store.health)).start()
    if store.recovered or store.quarantined_total:
        print(f"request exporter: replayed {store.recovered} spans from the write-ahead log"
              f"{f', quarantined {store.quarantined_total} in {store.quarantine_dir}' if store.quarantined_total else ''}",
              flush=True)
    print(f"request exporter: OTLP at {otlp.url}/v1/traces, metrics at {srv.url}/metrics, store {store.sink}",
          flush=True)

    def stop() -> None:
        """Everything within ``--shutdown-grace`` of the SIGTERM: what the store could not flush by then stays in
        its log for the next start."""
        deadline = sigterm.deadline(args.shutdown_grace)

        def left(keep: float = 0.0) -> float:
            return max(0.0, deadline - keep - time.monotonic())

        otlp.stop(drain_s=min(STOP_DRAIN_S, left(STOP_MARGIN_S)))  # new posts get 503 + Retry-After while those
        store.close(within_s=left(STOP_MARGIN_S))  # in flight finish and are logged; then the last flush
        srv.stop(drain_s=min(1.0, left()))
        print(f"request exporter stopped; {store.flushed_total} spans in the store", flush=True)

    serve_until_signal(stop, sigterm=sigterm)
    return 0
