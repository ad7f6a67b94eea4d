import pytest

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.simulator.config import load_fleet, parse_fleet
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import REPO, clickhouse_of, fleet_data, stress_pool


@pytest.fixture(scope="session")
def regression_run(tmp_path_factory):
    """Three simulated hours of the regression fleet: its files and a database ingested from its requests.parquet."""
    out = tmp_path_factory.mktemp("regression-run")
    res = simulate(load_fleet(REPO / "tests" / "fixtures" / "regression_fleet.yaml"), 10800.0)
    write_outputs(res, out)
    con = connect(out / "db.duckdb")
    ingest(con, [out / "requests.parquet"])
    con.close()
    return out


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory):
    """A steady simulated hour of a busy deployment: bursty arrivals, little KV (it preempts), shared prefixes,
    but no event and no release, so nothing regressed (and a cause named from the KV alone would be wrong)."""
    out = tmp_path_factory.mktemp("healthy-run")
    pool = stress_pool()
    pool["events"] = []
    pool["workloads"][0]["arrival"]["rate"] = 4.5
    write_outputs(simulate(parse_fleet(fleet_data(**pool), "healthy.yaml"), 3600.0), out)
    con = connect(out / "db.duckdb")
    ingest(con, [out / "requests.parquet"])
    con.close()
    return out


@pytest.fixture(scope="session")
def regression_clickhouse(regression_run, chdb):
    return clickhouse_of(chdb, regression_run, "regression")


@pytest.fixture(scope="session")
def healthy_clickhouse(healthy_run, chdb):
    return clickhouse_of(chdb, healthy_run, "healthy")


@pytest.fixture(params=["duckdb", "clickhouse"])
def regression_store(request, regression_run):
    """The regression run's store: its DuckDB file, or its spans read in place in ClickHouse (chDB)."""
    if request.param == "clickhouse":
        return request.getfixturevalue("regression_clickhouse")
    return connect(regression_run / "db.duckdb", read_only=True)


@pytest.fixture(params=["duckdb", "clickhouse"])
def healthy_store(request, healthy_run):
    if request.param == "clickhouse":
        return request.getfixturevalue("healthy_clickhouse")
    return connect(healthy_run / "db.duckdb", read_only=True)
