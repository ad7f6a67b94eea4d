"""rules/cost.rules.yaml: fresh, lint-clean, unit-tested by promtool (rules/tests/cost.test.yaml: cost per deployment
and tenant sums to the fleet's GPUs x prices; cost per 1M goodput tokens falls when attainment rises at equal spend),
priced from the one prices reader, and matching the GPU model names NVML gives."""

import re
import subprocess
import sys

import pytest
import yaml

from goodput.contracts.catalog import COST, names
from goodput.demo.fleet_gpus import NVML_NAMES
from goodput.foundation.errors import ConfigError
from goodput.monitoring.costrules import FILE, build, gpu_model_regex
from goodput.monitoring.rulegen import load_spec
from goodput.plan.prices import load_price_tables
from tests.conftest import REPO, needs

RULES = REPO / "rules"
needs_promtool = needs("promtool")


def _rules(text: str) -> list[dict]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def test_generated_file_is_fresh_and_records_the_catalog_cost_families():
    text = build(load_spec(RULES / "slos.yaml"))[FILE]
    assert (RULES / FILE).read_text() == text, f"{FILE} is stale: run `goodput rules generate`"
    recorded = {r["record"] for r in _rules(text)}
    assert {m.name for m in COST} <= recorded
    assert {n for n in recorded if ":" not in n} <= names()


def _prices(rules: list[dict]) -> dict[tuple[str, str], str]:
    return {(r["labels"]["gpu_type"], r["labels"]["pricing"]): r["expr"] for r in rules
            if r["record"] == "llm_gpu_hourly_cost_usd"}


def test_each_priced_gpu_gets_its_price_at_each_pricing_from_the_prices_reader():
    prices = _prices(_rules((RULES / FILE).read_text()))
    assert prices == {(g, p): f"vector({x.usd_per_gpu_hour})" for p, t in load_price_tables().items()
                      for g, x in t.by_gpu.items()}
    assert {p for _, p in prices} == {"on_demand", "reserved", "spot"}  # the shipped file has all three


def test_a_spec_naming_a_prices_file_prices_from_it(tmp_path):
    (tmp_path / "prices.yaml").write_text('as_of: "2026-12"\ngpus:\n  H100-80GB-SXM: {usd_per_gpu_hour: 2.5, '
                                          'source: "our contract"}\n  H200-141GB: {usd_per_gpu_hour: 4, source: "x"}\n')
    (tmp_path / "slos.yaml").write_text((RULES / "slos.yaml").read_text() + "\nprices: prices.yaml\n")
    prices = _prices(_rules(build(load_spec(tmp_path / "slos.yaml"))[FILE]))
    assert prices[("H100-80GB-SXM", "on_demand")] == "vector(2.5)" and prices[("H200-141GB", "on_demand")] == "vector(4.0)"
    # the file's H100 entry replaces the shipped one whole: no reserved or spot price it does not give
    assert ("H100-80GB-SXM", "spot") not in prices and ("H100-80GB-SXM", "reserved") not in prices
    assert prices[("L40S-48GB", "on_demand")] == "vector(0.79)"  # the defaults stay for the GPUs the file does not name
    assert prices[("L40S-48GB", "spot")] == "vector(0.34)"
    (tmp_path / "prices.yaml").write_text('as_of: "2026-12"\ngpus:\n  B300: {usd_per_gpu_hour: 9, source: "x"}\n')
    with pytest.raises(ConfigError, match="gpus.B300: not a GPU of"):
        build(load_spec(tmp_path / "slos.yaml"))
    (tmp_path / "slos.yaml").write_text((RULES / "slos.yaml").read_text() + "\nprices: 3\n")
    with pytest.raises(ConfigError, match="prices"):
        load_spec(tmp_path / "slos.yaml")


@pytest.mark.parametrize(("section", "key"), [
    ("{default: preemptible}", "pricing.default: expected one of on_demand, reserved, spot"),
    ("{deployments: {chat: cheap}}", "pricing.deployments.chat: expected one of"),
    ("{deployments: {'chat\"x': spot}}", "pricing.deployments.chat\"x: expected a deployment name"),
    ("{deployments: [chat]}", "pricing.deployments: expected a mapping"),
    ("{default: spot, spot: [chat]}", "pricing.spot: unknown key; allowed: default, deployments"),
])
def test_a_bad_pricing_section_is_one_line_naming_its_key(tmp_path, section, key):
    (tmp_path / "slos.yaml").write_text((RULES / "slos.yaml").read_text().split("\npricing:")[0] + f"\npricing: {section}\n")
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_spec(tmp_path / "slos.yaml")
    r = subprocess.run([sys.executable, "-m", "goodput", "rules", "generate", "--spec", str(tmp_path / "slos.yaml"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and key in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# chat: 2 H100s on spot; rag: an L40S on reserved, which the shipped prices have no row for; a.b (a dot in the name,
# matched as a dot) on spot, axb on the default on_demand: each an H100
_PRICING_SPEC = "\npricing: {default: on_demand, deployments: {chat: spot, rag: reserved, a.b: spot}}\n"
_GPUS = {"chat": ["NVIDIA H100 80GB HBM3"] * 2, "rag": ["NVIDIA L40S"], "a.b": ["NVIDIA H100 80GB HBM3"],
         "axb": ["NVIDIA H100 80GB HBM3"]}


@needs_promtool
def test_each_deployment_pays_its_own_pricing_and_one_with_no_price_there_costs_nothing(tmp_path):
    (tmp_path / "slos.yaml").write_text((RULES / "slos.yaml").read_text().split("\npricing:")[0] + _PRICING_SPEC)
    (tmp_path / FILE).write_text(build(load_spec(tmp_path / "slos.yaml"))[FILE])
    series = []
    for dep, models in _GPUS.items():
        for i, model in enumerate(models):
            gpu = f'gpu="{i}",uuid="GPU-{dep}-{i}",instance="{dep}:9400"'
            series += [{"series": f'llm_gpu_info{{{gpu},gpu_model="{model}"}}', "values": "1x10"},
                       {"series": f'llm_gpu_deployment_info{{{gpu},deployment="{dep}",replica="{dep}-0"}}',
                        "values": "1x10"}]
    paid = "deployment_gpu_type:llm_gpu_hourly_cost_usd:paid"
    test = {"rule_files": [FILE], "evaluation_interval": "1m", "tests": [{"interval": "1m", "input_series": series,
            "promql_expr_test": [
                {"expr": "llm_total_hourly_cost", "eval_time": "5m", "exp_samples": [  # rag: none
                    {"labels": 'llm_total_hourly_cost{deployment="chat"}', "value": 1.62},  # 2 x 0.81 spot
                    {"labels": 'llm_total_hourly_cost{deployment="a.b"}', "value": 0.81},
                    {"labels": 'llm_total_hourly_cost{deployment="axb"}', "value": 3.24}]},
                {"expr": "round(sum(llm_total_hourly_cost) * 100) / 100", "eval_time": "5m",
                 "exp_samples": [{"labels": "{}", "value": 5.67}]},
                {"expr": f"count by (deployment, pricing) ({paid})", "eval_time": "5m", "exp_samples": [
                    {"labels": f'{{deployment="{d}",pricing="{p}"}}', "value": 1}
                    for d, p in (("chat", "spot"), ("a.b", "spot"), ("axb", "on_demand"))]},
                {"expr": f"llm_deployment_gpus unless on (deployment, gpu_type) {paid}", "eval_time": "5m",
                 "exp_samples": [  # the documented query for the GPUs no price covers
                     {"labels": 'llm_deployment_gpus{deployment="rag",gpu_type="L40S-48GB"}', "value": 1}]}]}]}
    (tmp_path / "pricing.test.yaml").write_text(yaml.safe_dump(test))
    r = subprocess.run(["promtool", "test", "rules", "pricing.test.yaml"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("gpu_type", sorted(NVML_NAMES))
def test_the_model_names_nvml_gives_map_to_their_gpu_type(gpu_type):
    assert re.fullmatch(gpu_model_regex(gpu_type), NVML_NAMES[gpu_type])
    others = [g for g in NVML_NAMES if g != gpu_type]
    assert not any(re.fullmatch(gpu_model_regex(g), NVML_NAMES[gpu_type]) for g in others)
    assert not re.fullmatch(gpu_model_regex(gpu_type), "Tesla T4")


def test_an_h100_pcie_is_not_priced_as_the_sxm_part():
    assert not re.fullmatch(gpu_model_regex("H100-80GB-SXM"), "NVIDIA H100 PCIe")
    assert re.fullmatch(gpu_model_regex("H100-80GB-SXM"), "nvidia h100-sxm5")


@needs_promtool
def test_promtool_check_rules():
    r = subprocess.run(["promtool", "check", "rules", "--lint=all", "--lint-fatal", str(RULES / FILE)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@needs_promtool
def test_promtool_unit_tests():
    r = subprocess.run(["promtool", "test", "rules", "cost.test.yaml"], capture_output=True, text=True,
                       cwd=RULES / "tests")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
