"""An otel_traces made by clickhouseexporter's ``json: true`` (attributes as JSON columns, its own DDL: vendored in
tests/fixtures/clickhouse/) is refused when ``--db`` is opened, in one line naming the column, its type and the fix;
the default table (Map attributes) opens as before."""

import subprocess
import sys

import pytest

from goodput.analyzer.opening import open_backend
from goodput.exporters.otel_traces import TableSpec, create_table
from goodput.foundation.errors import ConfigError
from tests.conftest import FIXTURES, REPO

JSON_DDL = FIXTURES / "clickhouse" / "traces_json_table.sql"
# the exporter's rendering (fmt.Sprintf): database, table, cluster clause, engine, TTL clause
_CREATE = f"""
import sys
from goodput.foundation.clickhouse import connect
con = connect(f"chdb:{{sys.argv[1]}}")
con.command("CREATE DATABASE IF NOT EXISTS otel")
con.command(open({str(JSON_DDL)!r}).read() % ("otel", "otel_traces", "", "MergeTree()", ""))
"""


def _json_table(con, database: str) -> None:
    con.command(f"CREATE DATABASE IF NOT EXISTS {database}")
    con.command(JSON_DDL.read_text() % (database, "otel_traces", "", "MergeTree()", ""))


def test_a_json_mode_table_is_refused_in_one_line_with_exit_2(tmp_path):
    subprocess.run([sys.executable, "-c", _CREATE, str(tmp_path / "chdb")], cwd=REPO, check=True, timeout=120)
    r = subprocess.run([sys.executable, "-m", "goodput", "analyze", "triage", "--db", f"chdb:{tmp_path / 'chdb'}",
                        "--deployment", "chat"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"goodput: error: --db: chdb:{tmp_path / 'chdb'} (otel.otel_traces): column ResourceAttributes is JSON, not "
        "the Map(LowCardinality(String), String) goodput reads (clickhouseexporter's json: true makes attributes "
        "JSON): set json: false (or leave it out) and write to a table made by its default DDL (docs/collector.md)"]


def test_only_the_json_table_is_refused(chdb):
    _json_table(chdb, "jsonmode")
    create_table(chdb, TableSpec(database="mapmode"))
    with pytest.raises(ConfigError, match=r"column ResourceAttributes is JSON.*set json: false"):
        open_backend(f"chdb:{chdb.target.path}?database=jsonmode")
    open_backend(f"chdb:{chdb.target.path}?database=mapmode")  # the default DDL's table opens
