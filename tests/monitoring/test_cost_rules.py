"""rules/cost.rules.yaml: fresh, lint-clean, unit-tested by promtool (rules/tests/cost.test.yaml: cost per deployment
and tenant sums to the fleet's GPUs x prices; cost per 1M goodput tokens falls when attainment rises at equal spend),
priced from the one prices reader, and matching the GPU model names NVML gives."""

import re
import subprocess

import pytest
import yaml

from goodput.contracts.catalog import COST, names
from goodput.demo.fleet_gpus import NVML_NAMES
from goodput.foundation.errors import ConfigError
from goodput.monitoring.costrules import FILE, build, gpu_model_regex
from goodput.monitoring.rulegen import load_spec
from goodput.plan.prices import load_prices
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


def test_each_priced_gpu_gets_its_price_from_the_prices_reader():
    prices = {r["labels"]["gpu_type"]: float(r["expr"].removeprefix("vector(").removesuffix(")"))
              for r in _rules((RULES / FILE).read_text()) if r["record"] == "llm_gpu_hourly_cost_usd"}
    assert prices == {g: p.usd_per_gpu_hour for g, p in load_prices().by_gpu.items()}


def test_a_spec_naming_a_prices_file_prices_from_it(tmp_path):
    (tmp_path / "prices.yaml").write_text('as_of: "2026-12"\ngpus:\n  H100-80GB-SXM: {usd_per_gpu_hour: 2.5, '
                                          'source: "our contract"}\n  H200-141GB: {usd_per_gpu_hour: 4, source: "x"}\n')
    (tmp_path / "slos.yaml").write_text((RULES / "slos.yaml").read_text() + "\nprices: prices.yaml\n")
    rules = _rules(build(load_spec(tmp_path / "slos.yaml"))[FILE])
    prices = {r["labels"]["gpu_type"]: r["expr"] for r in rules if r["record"] == "llm_gpu_hourly_cost_usd"}
    assert prices["H100-80GB-SXM"] == "vector(2.5)" and prices["H200-141GB"] == "vector(4.0)"
    assert prices["L40S-48GB"] == "vector(0.79)"  # the defaults stay for the GPUs the file does not name
    (tmp_path / "prices.yaml").write_text('as_of: "2026-12"\ngpus:\n  B300: {usd_per_gpu_hour: 9, source: "x"}\n')
    with pytest.raises(ConfigError, match="gpus.B300: not a GPU of"):
        build(load_spec(tmp_path / "slos.yaml"))
    (tmp_path / "slos.yaml").write_text((RULES / "slos.yaml").read_text() + "\nprices: 3\n")
    with pytest.raises(ConfigError, match="prices"):
        load_spec(tmp_path / "slos.yaml")


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
