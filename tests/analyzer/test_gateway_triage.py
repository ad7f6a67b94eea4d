"""Triage step 4 on a simulated tenant flood (examples/tenant_flood.yaml): the gateway's refusals are named — the
flooding tenant held at its TPM quota, with its share — on the DuckDB store and on the spans in ClickHouse."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from goodput.analyzer.triage import triage
from tests.conftest import REPO, clickhouse_of


@pytest.fixture(scope="module")
def flood_run(tmp_path_factory):
    """Two simulated minutes of the tenant flood, through the CLI as a user runs it: simulate, then ingest."""
    out = tmp_path_factory.mktemp("tenant-flood")
    for args in (["simulate", str(REPO / "examples" / "tenant_flood.yaml"), "--duration", "120", "--out", str(out)],
                 ["analyze", "ingest", str(out / "requests.parquet"), "--db", str(out / "db.duckdb")]):
        subprocess.run([sys.executable, "-m", "goodput", *args], check=True, capture_output=True, cwd=REPO)
    return out


@pytest.fixture(params=["duckdb", "clickhouse"])
def flood_store(request, flood_run):
    if request.param == "clickhouse":
        return clickhouse_of(request.getfixturevalue("chdb"), flood_run, "tenant_flood")
    return duckdb.connect(str(flood_run / "db.duckdb"), read_only=True)


def test_triage_names_the_tenant_held_at_its_quota_with_its_share(flood_run, flood_store):
    t = triage(flood_store, "chat")
    step = dict(t.steps)["4. routing and cache"]
    split = t.facts["recent_from"]
    with duckdb.connect(str(flood_run / "db.duckdb"), read_only=True) as con:  # counted here independently
        refused, total = con.execute(
            "SELECT count(*) FILTER (WHERE reject_reason = 'tpm_limit' AND tenant = 'flood'), count(*) FROM requests "
            "WHERE ts >= CAST(? AS TIMESTAMP)", [split.removesuffix("+00:00")]).fetchone()
    assert refused > 0
    assert f"the gateway refused {refused} of {total} requests (100% of the rejections)" in step, step
    assert "100% of them tenant flood held at its quota (tpm_limit)" in step, step
    assert [(r["tenant"], r["reason"], r["refused"]) for r in t.facts["gateway_refusals"]] == [("flood", "tpm_limit", refused)]
