"""`goodput analyze ... --db clickhouse://... | chdb:DIR`: the report from spans read in place, and a --db that cannot
work as one line naming it (exit 2)."""

import json
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO

# a short run of the regression fleet, its OTLP spans written into a chDB otel_traces (its own process: chDB holds
# one directory per process) and into the analyzer's DuckDB by ingest
_FILL = """
import sys
from pathlib import Path
from goodput.exporters.otel_traces import TableSpec, create_table, insert_spans
from goodput.exporters.otlp import decode_json
from goodput.foundation.clickhouse import connect
from goodput.simulator.config import load_fleet
from goodput.simulator.run import simulate, write_outputs
out = Path(sys.argv[1])
write_outputs(simulate(load_fleet(Path("tests/fixtures/regression_fleet.yaml")), 900.0), out)
con = connect(f"chdb:{out / 'chdb'}")
create_table(con, TableSpec())
with open(out / "spans.otlp.jsonl") as f:
    insert_spans(con, (s for line in f for s in decode_json(line)))
"""


def _goodput(*args):
    return subprocess.run([sys.executable, "-m", "goodput", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def test_decompose_reads_chdb_in_place_and_agrees_with_duckdb(tmp_path):
    subprocess.run([sys.executable, "-c", _FILL, str(tmp_path)], cwd=REPO, check=True, timeout=300)
    assert _goodput("analyze", "ingest", str(tmp_path / "spans.otlp.jsonl"), "--db",
                    str(tmp_path / "db.duckdb")).returncode == 0
    ch = _goodput("analyze", "decompose", "--db", f"chdb:{tmp_path / 'chdb'}", "--by", "deployment,tier",
                  "--format", "json")
    duck = _goodput("analyze", "decompose", "--db", str(tmp_path / "db.duckdb"), "--by", "deployment,tier",
                    "--format", "json")
    assert ch.returncode == 0 and duck.returncode == 0, ch.stderr + duck.stderr
    a, b = json.loads(ch.stdout), json.loads(duck.stdout)
    assert [(r["deployment"], r["tier"], r["requests"]) for r in a] == [(r["deployment"], r["tier"], r["requests"])
                                                                       for r in b]
    for x, y in zip(a, b, strict=True):
        for k in ("gateway_s", "queue_s", "prefill_s", "decode_s", "send_s", "e2e_p95_s", "ttft_p99_s"):
            assert x[k] == pytest.approx(y[k], abs=1e-6), k
    missing = _goodput("analyze", "triage", "--db", f"chdb:{tmp_path / 'chdb'}?table=spans", "--deployment", "chat")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"goodput: error: --db: chdb:{tmp_path / 'chdb'} (otel.spans): no table otel.spans (the Collector's "
        "clickhouseexporter creates it; docs/clickhouse.md)"]


def test_a_bad_or_unreachable_clickhouse_is_one_line_and_exit_2():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for db, says in ((f"clickhouse://127.0.0.1:{port}/otel", "cannot connect"),
                     ("clickhouse://h:8123", "one DATABASE"), ("chdb:", "needs a directory")):
        r = _goodput("analyze", "regressions", "--db", db)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
