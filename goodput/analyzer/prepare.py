"""``goodput analyze prepare``: the request model kept inside the user's ClickHouse as spans are written.

Beside the Collector's ``otel_traces`` it makes ``goodput_spans`` (the narrow rows the model reads, by trace),
``goodput_requests``, ``goodput_early`` and ``goodput_admission`` (the model's tables, ReplacingMergeTrees keeping each
row's newest version), ``goodput_touched`` (which traces each insert touched, and when) and two materialized views
that fill ``goodput_spans`` and ``goodput_touched`` from each insert's block alone (an insert reads no stored table).
It backfills the model from the spans already stored, in chunks of hours within ``BACKFILL_SPANS_PER_PASS`` spans a
statement, and records the schema version in ``goodput_meta`` last, so a reader takes the tables for ready only once
they hold everything. ``sync`` brings the model tables up to date with the inserts since the last sync (the model of
the traces they touched, from their stored spans); a reader runs it before each statement, ``prepare`` run again too
(docs/clickhouse.md).
The model is ``clickhouse/model.sql``, the text read time uses too (``goodput.analyzer.backend.model_sql``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources

from goodput.analyzer.backend import (
    SCHEMA_VERSION,
    SETTINGS,
    SPAN_MARGIN,
    SPANS_PER_PASS,
    clickhouse_sql,
    model_sql,
    prepared_version,
    server_errors,
)
from goodput.foundation.clickhouse import Connection, Target, ident
from goodput.foundation.errors import ConfigError

__all__ = ["BACKFILL_SPANS_PER_PASS", "Layout", "MAX_TTL_DAYS", "Plan", "backfill", "ddl", "prepare", "sync"]

_TABLES = ("spans", "requests", "early", "admission", "touched")
# spans one backfill statement reads: fewer than read time's SPANS_PER_PASS, as each chunk also reads an hour either
# side and dedups its spans (LIMIT 1 BY); 10M in one pass would use 3.78 GiB, over a 4 GB cap's 3.73 (benchmark, 10M)
BACKFILL_SPANS_PER_PASS = SPANS_PER_PASS * 3 // 10
_MARGIN_NS = int(SPAN_MARGIN.total_seconds()) * 1_000_000_000
# a sync also recomputes the inserts of this many µs before the last one it saw: an insert stamped before it (its view
# ran) whose parts were committed after it (a server with concurrent inserts) is not missed
SYNC_OVERLAP_US = 5_000_000
# each table's day, as it is partitioned: `--ttl DAYS` drops a table's rows (whole parts) that many days after it, so
# goodput's copy keeps what the Collector's otel_traces `ttl` keeps, not everything for ever
_DAY = {"spans": "toDate(fromUnixTimestamp64Nano(start_ns))", "requests": "toDate(fromUnixTimestamp64Nano(call_start_ns))",
        "early": "toDate(fromUnixTimestamp64Nano(gateway_start))", "admission": "day", "touched": "toDate(at)"}
MAX_TTL_DAYS = 36_500
_NEVER = "toDate('2149-06-06')"  # a row with no time of its own (a nullable start) is kept: Date's last day
# Distributed tables' sharding keys on a cluster: a trace's rows on one shard, as its spans are (docs/clickhouse.md)
_SHARD_BY = {"spans": "cityHash64(trace_id)", "requests": "cityHash64(trace_id)", "early": "cityHash64(trace_id)",
             "admission": "cityHash64(deployment)", "touched": "cityHash64(trace_id)"}


@cache
def _sql(name: str) -> str:
    return resources.files("goodput.analyzer").joinpath("sql", "clickhouse", "prepare", f"{name}.sql").read_text()


def _statements(template: str) -> list[str]:
    """A prepare/*.sql template's statements (its comments are the file's, not the DDL's), before filling."""
    code = "\n".join(line for line in template.splitlines() if not line.startswith("--"))
    return [s.strip() for s in code.split(";\n") if s.strip()]


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the tables go: ``database`` beside the spans' ``table``; on a ``cluster`` each is a Replicated* table
    ``goodput_<name>_local`` made ON CLUSTER, read through a Distributed ``goodput_<name>`` sharded by trace."""

    database: str
    table: str
    cluster: str = ""
    ttl_days: int | None = None  # None: the tables keep their rows (or the TTL an earlier prepare set)

    def written(self, name: str) -> str:  # the table the views and the backfill write
        return f"goodput_{name}_local" if self.cluster else f"goodput_{name}"

    def fill(self, text: str) -> str:
        subs = {"__db__": ident(self.database), "__table__": ident(self.table), "__meta__": ident("goodput_meta"),
                "__synced__": ident("goodput_synced"),
                "__on_cluster__": f"ON CLUSTER {ident(self.cluster)}" if self.cluster else "",
                "__replicated__": "Replicated" if self.cluster else "", "__margin_ns__": str(_MARGIN_NS)}
        for name in _TABLES:  # the views' names first: __spans___mv holds __spans__
            subs[f"__{name}___mv"] = ident(f"goodput_{name}_mv")
            subs[f"__{name}__"] = ident(self.written(name))
        for key, value in subs.items():
            text = text.replace(key, value)
        return text

    def span_select(self) -> str:
        return f"{clickhouse_sql('spans').strip()}\nFROM {ident(self.database)}.{ident(self.table)}"

    def rows_select(self, name: str, spans: str) -> str:
        """The rows of table ``name`` from the model over ``spans``, with their version."""
        model = model_sql(spans)
        if name == "admission":
            return f"WITH {model}\nSELECT * FROM admission_spans{SETTINGS}"
        rows = _sql("model_rows").replace("__model__", model).replace("__rows__", name)
        return f"WITH {rows}{SETTINGS}"

    def sync_select(self, name: str) -> str:
        """The rows of table ``name`` for the traces inserted in a sync's range (prepare/touched.sql's parameters)."""
        return self.rows_select(name, self.fill(_sql("touched")))


def ddl(layout: Layout) -> list[str]:
    """Every statement that makes the tables and views (IF NOT EXISTS: running them again changes nothing)."""
    stored = f"SELECT * FROM {ident(layout.database)}.{ident(layout.written('spans'))}"

    def fill(text: str) -> str:
        text = layout.fill(text).replace("__span_select__", layout.span_select())
        text = text.replace("__touched_select__", layout.fill(_sql("touched_block")))
        for name in ("requests", "early", "admission"):  # the columns: the model over any spans (EMPTY AS reads none)
            text = text.replace(f"__{name}_select__", layout.rows_select(name, stored))
        return text

    out = [f"CREATE DATABASE IF NOT EXISTS {ident(layout.database)}"
           + (f" ON CLUSTER {ident(layout.cluster)}" if layout.cluster else "")]
    out += [fill(s) for s in _statements(_sql("meta")) + _statements(_sql("tables"))]
    if layout.cluster:
        out += [f"CREATE TABLE IF NOT EXISTS {ident(layout.database)}.{ident('goodput_' + name)} "
                f"ON CLUSTER {ident(layout.cluster)} AS {ident(layout.database)}.{ident(layout.written(name))} "
                f"ENGINE = Distributed({ident(layout.cluster)}, {ident(layout.database)}, "
                f"{ident(layout.written(name))}, {_SHARD_BY[name]})" for name in _TABLES]
    out += [fill(s) for s in _statements(_sql("views"))]
    if layout.ttl_days is not None:  # MODIFY TTL: run again with another --ttl, it replaces the one before
        on = f" ON CLUSTER {ident(layout.cluster)}" if layout.cluster else ""
        out += [f"ALTER TABLE {ident(layout.database)}.{ident(layout.written(name))}{on} MODIFY TTL "
                f"ifNull({_DAY[name]}, {_NEVER}) + INTERVAL {int(layout.ttl_days)} DAY" for name in _TABLES]
        out += [f"ALTER TABLE {ident(layout.database)}.{ident(layout.written(name))}{on} MODIFY SETTING "
                "ttl_only_drop_parts = 1" for name in _TABLES]  # a day's partition goes whole: no row rewrites
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    """One chunk of the backfill: the spans that start in [start_ns, end_ns), in ``passes`` sets of traces."""

    start_ns: int
    end_ns: int
    spans: int
    passes: int


def _chunks(hours: list[tuple[int, int]]) -> Iterator[Plan]:
    """Consecutive hours grouped while their spans fit one pass; an hour over it alone, in passes (of
    ``BACKFILL_SPANS_PER_PASS`` spans, counting the hour either side each chunk reads)."""
    start: int | None = None
    spans = end = 0
    for hour_ns, n in hours:
        if start is not None and (spans + n > BACKFILL_SPANS_PER_PASS or hour_ns != end):
            yield _plan(start, end, spans, hours)
            start, spans = None, 0
        if start is None:
            start = hour_ns
        spans, end = spans + n, hour_ns + 3_600_000_000_000
    if start is not None:
        yield _plan(start, end, spans, hours)


def _plan(start: int, end: int, spans: int, hours: list[tuple[int, int]]) -> Plan:
    read = sum(n for h, n in hours if start - 3_600_000_000_000 <= h < end + 3_600_000_000_000)
    return Plan(start, end, spans, max(1, math.ceil(read / BACKFILL_SPANS_PER_PASS)))


def backfill(con: Connection, layout: Layout, progress: Callable[[int, int], None] | None = None) -> int:
    """Fill the tables from the spans already in the source table, chunk by chunk; returns the spans read. Every
    chunk's spans are copied into goodput_spans before any chunk's model is derived: a chunk's model reads the hour
    after it, where a request that starts at its end has its later segments (modelled as each chunk was copied, such a
    request kept the segments of the chunk's own hours only: 10M spans, benchmarks/analyzer_scale.py, decode means
    off by 5e-5 s). The views run meanwhile: a span both stored is one row of goodput_spans once merged, and the model
    reads it once."""
    frame = con.query_df(layout.fill(_sql("hours")))
    plans = list(_chunks([(int(h), int(n)) for h, n in zip(frame["hour_ns"], frame["spans"], strict=True)]))
    db = ident(layout.database)
    chunk = layout.fill(_sql("chunk"))
    steps = 2 * len(plans)
    for i, plan in enumerate(plans):
        con.command(f"INSERT INTO {db}.{ident(layout.written('spans'))} {layout.span_select()}\n"
                    "WHERE Timestamp >= fromUnixTimestamp64Nano({chunk_from:Int64}) "
                    "AND Timestamp < fromUnixTimestamp64Nano({chunk_to:Int64})",
                    {"chunk_from": plan.start_ns, "chunk_to": plan.end_ns})
        if progress:
            progress(i + 1, steps)
    for i, plan in enumerate(plans):
        bounds = {"chunk_from": plan.start_ns, "chunk_to": plan.end_ns}
        for name, key in (("requests", "call_start_ns"), ("early", "gateway_start"), ("admission", None)):
            keep = f" WHERE {key} >= {{chunk_from:Int64}} AND {key} < {{chunk_to:Int64}}" if key else ""
            for n in range(plan.passes):
                con.command(f"INSERT INTO {db}.{ident(layout.written(name))} SELECT * FROM "
                            f"({layout.rows_select(name, chunk)}){keep}{SETTINGS}",
                            {**bounds, "passes": plan.passes, "pass": n})
        if progress:
            progress(len(plans) + i + 1, steps)
    return sum(p.spans for p in plans)


def _bar(done: int, total: int) -> None:
    width = 30
    fill = width * done // max(total, 1)
    print(f"\rbackfill [{'#' * fill}{'.' * (width - fill)}] {done}/{total} steps", end="\n" if done == total else "",
          file=sys.stderr, flush=True)


def sync(con: Connection, layout: Layout) -> int:
    """Bring the model tables up to date with the inserts since the last sync: the model of every trace they touched,
    from its stored spans (``prepare/touched.sql``), written as the rows' newest version; then the new mark. Returns
    the spans those inserts wrote (0: nothing new, after one small read of ``goodput_touched``)."""
    source = {"source": layout.table}
    synced = int(con.query_df(layout.fill(_sql("synced")), source)["synced"].iloc[0])
    todo = con.query_df(layout.fill(_sql("pending")), {"synced_from": synced - SYNC_OVERLAP_US, "synced": synced})
    if todo.empty:
        return 0
    row = todo.iloc[0]
    spans, to = int(row["spans"]), int(row["synced_to"])
    bounds = {"synced_from": synced - SYNC_OVERLAP_US, "synced_to": to, "first_ns": int(row["first_ns"]),
              "last_ns": int(row["last_ns"]), "passes": max(1, math.ceil(spans / BACKFILL_SPANS_PER_PASS))}
    db = ident(layout.database)
    for name in ("requests", "early", "admission"):
        for n in range(bounds["passes"]):
            con.command(f"INSERT INTO {db}.{ident(layout.written(name))} {layout.sync_select(name)}",
                        {**bounds, "pass": n})
    con.command(f"INSERT INTO {db}.{ident('goodput_synced')} VALUES "
                "({source:String}, fromUnixTimestamp64Micro({to:Int64}, 'UTC'))", {**source, "to": to})
    return spans


def prepare(con: Connection, target: Target, cluster: str = "", fill: bool = True, ttl_days: int | None = None) -> str:
    """Make ``target``'s database ready (tables, views, backfill, version); returns what was done, in one line.
    Run again it changes nothing but the sync (and the TTL, when ``ttl_days`` names one): the DDL is IF NOT EXISTS,
    and a database already at SCHEMA_VERSION is not filled again, only brought up to date with the inserts since its
    last sync."""
    layout = Layout(target.database, target.table, cluster, ttl_days)
    version = prepared_version(con, target)
    if version is not None and version != SCHEMA_VERSION:
        raise ConfigError("--db", str(target), f"prepared by another goodput (schema {version}, this one "
                                               f"{SCHEMA_VERSION}): drop its goodput_* tables and views, then prepare")
    step = "the DDL"
    try:
        for statement in ddl(layout):
            con.command(statement)
        if version == SCHEMA_VERSION:
            step = "the sync"
            return (f"{target}: already prepared (schema {SCHEMA_VERSION}); synced {sync(con, layout):,} new spans"
                    + _kept(ttl_days))
        step, spans = "the backfill", 0
        if fill:
            spans = backfill(con, layout, _bar if sys.stderr.isatty() else None)
        step = "the sync"
        sync(con, layout)  # the inserts made while it was backfilled
        step = "goodput_meta"
        con.command(f"INSERT INTO {ident(layout.database)}.{ident('goodput_meta')} VALUES "
                    "({source:String}, {version:UInt32}, now64(3))", {"source": target.table, "version": SCHEMA_VERSION})
    except server_errors() as e:
        raise ConfigError("--db", str(target), f"ClickHouse refused {step}: "
                                               f"{(str(e).strip().splitlines() or ['?'])[0][:300]}") from None
    filled = f"backfilled from {spans:,} spans" if fill else "not backfilled (--no-backfill)"
    return f"{target}: prepared (schema {SCHEMA_VERSION}), {filled}{_kept(ttl_days)}"


def _kept(ttl_days: int | None) -> str:
    return "" if ttl_days is None else f"; goodput's tables keep {ttl_days} days"
