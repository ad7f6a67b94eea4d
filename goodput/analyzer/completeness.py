"""How far the trace store is complete, per deployment: which buckets by arrival are final, which still wait.

A request reaches the store in pieces: goodput's live fleet exports its ``llm.gateway`` span at admission and
its ``llm.queue`` span at scheduling, the root when it finishes (OpenTelemetry exports a span when it ends). So
during a queue build-up the newest minutes of finished requests hold only the survivors — the quick ones — and
any figure over them (arrival rate, p95, lengths) points the wrong way. Here:

- arrivals are counted by arrival time from finished requests *and* those in flight (``goodput/analyzer/sql/arrivals.sql``);
- ``final_before``: a bucket by arrival is final when its end is at or before it. With early spans it is the
  oldest in-flight arrival (or the store's newest data, when nothing is in flight); arrivals are complete up to
  the newest data whatever is still in flight. A request in flight for over ``ABANDONED_S`` (its fleet stopped,
  its root's spans were lost) is counted as abandoned and holds nothing open.
- shapes without early spans (vLLM's ``llm_request``, a gateway that exports nothing early): the store cannot
  see what is in flight. Prometheus can count it (engines' waiting + running); when it says nothing is in
  flight the store is final up to its newest data, otherwise (or when Prometheus is not asked) the bound is
  conservative: the newest completion minus twice the longest request that finished in the hour before it. In a
  first-come queue whose wait grows, the oldest request in flight arrived about one longest request before the
  newest completion; priorities (a starved low tier) stretch that, hence the margin. A request stuck longer
  still is beyond what a store without early spans can know. Arrivals there are complete only up to
  ``final_before``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import duckdb
import pandas as pd

from goodput.analyzer.backend import Backend, backend, interval_us
from goodput.contracts.catalog import by_name
from goodput.foundation.promapi import Client, PromError, Query, config_error

__all__ = ["ABANDONED_S", "BOUND_FACTOR", "Completeness", "arrival_count", "arrivals", "completeness",
           "drop_incomplete", "final_window", "in_flight_rows", "not_final", "prometheus_in_flight", "verdict_window"]

BOUND_FACTOR = 2.0  # final_before without early spans: the newest completion minus this x the longest request
ABANDONED_S = 3600.0  # in flight longer than this: its root will not come (a fleet that stopped, spans lost)


def _ts(ns: int | None) -> datetime | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC)


@dataclass(frozen=True)
class Completeness:
    deployment: str
    early_spans: bool  # its gateway spans name it: in-flight requests and arrivals at admission are in the store
    in_flight: int | None  # requests admitted, not finished (None: unknown — no early spans, Prometheus not asked)
    oldest_arrival: datetime | None  # of the requests in flight (early spans only)
    newest_completion: datetime | None
    newest_data: datetime | None  # the store's newest span end, any deployment
    final_before: datetime | None  # a bucket by arrival is final when it ends at or before this
    arrivals_through: datetime | None  # arrivals before this are all counted
    basis: str  # how final_before was found: "store" (in flight known to it), "prometheus", "bound"
    abandoned: int = 0  # in flight longer than ABANDONED_S: counted here, never waited for

    @property
    def oldest_age_s(self) -> float | None:
        """How long the oldest request in flight has been in, at the store's newest data."""
        if self.oldest_arrival is None or self.newest_data is None:
            return None
        return max(0.0, (self.newest_data - self.oldest_arrival).total_seconds())

    def final(self, bucket_start: datetime, width: timedelta) -> bool:
        return self.final_before is not None and bucket_start + width <= self.final_before

    def describe(self) -> str:
        """One line: what is in flight, since when, and up to where the figures are final."""
        if self.in_flight is None:
            flight = "requests in flight unknown (no early spans; Prometheus not asked)"
        elif self.oldest_arrival is not None:
            flight = f"{self.in_flight} in flight, the oldest arrived {self.oldest_age_s:.0f} s before the newest data"
        else:
            flight = f"{self.in_flight} in flight"
        if self.abandoned:
            flight += f" ({self.abandoned} more abandoned: in flight over {ABANDONED_S / 3600:g} h)"
        until = f"final before {self.final_before:%H:%M:%S}" if self.final_before else "nothing final yet"
        done = f"newest completion {self.newest_completion:%H:%M:%S}" if self.newest_completion else "none finished"
        return f"{flight}; {done}; {until} ({self.basis})"

    def record(self) -> dict:
        iso = {k: (v.isoformat() if v is not None else None) for k, v in (
            ("oldest_arrival", self.oldest_arrival), ("newest_completion", self.newest_completion),
            ("newest_data", self.newest_data), ("final_before", self.final_before),
            ("arrivals_through", self.arrivals_through))}
        return {"deployment": self.deployment, "early_spans": self.early_spans, "in_flight": self.in_flight,
                "abandoned": self.abandoned, "oldest_age_s": self.oldest_age_s, "basis": self.basis, **iso}


def completeness(con: Backend | duckdb.DuckDBPyConnection, deployment: str | None = None,
                 prometheus: dict[str, float] | None = None) -> dict[str, Completeness]:
    """Per deployment; ``prometheus``: requests in flight by deployment as Prometheus counts them
    (``prometheus_in_flight``), used for deployments without early spans."""
    out = {}
    for dep, done_ns, longest_s, n_open, oldest_ns, abandoned, early, newest_ns in backend(con).rows(
            "completeness", {"deployment": deployment, "abandoned_s": ABANDONED_S}).rows:
        newest = _ts(newest_ns)
        if early:
            final = min(x for x in (_ts(oldest_ns), newest) if x is not None) if newest else None
            out[dep] = Completeness(dep, True, n_open, _ts(oldest_ns), _ts(done_ns), newest, final, newest,
                                    "store", abandoned)
            continue
        told = prometheus.get(dep) if prometheus is not None else None
        if told is not None and told <= 0:
            final, basis = newest, "prometheus"
        else:
            bound = _ts(done_ns - int(BOUND_FACTOR * (longest_s or 0.0) * 1e9)) if done_ns is not None else None
            final, basis = (min(bound, newest) if bound and newest else bound), "bound"
        out[dep] = Completeness(dep, False, None if told is None else int(told), None, _ts(done_ns), newest, final,
                                final, basis)
    return out


def final_window(c: Completeness | None, until: datetime | None, width: timedelta = timedelta(minutes=1)
                 ) -> datetime | None:
    """The end of the part of a window (ending ``until``, None = open) that verdicts may read: ``until`` cut to
    the last whole ``width`` bucket that is final."""
    if c is None or c.final_before is None or (c.newest_data is not None and c.final_before >= c.newest_data):
        return until  # nothing final yet is unknown; nothing in flight: all of it is final
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    cut = epoch + (c.final_before - epoch) // width * width
    return cut if until is None or cut < until else until


def arrivals(con: Backend | duckdb.DuckDBPyConnection, bucket: str, *, since: datetime | None = None,
             until: datetime | None = None, deployment: str | None = None, tier: str | None = None,
             tenant: str | None = None):
    """Arrivals per bucket and deployment (a DataFrame: bucket, deployment, arrivals, in_flight)."""
    return backend(con).frame("arrivals", {"bucket": bucket, "bucket_us": interval_us(bucket), "since": since,
                                           "until": until, "deployment": deployment, "tier": tier, "tenant": tenant})


def prometheus_in_flight(url: str, flag: str = "--prometheus") -> dict[str, float]:
    """Requests in flight per deployment as the engines count them now (waiting + running)."""
    expr = " + ".join(f"sum by (deployment) ({by_name(m).name})" for m in ("llm_requests_waiting",
                                                                           "llm_requests_running"))
    now = time.time()
    try:
        with Client(url) as client:
            series = client.run(Query("in flight", expr, now, now))
    except PromError as e:
        raise config_error(url, e, flag) from None
    return {s.labels.get("deployment", ""): s.values[-1] for s in series}


def arrival_count(con: Backend | duckdb.DuckDBPyConnection, deployment: str, since: datetime | None,
                  until: datetime | None) -> int:
    """Requests of ``deployment`` that arrived in [since, until): finished or in flight."""
    return int(arrivals(con, "100 years", since=since, until=until, deployment=deployment)["arrivals"].sum())


def verdict_window(con: Backend | duckdb.DuckDBPyConnection, deployment: str, until: datetime | None,
                   prometheus: dict[str, float] | None = None) -> tuple[Completeness | None, datetime | None, str]:
    """What a verdict on ``deployment`` may read: its completeness, the end of the final part of the window, and
    one line saying what was left out ("" when nothing was)."""
    c = completeness(con, deployment, prometheus).get(deployment)
    cut = final_window(c, until)
    end = until or (c.newest_data if c else None)
    if c is None or cut is None or (end is not None and cut >= end):
        return c, cut, ""
    n = arrival_count(con, deployment, cut, end)
    if not n:
        return c, cut, ""
    if c.oldest_age_s is not None:
        why = f"{c.in_flight} still in flight, the oldest for {c.oldest_age_s:.0f} s"
    elif c.basis == "bound":
        why = "no early spans: final only up to the newest completion minus the longest request"
    else:
        why = f"{c.in_flight} in flight"
    return c, cut, f"left out: the {n} requests that arrived from {cut:%H:%M} on, not final yet ({why})"


def drop_incomplete(con: Backend | duckdb.DuckDBPyConnection, series: pd.DataFrame, width: timedelta,
                    deployment: str | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """``series`` (rows per deployment and ``bucket`` start) without the buckets that are not final, and how many
    buckets of each deployment were left out."""
    if series.empty:
        return series, {}
    never = pd.Timestamp(0, tz="UTC")  # nothing final yet: every bucket waits
    ends = {d: pd.Timestamp(c.final_before) if c.final_before else never
            for d, c in completeness(con, deployment).items()}
    final = series["bucket"] + pd.Timedelta(width) <= series["deployment"].map(ends)
    left = series.loc[~final].groupby("deployment")["bucket"].nunique()
    return series.loc[final].reset_index(drop=True), {str(d): int(n) for d, n in left.items()}


def in_flight_rows(con: Backend | duckdb.DuckDBPyConnection, records: list[dict], *, since: datetime | None = None,
                   until: datetime | None = None, deployment: str | None = None, tier: str | None = None,
                   tenant: str | None = None, bucket: str | None = None) -> list[int | None]:
    """For each row of a figure over requests (grouped by some of ``deployment``, ``tier``, ``tenant`` and, with
    ``bucket`` an interval, ``bucket``), how many of the requests it covers — arrived in [since, until), of its
    deployment, tier, tenant and bucket where it names them, else of the filters' — are still in flight: 0, the
    figure is final (the same after the run); None, unknown (a deployment without early spans, past what is final).
    A row grouped by a dimension the in-flight spans do not carry (route, replica) counts its deployment's."""
    width = pd.Timedelta(microseconds=interval_us(bucket)) if bucket else None
    comps = completeness(con, deployment)
    seen: dict[tuple, pd.DataFrame] = {}
    out: list[int | None] = []
    for rec in records:
        key = (rec.get("tier", tier), rec.get("tenant", tenant))
        if key not in seen:
            seen[key] = arrivals(con, bucket or "100 years", since=since, until=until, deployment=deployment,
                                 tier=key[0], tenant=key[1])
        got, dep = seen[key], rec.get("deployment", deployment)
        start = pd.Timestamp(rec["bucket"]) if width is not None and rec.get("bucket") is not None else None
        if dep is not None:
            got = got[got["deployment"] == dep]
        if start is not None:
            start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
            got = got[pd.to_datetime(got["bucket"], utc=True) == start]
        end = start + width if start is not None and width is not None else until
        blind = any(not c.early_spans and not _final_to(c, end) for d, c in comps.items() if dep in (None, d))
        out.append(None if blind else int(got["in_flight"].sum()))
    return out


def _final_to(c: Completeness, end: datetime | pd.Timestamp | None) -> bool:
    """Whether every request of ``c``'s deployment that arrived before ``end`` (None: the newest data) has finished."""
    limit = c.newest_data if end is None else end
    return c.final_before is not None and limit is not None and c.final_before >= limit


def not_final(in_flight: int | None) -> str:
    """What a figure over requests says of itself: "" when final, else that it is not, and how many are in flight."""
    if in_flight == 0:
        return ""
    return "not final: in flight unknown (no early spans)" if in_flight is None else f"not final: {in_flight} in flight"
