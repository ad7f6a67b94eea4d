"""The ``otel_traces`` shape the ClickHouse backend reads, checked when ``--db`` is opened.

The request model (``sql/clickhouse/requests.sql``) reads the span and resource attributes as the Collector
clickhouseexporter's default table holds them, ``Map(LowCardinality(String), String)``. Its ``json: true`` mode makes
them ``JSON`` columns instead (its ``traces_json_table.sql``), which the model cannot read: ClickHouse refuses it
halfway through (``Code: 43 ... Dynamic cannot be inside Nullable``), after a warning about temporary tables that
points the wrong way. So such a table is refused before any statement, in one line that names the column, its type
and the fix.
"""

from __future__ import annotations

from goodput.foundation.clickhouse import Connection
from goodput.foundation.errors import ConfigError

__all__ = ["check_attribute_columns"]

# the attribute columns requests.sql reads as maps
_COLUMNS_SQL = ("SELECT name, type FROM system.columns WHERE database = {d:String} AND table = {t:String} "
                "AND name IN ('ResourceAttributes', 'SpanAttributes') ORDER BY name")


def check_attribute_columns(con: Connection, flag: str) -> None:
    """A ConfigError naming ``flag`` when the target table holds an attribute column that is not a ``Map``; a missing
    table passes (the caller says so)."""
    target = con.target
    found = con.query_df(_COLUMNS_SQL, {"d": target.database, "t": target.table})
    for name, type_ in zip(found["name"], found["type"], strict=True):
        if not str(type_).startswith("Map("):
            raise ConfigError(flag, str(target), (
                f"column {name} is {type_}, not the Map(LowCardinality(String), String) goodput reads (clickhouseexporter's "
                "json: true makes attributes JSON): set json: false (or leave it out) and write to a table made by its "
                "default DDL (docs/collector.md)"))
