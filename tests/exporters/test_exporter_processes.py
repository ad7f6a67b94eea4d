"""The engine and GPU exporters as a user starts them: real processes, real ports, scraped, then SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FIXTURES, REPO, free_port_block

ENGINE_BODY = (FIXTURES / "vllm_v1_simulated.txt").read_bytes()


class _Engine(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(ENGINE_BODY)))
        self.end_headers()
        self.wfile.write(ENGINE_BODY)


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """``handler`` on a free loopback port, answering from a background thread; ``shutdown()`` when done."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "goodput", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _families_when(proc: subprocess.Popen, url: str, ready, what: str) -> dict:
    """Scrape ``url`` until ``ready(families)``; fail clearly if the process dies or it never gets there."""
    deadline = time.monotonic() + 60
    fams: dict = {}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the exporter exited with {proc.returncode} before {what}: {out}{err}")
        try:
            fams = {f.name: f for f in text_string_to_metric_families(httpx.get(url, timeout=5).text)}
        except httpx.HTTPError:
            fams = {}
        if ready(fams):
            return fams
        time.sleep(0.1)
    pytest.fail(f"no {what} within 60 s; last families: {sorted(fams)}")


def _terminate(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the exporter did not exit within 30 s of SIGTERM: {out}{err}")
    assert proc.returncode == 0, f"exit {proc.returncode}: {err}"
    assert "Traceback" not in err, err
    return out, err


def _value(fams: dict, family: str, **labels) -> float:
    (s,) = [s for s in fams[family].samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return s.value


def test_engine_exporter_process_scrapes_serves_and_stops_on_sigterm(tmp_path):
    engine = serve(_Engine)
    targets = tmp_path / "targets.yaml"
    targets.write_text(yaml.safe_dump({"targets": [
        {"deployment": "chat", "replica": "chat-0", "url": f"http://127.0.0.1:{engine.server_address[1]}/metrics"},
        {"deployment": "chat", "replica": "chat-1", "url": "http://127.0.0.1:9/metrics"}],  # nothing listens
        "deployments": {"chat": {"desired_replicas": 3}}}))
    port = free_port_block(1)
    proc = _start(["exporter", "engine", "--targets", str(targets), "--port", str(port), "--interval", "0.2",
                   "--timeout", "2"])
    try:
        base = f"http://127.0.0.1:{port}"
        fams = _families_when(proc, f"{base}/metrics", lambda f: "llm_requests_running" in f, "engine samples")
        assert _value(fams, "llm_engine_up", replica="chat-0") == 1 and _value(fams, "llm_engine_up", replica="chat-1") == 0
        assert _value(fams, "llm_requests_running", replica="chat-0", model="Llama-3.1-8B") == 6  # the dump's value
        assert _value(fams, "llm_prompt_tokens", replica="chat-0") == 27746
        assert _value(fams, "llm_deployment_replicas", state="desired") == 3
        assert _value(fams, "llm_deployment_replicas", state="available") == 1
        assert httpx.get(f"{base}/healthz").status_code == 200
    finally:
        out, _ = _terminate(proc)
        engine.shutdown()
    assert "engine exporter: 2 targets" in out


def test_gpu_exporter_process_on_a_fake_gpu_serves_and_stops_on_sigterm(tmp_path):
    fake = tmp_path / "fake.yaml"
    fake.write_text(yaml.safe_dump({"hostname": "node-a", "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "utilization": 0.42, "memory_used_bytes": 60_000_000_000, "power_watts": 420},
        {"name": "NVIDIA H100 80GB HBM3", "unsupported": ["power_watts"]}],
        "faults": [{"at": 0, "gpu": 1, "kind": "lost"}]}))
    port = free_port_block(1)
    proc = _start(["exporter", "gpu", "--fake", str(fake), "--port", str(port), "--interval", "0.2"])
    try:
        base = f"http://127.0.0.1:{port}"
        fams = _families_when(proc, f"{base}/metrics", lambda f: "llm_gpu_utilization_ratio" in f, "GPU samples")
        assert _value(fams, "llm_gpu_up", gpu="0") == 1 and _value(fams, "llm_gpu_up", gpu="1") == 0
        assert _value(fams, "llm_gpu_utilization_ratio", gpu="0") == 0.42
        assert _value(fams, "llm_gpu_memory_used_bytes", gpu="0") == 60e9
        assert _value(fams, "llm_gpu_power_watts", gpu="0") == 420
        assert _value(fams, "llm_gpu_info", gpu="0", hostname="node-a", gpu_model="NVIDIA H100 80GB HBM3") == 1
        assert httpx.get(f"{base}/healthz").status_code == 200
    finally:
        out, _ = _terminate(proc)
    assert "gpu exporter: fake NVML" in out
