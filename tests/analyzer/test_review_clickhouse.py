"""The review's trace section from the Collector's otel_traces in ClickHouse (chDB) equals the one from the DuckDB
store of the same run: demand, tiers, SLO attainment, tenants and the regressions attributed to releases."""

from __future__ import annotations

import subprocess
import sys

import pytest

from goodput.review.traces import db_review

pytestmark = pytest.mark.slow  # long (the ClickHouse copy of the regression run): dealt out first (tests/conftest.py)

WEEK = "2026-W48"  # the regression fleet starts on its Monday


def _rounded(v):
    if isinstance(v, float):
        return float(f"{v:.12g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    return [_rounded(x) for x in v] if isinstance(v, list) else v


def _split(review: dict) -> tuple[dict, dict]:
    """The review less its source line, and the regressions taken out of it (their p95s are sums of floats in another
    order: equal to the last bits, not to the bit)."""
    regs = {dep: e.pop("regressions", []) for dep, e in review["deployments"].items()}
    return {k: v for k, v in review.items() if k != "source"}, regs


def test_the_review_on_clickhouse_equals_the_review_on_duckdb(regression_run, regression_clickhouse):
    releases = regression_run / "releases.yaml"
    on_duckdb = db_review(regression_run / "db.duckdb", WEEK, releases=releases)
    target = f"chdb:{regression_clickhouse.con.target.path}?database=regression"
    on_clickhouse = db_review(target, WEEK, releases=releases)
    assert on_duckdb["has_data"] and on_duckdb["deployments"]
    assert on_clickhouse["source"].startswith("ClickHouse chdb:") and on_duckdb["source"].startswith("DuckDB ")
    (ch, ch_regs), (dd, dd_regs) = _split(on_clickhouse), _split(on_duckdb)
    assert any(r["release"] for rs in dd_regs.values() for r in rs)  # a regression attributed to a release
    assert ch == dd
    assert _rounded(ch_regs) == _rounded(dd_regs)


def test_a_bad_clickhouse_db_is_one_line_and_exit_2(tmp_path):
    for bad in ("clickhouse://127.0.0.1:1/x?table=no-such", "chdb:"):
        done = subprocess.run([sys.executable, "-m", "goodput", "review", "--db", bad, "--week", WEEK,
                               "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and bad.split("?")[0] in done.stderr
