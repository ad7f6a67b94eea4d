"""`goodput analyze prepare`: the request model kept in ClickHouse (chDB here) by materialized views and a backfill
(goodput/analyzer/prepare.py), read by the backend in place of the read-time derivation, to the same answers."""

import dataclasses
import logging
import random
import subprocess
import sys

import pandas as pd
import pytest

from goodput.analyzer import prepare as prepare_module
from goodput.analyzer.backend import ClickHouseBackend
from goodput.analyzer.decompose import decompose
from goodput.analyzer.opening import open_backend
from goodput.analyzer.prepare import Layout, prepare, sync
from goodput.analyzer.triage import triage
from goodput.exporters.otel_traces import TableSpec, create_table, insert_spans
from goodput.exporters.otlp import decode_json
from goodput.foundation.clickhouse import connect, parse_target
from goodput.foundation.errors import ConfigError
from goodput.simulator.config import load_fleet
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import REPO

_REQUESTS = "SELECT * EXCEPT version FROM {db:Identifier}.goodput_requests FINAL ORDER BY trace_id, span_id"


@pytest.fixture(scope="module")
def spans(tmp_path_factory):
    """Fifteen simulated minutes of the regression fleet, as OTLP spans (43k spans, 7k requests)."""
    out = tmp_path_factory.mktemp("prepare-run")
    write_outputs(simulate(load_fleet(REPO / "tests" / "fixtures" / "regression_fleet.yaml"), 900.0), out)
    with open(out / "spans.otlp.jsonl") as f:
        return [span for line in f for span in decode_json(line)]


def _traces(spans, n):
    """The spans of the first ``n`` traces: a small set for the views, which recompute each insert's traces."""
    keep = list(dict.fromkeys(s.trace_id for s in spans))[:n]
    return [s for s in spans if s.trace_id in set(keep)]


def _target(chdb, database):
    return parse_target(f"chdb:{chdb.target.path}?database={database}")


def _filled(chdb, database, spans):
    create_table(chdb, TableSpec(database=database))
    insert_spans(chdb, spans, TableSpec(database=database))
    return _target(chdb, database)


def test_prepare_twice_is_one_preparation_and_inserts_after_it_match_a_backfill(spans, chdb):
    few = _traces(spans, 100)
    backfilled = _filled(chdb, "prep_backfill", few)
    assert "backfilled from" in prepare(chdb, backfilled)
    rows = chdb.query_df("SELECT count() AS n FROM prep_backfill.goodput_requests")["n"].iloc[0]
    assert "already prepared" in prepare(chdb, backfilled)  # the second run: no new rows, one version recorded
    assert chdb.query_df("SELECT count() AS n FROM prep_backfill.goodput_requests")["n"].iloc[0] == rows
    assert chdb.query_df("SELECT count() AS n FROM prep_backfill.goodput_meta")["n"].iloc[0] == 1

    streamed = _filled(chdb, "prep_stream", [])
    prepare(chdb, streamed)
    shuffled = list(few)
    random.Random(7).shuffle(shuffled)  # the Collector's inserts cut traces apart
    for i in range(0, len(shuffled), 250):
        insert_spans(chdb, shuffled[i:i + 250], TableSpec(database="prep_stream"))
    assert sync(chdb, Layout("prep_stream", "otel_traces")) == len(few)  # what a reader runs before a statement
    assert sync(chdb, Layout("prep_stream", "otel_traces")) == 0  # then nothing is left to do
    a = chdb.query_df(_REQUESTS, {"db": "prep_backfill"})
    b = chdb.query_df(_REQUESTS, {"db": "prep_stream"})
    assert len(a) == len({s.trace_id for s in few if s.name == "llm.request"}) > 60
    pd.testing.assert_frame_equal(a, b)
    assert (a["queue_s"].notna() & a["decode_s"].notna()).all()  # every request met its segment spans


def _parts_read(chdb) -> int:
    """The MergeTree parts this chDB session's queries have selected to read so far (a stored table's read)."""
    return int(chdb.query_df("SELECT sum(value) AS n FROM system.events WHERE event = 'SelectedParts'")["n"].iloc[0])


def test_an_insert_after_prepare_reads_no_stored_table(spans, chdb):
    few = _traces(spans, 60)
    half = {s.trace_id for s in few[::2]}  # half the traces stored and backfilled, the rest of them inserted after
    stored = [s for s in few if s.trace_id in half and s.name != "llm.send"]
    target = _filled(chdb, "prep_cheap", stored)
    prepare(chdb, target)
    before = _parts_read(chdb)
    insert_spans(chdb, [s for s in few if s not in stored], TableSpec(database="prep_cheap"))
    assert _parts_read(chdb) == before  # the views transformed the block, and read no stored table
    store = open_backend(f"chdb:{chdb.target.path}?database=prep_cheap")
    assert store.frame("completeness", {"deployment": None, "abandoned_s": 1e9})["in_flight"].sum() == 0
    store.close()
    expected = _filled(chdb, "prep_cheap_all", few)
    prepare(chdb, expected)
    a = chdb.query_df(_REQUESTS, {"db": "prep_cheap"})
    assert len(a) > 40 and a.equals(chdb.query_df(_REQUESTS, {"db": "prep_cheap_all"}))


def test_a_backfill_in_chunks_keeps_the_requests_that_cross_an_hour(spans, chdb, monkeypatch):
    few = _traces(spans, 400)
    middle = (min(s.start_ns for s in few) + max(s.end_ns for s in few)) // 2
    # the traces moved to straddle an hour: the requests in flight at it have later segments in the next hour
    shift = (middle // 3_600_000_000_000 + 1) * 3_600_000_000_000 - middle
    moved = [dataclasses.replace(s, start_ns=s.start_ns + shift, end_ns=s.end_ns + shift) for s in few]
    streamed = _filled(chdb, "prep_hours_stream", [])
    prepare(chdb, streamed)
    insert_spans(chdb, moved, TableSpec(database="prep_hours_stream"))
    sync(chdb, Layout("prep_hours_stream", "otel_traces"))
    monkeypatch.setattr(prepare_module, "BACKFILL_SPANS_PER_PASS", len(moved) - 1)  # each hour a chunk
    assert "backfilled from" in prepare(chdb, _filled(chdb, "prep_hours", moved))
    a = chdb.query_df(_REQUESTS, {"db": "prep_hours"})
    assert len(a) > 300 and a.equals(chdb.query_df(_REQUESTS, {"db": "prep_hours_stream"}))


def test_a_request_in_flight_is_early_until_its_root_arrives(spans, chdb):
    trace = _traces(spans, 1)
    early = [s for s in trace if s.name in ("llm.gateway", "llm.queue")]
    rest = [s for s in trace if s not in early]
    target = _filled(chdb, "prep_flight", [])
    prepare(chdb, target)
    insert_spans(chdb, early, TableSpec(database="prep_flight"))
    store = open_backend(f"chdb:{chdb.target.path}?database=prep_flight")
    assert isinstance(store, ClickHouseBackend) and store.prepared
    in_flight = store.frame("completeness", {"deployment": None, "abandoned_s": 1e9})
    assert in_flight["in_flight"].sum() == 1
    insert_spans(chdb, rest, TableSpec(database="prep_flight"))
    done = store.frame("completeness", {"deployment": None, "abandoned_s": 1e9})
    assert done["in_flight"].sum() == 0 and done["newest_completion_ns"].notna().all()
    store.close()


def test_the_printed_ddl_makes_what_prepare_makes(spans, chdb):
    printed = subprocess.run([sys.executable, "-m", "goodput", "analyze", "prepare", "--print", "--db",
                              f"chdb:{chdb.target.path}?database=prep_printed"], capture_output=True, text=True,
                             cwd=REPO, timeout=60, check=True).stdout
    _filled(chdb, "prep_printed", [])
    statements = [s for s in printed.split(";\n\n") if s.strip() and not s.lstrip().startswith("--")]
    for statement in statements:
        chdb.command(statement)
    prepare(chdb, _filled(chdb, "prep_made", []), fill=False)
    shape = ("SELECT table, name, type FROM system.columns WHERE database = {db:String} AND table LIKE 'goodput%' "
             "ORDER BY table, position")
    made = chdb.query_df(shape, {"db": "prep_made"})
    assert len(made) > 80 and chdb.query_df(shape, {"db": "prep_printed"}).equals(made)


class _Refusing:
    """A real chDB connection whose user may not create tables, as a server answers one."""

    def __init__(self, con) -> None:
        self.con, self.target = con, con.target

    def command(self, sql, params=None):
        if sql.startswith("CREATE TABLE"):
            raise RuntimeError("Code: 497. DB::Exception: reader: Not enough privileges. (ACCESS_DENIED)")
        return self.con.command(sql, params)

    def query_df(self, sql, params=None):
        return self.con.query_df(sql, params)


def test_bad_targets_and_refused_ddl_are_one_line(chdb, tmp_path):
    with pytest.raises(ConfigError, match=r"ClickHouse refused the DDL: Code: 497.*ACCESS_DENIED") as e:
        prepare(_Refusing(chdb), _filled(chdb, "prep_refused", []))
    assert "\n" not in str(e.value)
    for db, says in (("chdb:", "needs a directory"), (str(tmp_path / "x.duckdb"), "prepare is for ClickHouse"),
                     (f"chdb:{tmp_path / 'ch'}?table=nothing", "no table otel.nothing")):
        r = subprocess.run([sys.executable, "-m", "goodput", "analyze", "prepare", "--db", db], capture_output=True,
                           text=True, cwd=REPO, timeout=60)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_unprepared_database_warns_once_naming_the_command(chdb, caplog):
    _filled(chdb, "prep_warn", [])
    db = f"chdb:{chdb.target.path}?database=prep_warn"
    with caplog.at_level(logging.WARNING, logger="goodput.analyzer.backend"):
        for _ in range(2):
            assert not open_backend(db).prepared
    assert [r.getMessage().rsplit("run: ", 1)[1] for r in caplog.records] == [f"goodput analyze prepare --db {db}"]


def test_prepared_and_read_time_give_the_same_answers(spans, chdb):
    target = _filled(chdb, "prep_same", spans)
    read_time = ClickHouseBackend(connect(target))
    before_d = decompose(read_time, ["deployment", "tier"]).records()
    before_t = triage(read_time, "chat")
    read_time.close()
    prepare(chdb, target)
    prepared = open_backend(f"chdb:{chdb.target.path}?database=prep_same")
    assert prepared.prepared
    after_d = decompose(prepared, ["deployment", "tier"]).records()
    after_t = triage(prepared, "chat")
    prepared.close()
    assert [(r["deployment"], r["tier"], r["requests"]) for r in after_d] == [
        (r["deployment"], r["tier"], r["requests"]) for r in before_d]
    for x, y in zip(after_d, before_d, strict=True):
        for k in ("gateway_s", "queue_s", "prefill_s", "decode_s", "send_s", "other_s", "e2e_p95_s", "ttft_p99_s"):
            assert x[k] == pytest.approx(y[k], abs=1e-9), k
    assert after_t.verdict == before_t.verdict and after_t.steps == before_t.steps


def _moved(spans, to_ns: int, tag: str):
    """``spans`` with their times moved to start at ``to_ns`` and their trace ids made their own (``tag``)."""
    first = min(s.start_ns for s in spans)
    return [dataclasses.replace(s, trace_id=tag + s.trace_id[len(tag):], start_ns=s.start_ns - first + to_ns,
                                end_ns=s.end_ns - first + to_ns) for s in spans]


def test_a_ttl_drops_goodputs_old_days_as_the_collectors_ttl_drops_spans(spans, chdb):
    """`prepare --ttl 3`: goodput's rows of 10 days ago go (whole day parts, once merged) and today's stay, while the
    Collector's table keeps what its own TTL keeps; run again with `--ttl 30`, the TTL is replaced, not added to."""
    now_ns = int(pd.Timestamp.now(tz="UTC").timestamp()) * 10**9
    few = _traces(spans, 40)
    old, new = _moved(few, now_ns - 10 * 86400 * 10**9, "0ld"), _moved(few, now_ns - 3600 * 10**9, "eee")
    target = _filled(chdb, "prep_ttl", old + new)
    assert prepare(chdb, target, ttl_days=3).endswith("goodput's tables keep 3 days")
    tables = ("goodput_spans", "goodput_requests", "goodput_early", "goodput_touched")
    for table in tables:
        chdb.command(f"OPTIMIZE TABLE prep_ttl.{table} FINAL")
    spans_left = chdb.query_df("SELECT DISTINCT substring(trace_id, 1, 3) AS tag FROM prep_ttl.goodput_spans")
    assert spans_left["tag"].tolist() == ["eee"]
    requests = chdb.query_df("SELECT substring(trace_id, 1, 3) AS tag, count() AS n FROM prep_ttl.goodput_requests "
                             "GROUP BY tag")
    assert requests["tag"].tolist() == ["eee"] and requests["n"].iloc[0] > 10
    assert chdb.query_df("SELECT count() AS n FROM prep_ttl.otel_traces")["n"].iloc[0] == len(old) + len(new)
    ttl = "SELECT create_table_query AS q FROM system.tables WHERE database = 'prep_ttl' AND name = {t:String}"
    assert "toIntervalDay(3)" in chdb.query_df(ttl, {"t": "goodput_requests"})["q"].iloc[0]
    assert "already prepared" in prepare(chdb, target, ttl_days=30)
    query = chdb.query_df(ttl, {"t": "goodput_requests"})["q"].iloc[0]
    assert "toIntervalDay(30)" in query and "toIntervalDay(3)" not in query


def test_the_ttl_is_in_the_printed_ddl_and_checked_before_any_work(chdb):
    db = f"chdb:{chdb.target.path}?database=prep_ttl_print"
    args = [sys.executable, "-m", "goodput", "analyze", "prepare", "--print", "--db", db]
    printed = subprocess.run([*args, "--ttl", "7", "--cluster", "c1"], capture_output=True, text=True, cwd=REPO,
                             timeout=60, check=True).stdout
    assert printed.count("ON CLUSTER `c1` MODIFY TTL") == 5
    assert "`goodput_spans_local` ON CLUSTER `c1` MODIFY TTL" in printed
    assert "+ INTERVAL 7 DAY" in printed and "ttl_only_drop_parts = 1" in printed
    assert "MODIFY TTL" not in subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=60).stdout
    for bad in ("0", "-3", "99999999"):
        r = subprocess.run([*args[:-3], "--db", db, "--ttl", bad], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert r.returncode == 2 and "--ttl" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
