"""The analyzer's DuckDB database, read as a snapshot that never blocks the writer.

Whoever writes the database (``goodput demo``'s ingest loop) builds each new version beside it and renames it
into place, so a reader that opened the file keeps a consistent snapshot of the version it opened. A
read-only connection here lives for one batch of queries and is closed: an in-place writer (``goodput
analyze ingest --db`` run by hand) that holds the file's lock makes the console say "busy", never wait.
SQL lives in ``console/sql/*.sql``; values reach it only as parameters.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path

import duckdb
import pandas as pd

from analyzer.store import StoreLocked, connect

__all__ = ["StoreBusy", "StoreMissing", "query", "snapshot", "sql"]

LOCK_RETRIES = 5
LOCK_WAIT_S = 0.1


class StoreMissing(Exception):
    """No database at the path."""


class StoreBusy(Exception):
    """Another process holds the database's write lock."""


@cache
def sql(name: str) -> str:
    """``console/sql/<name>.sql``, with ``{filtered}`` replaced by the shared filter (``filtered.sql``)."""
    text = resources.files("console").joinpath("sql", f"{name}.sql").read_text()
    if "{filtered}" in text:
        text = text.replace("{filtered}", sql("filtered").strip().rstrip(";"))
    return text


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


def query(con: duckdb.DuckDBPyConnection, name: str, params: dict) -> pd.DataFrame:
    """Run ``console/sql/<name>.sql`` with the parameters it names (DuckDB refuses unused ones)."""
    text = sql(name)
    used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", re.sub(r"--[^\n]*", "", text)))
    missing = used - set(params)
    if missing:
        raise KeyError(f"{name}.sql needs parameters {sorted(missing)}")
    return con.execute(text, {k: v for k, v in params.items() if k in used}).fetchdf()
