"""The analyzer's DuckDB database: opening it, its schema, and the SQL files that act on it."""

from __future__ import annotations

from pathlib import Path

import duckdb

from goodput.analyzer.sqlfiles import sql
from goodput.foundation.errors import ConfigError

__all__ = ["StoreLocked", "connect", "in_place", "sql"]


class StoreLocked(ConfigError):
    """Another process holds the database's lock: worth a retry, unlike a file that is not a database."""


def connect(path: str | Path, read_only: bool = False, threads: int | None = None,
            memory_limit: str = "2GB") -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) an analyzer database with its schema; a directory is the request exporter's
    trace store, read in place (``in_place``)."""
    p = Path(path)
    if p.is_dir():
        if not read_only:
            raise ConfigError(str(p), "--db", "a trace store directory is read in place, never written: ingest into "
                                              "a DuckDB file (--db F.duckdb)")
        return in_place(p, threads, memory_limit)
    if read_only and not p.exists():
        raise ConfigError(str(p), "--db", "no such database; run `goodput analyze ingest ... --db` first")
    try:
        con = duckdb.connect(str(p), read_only=read_only)
    except duckdb.Error as e:
        first = str(e).splitlines()[0]
        if "lock" in first.lower():  # DuckDB: "Could not set lock on file ...: Conflicting lock is held in ..."
            raise StoreLocked(str(p), "--db", f"locked by another process (a writer): {first}") from None
        if "not a valid DuckDB database" in first:
            raise ConfigError(str(p), "--db", "not a DuckDB database (corrupt, or another kind of file)") from None
        raise ConfigError(str(p), "--db", f"cannot open: {first}") from None
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET enable_progress_bar = false")
    # order only where a statement asks for it (inserts order by arrival); halves peak memory on big ingests
    con.execute("SET preserve_insertion_order = false")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if not read_only:
        con.execute(sql("schema"))
        con.execute(sql("schema_in_flight"))
    elif not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'in_flight'").fetchall()[0][0]:
        # a database made before in-flight requests were kept: read it as one with none (temp tables, nothing written)
        con.execute(sql("schema_in_flight").replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMP TABLE"))
    return con


def in_place(store: Path, threads: int | None = None, memory_limit: str = "2GB") -> duckdb.DuckDBPyConnection:
    """The request model of a trace store's span Parquet (``DIR/date=…/hour=…/*.parquet``), built in memory by one
    DuckDB scan of its files and the ingest's set-based SQL: no copy of the spans, the same tables as an ingest of
    the store. Built whole at each open, a request whose spans were written by different flushes comes out whole,
    and one whose root is not stored yet is in flight (its early spans) or quarantined as partial, as ingest has it."""
    from goodput.analyzer.ingest import ingest  # here, not at the top: most commands never open a store in place

    con = connect(":memory:", threads=threads, memory_limit=memory_limit)
    ingest(con, [store])
    return con
