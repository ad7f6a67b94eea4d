"""The Capacity page's cost: live, from a real Prometheus evaluating rules/cost.rules.yaml (durations scaled) over a
small exporter of GPUs and tokens whose values the test knows; and the weekly review's cost, cost per good token,
waste and its trend."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from goodput.console.views.capacity import COST_QUERIES, review_cost_tables
from goodput.demo.stack import Process
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.costrules import FILE, build
from goodput.monitoring.rulegen import load_spec
from goodput.plan.prices import load_prices
from tests.conftest import REPO, free_port_block, needs
from tests.console.test_pages import app, frame, no_exception, show

SCALE = 1 / 30  # the rules' 5m windows read 10 s
GPUS = {"chat": 2, "rag": 1}  # H100s per deployment
PROMPT_PER_S = {"chat": 4000.0, "rag": 1000.0}


def _exposition(t0: float) -> str:
    dt = time.monotonic() - t0
    lines = ["# TYPE llm_gpu_info gauge", "# TYPE llm_gpu_deployment_info gauge"]
    i = 0
    for dep, n in GPUS.items():
        for _ in range(n):
            lines += [f'llm_gpu_info{{gpu="{i}",uuid="GPU-{i}",gpu_model="NVIDIA H100 80GB HBM3",driver_version="550",'
                      f'hostname="h"}} 1',
                      f'llm_gpu_deployment_info{{gpu="{i}",uuid="GPU-{i}",deployment="{dep}",replica="{dep}-0"}} 1']
            i += 1
    lines += ["# TYPE llm_prompt_tokens counter"]
    lines += [f'llm_prompt_tokens_total{{model="m",deployment="{d}",replica="{d}-0"}} {r * dt:.3f}'
              for d, r in PROMPT_PER_S.items()]
    lines += ["# TYPE llm_generation_tokens counter"]
    lines += [f'llm_generation_tokens_total{{model="m",deployment="{d}",replica="{d}-0"}} {r / 4 * dt:.3f}'
              for d, r in PROMPT_PER_S.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cost-prom")
    (tmp / FILE).write_text(build(load_spec(REPO / "rules" / "slos.yaml"), SCALE)[FILE])
    t0 = time.monotonic()
    exporter = Server("127.0.0.1", 0, metrics_routes(lambda: _exposition(t0))).start()
    port = free_port_block(1)
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{tmp / FILE}']\nscrape_configs:\n  - job_name: llm-engine\n"
        f"    static_configs: [{{targets: ['{exporter.url.removeprefix('http://')}']}}]\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        Process("prometheus", url, proc, tmp / "prometheus.log").ready("/-/ready")
        deadline = time.monotonic() + 60
        while len(_query(url, COST_QUERIES["$ per 1M prompt tokens"])) < len(GPUS):
            assert time.monotonic() < deadline, "no llm_cost_per_million_tokens recorded in 60 s"
            time.sleep(1)
        time.sleep(300 * SCALE + 2)  # the rate windows full of scrapes
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        exporter.stop()


def _query(url: str, q: str) -> dict[str, float]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": q}, timeout=5).json()["data"]["result"]
    return {x["metric"]["deployment"]: float(x["value"][1]) for x in r}


@needs("prometheus")
def test_live_cost_is_each_deployments_gpus_at_their_price_and_the_rules_figures(monkeypatch, store, prometheus):
    page = show(app(monkeypatch, store / "db.duckdb", prometheus), "capacity")
    no_exception(page)
    cost = frame(page, "$/hour", "$ per 1M goodput tokens", "idle $/hour").set_index("deployment")
    h100 = load_prices().usd_per_gpu_hour("H100-80GB-SXM")
    assert cost["$/hour"].to_dict() == pytest.approx({d: n * h100 for d, n in GPUS.items()})
    for col in ("$ per 1M prompt tokens", "$ per 1M generated tokens"):  # rates move a little between the two reads
        assert cost[col].to_dict() == pytest.approx(_query(prometheus, COST_QUERIES[col]), rel=0.05), col
    # 1000 + 4 x 250 weighted tokens/s per 1000 prompt tokens/s: a prompt token costs $/s / (2 x prompt/s)
    assert cost.loc["chat", "$ per 1M prompt tokens"] == pytest.approx(2 * h100 / 3600 / (2 * 4000) * 1e6, rel=0.05)
    # no SLO series and no gateway tokens here: no goodput, every GPU-hour idle
    assert cost["idle share"].to_dict() == pytest.approx({d: 1.0 for d in GPUS})
    assert cost["$ per 1M goodput tokens"].isna().all()


REVIEW = {"week": "2026-W48", "has_data": True, "source": "Prometheus http://p:9090", "recommendations": [],
          "cost": {"usd": 1500.0, "usd_per_million_goodput_tokens": 0.9, "idle_usd": 300.0, "idle_share": 0.2,
                   "idle_share_trend_pp_per_day": 1.5, "gpu_hours": {}, "tenants": [], "daily": []},
          "deployments": {
              "chat": {"cost": {"usd": 1000.0, "usd_per_million_goodput_tokens": 0.8, "idle_usd": 250.0,
                                "idle_share": 0.25, "idle_share_trend_pp_per_day": 2.0,
                                "gpu_hours": {"H100-80GB-SXM": 308.6},
                                "tenants": [{"tier": "P0", "tenant": "acme", "usd": 700.0},
                                            {"tier": "P0", "tenant": "globex", "usd": 300.0}],
                                "daily": [{"day": d, "usd": 142.9, "idle_usd": 20.0 + 5 * d, "idle_share": 0.1 + 0.02 * d,
                                           "usd_per_million_goodput_tokens": 0.8} for d in range(1, 8)]}},
              "batch": {"tiers": {}}}}  # a deployment without cost series: not in the cost tables


def test_the_review_s_cost_per_deployment_and_tenant_cost_per_good_token_and_waste_trend(monkeypatch, store, tmp_path):
    (tmp_path / "reviews" / "w48").mkdir(parents=True)
    (tmp_path / "reviews" / "w48" / "review.json").write_text(json.dumps(REVIEW))
    at = app(monkeypatch, store / "db.duckdb")
    monkeypatch.setenv("GOODPUT_REVIEWS", str(tmp_path / "reviews"))
    page = show(at, "capacity")
    no_exception(page)
    costs = frame(page, "USD", "$ per 1M goodput tokens", "idle USD", "idle trend pp/day").set_index("deployment")
    assert costs["USD"].to_dict() == {"chat": 1000.0, "(fleet)": 1500.0}
    assert costs.loc["chat", "$ per 1M goodput tokens"] == 0.8 and costs.loc["chat", "idle trend pp/day"] == 2.0
    assert costs.loc["chat", "GPU-hours"] == 308.6
    # the idle share reads as a percent, as every share on the console does (it showed 0.25)
    (grid,) = [d for d in page.dataframe if "idle USD" in d.value.columns]
    assert json.loads(grid.proto.columns)["idle share"]["type_config"]["format"] == "percent", grid.proto.columns
    tenants = frame(page, "tier", "tenant", "USD")
    assert dict(zip(tenants["tenant"], tenants["USD"], strict=True)) == {"acme": 700.0, "globex": 300.0}
    (waste,) = [c for c in page.get("plotly_chart") if "waste" in json.loads(c.proto.spec)["layout"]["title"]["text"]]
    (line,) = json.loads(waste.proto.spec)["data"]
    assert line["y"] == pytest.approx([0.1 + 0.02 * d for d in range(1, 8)])
    old = review_cost_tables({"week": "2026-W40", "deployments": {"chat": {"tiers": {}}}})
    assert all(t.empty for t in old)  # a review from before the cost rules: said so, no table
