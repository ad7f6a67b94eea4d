"""Live: the incident, then its fix, through the real request exporter, Prometheus and Alertmanager.

A scripted gateway sends OTLP spans as OpenTelemetry exports them (each when it ends: ``llm.gateway`` with the
request's labels at admission, ``llm.queue`` at scheduling, the root and the rest at completion), 30 virtual seconds
a wall second as the demo's ``--speed 30``, with rules generated at 1/30. One replica serves 1.2 requests/s while
1.8/s arrive, so a FIFO backlog builds; at virtual second 720 three replicas are ready and take every new request
(0.02-0.06 s of queue), while the old replica drains its backlog (432 requests) at 1.2/s, finishing requests that
waited minutes.
The page fires while the backlog builds, and nothing pages once the new replicas serve.

The engine side (the old replica's waiting count, replicas available, the capacity plan) is this script's own
state, rendered with the catalog's specs: what is under test is what the gateway's spans make of it.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from dataclasses import dataclass

import httpx
import pytest

from goodput.contracts.catalog import by_name
from goodput.demo.stack import start_alertmanager, start_prometheus
from goodput.demo.webhook import WebhookReceiver
from goodput.exporters.exposition import render
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.rulegen import load_spec, write
from tests.conftest import REPO, free_port_block, needs

pytestmark = [needs("prometheus", "prometheus-alertmanager|alertmanager"), pytest.mark.slow]

SPEED = 30.0
FIX_V, END_V = 720.0, 1320.0  # virtual seconds: the added replicas serve from FIX_V; the test ends at END_V
ARRIVALS, SERVED = 1.8, 1.2  # requests per virtual second: arriving, and what the old replica serves
PREFILL = 0.3  # virtual seconds; decode takes the rest of 1 / SERVED
IN_TOKENS, OUT_TOKENS = 2000, 200
REPLICA_GOODPUT = 1300.0  # tokens per virtual second: 1.8 x 2,200 / 1,300 x 1.2 -> 4 replicas required
EVAL_S = 1.0  # the generated rules' evaluation interval here (start_prometheus's interval)
# the alert group evaluates on its own schedule, offset from the recording group's, and a group that runs late under
# load reads the other's newest sample an evaluation later: the page must be gone by the third evaluation after the
# recorded replicas (it resolves at the first on a quiet machine)
RESOLVE_EVALUATIONS = 3
LABELS = {"gen_ai.request.model": "m", "llm.deployment": "rag", "llm.tenant": "a", "llm.tier": "P1", "llm.route": "rag"}


@dataclass
class Request:
    arrival: float
    scheduled: float
    old: bool  # queued on the old replica (else one of the added ones)

    @property
    def first_token(self) -> float:
        return self.scheduled + PREFILL

    @property
    def done(self) -> float:
        return self.scheduled + 1.0 / SERVED


def incident(seed: int = 7) -> list[Request]:
    """Poisson arrivals; the old replica FIFO at SERVED/s until FIX_V, then only its backlog."""
    rng, t, free, out = random.Random(seed), 0.0, 0.0, []
    while t < END_V:
        t += rng.expovariate(ARRIVALS)
        if t < FIX_V:
            free = max(free, t) + 1.0 / SERVED
            out.append(Request(t, free - 1.0 / SERVED, True))
        else:
            out.append(Request(t, t + rng.uniform(0.02, 0.06), False))
    return out


def _span(trace: str, sid: int, parent: int | None, name: str, start: float, end: float, base: int,
          attrs: dict[str, str | int]) -> dict:
    def value(v):
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return {"traceId": trace, "spanId": f"{sid:016x}", **({"parentSpanId": f"{parent:016x}"} if parent else {}),
            "name": name, "kind": 1 if parent else 2, "startTimeUnixNano": str(base + int(start * 1e9)),
            "endTimeUnixNano": str(base + int(end * 1e9)),
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()]}


def spans_by_end(requests: list[Request], base: int) -> list[tuple[float, dict]]:
    """(virtual end, span) of every span, in the order they end."""
    out = []
    for i, r in enumerate(requests):
        trace, root = f"{i + 1:032x}", (i + 1) << 8
        admitted = r.arrival + 0.001
        out += [
            (admitted, _span(trace, root | 1, root, "llm.gateway", r.arrival, admitted, base, LABELS)),
            (r.scheduled, _span(trace, root | 2, root, "llm.queue", admitted, r.scheduled, base, {})),
            (r.done, _span(trace, root | 3, root, "llm.prefill", r.scheduled, r.first_token, base, {})),
            (r.done, _span(trace, root | 4, root, "llm.decode", r.first_token, r.done, base, {})),
            (r.done, _span(trace, root, None, "llm.request", r.arrival, r.done, base, {
                **LABELS, "llm.outcome": "ok", "gen_ai.usage.input_tokens": IN_TOKENS,
                "gen_ai.usage.output_tokens": OUT_TOKENS})),
        ]
    out.sort(key=lambda e: (e[0], e[1]["name"] == "llm.request"))
    return out


def engine_page(requests: list[Request], now_v: float) -> str:
    """The engines' side at virtual time ``now_v``: the old replica's queue, replicas available, the plan."""
    waiting = sum(1 for r in requests if r.old and r.arrival <= now_v < r.scheduled)
    lab = 'model="m",deployment="rag",replica="rag-0"'
    fams = {"llm_requests_waiting": [f"llm_requests_waiting{{{lab}}} {float(waiting)}"],
            "llm_deployment_replicas": [
                f'llm_deployment_replicas{{deployment="rag",state="available"}} {4.0 if now_v >= FIX_V else 1.0}'],
            "llm_capacity_replica_goodput_tokens_per_second": [  # per wall second, as the demo scales its plan
                f'llm_capacity_replica_goodput_tokens_per_second{{deployment="rag"}} {REPLICA_GOODPUT * SPEED}']}
    return render((by_name(n), lines) for n, lines in fams.items())


def _post(url: str, spans: list[dict]) -> None:
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "gw"}}]},
                              "scopeSpans": [{"spans": spans}]}]}
    r = httpx.post(url, content=json.dumps(doc), headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 200, r.text


def _firing_pages(prom_url: str) -> set[str]:
    alerts = httpx.get(f"{prom_url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing" and a["labels"]["severity"] == "page"}


@pytest.mark.timeout(150)
def test_the_page_fires_during_the_incident_and_nothing_pages_while_the_backlog_drains(tmp_path):
    hook = WebhookReceiver(port=0).start()
    spec = load_spec(REPO / "rules" / "slos.yaml")
    spec = dataclasses.replace(spec, alertmanager={
        "receivers": {r: f"{hook.url}/{r}" for r in ("pager", "ticket", "log")},
        "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"})
    write(spec, tmp_path / "rules", scale=1 / SPEED)

    requests = incident()
    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=1.0).start()
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, {("POST", "/v1/traces"): recv.route}).start()
    req_srv = Server("127.0.0.1", 0, metrics_routes(lambda: metrics.render(store))).start()
    clock = {"v": 0.0}
    served_fix: list[float] = []  # when a scrape first read the added replicas (unix seconds)

    def engines() -> str:
        v = clock["v"]
        if v >= FIX_V and not served_fix:
            served_fix.append(time.time())
        return engine_page(requests, v)

    eng_srv = Server("127.0.0.1", 0, metrics_routes(engines)).start()
    base = free_port_block(2)
    am = start_alertmanager(tmp_path / "am", base + 1, tmp_path / "rules" / "alertmanager.yaml").ready("/-/ready")
    prom = start_prometheus(tmp_path / "prom", base, {
        "llm-engine": [eng_srv.url.removeprefix("http://")], "llm-requests": [req_srv.url.removeprefix("http://")]},
        tmp_path / "rules", f"127.0.0.1:{base + 1}", interval="1s", resend_delay="1s").ready("/-/ready")
    pending = spans_by_end(requests, time.time_ns())
    fired: dict[str, list[float]] = {}  # page -> the virtual times it was seen firing
    i = 0
    try:
        t0, t_wall0 = time.monotonic(), time.time()
        while clock["v"] < END_V and time.monotonic() - t0 < END_V / SPEED + 20:  # bounded if posting lags
            clock["v"] = (time.monotonic() - t0) * SPEED
            batch = []
            while i < len(pending) and pending[i][0] <= clock["v"]:
                batch.append(pending[i][1])
                i += 1
            if batch:
                _post(f"{otlp.url}/v1/traces", batch)
            for alert in _firing_pages(prom.url):
                fired.setdefault(alert, []).append(clock["v"])
            time.sleep(0.25)
        assert clock["v"] >= END_V, "the script fell behind its clock"
        queue = fired.get("LLMQueueWaitRisingReplicasShort", [])
        assert queue and min(queue) < FIX_V, f"the queue page did not fire during the incident: {fired}"
        assert hook.alerts("pager", "LLMQueueWaitRisingReplicasShort"), "the queue page never reached the pager"
        # once Prometheus has recorded the added replicas, the queue page resolves at the alert group's next
        # evaluations and never fires again while the backlog drains: judged on Prometheus' own evaluation
        # timestamps, since this loop's clock (which the engine page reads) and the scrapes lag on a loaded machine
        recorded, firing = _queue_page_evaluations(prom.url, time.time() - t_wall0 + 5)
        assert recorded is not None and served_fix, "Prometheus never recorded the added replicas"
        last = max(firing)
        assert last <= recorded + RESOLVE_EVALUATIONS * EVAL_S, (
            f"the queue page still fired {last - recorded:.0f} s after Prometheus recorded the added replicas "
            f"(first scraped {recorded - served_fix[0]:.1f} s before that): {[round(t - recorded, 1) for t in firing]}")
        # the burn-rate page resolves within its 5m reset window (10 s here), any other page at the fix; none fires
        # again while the backlog drains
        settle = {"LLMSLOBurnRateFast": 11 * SPEED}
        late = {a: [round(v) for v in vs if v > FIX_V + settle.get(a, 0)] for a, vs in fired.items()
                if a != "LLMQueueWaitRisingReplicasShort"}
        assert not any(late.values()), f"paging after the fix while the backlog drained (virtual s): {late}"
        started = [a["labels"]["alertname"] for a in hook.alerts("pager") if _started(a) > t0 + FIX_V / SPEED + 2]
        assert not started, f"pages that started after the fix: {started}"
        # the backlog drained through the exporter: each request posted arrived once; the old replica's are done
        admitted = sum(1 for _, span in pending[:i] if span["name"] == "llm.gateway")
        assert sum(metrics.arrived.values()) == admitted
        assert sum(metrics.in_flight.values()) == sum(1 for r in requests if r.arrival + 0.001 <= pending[i - 1][0]
                                                      < r.done)
    finally:
        prom.stop()
        am.stop()
        for s in (eng_srv, req_srv, otlp):
            s.stop()
        store.close()
        hook.stop()


def _raw(prom_url: str, expr: str, window_s: float) -> list[tuple[float, float]]:
    """Every sample of ``expr`` over the last ``window_s`` seconds, with Prometheus' timestamps, oldest first."""
    got = httpx.get(f"{prom_url}/api/v1/query", params={"query": f"{expr}[{int(window_s) + 1}s]"}, timeout=5).json()
    return sorted((float(t), float(v)) for s in got["data"]["result"] for t, v in s["values"])


def _queue_page_evaluations(prom_url: str, window_s: float) -> tuple[float | None, list[float]]:
    """(when the recording rule first read the 4 available replicas, the evaluations at which the queue page fired):
    both are rule evaluations' own timestamps, on Prometheus' schedule whatever the load."""
    available = _raw(prom_url, 'deployment:llm_replicas_available:max{deployment="rag"}', window_s)
    recorded = next((t for t, v in available if v >= 4), None)
    firing = _raw(prom_url, 'ALERTS{alertname="LLMQueueWaitRisingReplicasShort",alertstate="firing"}', window_s)
    return recorded, [t for t, _ in firing]


def _started(alert: dict) -> float:
    """An Alertmanager alert's startsAt as monotonic time (the test compares it with its own clock)."""
    from datetime import datetime

    wall = datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00")).timestamp()
    return time.monotonic() - (time.time() - wall)
