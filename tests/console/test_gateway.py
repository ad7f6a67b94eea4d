"""The Routing page's gateway on a simulated tenant flood (examples/tenant_flood.yaml) under Streamlit's AppTest:
per tenant and tier, the admission decisions and the rejections by reason are the store's own counts (read here by
SQL over the same database) when Prometheus does not answer, on the DuckDB file and on its spans in ClickHouse."""

from __future__ import annotations

import duckdb
import pytest

from analyzer.ingest import ingest
from analyzer.store import connect
from simulator.config import load_fleet
from simulator.run import simulate, write_outputs
from tests.conftest import REPO, clickhouse_of
from tests.console.test_pages import app, frame, no_exception, show


@pytest.fixture(scope="module")
def flood(tmp_path_factory):
    out = tmp_path_factory.mktemp("console-flood")
    write_outputs(simulate(load_fleet(REPO / "examples" / "tenant_flood.yaml"), 120.0), out)
    con = connect(out / "db.duckdb")
    ingest(con, [out / "requests.parquet"])
    con.close()
    return out / "db.duckdb"


@pytest.fixture(params=["duckdb", "clickhouse"])
def flood_db(request, flood):
    """What the page reads: the DuckDB file, or the same run's spans in chDB."""
    if request.param == "clickhouse":
        chdb = request.getfixturevalue("chdb")
        clickhouse_of(chdb, flood.parent, "console_flood")
        return f"chdb:{chdb.target.path}?database=console_flood"
    return flood


def _page(monkeypatch, flood, db, **query):
    at = app(monkeypatch, flood, range="all", **query)
    monkeypatch.setenv("GOODPUT_DB", str(db))  # read when the page runs
    return show(at, "routing")


def test_routing_shows_the_gateways_decisions_and_rejections_per_tenant_from_the_store(monkeypatch, flood, flood_db):
    page = _page(monkeypatch, flood, flood_db)
    no_exception(page)
    assert any("Prometheus is unreachable" in c.value and "from the traces instead" in c.value for c in page.caption)
    with duckdb.connect(str(flood), read_only=True) as con:
        per = dict(((t, tier), n) for t, tier, n in con.execute(
            "SELECT tenant, tier, count(*) FROM requests GROUP BY ALL").fetchall())
        refused = {(t, tier, r): n for t, tier, r, n in con.execute(
            "SELECT tenant, tier, reject_reason, count(*) FROM requests WHERE replica IS NULL AND reject_reason IS NOT NULL "
            "GROUP BY ALL").fetchall()}
    decisions = frame(page, "decision", "requests", "share")
    rejected = {(r.tenant, r.tier): r.requests for r in decisions.itertuples() if r.decision == "rejected"}
    admitted = {(r.tenant, r.tier): r.requests for r in decisions.itertuples() if r.decision == "admitted"}
    assert rejected == {(t, tier): n for (t, tier, _), n in refused.items()} and set(rejected) == {("flood", "P0")}
    assert {k: admitted.get(k, 0) + rejected.get(k, 0) for k in per} == per
    reasons = frame(page, "reason", "requests", "share")
    assert {(r.tenant, r.tier, r.reason): r.requests for r in reasons.itertuples()} == refused == {
        ("flood", "P0", "tpm_limit"): refused[("flood", "P0", "tpm_limit")]}
    assert reasons["share"].iloc[0] == pytest.approx(refused[("flood", "P0", "tpm_limit")] / per[("flood", "P0")])


def test_a_tenant_filter_narrows_the_gateway_to_that_tenant(monkeypatch, flood, flood_db):
    page = _page(monkeypatch, flood, flood_db, tenant="a")
    no_exception(page)
    assert set(frame(page, "decision", "requests", "share")["tenant"]) == {"a"}
    assert any("rejected none" in i.value for i in page.info)
