import pytest

from analyzer.ingest import ingest
from analyzer.store import connect
from simulator.config import load_fleet
from simulator.run import simulate, write_outputs
from tests.conftest import REPO


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
