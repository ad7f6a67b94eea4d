"""`make demo` runs `goodput demo`: the fleet and the three exporters, reachable, stopping cleanly."""

import subprocess
import sys
import time

import httpx

from tests.conftest import REPO, free_port_block


def test_demo_serves_fleet_and_exporters_then_stops(tmp_path):
    base = free_port_block(12)
    ports = {"gpu": base + 8, "engine": base + 9, "requests": base + 10, "otlp": base + 11}
    p = subprocess.Popen([sys.executable, "-m", "goodput", "demo", "--out", str(tmp_path), "--base-port", str(base),
                          "--gpu-port", str(ports["gpu"]), "--engine-port", str(ports["engine"]),
                          "--requests-port", str(ports["requests"]), "--otlp-port", str(ports["otlp"]),
                          "--duration", "12"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        seen = {}
        while time.monotonic() < deadline and len(seen) < 3:
            time.sleep(0.5)
            for name, marker in (("gpu", "llm_gpu_utilization_ratio{"), ("engine", "llm_requests_running{"),
                                 ("requests", "llm_gateway_requests_total{")):
                try:
                    text = httpx.get(f"http://127.0.0.1:{ports[name]}/metrics", timeout=2).text
                except httpx.HTTPError:
                    continue
                if marker in text:
                    seen[name] = text
        assert set(seen) == {"gpu", "engine", "requests"}
        assert 'deployment="chat-8b-h100"' in seen["engine"]
        r = httpx.post(f"http://127.0.0.1:{base}/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    for name in ("gpu exporter", "engine exporter", "request exporter", "OTLP/HTTP traces", "chat-8b-h100-0"):
        assert name in out
    assert "goodput demo stopped." in out
    assert list((tmp_path / "traces").glob("date=*/hour=*/*.parquet"))
