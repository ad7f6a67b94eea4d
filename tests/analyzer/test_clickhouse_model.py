"""ClickHouse derives a command's request model once per window, into temporary tables of its session that every
later statement of the window reads (goodput/analyzer/backend.py), and drops them when the command closes its backend; its
statements answer what DuckDB's do."""

from datetime import UTC, datetime, timedelta

import pytest

from goodput.analyzer.backend import ClickHouseBackend, backend
from goodput.analyzer.decompose import decompose
from goodput.analyzer.regressions import scan_regressions
from goodput.analyzer.releases import load_releases
from goodput.analyzer.store import connect as connect_duckdb
from goodput.foundation.clickhouse import connect, parse_target
from tests.conftest import clickhouse_of

# a second copy of every span, its trace ids re-prefixed: the fleet's traffic twice over
_COPY = """INSERT INTO {db:Identifier}.otel_traces
SELECT * REPLACE (concat('ff', substring(TraceId, 3)) AS TraceId) FROM {db:Identifier}.otel_traces"""


def _temporary(chdb) -> int:
    return int(chdb.query_df("SELECT count() AS n FROM system.tables WHERE is_temporary")["n"].iloc[0])


def _requests(store, **window) -> int:
    return sum(r["requests"] for r in decompose(store, ["deployment"], **window).records())


def test_a_backend_derives_each_window_once_and_drops_it_on_close(healthy_run, chdb):
    store = clickhouse_of(chdb, healthy_run, "model_once")
    before = _temporary(chdb)
    whole = _requests(store)
    assert whole > 0 and _temporary(chdb) == before + 1  # the requests of the open window, derived
    since, until = datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
    assert _requests(store, since=since, until=until) == whole and _temporary(chdb) == before + 2  # another window

    chdb.command(_COPY, {"db": "model_once"})
    assert _requests(store) == whole  # read from the window's table, not derived again from the spans
    fresh = ClickHouseBackend(connect(parse_target(f"chdb:{chdb.target.path}?database=model_once")))
    assert _requests(fresh) == 2 * whole  # a new command derives the model anew
    fresh.close()
    store.close()
    assert _temporary(chdb) == before


class _NoTemporaryTables:
    """A real chDB connection whose user may not create temporary tables, as a ClickHouse server answers one
    (chDB has no users or grants to refuse with)."""

    def __init__(self, con) -> None:
        self.con, self.target = con, con.target

    def command(self, sql, params=None):
        if sql.startswith("CREATE TEMPORARY TABLE"):
            raise RuntimeError("Code: 497. DB::Exception: default: Not enough privileges. To execute this query, it's "
                               "necessary to have the grant CREATE TEMPORARY TABLE ON *.*. (ACCESS_DENIED)")
        return self.con.command(sql, params)

    def query_df(self, sql, params=None):
        return self.con.query_df(sql, params)

    def close(self) -> None:
        self.con.close()


def test_a_user_without_temporary_tables_gets_the_same_answers(healthy_run, chdb):
    store = clickhouse_of(chdb, healthy_run, "model_inline")
    whole = _requests(store)
    store.close()
    before = _temporary(chdb)
    refused = ClickHouseBackend(_NoTemporaryTables(connect(parse_target(f"chdb:{chdb.target.path}?database=model_inline"))))
    assert _requests(refused) == whole and _temporary(chdb) == before  # each statement derives the model itself
    refused.close()


def test_the_tenants_and_routes_that_moved_are_duckdbs(regression_run, regression_clickhouse):
    """tenant_route_shift, every row: for each change point DuckDB's scan finds (all in one statement, as the scan
    asks), each tenant's and route's median per-bucket p95 from 12 buckets before it to 12 after, and its bucket
    count, the same on both engines."""
    duck = connect_duckdb(regression_run / "db.duckdb", read_only=True)
    found = scan_regressions(duck, load_releases(regression_run / "releases.yaml")).found
    width = timedelta(minutes=5)
    params = {"ids": list(range(len(found))), "deployments": [r.deployment for r in found],
              "tiers": [r.tier for r in found], "metrics": [r.metric for r in found], "ats": [r.time for r in found],
              "starts": [r.time - 12 * width for r in found], "ends": [r.time + 12 * width for r in found],
              "bucket": width}
    on_duckdb = backend(duck).rows("tenant_route_shift", params).rows
    on_clickhouse = regression_clickhouse.rows("tenant_route_shift", params).rows
    assert len(found) > 10 and {r[0] for r in on_duckdb} == set(range(len(found)))
    assert [r[:3] + r[5:] for r in on_clickhouse] == [r[:3] + r[5:] for r in on_duckdb]  # ids, tenants, routes, buckets
    assert [r[3:5] for r in on_clickhouse] == [pytest.approx(r[3:5], abs=1e-6) for r in on_duckdb]
