"""What every page shares: the sidebar's filters (kept in the URL), the state of each source, banners.

Whatever a page shows that came from data goes through tables, charts or ``st.text``; the few markdown lines
that include data escape it with ``esc``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import streamlit as st

from goodput.console import data, traces
from goodput.console.filters import DIMENSIONS, RANGES, Filters
from goodput.console.settings import Settings
from goodput.foundation.clickhouse import redact
from goodput.foundation.errors import ConfigError

__all__ = ["ALL", "Context", "esc", "prom_down", "sidebar", "step_for"]

ALL = "(all)"
_MD = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$&:])")


def esc(text: object) -> str:
    """Text safe inside ``st.markdown``: markdown and HTML characters escaped."""
    return _MD.sub(r"\\\1", str(text))


@dataclass
class Context:
    settings: Settings
    filters: Filters
    db_version: data.Version = None
    requests: int = 0
    first: datetime | None = None
    last: datetime | None = None
    store_problem: str | None = None  # why the trace pages have nothing to show

    @property
    def db(self) -> str:
        return str(self.settings.db)

    def sql_params(self) -> dict:
        return self.filters.sql_params(self.last or datetime.now(UTC))

    def window(self) -> tuple[datetime | None, datetime]:
        return self.filters.window(self.last or datetime.now(UTC))

    def prom_window(self) -> tuple[datetime, datetime]:
        """Prometheus runs on the wall clock: the range ends now (all time: the last 7 days)."""
        end = datetime.now(UTC).replace(microsecond=0)
        return end - (RANGES[self.filters.range] or timedelta(days=7)), end

    def span(self) -> tuple[datetime, datetime]:
        """The first and the last request stored; only once ``store_ready()`` said yes (a store with requests)."""
        if self.first is None or self.last is None:
            raise RuntimeError("the trace store is not ready: ask store_ready() first")
        return self.first, self.last

    def store_ready(self) -> bool:
        """True when the trace pages can query; else shows why not and what to run."""
        if self.store_problem:
            st.info(self.store_problem, icon=":material/database:")
            return False
        return True


def step_for(start: datetime, end: datetime, points: int = 240) -> float:
    return max(5.0, round((end - start).total_seconds() / points))


def _store_state(ctx: Context) -> None:
    db = ctx.settings.db
    shown = esc(redact(str(db)))  # a ClickHouse URL's password never reaches the page
    fill = (f"Fill it: `goodput demo` keeps it current, or run `goodput analyze ingest TRACES --db {shown}` "
            "on a trace store, OTLP files or a simulator run.")
    ctx.db_version = data.store_version(db)
    if ctx.db_version is None:
        ctx.store_problem = f"No analyzer database at {shown} (set GOODPUT_DB or `goodput console --db`). {fill}"
        return
    try:
        b = data.store_query(str(db), ctx.db_version, "bounds", {})
    except traces.StoreBusy as e:
        ctx.store_problem = f"The analyzer database is locked by a writer; retry in a moment. ({esc(e)})"
        return
    except ConfigError as e:  # not a database (corrupt, another kind of file): retrying will not help
        ctx.store_problem = f"The analyzer database {shown} cannot be read: {esc(e.problem)}"
        return
    ctx.requests = int(b["requests"].iloc[0])
    if ctx.requests == 0:
        ctx.store_problem = f"The analyzer database {shown} holds no requests yet. {fill}"
        return
    ctx.first, ctx.last = b["first"].iloc[0].to_pydatetime(), b["last"].iloc[0].to_pydatetime()


def _options(ctx: Context) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {d: [] for d in DIMENSIONS}
    if ctx.store_problem is None:
        o = data.store_query(ctx.db, ctx.db_version, "options", {})
        for dim, value in zip(o["dim"], o["value"], strict=True):
            out[dim].append(value)
    return out


def sidebar(settings: Settings) -> Context:
    """The filters, seeded from the URL on a session's first run and written back to it on every run."""
    if "filters_seeded" not in st.session_state:
        f, bad = Filters.from_query({k: st.query_params.get_all(k) for k in st.query_params})
        st.session_state["filters_seeded"] = True
        st.session_state["f_range"] = f.range
        for d in DIMENSIONS:
            st.session_state[f"f_{d}"] = getattr(f, d) or ALL
        if bad:
            st.session_state["filters_bad"] = bad
    ctx = Context(settings, Filters())
    _store_state(ctx)
    options = _options(ctx)
    with st.sidebar:
        st.header("Filters")
        st.selectbox("time range", list(RANGES), key="f_range")
        values = {}
        for d in DIMENSIONS:
            opts = [ALL, *options[d]]
            if st.session_state[f"f_{d}"] not in opts:  # a value from a link the store has not seen (yet)
                opts.append(st.session_state[f"f_{d}"])
            v = st.selectbox(d, opts, key=f"f_{d}")
            values[d] = None if v == ALL else v
        if st.session_state.get("filters_bad"):
            st.warning("ignored from the link: " + ", ".join(st.session_state["filters_bad"]))
        if ctx.last is not None:
            st.caption(f"{ctx.requests:,} requests stored, {ctx.first:%Y-%m-%d %H:%M} .. {ctx.last:%Y-%m-%d %H:%M} UTC; "
                       "trace figures end at the newest arrival, those in flight included")
    ctx.filters = Filters(st.session_state["f_range"], **values)
    q = ctx.filters.query()
    if dict(st.query_params) != q:
        st.query_params.from_dict(q)
    return ctx


def prom_down(what: str, error: Exception) -> None:
    st.warning(f"{what} is unreachable, so its figures are missing here; the trace figures below still work. "
               f"({esc(error)})", icon=":material/warning:")
