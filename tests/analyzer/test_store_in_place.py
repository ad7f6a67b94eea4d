"""``--db <trace store dir>``: the analyzer reads the request exporter's Parquet in place, with no ingest copy —
the same requests as an ingest of the same spans, whatever flush each span came in, and a request whose root is
not stored yet counted in flight."""

import json
import random
import subprocess
import sys

import pytest

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.exporters.otlp import decode_json
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.errors import ConfigError
from goodput.simulator.config import load_fleet
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import REPO

LATE = ("llm.request", "llm.prefill", "llm.kv_transfer", "llm.decode", "llm.send")  # what a request in flight lacks
COLS = {"requests": "* EXCLUDE (source)", "segments": "*"}  # where a request was read from differs


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A minute of examples/primary_down.yaml written through the trace store in shuffled batches of 997 spans, one
    flush each (so a request's spans land in different files), but for five requests whose root never came."""
    out = tmp_path_factory.mktemp("in-place")
    write_outputs(simulate(load_fleet(REPO / "examples" / "primary_down.yaml"), 60.0), out)
    spans = [s for line in (out / "spans.otlp.jsonl").read_text().splitlines() for s in decode_json(line)]
    traces = sorted({s.trace_id for s in spans})
    flying = set(random.Random(3).sample(traces, 5))
    kept = [s for s in spans if not (s.trace_id in flying and s.name in LATE)]
    random.Random(4).shuffle(kept)
    store = TraceStore(out / "store")
    for i in range(0, len(kept), 997):
        store.accept(kept[i:i + 997], b"{}", "J")
        store.flush()
    store.close()
    ref = connect(out / "ref.duckdb")
    ingest(ref, [out / "spans.otlp.jsonl"])
    ref.close()
    return out, flying


def test_the_store_read_in_place_is_the_ingest_of_its_spans(stored):
    out, flying = stored
    assert len(list((out / "store").rglob("*.parquet"))) > 5
    con = connect(out / "store", read_only=True)
    con.execute(f"ATTACH '{out / 'ref.duckdb'}' AS ref (READ_ONLY)")
    for table in ("requests", "segments"):
        keep = "WHERE trace_id NOT IN (SELECT unnest(?))"
        cols = COLS[table]
        a = con.execute(f"SELECT {cols} FROM main.{table} EXCEPT ALL SELECT {cols} FROM ref.{table} {keep}",
                        [sorted(flying)]).fetchall()
        b = con.execute(f"SELECT {cols} FROM ref.{table} {keep} EXCEPT ALL SELECT {cols} FROM main.{table}",
                        [sorted(flying)]).fetchall()
        assert a == [] and b == [], table
    assert con.execute("SELECT count(*) FROM requests WHERE fallback_from IS NOT NULL").fetchall()[0][0] > 0
    in_flight = {t for (t,) in con.execute("SELECT trace_id FROM in_flight").fetchall()}
    assert in_flight == flying  # never dropped: counted in flight, as the completeness rules read them
    assert con.execute("SELECT count(*) FROM quarantine").fetchall()[0][0] == 0


def test_analyze_decompose_reads_the_store_directory(stored):
    out, _ = stored
    cli = [sys.executable, "-m", "goodput", "analyze", "decompose", "--db", str(out / "store"), "--format", "json"]
    done = subprocess.run(cli, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    ref = subprocess.run([*cli[:-4], "--db", str(out / "ref.duckdb"), "--format", "json"], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert rows and rows != json.loads(ref.stdout)  # five requests fewer: still in flight in the store


def test_a_store_is_never_written_and_an_empty_one_says_so(tmp_path):
    (tmp_path / "store").mkdir()
    with pytest.raises(ConfigError, match="read in place"):
        connect(tmp_path / "store")
    with pytest.raises(ConfigError, match="no trace files"):
        connect(tmp_path / "store", read_only=True)
