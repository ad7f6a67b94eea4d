"""Live: the real Prometheus and Alertmanager with our rules page when the simulated fleet is overloaded.

The rules are a test-only variant generated from the same spec with every duration scaled by 1/30
(5m windows become 10 s) and 1 s scrapes; Alertmanager routes to a webhook receiver in the test.
"""

import copy
import dataclasses
import time

import httpx
import pytest

from goodput.demo.stack import start_alertmanager, start_prometheus
from goodput.demo.webhook import WebhookReceiver
from goodput.exporters.config import Plan, load_targets
from goodput.exporters.engine import EngineExporter
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.rulegen import build, load_spec, write
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, free_port_block, make_fleet, needs

pytestmark = [needs("prometheus", "prometheus-alertmanager|alertmanager"), pytest.mark.slow]

SCALE = 1 / 30


def _metrics_server(render):
    return Server("127.0.0.1", 0, metrics_routes(render)).start()


# Every wait below draws on one budget that ends well before pytest's own 300 s timeout, so a rule that never
# fires fails here with the name of what was missing instead of being killed without a word.
BUDGET_S = 230


class Deadline:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def wait(self, check, timeout: float, what: str):
        """Poll ``check`` until it returns something truthy, for ``timeout`` s at most and never past the budget."""
        until = min(time.monotonic() + timeout, self.end)
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() >= until:
                break
            time.sleep(0.5)
        spent = self.seconds - (self.end - time.monotonic())
        raise AssertionError(f"timed out waiting for {what} ({timeout:.0f} s allowed for it; {spent:.0f} s of the "
                             f"test's {self.seconds} s budget spent)")


@pytest.mark.timeout(BUDGET_S + 60)  # the budget, plus stopping the servers
def test_overload_pages_and_a_dead_engine_inhibits(tmp_path):
    deadline = Deadline(BUDGET_S)
    hook = WebhookReceiver(port=0).start()
    spec = load_spec(REPO / "rules" / "slos.yaml")
    spec = dataclasses.replace(spec, alertmanager={
        "receivers": {r: f"{hook.url}/{r}" for r in ("pager", "ticket", "log")},
        "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1m"})
    rules = tmp_path / "rules"
    write(spec, rules, scale=SCALE)
    assert build(spec, SCALE)["alerts.rules.yaml"] != (REPO / "rules" / "alerts.rules.yaml").read_text()

    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(replicas=3)
    dep["engine"].update(max_num_seqs=6, max_waiting_requests=100_000, max_queue_time_s=3600)
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 25.0  # far more than three replicas of six sequences can serve
    cfg = make_fleet(deployments=[dep], workloads=[wl])

    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=1.0).start()
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, {("POST", "/v1/traces"): recv.route}).start()
    req_srv = _metrics_server(lambda: metrics.render(store))
    sink = SpanSink(cfg, 1, f"{otlp.url}/v1/traces", None, interval_s=0.5)
    live = LiveFleet(cfg, base_port=free_port_block(3), targets=tmp_path / "targets.yaml", sink=sink)
    live.start()
    # a capacity plan that says one replica serves 500 tokens/s within the SLO: the fleet is short
    engine = EngineExporter(load_targets(tmp_path / "targets.yaml"), Plan({"chat": 500.0}, {}), interval_s=1.0)
    engine.start()
    eng_srv = _metrics_server(engine.render)

    base = free_port_block(2)
    am = start_alertmanager(tmp_path / "am", base + 1, rules / "alertmanager.yaml").ready("/-/ready")
    prom = start_prometheus(tmp_path / "prom", base, {
        "llm-engine": [eng_srv.url.removeprefix("http://")], "llm-requests": [req_srv.url.removeprefix("http://")]},
        rules, f"127.0.0.1:{base + 1}", interval="1s", resend_delay="2s").ready("/-/ready")
    try:
        page = deadline.wait(lambda: hook.alerts("pager", "LLMQueueWaitRisingReplicasShort"), 130, "the queue page")[0]
        assert page["labels"]["deployment"] == "chat" and page["labels"]["tier"] == "P0"
        assert page["labels"]["severity"] == "page"
        assert page["annotations"]["runbook_url"].endswith("docs/runbooks/LLMQueueWaitRisingReplicasShort.md")
        # the dashboard link's template, rendered by the real Prometheus
        assert page["annotations"]["dashboard"] == ("/d/goodput-deployment/llm-deployment?viewPanel=1"
                                                    "&var-deployment=chat&var-tier=P0")
        deadline.wait(lambda: hook.alerts("log", "GoodputWatchdog"), 20, "the watchdog at the log receiver")
        assert not hook.alerts("pager", "GoodputWatchdog")  # info goes to the log only
        assert not hook.alerts("pager", "LLMEngineDown")

        live.kill_replica("chat", 2)
        down = deadline.wait(lambda: hook.alerts("pager", "LLMEngineDown"), 60, "the engine-down page")[0]
        assert down["labels"]["replica"] == "chat-2" and down["labels"]["deployment"] == "chat"

        def inhibited():
            query = {"filter": 'alertname="LLMQueueWaitRisingReplicasShort"'}
            alerts = httpx.get(f"{am.url}/api/v2/alerts", params=query).json()
            return [a for a in alerts if a["status"]["inhibitedBy"]]

        held = deadline.wait(inhibited, 20, "the inhibition")[0]
        assert held["status"]["state"] == "suppressed" and held["labels"]["deployment"] == "chat"
    finally:
        prom.stop()
        am.stop()
        engine.stop()
        live.close()
        for s in (eng_srv, req_srv, otlp):
            s.stop()
        store.close()
        hook.stop()
