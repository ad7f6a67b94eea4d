"""The Routing page's gateway on a simulated tenant flood (examples/tenant_flood.yaml) under Streamlit's AppTest:
per tenant and tier, the admission decisions and the rejections by reason are the store's own counts (read here by
SQL over the same database) when Prometheus does not answer, on the DuckDB file and on its spans in ClickHouse; and
Prometheus' counts (a real one, scraping known counters) when it does."""

from __future__ import annotations

import time
from collections.abc import Iterator

import duckdb
import httpx
import pytest

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.demo.stack import start_prometheus
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.rulegen import load_spec, write
from goodput.simulator.config import load_fleet
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import REPO, clickhouse_of, free_port_block, require
from tests.console.conftest import RULE_SCALE
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


# the live gateway: counters growing at these rates per second (tenant, tier, decision or reason)
ADMISSIONS = {("flood", "P0", "admitted"): 1.0, ("flood", "P0", "rejected"): 4.0, ("a", "P0", "admitted"): 2.0}
REJECTIONS = {("flood", "P0", "tpm_limit"): 4.0, ("a", "P0", "kv_capacity"): 0.5}  # kv_capacity: the engine's


def _exposition(t0: float) -> str:
    dt = time.monotonic() - t0
    lines = []
    for name, label, rates in (("llm_gateway_admissions_total", "decision", ADMISSIONS),
                               ("llm_gateway_rejections_total", "reason", REJECTIONS)):
        lines.append(f"# TYPE {name} counter")
        lines += [f'{name}{{model="m",deployment="chat",tenant="{t}",tier="{tier}",route="chat",{label}="{v}"}} '
                  f"{rate * dt:.3f}" for (t, tier, v), rate in rates.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def gateway_prometheus(tmp_path_factory) -> Iterator[str]:
    """A real Prometheus scraping a small exporter of the gateway's counters every second."""
    require("prometheus")
    work = tmp_path_factory.mktemp("gateway-prom")
    base = free_port_block(2)
    write(load_spec(REPO / "rules" / "slos.yaml"), work / "rules", RULE_SCALE)
    t0 = time.monotonic()
    exporter = Server("127.0.0.1", base + 1, metrics_routes(lambda: _exposition(t0)))
    exporter.start()
    prom = start_prometheus(work / "prom", base, {"llm-gateway": [f"127.0.0.1:{base + 1}"]}, work / "rules", None,
                            interval="1s")
    try:
        prom.ready("/-/ready")
        deadline = time.monotonic() + 60
        query = {"query": "min(count_over_time(llm_gateway_admissions_total[10s])) >= 4"}  # a few scrapes of every series
        while not httpx.get(f"{prom.url}/api/v1/query", params=query, timeout=5).json()["data"]["result"]:
            assert time.monotonic() < deadline, "Prometheus scraped no gateway counters in 60 s"
            time.sleep(1)
        yield prom.url
    finally:
        prom.stop()
        exporter.stop()


def test_routing_shows_the_gateway_from_prometheus_when_it_answers(monkeypatch, flood, gateway_prometheus):
    page = show(app(monkeypatch, flood, gateway_prometheus, range="1h"), "routing")
    no_exception(page)
    assert any("From Prometheus" in c.value for c in page.caption)
    decisions = frame(page, "decision", "requests", "share")
    share = {(r.tenant, r.decision): r.share for r in decisions.itertuples()}
    assert share[("flood", "rejected")] == pytest.approx(0.8, rel=1e-3)  # 4/s of flood's 5/s
    assert share[("a", "admitted")] == pytest.approx(1.0)
    reasons = frame(page, "reason", "requests", "share")
    assert list(zip(reasons["tenant"], reasons["reason"], strict=True)) == [("flood", "tpm_limit")]  # not the engine's
    # over the decisions of another series, each extrapolated on its own by increase(): near, not exact
    assert reasons["share"].iloc[0] == pytest.approx(0.8, rel=0.02)
