"""The GPU prices file (goodput/plan/prices.py): on-demand at the top level, reserved: and spot: blocks beside it,
each checked as one line naming the file and key; the shipped rows each cite where they come from."""

from __future__ import annotations

import pytest
import yaml

from goodput.cli import main
from goodput.foundation.errors import ConfigError
from goodput.plan.prices import PRICINGS, load_price_tables, load_prices
from goodput.plan.tables import priced_at
from tests.conftest import REPO
from tests.plan.plan_fixtures import CHAT

SHIPPED = REPO / "goodput" / "plan" / "data" / "prices.yaml"
H100 = "as_of: '2026-11'\ngpus:\n  H100-80GB-SXM: {usd_per_gpu_hour: 3.0, source: list"


@pytest.mark.parametrize(("entry", "where"), [
    (", spot: 1.0}", "gpus.H100-80GB-SXM.spot: expected a mapping with usd_per_gpu_hour and source"),
    (", spot: {usd_per_gpu_hour: 1.0}}", "gpus.H100-80GB-SXM.spot.source: expected where the price comes from"),
    (", reserved: {usd_per_gpu_hour: -2, source: x}}", "gpus.H100-80GB-SXM.reserved.usd_per_gpu_hour: expected a finite"),
    (", reserved: {usd_per_gpu_hour: .nan, source: x}}", "gpus.H100-80GB-SXM.reserved.usd_per_gpu_hour: expected a"),
    (", spot: {usd_per_gpu_hour: 1, source: x, region: us}}", "gpus.H100-80GB-SXM.spot.region: unknown key; allowed: "
                                                              "source, usd_per_gpu_hour"),
    (", preemptible: {usd_per_gpu_hour: 1, source: x}}", "gpus.H100-80GB-SXM.preemptible: unknown key; allowed: "
                                                         "reserved, source, spot, usd_per_gpu_hour"),
])
def test_a_bad_pricing_block_is_one_line_naming_file_and_key(tmp_path, capsys, entry, where):
    path = tmp_path / "prices.yaml"
    path.write_text(H100 + entry + "\n")
    with pytest.raises(ConfigError, match=f"^{path}: {where}"):
        load_price_tables(path)
    demand = tmp_path / "demand.yaml"
    demand.write_text(CHAT)
    rc = main(["plan", "replicas", "--demand", str(demand), "--simulate", "--prices", str(path), "--out",
               str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{path}: {where}" in err and err.count("\n") == 1 and "Traceback" not in err


def test_each_pricing_has_its_own_table_and_a_file_replaces_whole_gpu_entries(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(H100 + ", reserved: {usd_per_gpu_hour: 2.0, source: our 1-year deal}}\n")
    tables = load_price_tables(path)
    assert set(tables) == set(PRICINGS) and all(tables[p].pricing == p for p in PRICINGS)
    h100 = {p: tables[p].usd_per_gpu_hour("H100-80GB-SXM") for p in PRICINGS}
    assert h100 == {"on_demand": 3.0, "reserved": 2.0, "spot": None}  # the shipped H100 spot price is replaced too
    assert tables["reserved"].get("H100-80GB-SXM").source == "our 1-year deal"
    assert tables["reserved"].get("H100-80GB-SXM").as_of == "2026-11"
    assert load_prices(path, "spot").usd_per_gpu_hour("L40S-48GB") == load_prices(None, "spot").usd_per_gpu_hour("L40S-48GB")
    with pytest.raises(ConfigError, match="--pricing: cheap: unknown pricing; known: on_demand, reserved, spot"):
        load_prices(path, "cheap")


def test_an_existing_single_price_file_still_reads_as_on_demand(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(H100 + "}\n")
    assert load_prices(path).usd_per_gpu_hour("H100-80GB-SXM") == 3.0 and load_prices(path).pricing == "on_demand"


def test_every_shipped_price_cites_a_source_and_reserved_and_spot_undercut_on_demand():
    gpus = yaml.safe_load(SHIPPED.read_text())["gpus"]
    rows = [(g, p, e if p == "on_demand" else e[p]) for g, e in gpus.items() for p in PRICINGS if p == "on_demand" or p in e]
    assert {p for _, p, _ in rows} == set(PRICINGS)
    for g, p, row in rows:
        assert "https://" in row["source"], (g, p)
        if p != "on_demand":
            assert row["usd_per_gpu_hour"] < gpus[g]["usd_per_gpu_hour"], (g, p)


def test_a_plan_written_before_there_was_a_pricing_choice_reads_as_on_demand():
    """plan.yaml files and results from before --pricing have no `pricing` key: they were priced on demand, and
    rendering them must not fail."""
    assert priced_at({}) == "dollars at on-demand GPU prices"
    assert priced_at({"pricing": "spot"}) == "dollars at spot GPU prices"
