"""The weekly review against a real VictoriaMetrics holding the same simulated week as the real Prometheus of
test_review_week.py (every sample it holds, copied through both APIs): the same review, MetricsQL answering
the queries PromQL answers, through the /prometheus prefix and basic auth from a file, as a user points goodput at
a long-term store (docs/metrics-stores.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from goodput.cli import main
from goodput.review.prom import Query, run_queries
from goodput.review.queries import WEEK_S, alert_rules, left_open
from goodput.review.review import DEFAULT_RULES, prometheus_review
from goodput.simulator.week import parse_week
from tests.conftest import needs
from tests.review.conftest import WEEK

pytestmark = [needs("prometheus", "promtool", "victoria-metrics"), pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def reviews(week, vm_week):
    _, _, paths = week
    kw = {"plan": paths["plan"], "releases": paths["releases"], "gpu_hour_cost": 2.0}
    return prometheus_review(week[0], WEEK, **kw), prometheus_review(vm_week, WEEK, **kw)


def _differences(a, b, path="") -> list[str]:
    """Where two reviews differ beyond VictoriaMetrics' storage precision: it keeps 12 significant decimal digits
    (0.07125000000000002 comes back 0.07125), so a figure rounded to 4 decimals may differ by one in the last."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return [] if math.isclose(a, b, rel_tol=1e-3, abs_tol=1.5e-4) else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def test_demand_on_victoriametrics_is_within_1_percent_of_prometheus(reviews):
    prom, vm = reviews
    assert vm["has_data"] and sorted(vm["deployments"]) == sorted(prom["deployments"]) == ["batch-32b-a100",
                                                                                           "chat-8b-h100"]
    for dep, e in prom["deployments"].items():
        for tier, t in e["tiers"].items():
            v = vm["deployments"][dep]["tiers"][tier]
            for k in ("requests", "requests_previous_week", "input_tokens_per_second", "output_tokens_per_second",
                      "timeouts"):
                assert v[k] == pytest.approx(t[k], rel=0.01), (dep, tier, k)
            assert v["requests_per_second"]["peak_hour"] == t["requests_per_second"]["peak_hour"]
            assert [x["tenant"] for x in v["tenants"]] == [x["tenant"] for x in t["tenants"]]
        got, want = vm["deployments"][dep]["tokens_per_second"], e["tokens_per_second"]
        assert got["peak_hour"] == want["peak_hour"]
        for k in ("mean", "peak_5m", "peak_hour_mean"):
            assert got[k] == pytest.approx(want[k], rel=0.01), (dep, k)


def test_the_same_pages_and_the_same_review(reviews, vm_week):
    prom, vm = reviews
    assert vm["pages"] == prom["pages"] and len(prom["pages"]) >= 3, prom["pages"]
    assert {p["alert"] for p in vm["pages"]} >= {"LLMEngineDown", "LLMTTFTSLOBreachWithRejects"}
    assert vm["recommendations"] == prom["recommendations"]
    assert vm["source"] == f"Prometheus {vm_week.url}"  # the prefix, never the credentials
    assert _differences({**prom, "source": ""}, {**vm, "source": ""}) == []


def test_alert_windows_are_left_open_so_both_engines_agree(week, vm_week):
    """Before: deriv(x[10m]) fitted three points of the 5-minute grid in Prometheus 2 ([t - 10m, t]) and two in
    MetricsQL ((t - 10m, t]) wherever t sat on the grid, and LLMTTFTSLOBreachWithRejects paged at different
    minutes. Written left-open, both read the same samples."""
    start = parse_week(WEEK).timestamp()
    derivs = [a for a in alert_rules(sorted(DEFAULT_RULES.glob("*.rules.yaml"))) if "deriv(" in a.expr]
    assert derivs and all("[599999ms]" in left_open(a.expr) for a in derivs)

    def held(server, rewrite) -> dict:
        got = run_queries(server, [Query(a.name, rewrite(a.expr), start, start + WEEK_S, 60.0) for a in derivs])
        return {k: {tuple(sorted(s.labels.items())): s.times.tolist() for s in v} for k, v in got.items()}
    assert held(week[0], left_open) == held(vm_week, left_open)
    assert held(week[0], str) != held(vm_week, str)


def test_goodput_review_reads_victoriametrics_with_a_password_file_and_refuses_without(week, vm_week, reviews,
                                                                                      tmp_path, capsys):
    _, _, paths = week
    args = ["review", "--prometheus", vm_week.url, "--week", WEEK, "--plan", str(paths["plan"]), "--releases",
            str(paths["releases"]), "--gpu-hour-cost", "2", "--format", "json"]
    assert main([*args, "--out", str(tmp_path / "r"), "--prometheus-user", vm_week.user,
                 "--prometheus-password-file", str(vm_week.secret.file)]) == 0
    assert json.loads(capsys.readouterr().out)["pages"] == len(reviews[1]["pages"])
    written = json.loads((tmp_path / "r" / "review.json").read_text())
    assert written["pages"] == reviews[1]["pages"]
    assert vm_week.secret.read() not in Path(tmp_path / "r" / "review.html").read_text()

    assert main([*args, "--out", str(tmp_path / "no-auth")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "(HTTP 401)" in err and vm_week.url in err
