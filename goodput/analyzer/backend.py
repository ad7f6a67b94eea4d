"""Where the analyses' SQL runs, behind one seam: the analyzer's DuckDB file, or ClickHouse beside the OpenTelemetry
Collector's ``otel_traces`` table (a server through clickhouse-connect, or chDB in-process).

An analysis asks for a statement by name with its parameters (``rows`` / ``frame``); DuckDB runs
``goodput/analyzer/sql/<name>.sql`` on its ``requests`` table, ClickHouse
``goodput/analyzer/sql/clickhouse/<name>.sql``, whose head (``__requests__``) names the request model: in a database
that ``goodput analyze prepare`` made ready, the tables its materialized views keep (``goodput_requests`` and its
companions, read with FINAL and the window's time filter); elsewhere the model derived from the spans at read time
(``clickhouse/requests.sql``), once per window and backend, into the session's temporary tables. Either way the
filters and aggregation run in the engine, only results come back.
Another package's statement is named ``package:name`` (``goodput.review:week_buckets``:
``goodput/review/sql/[clickhouse/]week_buckets.sql``). ``fill`` replaces allow-listed SQL fragments (column names),
never values: values are parameters, ``$name`` in DuckDB, ``{name:Type}`` in ClickHouse.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import duckdb
import numpy as np
import pandas as pd

from goodput.analyzer.otel_schema import check_attribute_columns
from goodput.analyzer.store import sql
from goodput.foundation.clickhouse import DEFAULT_DATABASE, DEFAULT_TABLE, Connection, Target, parse_target
from goodput.foundation.clickhouse import connect as connect_clickhouse
from goodput.foundation.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["SCHEMA_VERSION", "SETTINGS", "SPAN_MARGIN", "Backend", "ClickHouseBackend", "DuckDBBackend", "Result",
           "backend", "clickhouse_sql", "db_text", "interval_us", "model_sql", "open_clickhouse", "prepared_version",
           "read_prepared", "server_errors", "statement"]

# spans read around a window: a request's spans start up to this long before its arrival time (the gateway's) or
# end after it; a request longer than this at the window's edge is read without its outer spans
SPAN_MARGIN = timedelta(hours=1)
# standard SQL's semantics, which the statements are written for: an unmatched outer join gives NULLs, and a name in
# an expression is the column even where the same SELECT has an alias of that name
SETTINGS = "\nSETTINGS join_use_nulls = 1, prefer_column_name_to_alias = 1, enable_materialized_cte = 1"
# the CTEs of clickhouse/requests.sql that statements read: each becomes a temporary table when first read
_MODEL = ("requests", "early_only", "admission_spans")
# spans one statement derives the model from: the model is per trace and its joins and materialized CTEs are held in
# memory, so a window with more spans is derived in passes over disjoint sets of its traces (by a hash of the trace
# id), each within a query's memory (~0.3 GiB per million spans on the regression fleet: docs/analyzer.md)
SPANS_PER_PASS = 10_000_000
# the layout of the tables `goodput analyze prepare` makes (goodput/analyzer/prepare.py); goodput_meta records it, and
# a backend reads the tables only when theirs is this one
SCHEMA_VERSION = 2
_warned: set[str] = set()  # the databases this process has already said are not prepared


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple]


class Backend(Protocol):
    dialect: str  # "duckdb" or "clickhouse"

    def rows(self, name: str, params: dict[str, Any], fill: dict[str, str] | None = None) -> Result: ...

    def frame(self, name: str, params: dict[str, Any], fill: dict[str, str] | None = None) -> pd.DataFrame: ...

    def close(self) -> None: ...


def _fill(text: str, fill: dict[str, str] | None) -> str:
    for key, value in (fill or {}).items():
        text = text.replace(key, value)
    return text


class DuckDBBackend:
    """The analyzer's DuckDB store, as it always was: ``goodput/analyzer/sql/<name>.sql`` on its tables."""

    dialect = "duckdb"

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def _run(self, name: str, params: dict[str, Any], fill: dict[str, str] | None):
        text = _fill(statement(name, self.dialect), fill)
        used = {k: v for k, v in params.items() if re.search(rf"\${k}\b", text)}  # DuckDB refuses unused names
        return self.con.execute(text, used)

    def rows(self, name: str, params: dict[str, Any], fill: dict[str, str] | None = None) -> Result:
        rel = self._run(name, params, fill)
        return Result([d[0] for d in rel.description], rel.fetchall())

    def frame(self, name: str, params: dict[str, Any], fill: dict[str, str] | None = None) -> pd.DataFrame:
        return self._run(name, params, fill).fetchdf()

    def close(self) -> None:
        self.con.close()


@cache
def clickhouse_sql(name: str) -> str:
    """The text of ``goodput/analyzer/sql/clickhouse/<name>.sql``."""
    return resources.files("goodput.analyzer").joinpath("sql", "clickhouse", f"{name}.sql").read_text()


@cache
def model_sql(spans: str) -> str:
    """The request model's CTEs (``clickhouse/model.sql``) over ``spans``, a query giving ``clickhouse/spans.sql``'s
    rows: the one text read time, the backfill and the materialized views share."""
    return f"spans AS (\n{spans.strip()}\n), {clickhouse_sql('model').strip()}"


@cache
def _read_time_model() -> str:
    """The model over the window's spans of otel_traces (``clickhouse/requests.sql``)."""
    return model_sql(clickhouse_sql("requests").replace("__span_columns__", clickhouse_sql("spans").strip()))


@cache
def statement(name: str, dialect: str) -> str:
    """The text of statement ``name`` (``name`` or ``package:name``) in ``dialect``: ``<package>/sql/<name>.sql`` for
    DuckDB, ``<package>/sql/clickhouse/<name>.sql`` for ClickHouse (the package defaults to the analyzer's)."""
    package, _, stem = name.rpartition(":")
    if not package:
        return sql(stem) if dialect == "duckdb" else clickhouse_sql(stem)
    parts = ("sql", f"{stem}.sql") if dialect == "duckdb" else ("sql", "clickhouse", f"{stem}.sql")
    return resources.files(package).joinpath(*parts).read_text()


def _ch_value(v: Any) -> Any:
    if isinstance(v, pd.Timestamp):
        v = v.to_pydatetime()
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, timedelta):
        return v.total_seconds()
    if isinstance(v, list | tuple):
        return [_ch_value(x) for x in v]
    return v


def _py(v: Any) -> Any:
    if isinstance(v, pd.Timestamp):
        return v.tz_localize(UTC).to_pydatetime() if v.tzinfo is None else v.tz_convert(UTC).to_pydatetime()
    if isinstance(v, np.ndarray):
        return [_py(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return v


@cache
def server_errors() -> tuple[type[Exception], ...]:
    """What a statement sent to ClickHouse raises when the server refuses it or cannot be reached: clickhouse-connect's
    errors and its transport's OSError, chDB's ChdbError (a RuntimeError). Imported when first needed, so the DuckDB
    path never loads the driver; anything else is a bug of ours and keeps its traceback."""
    from clickhouse_connect.driver.exceptions import ClickHouseError

    return ClickHouseError, RuntimeError, OSError


class ClickHouseBackend:
    """The Collector's ``otel_traces`` read in place. The request model of a window (the spans ``SPAN_MARGIN``
    around ``since`` / ``until``) is derived once, on its first use, into a temporary table of the connection's
    session (kept in the engine, on its disk: nothing is copied out); every later statement of that window reads
    it, so one command scans and joins the spans once, and its statements see one snapshot of them. ``close``
    drops the tables (chDB's session outlives the backend)."""

    dialect = "clickhouse"

    def __init__(self, con: Connection, prepared: bool = False, sync: Callable[[], object] | None = None) -> None:
        self.con = con
        self.prepared = prepared  # the model's tables kept by `goodput analyze prepare`: read them, derive nothing
        # brings the prepared tables up to date with the inserts since the last sync (goodput.analyzer.prepare.sync),
        # run before each statement; None once the server refused it (a read-only user)
        self._sync = sync if prepared else None
        self._tables: dict[tuple[str, Any, Any], str] = {}  # (model CTE, span_from, span_to) -> its table
        self._passes: dict[tuple[Any, Any], int] = {}  # (span_from, span_to) -> passes its model is derived in
        self._inline = False  # the server refused a temporary table: each statement derives the model itself

    def _refused(self, name: str, e: Exception) -> ConfigError:  # the server's answer (a version, a permission)
        return ConfigError("--db", str(self.con.target),
                           f"ClickHouse refused {name}.sql: {str(e).strip().splitlines()[0][:300]}")

    def _model(self, text: str, window: dict[str, Any]) -> str:
        """The head that replaces ``__requests__`` in ``text``: each model CTE it reads, from its table; or, where
        the server refuses temporary tables (a user without CREATE TEMPORARY TABLE), the model's CTEs themselves; in a
        prepared database, its tables (``clickhouse/prepared.sql``)."""
        if self.prepared:
            return clickhouse_sql("prepared").strip()
        if self._inline:
            return _read_time_model()
        head, code = [], re.sub(r"--[^\n]*", "", text)
        for cte in _MODEL:
            if not re.search(rf"\b{cte}\b", code):
                continue
            key = (cte, window["span_from"], window["span_to"])
            if key not in self._tables:
                table = f"goodput_{cte}_{uuid.uuid4().hex[:16]}"
                derive = f"WITH {_read_time_model()} SELECT * FROM {cte}{SETTINGS}"
                passes = self._window_passes(window)
                try:
                    self.con.command(f"CREATE TEMPORARY TABLE {table} ENGINE = MergeTree ORDER BY tuple() AS {derive}",
                                     {**window, "passes": passes, "pass": 0})
                except server_errors() as e:  # the statement itself will say what the server refuses
                    log.warning("%s: no temporary table (%s); each statement derives the request model itself, "
                                "slower (docs/clickhouse.md)", self.con.target, str(e).strip().splitlines()[0][:200])
                    self._inline = True
                    return self._model(text, window)
                self._tables[key] = table
                for n in range(1, passes):
                    try:
                        self.con.command(f"INSERT INTO {table} {derive}", {**window, "passes": passes, "pass": n})
                    except server_errors() as e:
                        raise self._refused("requests", e) from None
            # a deployment's admission spans may be in several passes' traces
            head.append(f"{cte} AS (SELECT {'DISTINCT ' if cte == 'admission_spans' else ''}* FROM {self._tables[key]})")
        return ", ".join(head)

    def _window_passes(self, window: dict[str, Any]) -> int:
        """How many passes the window's model is derived in: one per ``SPANS_PER_PASS`` spans it reads."""
        key = (window["span_from"], window["span_to"])
        if key not in self._passes:
            try:
                spans = int(self.con.query_df(clickhouse_sql("window_spans"), window)["spans"].iloc[0])
            except server_errors() as e:
                raise self._refused("window_spans", e) from None
            self._passes[key] = max(1, math.ceil(spans / SPANS_PER_PASS))
        return self._passes[key]

    def _synced(self) -> None:
        if self._sync is None:
            return
        try:
            self._sync()
        except server_errors() as e:
            log.warning("goodput: %s: the prepared tables cannot be brought up to date (%s); answers leave out the "
                        "spans inserted since their last sync; run: goodput analyze prepare --db %s",
                        self.con.target, str(e).strip().splitlines()[0][:200], db_text(self.con.target))
            self._sync = None

    def frame(self, name: str, params: dict[str, Any], fill: dict[str, str] | None = None) -> pd.DataFrame:
        self._synced()
        text = _fill(statement(name, self.dialect), fill)
        since, until = params.get("since"), params.get("until")
        window = dict(database=self.con.target.database, table=self.con.target.table,
                      span_from=_ch_value(since - SPAN_MARGIN) if since is not None else None,
                      span_to=_ch_value(until + SPAN_MARGIN) if until is not None else None)
        text = text.replace("__requests__", self._model(text, window))
        bound = {k: _ch_value(v) for k, v in params.items()}
        if self._inline or self.prepared:  # the model's own parameters, in one pass
            bound = {**window, "passes": 1, "pass": 0, **bound}
        try:
            df = self.con.query_df(text + SETTINGS, bound)
        except server_errors() as e:
            raise self._refused(name, e) from None
        for col in df.columns:  # times come back in UTC
            if pd.api.types.is_datetime64_any_dtype(df[col]) and getattr(df[col].dt, "tz", None) is None:
                df[col] = df[col].dt.tz_localize(UTC)
        return df

    def rows(self, name: str, params: dict[str, Any], fill: dict[str, str] | None = None) -> Result:
        df = self.frame(name, params, fill)
        return Result(list(df.columns), [tuple(_py(v) for v in row) for row in df.itertuples(index=False, name=None)])

    def close(self) -> None:
        try:
            for table in self._tables.values():
                self.con.command(f"DROP TEMPORARY TABLE IF EXISTS {table}")
        except Exception:  # noqa: BLE001 - a server gone mid-command: its session's end drops them (chDB's, the process's)
            pass
        finally:
            self._tables.clear()
            self.con.close()


def interval_us(text: str) -> int:
    """An interval as DuckDB reads it (``5 minutes``, ``300 seconds``, ``100 years``), in microseconds."""
    with duckdb.connect() as con:
        value = con.execute("SELECT CAST(? AS INTERVAL)", [text]).fetchall()[0][0]
    return int(pd.to_timedelta(value) / pd.Timedelta(1, "us"))


def backend(con: Backend | duckdb.DuckDBPyConnection) -> Backend:
    """``con`` as a Backend: a DuckDB connection (what callers have always passed) is wrapped."""
    return DuckDBBackend(con) if isinstance(con, duckdb.DuckDBPyConnection) else con


def db_text(target: Target) -> str:
    """``target`` as a ``--db`` value to type (a server's password left out)."""
    if target.kind == "chdb":
        opts = [f"{k}={v}" for k, v, default in (("database", target.database, DEFAULT_DATABASE),
                                                 ("table", target.table, DEFAULT_TABLE)) if v != default]
        return f"chdb:{target.path}" + (f"?{'&'.join(opts)}" if opts else "")
    user = "" if target.user == "default" else f"{target.user}@"
    table = "" if target.table == DEFAULT_TABLE else f"?table={target.table}"
    return f"{'clickhouses' if target.secure else 'clickhouse'}://{user}{target.host}:{target.port}/{target.database}{table}"


def prepared_version(con: Connection, target: Target) -> int | None:
    """The schema version ``goodput analyze prepare`` recorded for ``target``'s table, None if never prepared."""
    found = con.query_df("SELECT count() AS n FROM system.tables WHERE database = {d:String} AND name = 'goodput_meta'",
                         {"d": target.database})
    if not int(found["n"].iloc[0]):
        return None
    meta = con.query_df("SELECT max(schema_version) AS v, count() AS n FROM {d:Identifier}.goodput_meta "
                        "WHERE source = {t:String}", {"d": target.database, "t": target.table})
    return int(meta["v"].iloc[0]) if int(meta["n"].iloc[0]) else None


def read_prepared(con: Connection, target: Target, flag: str) -> bool:
    """Whether the model's tables are there to read; if not, one warning line (once a process) naming the command
    that makes them."""
    try:
        version = prepared_version(con, target)
    except server_errors() as e:
        raise ConfigError(flag, str(target), f"cannot read goodput_meta: {str(e).strip().splitlines()[0][:200]}"
                          ) from None
    if version == SCHEMA_VERSION:
        return True
    if str(target) not in _warned:
        _warned.add(str(target))
        why = "not prepared" if version is None else f"prepared by another goodput (schema {version})"
        log.warning("goodput: %s: %s; requests are derived from the spans at read time, slower; run: "
                    "goodput analyze prepare --db %s", target, why, db_text(target))
    return False


def open_clickhouse(db: str | Path, flag: str = "--db") -> Connection:
    """The ClickHouse ``db`` names, its spans' table checked to exist (one line naming ``flag`` if not)."""
    target = parse_target(str(db), flag)
    con = connect_clickhouse(target, flag)
    try:
        found = con.query_df("SELECT count() AS n FROM system.tables WHERE database = {d:String} AND name = {t:String}",
                             {"d": target.database, "t": target.table})
        check_attribute_columns(con, flag)  # clickhouseexporter's json: true table, refused in one line
    except server_errors() as e:  # the server answered, but not to this (permissions, a proxy in the way)
        raise ConfigError(flag, str(target), f"cannot read system.tables: {str(e).strip().splitlines()[0][:200]}"
                          ) from None
    if not int(found["n"].iloc[0]):
        raise ConfigError(flag, str(target), f"no table {target.database}.{target.table} (the Collector's "
                                             "clickhouseexporter creates it; docs/clickhouse.md)")
    return con
