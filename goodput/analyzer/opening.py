"""What ``--db`` names, opened for reading by the analyses, the review and the console.

Here, above ``backend`` and ``prepare``, because a prepared ClickHouse is brought up to date by prepare's ``sync``
before each read, and prepare itself builds on the backend's SQL.
"""

from __future__ import annotations

from pathlib import Path

from goodput.analyzer.backend import Backend, ClickHouseBackend, DuckDBBackend, open_clickhouse, read_prepared
from goodput.analyzer.prepare import Layout, sync
from goodput.analyzer.store import connect
from goodput.foundation.clickhouse import is_clickhouse

__all__ = ["open_backend"]


def open_backend(db: str | Path, flag: str = "--db") -> Backend:
    """What ``--db`` names, opened for reading: a ``clickhouse://`` URL or ``chdb:DIR`` (its table must exist; its
    prepared tables read, synced first, when there), or the analyzer's DuckDB file."""
    if not is_clickhouse(db):
        return DuckDBBackend(connect(db, read_only=True))
    con = open_clickhouse(db, flag)
    layout = Layout(con.target.database, con.target.table)
    return ClickHouseBackend(con, prepared=read_prepared(con, con.target, flag), sync=lambda: sync(con, layout))
