"""The engine exporter against real sockets: one healthy target and every way a target can fail."""

import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporters.config import Plan, Target, Targets, load_plan, load_targets
from exporters.engine import EngineExporter
from goodput.foundation.errors import ConfigError
from goodput.foundation.http import Server, metrics_routes
from tests.conftest import REPO, require

GOOD = (REPO / "tests" / "fixtures" / "vllm_v1_simulated.txt").read_text()


class FaultyEngines(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.path
        if path == "/slow":
            time.sleep(2.0)
            body = GOOD.encode()
        elif path == "/500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        elif path == "/garbage":
            body = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
        elif path == "/unknown":
            body = b"# TYPE node_load1 gauge\nnode_load1 0.42\n"
        elif path == "/huge":
            body = GOOD.encode() * 200
        elif path == "/truncated":
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD) * 2))
            self.end_headers()
            self.wfile.write(GOOD.encode()[:5000])
            self.wfile.flush()
            self.connection.close()
            return
        else:
            body = GOOD.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def engines():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FaultyEngines)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _targets(base):
    names = ["ok", "slow", "500", "garbage", "unknown", "huge", "truncated"]
    ts = [Target("chat", f"chat-{n}", f"{base}/{n}", "auto", "Llama-3.1-8B") for n in names]
    ts.append(Target("chat", "chat-down", "http://127.0.0.1:9/metrics"))  # nothing listens on port 9
    return Targets(tuple(ts), {"chat": 10})


def test_faulty_targets_are_down_and_the_others_keep_serving(engines):
    exp = EngineExporter(_targets(engines), Plan({"chat": 5200.0}, {}), timeout_s=0.8, max_bytes=200_000)
    t0 = time.monotonic()
    exp.scrape_once()
    assert time.monotonic() - t0 < 1.8  # concurrent: the slow one does not hold up the rest
    text = exp.render()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    up = {s.labels["replica"]: s.value for s in fams["llm_engine_up"].samples}
    assert up == {"chat-ok": 1, "chat-slow": 0, "chat-500": 0, "chat-garbage": 0, "chat-unknown": 0, "chat-huge": 0,
                  "chat-truncated": 0, "chat-down": 0}
    errors = {s.labels["kind"]: s.value for s in fams["llm_exporter_errors"].samples if s.name.endswith("_total")}
    assert {"timeout", "http_500", "unknown_dialect", "too_large", "connect"} <= set(errors)
    running = [s for s in fams["llm_requests_running"].samples]
    assert [(s.labels["replica"], s.value) for s in running] == [("chat-ok", 6.0)]
    assert running[0].labels == {"model": "Llama-3.1-8B", "deployment": "chat", "replica": "chat-ok"}
    replicas = {s.labels["state"]: s.value for s in fams["llm_deployment_replicas"].samples}
    assert replicas == {"desired": 10, "available": 1}
    goodput = fams["llm_capacity_replica_goodput_tokens_per_second"].samples
    assert goodput[0].labels == {"deployment": "chat"} and goodput[0].value == 5200
    require("promtool")
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_served_over_http_with_background_scrapes(engines):
    targets = Targets((Target("chat", "chat-0", f"{engines}/ok"),), {})
    exp = EngineExporter(targets, interval_s=0.2)
    srv = Server("127.0.0.1", 0, metrics_routes(exp.render)).start()
    exp.start()
    try:
        deadline = time.monotonic() + 5
        while exp.rounds < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        r = httpx.get(f"{srv.url}/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert 'llm_engine_up{model="Llama-3.1-8B",deployment="chat",replica="chat-0"} 1.0' in r.text
        assert httpx.get(f"{srv.url}/nope").status_code == 404
    finally:
        exp.stop()
        srv.stop()


def test_targets_and_plan_files(tmp_path):
    t = tmp_path / "targets.yaml"
    t.write_text("targets:\n- {deployment: chat, replica: chat-0, url: 'http://127.0.0.1:8100/metrics', engine: vllm}\n"
                 "deployments: {chat: {desired_replicas: 3}}\n")
    ts = load_targets(t)
    assert ts.targets[0].engine == "vllm" and ts.desired == {"chat": 3}
    t.write_text("targets:\n- {deployment: chat, replica: chat-0, url: 'ftp://x'}\n")
    with pytest.raises(ConfigError, match=r"targets\[0\].url: not an http"):
        load_targets(t)
    t.write_text("targets:\n- {deployment: chat, replica: chat-0, url: 'http://x', engine: ollama}\n")
    with pytest.raises(ConfigError, match=r"targets\[0\].engine"):
        load_targets(t)
    p = tmp_path / "plan.yaml"
    p.write_text("plan_version: 1\ndeployments:\n  chat: {replica_goodput_tokens_per_second: 4100, desired_replicas: 6}\n")
    assert load_plan(p) == Plan({"chat": 4100.0}, {"chat": 6})
    p.write_text("deployments:\n  chat: {replica_goodput_tokens_per_second: -1}\n")
    with pytest.raises(ConfigError, match="replica_goodput_tokens_per_second: expected a number > 0"):
        load_plan(p)
