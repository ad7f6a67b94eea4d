"""The analyzer's DuckDB SQL files, by name: a module of its own so that both the store (which opens a trace store
by ingesting it) and the ingest (which runs the files) can read them without importing each other."""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["sql"]


@cache
def sql(name: str) -> str:
    """The text of ``goodput/analyzer/sql/<name>.sql``."""
    return resources.files("goodput.analyzer").joinpath("sql", f"{name}.sql").read_text()
