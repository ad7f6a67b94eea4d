"""The server's view from a real Prometheus that scrapes goodput's engine exporter over the live fleet."""

from __future__ import annotations

import copy
import json
import subprocess
import time

import httpx
import pytest

from goodput.cli import main
from goodput.exporters.config import load_targets
from goodput.exporters.engine import EngineExporter
from goodput.foundation.http import Server, metrics_routes
from goodput.loadtest.prometheus_view import step_queries
from goodput.simulator.live import LiveFleet
from tests.conftest import BASE_DEPLOYMENT, free_port_block, make_fleet, needs
from tests.loadtest.exits import run_exit

pytestmark = pytest.mark.slow  # long: dealt out first (tests/conftest.py)

WORKLOAD = """\
api: completions
input_tokens: {p50: 200, p95: 220, max: 240}
output_tokens: {p50: 150, p95: 160, max: 170}
"""


def test_step_queries_are_prometheus_window_queries():
    q = step_queries(4.25, '{deployment="chat"}')
    assert q["running_mean"] == 'sum(avg_over_time(llm_requests_running{deployment="chat"}[4250ms]))'
    assert q["queue_wait_p95_s"] == 'sum by (le) (increase(llm_queue_time_seconds_bucket{deployment="chat"}[4250ms]))'

    assert q["prefix_cache_hit_ratio"].count("increase(") == 2
    assert step_queries(0.0)["preemptions"] == "sum(increase(llm_preemptions_total[1ms]))"


@needs("prometheus")
def test_the_server_view_from_prometheus_shows_the_queue_of_the_heavy_step(tmp_path, capsys):
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    dep["engine"].update({"max_num_seqs": 4})
    fleet = LiveFleet(make_fleet(deployments=[dep]), base_port=free_port_block(1), traffic=0,
                      targets=tmp_path / "targets.yaml")
    fleet.start()
    engine = EngineExporter(load_targets(tmp_path / "targets.yaml"), interval_s=0.5)
    engine.start()
    eng_srv = Server("127.0.0.1", 0, metrics_routes(engine.render)).start()
    prom_port = free_port_block(1)
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s}}
scrape_configs:
  - job_name: engine
    static_configs: [{{targets: ['{eng_srv.url.removeprefix("http://")}']}}]
""")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prom_url = f"http://127.0.0.1:{prom_port}"
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    try:
        deadline = time.monotonic() + 60
        while True:  # Prometheus up and holding the engine's series
            try:
                r = httpx.get(prom_url + "/api/v1/query", params={"query": "llm_requests_running"}, timeout=2)
                if r.status_code == 200 and r.json()["data"]["result"]:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and prom.poll() is None, "Prometheus never had the engine's series"
            time.sleep(0.5)
        code = main(["loadtest", "run", "--target", f"http://127.0.0.1:{fleet.base_port}", "--workload",
                     str(tmp_path / "w.yaml"), "--pattern", "step", "--steps", "rate=2,12", "--duration", "10",
                     "--slo", "ttft_p95=10s", "--prometheus", prom_url, "--prometheus-selector",
                     '{deployment="chat"}', "--out", str(tmp_path / "run"), "--format", "json"])
    finally:
        prom.terminate()
        prom.wait(timeout=20)
        engine.stop()
        eng_srv.stop()
        fleet.close()
    assert code == run_exit(tmp_path / "run"), capsys.readouterr().err
    light, heavy = (s["server"] for s in json.loads((tmp_path / "run" / "summary.json").read_text())["steps"])
    assert light["source"] == heavy["source"] == "prometheus" and heavy["failed_scrapes"] == 0, heavy
    assert 0 < light["running_mean"] < heavy["running_mean"] <= 4, (light, heavy)  # four seats
    assert heavy["waiting_mean"] > light["waiting_mean"], (light, heavy)  # 12/s of 150 tokens: a queue
    # the light step's waits are milliseconds, inside vLLM's first queue bucket (0-0.3 s): a bound, not a number;
    # the heavy step's queue of seconds is interpolated between two finite bounds
    assert light["queue_wait_p95_s"] == {"bound": "below", "value": None, "lower": 0.0, "upper": 0.3}, light
    assert heavy["queue_wait_p95_s"]["bound"] == "within" and heavy["queue_wait_p95_s"]["value"] > 0.3, heavy
    assert heavy["kv_usage_max"] > 0, heavy
    assert heavy["gpu_util_mean"] is None  # no GPU exporter scraped
