"""The request exporter under an overload: the ladder's steps, its degradations and the fallback routes, read from
the contracts' span attributes over real OTLP (the official SDK's protobuf, and JSON), on real sockets."""

import json
import time
from collections import Counter

import httpx
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, set_span_in_context
from prometheus_client.parser import text_string_to_metric_families

from goodput.cli import main
from goodput.contracts.catalog import OVERLOAD_STEPS
from goodput.contracts.vocabulary import CIRCUIT_STATE_ATTR, CIRCUIT_STATES
from goodput.exporters.otlp import decode_json
from goodput.exporters.requests import LABEL_LIMITS, RequestMetrics
from tests.conftest import REPO
from tests.exporters.test_requests import Exporter

# (tier, tenant, deployment served, overload_step, degraded, fallback_from, fallback_reason, outcome, reject_reason):
# a burst on "chat": the ladder defers P2, degrades P1 (output cap, then context trim), fails P2 fast with "busy";
# the primary's circuit opens and its traffic moves to "chat-small" until the backup is full (circuit_open) or the
# request needs what the backup lacks (capability); then the ladder lets go
PHASES = [
    ("", 6),
    ("defer_p2", 6),
    ("degrade_p1", 8),
    ("fail_fast", 6),
    ("", 4),
]


def _scenario() -> list[dict]:
    out = []
    tenants = ("acme", "globex", "initech")
    for step, n in PHASES:
        for i in range(n):
            tier = ("P0", "P1", "P2")[i % 3]
            r = {"tier": tier, "tenant": tenants[(len(out) + i) % 3], "deployment": "chat", "step": step,
                 "degraded": "", "fallback_from": "", "fallback_reason": "", "outcome": "ok", "reject_reason": ""}
            if step in ("degrade_p1", "fail_fast") and tier == "P1":
                r["degraded"] = "output_cap" if i % 2 else "context_trim"
            if step == "fail_fast" and tier == "P2":
                r.update(outcome="rejected", reject_reason="busy")
            if step == "degrade_p1" and tier == "P0":  # the primary's circuit is open: P0 goes to the backup
                r.update(deployment="chat-small", fallback_from="chat", fallback_reason="circuit_open")
            if step == "fail_fast" and tier == "P0":
                r.update(outcome="rejected", reject_reason="circuit_open" if i % 2 else "capability")
            out.append(r)
    # a second primary whose backup took its traffic for capacity, not a broken circuit
    out += [{"tier": "P1", "tenant": "acme", "deployment": "rag-large", "step": "", "degraded": "",
             "fallback_from": "rag", "fallback_reason": "capacity", "outcome": "ok", "reject_reason": ""}] * 3
    return out


def _gateway_attrs(r: dict) -> dict:
    """The ``llm.gateway`` span's attributes as contracts.md has them (absent when empty)."""
    a = {"llm.deployment": r["deployment"], "llm.tenant": r["tenant"], "llm.tier": r["tier"], "llm.route": "chat",
         "gen_ai.request.model": "m", "llm.admission": "rejected" if r["outcome"] == "rejected" else "admitted",
         "llm.gateway_wait_s": 0.01, "llm.overload_step": r["step"], "llm.degraded": r["degraded"],
         "llm.fallback_from": r["fallback_from"], "llm.fallback_reason": r["fallback_reason"],
         "llm.reject_reason": r["reject_reason"]}
    return {k: v for k, v in a.items() if v != ""}


def _root_attrs(r: dict) -> dict:
    a = _gateway_attrs(r)
    a.pop("llm.admission")
    a.pop("llm.gateway_wait_s")
    a["llm.outcome"] = r["outcome"]
    return a


@pytest.fixture
def exporter(tmp_path):
    ex = Exporter(tmp_path / "store")
    yield ex
    ex.close()


def _counts(fams, family: str, *keys: str) -> Counter:
    out: Counter = Counter()
    for s in fams[family].samples if family in fams else ():
        out[tuple(s.labels[k] for k in keys)] += s.value
    return out


def _expected(rows: list[dict], *keys: str, where: str) -> Counter:
    return Counter(tuple(r[k] for k in keys) for r in rows if r[where])


def _steps(fams) -> dict[str, tuple[str, float]]:
    return {s.labels["deployment"]: (s.labels["step"], s.value) for s in fams["llm_gateway_overload_step"].samples}


def test_the_ladder_and_fallbacks_are_counted_while_the_requests_are_in_flight(exporter):
    """The official SDK's protobuf, each span exported when it ends: the gateway spans of a phase arrive while their
    requests are still in flight, and the ladder's state, its degradations and fallbacks are known then, not when
    the requests finish; the roots that land later count nothing twice."""
    rows = _scenario()
    tp = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=exporter.url)))
    tr = tp.get_tracer("test")
    t0 = time.time_ns()
    roots = []
    for k, r in enumerate(rows):
        start = t0 + k * 10_000_000
        root = tr.start_span("llm.request", kind=SpanKind.SERVER, start_time=start, attributes=_root_attrs(r))
        tr.start_span("llm.gateway", context=set_span_in_context(root), start_time=start,
                      attributes=_gateway_attrs(r)).end(end_time=start + 1_000_000)
        roots.append((root, start))
        if k == sum(n for _, n in PHASES[:3]) - 1:  # the degrade_p1 phase admitted; no request has finished
            fams = exporter.families()
            assert _steps(fams) == {"chat": ("degrade_p1", 2.0), "chat-small": ("degrade_p1", 2.0)}
            sent = rows[:k + 1]
            degraded = _expected(sent, "tier", "degraded", where="degraded")
            assert _counts(fams, "llm_gateway_degradations", "tier", "step") == degraded
            assert set(degraded) == {("P1", "output_cap"), ("P1", "context_trim")}
            assert _counts(fams, "llm_gateway_fallbacks", "deployment", "fallback_from", "reason") == _expected(
                sent, "deployment", "fallback_from", "fallback_reason", where="fallback_from") != Counter()
            assert sum(_counts(fams, "llm_gateway_requests", "outcome").values()) == 0
    assert _steps(exporter.families())["chat"] == ("none", 0.0)  # the ladder let go: the newest admission says so
    for root, start in roots:
        root.end(end_time=start + 2_000_000_000)
    tp.shutdown()
    fams = exporter.families()
    assert _counts(fams, "llm_gateway_degradations", "tenant", "tier", "step") == _expected(
        rows, "tenant", "tier", "degraded", where="degraded")
    assert _counts(fams, "llm_gateway_fallbacks", "deployment", "tenant", "fallback_from", "reason") == _expected(
        rows, "deployment", "tenant", "fallback_from", "fallback_reason", where="fallback_from")
    rejections = _expected(rows, "tier", "reject_reason", where="reject_reason")
    assert _counts(fams, "llm_gateway_rejections", "tier", "reason") == rejections
    assert {reason for _, reason in rejections} == {"busy", "circuit_open", "capability"}
    # each deployment's newest admission: chat let go, the backup's last came under degrade_p1, rag-large none
    assert _steps(fams) == {"chat": ("none", 0.0), "chat-small": ("degrade_p1", 2.0), "rag-large": ("none", 0.0)}
    assert set(_counts(fams, "llm_gateway_degradations", "route")) == {("chat",)}


def _doc(spans: list[dict]) -> bytes:
    def value(v):
        return {"doubleValue": v} if isinstance(v, float) else {"stringValue": v}

    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gw"}}]}, "scopeSpans": [{"spans": [
            {**{k: v for k, v in s.items() if k != "attributes"},
             "attributes": [{"key": k, "value": value(v)} for k, v in s["attributes"].items()]}
            for s in spans]}]}]}).encode()


def _json_spans(rows: list[dict], t0: int, ids: int = 0) -> list[dict]:
    out = []
    for k, r in enumerate(rows):
        trace, root_id, start = f"{ids + k + 1:032x}", f"{2 * (ids + k) + 1:016x}", t0 + k * 10_000_000
        out.append({"traceId": trace, "spanId": f"{2 * (ids + k) + 2:016x}", "parentSpanId": root_id,
                    "name": "llm.gateway", "kind": 1, "startTimeUnixNano": str(start),
                    "endTimeUnixNano": str(start + 1_000_000), "attributes": _gateway_attrs(r)})
        out.append({"traceId": trace, "spanId": root_id, "name": "llm.request", "kind": 2,
                    "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 2_000_000_000),
                    "attributes": _root_attrs(r)})
    return out


def test_json_all_at_once_counts_the_same_and_a_late_old_span_does_not_move_the_ladder_back(exporter):
    rows = _scenario()
    t0 = 1795424400_000_000_000
    spans = _json_spans(rows, t0)
    newest_first = spans[::-1]  # every span at once, in the worst order: the newest admission first
    r = httpx.post(exporter.url, content=_doc(newest_first), headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    fams = exporter.families()
    assert _counts(fams, "llm_gateway_degradations", "tenant", "tier", "step") == _expected(
        rows, "tenant", "tier", "degraded", where="degraded")
    assert _counts(fams, "llm_gateway_fallbacks", "deployment", "tenant", "fallback_from", "reason") == _expected(
        rows, "deployment", "tenant", "fallback_from", "fallback_reason", where="fallback_from")
    assert _steps(fams)["chat"] == ("none", 0.0)
    # a retried old payload (new span ids, the fail_fast phase's times) is older than what the gauge holds
    old = _json_spans([{**rows[0], "step": "fail_fast"}], t0 + 20 * 10_000_000, ids=10_000)
    assert httpx.post(exporter.url, content=_doc(old), headers={"Content-Type": "application/json"}).status_code == 200
    assert _steps(exporter.families())["chat"] == ("none", 0.0)
    new = _json_spans([{**rows[0], "step": "tpm_limit"}], t0 + 10**12, ids=20_000)
    assert httpx.post(exporter.url, content=_doc(new), headers={"Content-Type": "application/json"}).status_code == 200
    assert _steps(exporter.families())["chat"] == ("tpm_limit", float(OVERLOAD_STEPS.index("tpm_limit") + 1))


def test_steps_a_sender_invents_are_bounded_and_read_past_the_known_ladder():
    m = RequestMetrics()
    n = LABEL_LIMITS["step"] + 4
    rows = [{**_scenario()[0], "step": f"s{i}", "degraded": f"d{i}"} for i in range(n)]
    t0 = 1795424400_000_000_000
    m.ingest(decode_json(_doc(_json_spans(rows, t0))))
    fams = {f.name: f for f in text_string_to_metric_families(m.render())}
    steps = _counts(fams, "llm_gateway_degradations", "step")
    assert len(steps) <= LABEL_LIMITS["step"] + 1 and steps[("other",)] >= 4
    assert _steps(fams)["chat"] == ("other", float(len(OVERLOAD_STEPS) + 1))
    overflow = {s.labels["label"]: s.value for s in fams["llm_exporter_label_overflow"].samples}
    assert overflow["step"] >= 4


def _circuits(fams) -> dict[str, str]:
    """Each primary's breaker state by ``llm_gateway_circuit_state``: the one state at 1 (the others there, at 0)."""
    series = _counts(fams, "llm_gateway_circuit_state", "deployment", "state")
    deps = {d for d, _ in series}
    assert set(series) == {(d, s) for d in deps for s in CIRCUIT_STATES}  # every state of each, one at 1
    now = {d: s for (d, s), v in series.items() if v == 1.0}
    assert set(now) == deps and sum(series.values()) == len(deps)
    return now


# (deployment served, fallback_from, llm.circuit_state): chat's breaker opens (its traffic on chat-small), half-opens
# (the probe to chat, the rest still on chat-small), closes; rag's opens and then no span names rag again;
# chat-small's own traffic has no breaker
BREAKER = [("chat", "", "closed"), ("rag", "", "closed"), ("chat-small", "", None), ("chat", "", "closed"),
           ("chat-small", "chat", "open"), ("rag-large", "rag", "open"), ("chat-small", "chat", "open"),
           ("chat", "", "half_open"), ("chat-small", "chat", "half_open"), ("chat", "", "closed")]
OPENED, HALF_OPENED = 4, 7  # BREAKER's rows where chat's breaker opened and half-opened


def _breaker_doc(k: int, step: int, t0: int, state: str | None = None) -> bytes:
    """BREAKER's row ``k`` as OTLP JSON (a gateway span and its root) at ``t0`` + ``step`` x 10 ms; ``state`` replaces
    its llm.circuit_state (and gives it new span ids)."""
    dep, moved_from, circuit = BREAKER[k]
    row = {**_scenario()[0], "deployment": dep, "fallback_from": moved_from,
           "fallback_reason": "circuit_open" if moved_from else ""}
    spans = _json_spans([row], t0 + step * 10_000_000, ids=step + 1000 * (state is not None))
    if state or circuit:
        spans[0]["attributes"][CIRCUIT_STATE_ATTR] = state or circuit
    return _doc(spans)


def test_the_breaker_state_is_the_newest_gateway_span_per_primary(exporter):
    """Each span on its own, as an SDK sends them when they end: chat's breaker reads open, half_open, closed as its
    newest span says (where it fell back from, not the backup it went to), rag's stays open after its spans stop,
    and an older span sent late, or a state the contract does not name, moves nothing."""
    t0 = 1795424400_000_000_000
    seen = []
    for k in range(len(BREAKER)):
        assert httpx.post(exporter.url, content=_breaker_doc(k, k, t0),
                          headers={"Content-Type": "application/json"}).status_code == 200
        seen.append(_circuits(exporter.families()).get("chat"))
    assert seen == ["closed"] * OPENED + ["open"] * (HALF_OPENED - OPENED) + ["half_open", "half_open", "closed"]
    assert _circuits(exporter.families()) == {"chat": "closed", "rag": "open"}  # no series for chat-small
    for doc in (_breaker_doc(OPENED, OPENED, t0, "open"),  # an old payload retried: older than chat's newest
                _breaker_doc(0, len(BREAKER) + 1, t0, "forced_open")):  # newer, a state outside the contract
        assert httpx.post(exporter.url, content=doc, headers={"Content-Type": "application/json"}).status_code == 200
    assert _circuits(exporter.families()) == {"chat": "closed", "rag": "open"}


def _split_at(doc: dict, cut_ns: int) -> tuple[dict, dict]:
    """``doc``'s spans that ended by ``cut_ns`` (an SDK exports a span when it ends: these are sent by then) and the
    rest, each newest first: the worst order for the ladder's gauge."""
    halves = ({"resourceSpans": []}, {"resourceSpans": []})
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for half, keep in zip(halves, (True, False), strict=True):
                spans = [s for s in ss["spans"][::-1] if (int(s["endTimeUnixNano"]) <= cut_ns) == keep]
                if spans:
                    half["resourceSpans"].append({**rs, "scopeSpans": [{**ss, "spans": spans}]})
    return halves


def _post(url: str, docs: list[dict]) -> None:
    for doc in docs:
        if doc["resourceSpans"]:
            r = httpx.post(url, content=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text


def _parquet_counts(rows, *columns: str) -> Counter:
    return Counter(tuple(str(v) for v in row) for row in rows[list(columns)].itertuples(index=False))


@pytest.mark.parametrize(("fleet", "duration"), [("overload_burst.yaml", "300"), ("primary_down.yaml", "240")])
def test_the_simulators_own_spans_count_what_its_requests_parquet_says(exporter, tmp_path, capsys, fleet, duration):
    """Not hand-made spans: the simulator's own (its ladder on the burst, its circuit and fallback on the lost primary)
    over OTLP JSON, first what had ended 100 s into the run (mid-burst, mid-outage), then the rest. The counters and
    the ladder's gauge equal what its requests.parquet says about the same requests."""
    path = REPO / "examples" / fleet
    assert main(["simulate", str(path), "--duration", duration, "--out", str(tmp_path), "--format", "json"]) == 0
    capsys.readouterr()
    rows = pq.read_table(tmp_path / "requests.parquet").to_pandas().fillna("")
    cut = pd.Timestamp(yaml.safe_load(path.read_text())["start_time"]) + pd.Timedelta(seconds=100)
    docs = [json.loads(line) for line in (tmp_path / "spans.otlp.jsonl").read_text().splitlines()]
    early, late = zip(*(_split_at(d, cut.value) for d in docs[::-1]), strict=True)

    def check(admitted):
        fams = exporter.families()
        degraded = admitted[admitted.degraded != ""]
        assert _counts(fams, "llm_gateway_degradations", "deployment", "tier", "step") == _parquet_counts(
            degraded, "deployment", "tier", "degraded")
        fell_back = admitted[admitted.fallback_from != ""]
        assert _counts(fams, "llm_gateway_fallbacks", "deployment", "fallback_from", "reason") == _parquet_counts(
            fell_back, "deployment", "fallback_from", "fallback_reason")
        newest = admitted.sort_values("queue_start").groupby("deployment").last()  # the gateway span ends at queue_start
        assert _steps(fams) == {dep: (step or "none", float(OVERLOAD_STEPS.index(step) + 1 if step else 0))
                                for dep, step in newest.overload_step.items()}
        guarded = admitted[admitted.circuit_state != ""]  # by primary: where it fell back from, else where it went
        primary = guarded.fallback_from.where(guarded.fallback_from != "", guarded.deployment)
        assert _circuits(fams) == guarded.assign(primary=primary).sort_values("queue_start").groupby(
            "primary").circuit_state.last().to_dict()
        return fams

    _post(exporter.url, list(early))
    mid = check(rows[rows.queue_start <= cut])
    _post(exporter.url, list(late))
    fams = check(rows)
    ended = rows[rows.outcome.isin(["rejected", "timeout"])]
    assert _counts(fams, "llm_gateway_rejections", "deployment", "tier", "reason") == _parquet_counts(
        ended, "deployment", "tier", "reject_reason")
    if fleet == "overload_burst.yaml":  # mid-burst the ladder is at degrade_p1 and has degraded P1 both ways
        assert _steps(mid)["chat"] == ("degrade_p1", 2.0)
        assert set(_counts(mid, "llm_gateway_degradations", "step")) == {("output_cap",), ("output_cap+context_trim",)}
    else:  # mid-outage large's traffic is on small (circuit_open), and what small cannot serve was refused
        assert set(_counts(mid, "llm_gateway_fallbacks", "deployment", "fallback_from", "reason")) == {
            ("small", "large", "circuit_open")}
        assert (_circuits(mid), _circuits(fams)) == ({"large": "open"}, {"large": "closed"})  # reopened at 90 s
        assert {"capability", "circuit_open"} <= {r for (r,) in _counts(fams, "llm_gateway_rejections", "reason")}
