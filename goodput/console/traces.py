"""The trace store the console reads: the analyzer's DuckDB database, read as a snapshot that never blocks the
writer, or the Collector's ``otel_traces`` read in place in ClickHouse (``clickhouse://``, ``chdb:DIR``) through
``goodput/analyzer/backend.py``.

Whoever writes the database (``goodput demo``'s ingest loop) builds each new version beside it and renames it
into place, so a reader that opened the file keeps a consistent snapshot of the version it opened. A
read-only connection here lives for one batch of queries and is closed: an in-place writer (``goodput
analyze ingest --db`` run by hand) that holds the file's lock makes the console say "busy", never wait.
SQL lives in ``goodput/console/sql/*.sql`` (ClickHouse's in ``goodput/console/sql/clickhouse/``, each headed by the
request model); values reach it only as parameters.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pandas as pd

from goodput.analyzer.backend import Backend, DuckDBBackend, interval_us, statement
from goodput.analyzer.opening import open_backend
from goodput.analyzer.store import StoreLocked, connect
from goodput.foundation.clickhouse import is_clickhouse

__all__ = ["StoreBusy", "StoreMissing", "open_store", "query", "snapshot"]

LOCK_RETRIES = 5
LOCK_WAIT_S = 0.1


class StoreMissing(Exception):
    """No database at the path."""


class StoreBusy(Exception):
    """Another process holds the database's write lock."""


@contextmanager
def snapshot(db: Path, memory_limit: str = "1GB") -> Iterator[duckdb.DuckDBPyConnection]:
    if not db.exists():
        raise StoreMissing(str(db))
    for attempt in range(LOCK_RETRIES):
        try:
            con = connect(db, read_only=True, memory_limit=memory_limit)
            break
        except StoreLocked as e:  # a file that is not a database is a ConfigError, for the page to say so
            if attempt == LOCK_RETRIES - 1:
                raise StoreBusy(str(e)) from None
            time.sleep(LOCK_WAIT_S)
    try:
        yield con
    finally:
        con.close()


@contextmanager
def open_store(db: str | Path) -> Iterator[Backend]:
    """What ``db`` names, as the seam the analyses read: a ClickHouse target, or a snapshot of the DuckDB file."""
    if is_clickhouse(db):
        store = open_backend(str(db))
        try:
            yield store
        finally:
            store.close()
        return
    with snapshot(Path(db)) as con:
        yield DuckDBBackend(con)


_PARAM = {"duckdb": r"\$([a-z_][a-z0-9_]*)", "clickhouse": r"\{([a-z_][a-z0-9_]*):"}


def query(store: Backend, name: str, params: dict) -> pd.DataFrame:
    """Run ``goodput/console/sql/[clickhouse/]<name>.sql``, ``{filtered}`` replaced by the shared filter (``filtered.sql``),
    with the parameters it names."""
    if store.dialect == "clickhouse" and "bucket" in params:  # ClickHouse buckets by microseconds, not an interval
        params = {**params, "bucket_us": interval_us(params["bucket"])}
    filtered = statement("goodput.console:filtered", store.dialect).strip().rstrip(";")
    text = statement(f"goodput.console:{name}", store.dialect).replace("{filtered}", filtered)
    used = set(re.findall(_PARAM[store.dialect], re.sub(r"--[^\n]*", "", text)))
    missing = used - set(params)
    if missing:
        raise KeyError(f"{name}.sql needs parameters {sorted(missing)}")
    return store.frame(f"goodput.console:{name}", params, fill={"{filtered}": filtered})
