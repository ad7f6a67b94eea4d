"""The analyzer: a DuckDB database of requests, their latency decomposition, regressions and triage."""

from analyzer.decompose import decompose
from analyzer.ingest import ingest
from analyzer.regressions import find_regressions
from analyzer.releases import load_releases
from analyzer.store import connect
from analyzer.triage import triage

__all__ = ["connect", "decompose", "find_regressions", "ingest", "load_releases", "triage"]
