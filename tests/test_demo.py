"""`make demo` runs `goodput demo`: the fleet and the three exporters, reachable, stopping cleanly."""

import json
import signal
import subprocess
import sys
import time

import httpx

from tests.conftest import REPO, free_port_block, require


def test_demo_serves_fleet_and_exporters_then_stops(tmp_path):
    base = free_port_block(15)
    ports = {"gpu": base + 8, "engine": base + 9, "requests": base + 10, "otlp": base + 11, "prometheus": base + 12,
             "alertmanager": base + 13, "webhook": base + 14}
    p = subprocess.Popen([sys.executable, "-m", "goodput", "demo", "--out", str(tmp_path), "--base-port", str(base),
                          "--gpu-port", str(ports["gpu"]), "--engine-port", str(ports["engine"]),
                          "--requests-port", str(ports["requests"]), "--otlp-port", str(ports["otlp"]),
                          "--prometheus-port", str(ports["prometheus"]), "--alertmanager-port", str(ports["alertmanager"]),
                          "--webhook-port", str(ports["webhook"]), "--duration", "180"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        r = httpx.post(f"http://127.0.0.1:{base}/v1/completions",
                       json={"model": "Llama-3.1-8B", "prompt": "hi", "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        require("prometheus", "prometheus-alertmanager|alertmanager")
        prom = f"http://127.0.0.1:{ports['prometheus']}"
        deadline = time.monotonic() + 20
        up = []
        while time.monotonic() < deadline and len(up) < 3:
            time.sleep(1)
            up = httpx.get(f"{prom}/api/v1/query", params={"query": 'up{job=~"llm-.*"} == 1'}).json()["data"]["result"]
        assert {u["metric"]["job"] for u in up} == {"llm-gpu", "llm-engine", "llm-requests"}
        rules = httpx.get(f"{prom}/api/v1/rules").json()["data"]["groups"]
        assert any(r.get("name") == "LLMQueueWaitRisingReplicasShort" for g in rules for r in g["rules"])
        assert httpx.get(f"http://127.0.0.1:{ports['alertmanager']}/-/ready").status_code == 200
        # the printed analyzer commands work on the traces the running demo has stored
        db = tmp_path / "analyzer.duckdb"
        for cmd in (["ingest", str(tmp_path / "traces"), "--db", str(db)],
                    ["decompose", "--db", str(db), "--by", "deployment,tier", "--format", "json"],
                    ["regressions", "--db", str(db), "--releases", str(tmp_path / "releases.yaml"), "--format", "json"]):
            r = subprocess.run([sys.executable, "-m", "goodput", "analyze", *cmd], cwd=REPO, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        assert any(row["deployment"] == "chat-8b-h100" for row in json.loads(
            subprocess.run([sys.executable, "-m", "goodput", "analyze", "decompose", "--db", str(db), "--format", "json"],
                           cwd=REPO, capture_output=True, text=True).stdout))
    finally:
        p.send_signal(signal.SIGTERM)  # stops cleanly, like Ctrl-C
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    for name in ("gpu exporter", "engine exporter", "request exporter", "OTLP/HTTP traces", "chat-8b-h100-0",
                 "goodput analyze ingest", "goodput analyze triage"):
        assert name in out
    assert "goodput demo stopped." in out
    assert list((tmp_path / "traces").glob("date=*/hour=*/*.parquet"))
