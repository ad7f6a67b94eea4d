"""Opening the analyzer database: a corrupt file and a file another process holds are different problems.

Before: both were one ConfigError, and the console called either "locked by a writer; retry in a moment"."""

from __future__ import annotations

import subprocess
import sys

import pytest

from goodput.analyzer.store import StoreLocked, connect
from goodput.console.traces import StoreBusy, snapshot
from goodput.foundation.errors import ConfigError
from tests.conftest import REPO


def test_a_file_that_is_not_a_database_is_said_to_be_so_and_is_not_busy(tmp_path):
    db = tmp_path / "junk.duckdb"
    db.write_bytes(b"not a database, only text\n" * 400)
    with pytest.raises(ConfigError) as e:
        connect(db, read_only=True)
    assert not isinstance(e.value, StoreLocked)
    assert str(e.value) == f"{db}: --db: not a DuckDB database (corrupt, or another kind of file)"
    with pytest.raises(ConfigError) as e2, snapshot(db):
        pass
    assert not isinstance(e2.value, StoreBusy)


def test_a_database_another_process_writes_is_locked(tmp_path):
    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
                               "sys.stdin.read()", str(db)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreLocked) as e:
            connect(db, read_only=True)
        assert "locked by another process" in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(StoreBusy), snapshot(db):
            pass
    finally:
        holder.communicate("", timeout=30)
