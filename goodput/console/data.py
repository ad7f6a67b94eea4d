"""Every read the pages make, cached per query for a few seconds (Streamlit's ``cache_data``).

A database read is keyed by the file's identity (inode and mtime) as well, so a new snapshot renamed into
place is seen at once (ClickHouse has no file: its reads are fresh within the cache's few seconds); errors are
never cached, so a server that comes back is seen at the next rerun.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
import streamlit as st

from goodput.analyzer import completeness as store_completeness
from goodput.analyzer.backend import interval_us
from goodput.analyzer.decompose import decompose
from goodput.analyzer.regressions import scan_regressions
from goodput.analyzer.releases import load_releases
from goodput.console import traces
from goodput.console.prom import Alertmanager, Prometheus, Sample, Series
from goodput.foundation.clickhouse import is_clickhouse
from goodput.foundation.promapi import Endpoint

__all__ = ["alerts", "arrivals", "bucket_series", "completeness", "decomposition", "in_flight", "prom_instant", "prom_range",
           "regressions", "silences", "store_query", "store_version"]

PROM_TTL_S = 10
STORE_TTL_S = 15
# the database file's identity, part of every store read's cache key (None: no file, which the pages say first)
Version = tuple[int, int] | None


def store_version(db: str | Path) -> Version:
    """The database file's identity; None when there is none (a ClickHouse store: always one, the same)."""
    if is_clickhouse(db):
        return 0, 0
    try:
        st_ = Path(db).stat()
    except OSError:
        return None
    return st_.st_ino, st_.st_mtime_ns


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=256)
def store_query(db: str, version: Version, name: str, params: dict) -> pd.DataFrame:
    with traces.open_store(db) as con:
        return traces.query(con, name, params)


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=64)
def arrivals(db: str, version: Version, bucket: str, params: dict) -> pd.DataFrame:
    """Arrivals per bucket and deployment, finished or in flight (``goodput/analyzer/completeness.py``)."""
    with traces.open_store(db) as con:
        return store_completeness.arrivals(con, bucket, **{k: params.get(k) for k in ("since", "until", "deployment", "tier",
                                                                          "tenant")})


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=64)
def completeness(db: str, version: Version, deployment: str | None) -> dict[str, store_completeness.Completeness]:
    """How far the store is complete, per deployment: in flight, the oldest, what is final."""
    with traces.open_store(db) as con:
        return store_completeness.completeness(con, deployment)


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=64)
def decomposition(db: str, version: Version, by: tuple[str, ...], since: datetime | None, until: datetime,
                  deployment: str | None) -> list[dict]:
    with traces.open_store(db) as con:
        return decompose(con, list(by), since=since, until=until, deployment=deployment).records()


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=64)
def bucket_series(db: str, version: Version, bucket: str, since: datetime | None, until: datetime,
                  deployment: str | None) -> pd.DataFrame:
    """The analyzer's own p95-per-bucket series (``goodput/analyzer/sql/bucket_series.sql``), the input of its verdicts."""
    with traces.open_store(db) as con:
        return con.frame("bucket_series", {"bucket": bucket, "bucket_us": interval_us(bucket), "since": since,
                                           "until": until, "deployment": deployment})


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=64)
def regressions(db: str, version: Version, releases: str | None, releases_version: Version, bucket: str,
                since: datetime | None, until: datetime, deployment: str | None) -> tuple[list[dict], str]:
    rel = load_releases(releases) if releases else []
    with traces.open_store(db) as con:
        scan = scan_regressions(con, rel, bucket=bucket, since=since, until=until, deployment=deployment)
    return [r.record() for r in scan.found], scan.describe()


@st.cache_data(ttl=PROM_TTL_S, show_spinner=False, max_entries=256)
def prom_instant(server: Endpoint, expr: str, at: datetime | None = None) -> list[Sample]:
    """``expr`` at ``at`` (default: now); the queries a table combines pass one ``at``, so a share of one over
    another is taken at one instant, not at the moments each happened to run."""
    return Prometheus(server).query(expr, at)


@st.cache_data(ttl=PROM_TTL_S, show_spinner=False, max_entries=256)
def prom_range(server: Endpoint, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
    return Prometheus(server).query_range(expr, start, end, step_s)


@st.cache_data(ttl=PROM_TTL_S, show_spinner=False)
def alerts(url: str) -> list[dict]:
    return Alertmanager(url).alerts()


@st.cache_data(ttl=PROM_TTL_S, show_spinner=False)
def silences(url: str) -> list[dict]:
    return Alertmanager(url).silences()


@st.cache_data(ttl=STORE_TTL_S, show_spinner=False, max_entries=64)
def in_flight(db: str, version: Version, rows: list[dict], since: datetime | None, until: datetime,
              filters: tuple[str | None, str | None, str | None], bucket: str | None) -> list[int | None]:
    """Per row (its deployment, tier, tenant, bucket where it has them; ``filters`` the sidebar's deployment, tier
    and tenant), the requests it covers still in flight (``goodput/analyzer/completeness.py``: 0 final, None unknown)."""
    deployment, tier, tenant = filters
    with traces.open_store(db) as con:
        return store_completeness.in_flight_rows(con, rows, since=since, until=until, deployment=deployment, tier=tier,
                                                 tenant=tenant, bucket=bucket)
