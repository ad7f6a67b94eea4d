"""``goodput analyze regressions``: change points in bucketed p95 latency, attributed to releases or not.

For each deployment and tier, every latency series (E2E, TTFT, TPOT and each segment) is bucketed
(p95 per bucket) and searched for change points (goodput/analyzer/changepoint.py). Each change point gets its
evidence — which segment moved, which tenants and routes, whether the workload shifted (request
lengths, arrival rate) or the per-token cost changed — and the releases and scale events of the window before
it. The evidence decides the verdict, and which of them it blames: a workload shift is reported as such and
blamed on a release only when that release changes request lengths (a prompt template, a routing or config change); a
change of per-token cost is blamed on the release (or scale event) before it; a queue that moved with neither is
blamed on a scale event before it (capacity changed); what none explains says so. Each change has a direction: a
step down is an improvement, reported in its own word. Scale events (kind ``scale``, replicas added, lost or scaled
by a policy) are causes like releases: a decode drop after a scale-out is the scale-out's, not the release's.

The bucket follows the window (``choose_bucket``): about ``MAX_BUCKETS`` over a long window, never fewer than
``MIN_BUCKETS`` over a short one, wide enough for a steady p95 where the traffic allows, so a search a few minutes
into an incident has buckets enough to find its step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

import duckdb
import numpy as np
import pandas as pd

from goodput.analyzer.backend import Backend, backend, interval_us
from goodput.analyzer.changepoint import detect
from goodput.analyzer.completeness import drop_incomplete
from goodput.analyzer.releases import Release
from goodput.contracts.vocabulary import SCALE_KIND

__all__ = ["METRICS", "Blame", "Moved", "Regression", "Scan", "attribute", "bucket_label", "choose_bucket",
           "find_regressions", "in_window", "scan_regressions"]

METRICS = ("e2e_s", "ttft_s", "tpot_s", "gateway_s", "queue_s", "prefill_s", "kv_transfer_s", "decode_s", "send_s")
SEGMENTS_OF = {"e2e_s": ("gateway", "queue", "prefill", "kv_transfer", "decode", "send"),
               "ttft_s": ("gateway", "queue", "prefill", "kv_transfer"), "tpot_s": ("decode",)}
LENGTH_KINDS = ("prompt_template", "routing", "config", "model")  # releases that can change what requests look like
LENGTH_SHIFT, RATE_SHIFT, COST_CHANGE = 0.2, 0.5, 0.1
MIN_REQUESTS = 5
NICE_BUCKETS_S = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MIN_BUCKETS = 16  # a short window still gets this many buckets: 8 per side of a step (detect needs 8 in all)
MIN_WIDTH_S = 60  # narrower only when the window is too short for MIN_BUCKETS of it: a burst of seconds is no step
MAX_BUCKETS = 288  # a long window: a day of 5-minute buckets
PER_BUCKET = 50  # requests a typical series' bucket should hold for a steady p95, where the window allows


@dataclass(frozen=True)
class Blame:
    """The release or scale event a change point is blamed on."""

    release: str  # its label, ``kind from -> to`` (Release.label)
    time: datetime
    kind: str  # a release kind, or SCALE_KIND

    @classmethod
    def of(cls, r: Release) -> Blame:
        return cls(r.label(), r.time, r.kind)


@dataclass
class Regression:
    deployment: str
    tier: str
    metric: str
    time: datetime
    change: float  # after / before - 1 of the p95
    before_p95_s: float
    after_p95_s: float
    segment: str
    cause: str
    direction: str = ""  # "regression" (p95 rose) or "improvement" (it fell)
    bucket: str = ""  # the bucket width searched
    blame: Blame | None = None
    evidence: dict = field(default_factory=dict)

    @property
    def blamed(self) -> bool:
        return self.blame is not None

    @property
    def release(self) -> str | None:
        """The blamed release's label (None: nothing blamed)."""
        return self.blame.release if self.blame else None

    @property
    def release_time(self) -> datetime | None:
        return self.blame.time if self.blame else None

    def record(self) -> dict:
        """Flat, as the command's output and the console's tables read it: the blame as the columns ``release``,
        ``release_time`` and ``blamed``, its kind as the evidence's ``release_kind``."""
        d = asdict(self)
        del d["blame"]
        evidence = d.pop("evidence")
        return {**d, "time": self.time.isoformat(), "release": self.release,
                "release_time": self.release_time.isoformat() if self.release_time else None, "blamed": self.blamed,
                "evidence": {**evidence, "release_kind": self.blame.kind} if self.blame else evidence}


@dataclass
class Scan:
    """What a search for change points looked at, and what it found."""

    found: list[Regression]
    bucket: str  # its width, as bucket_label writes it
    min_change: float
    t_min: float
    chosen: bool = False  # the bucket was chosen for the window (choose_bucket), not given
    groups: list[str] = field(default_factory=list)  # "deployment/tier" searched
    series: int = 0  # (group, metric) series long enough to search
    buckets: int = 0
    start: datetime | None = None
    end: datetime | None = None
    left_out: dict[str, int] = field(default_factory=dict)  # deployment -> buckets not final (requests in flight)

    def describe(self) -> str:
        """What was searched, in one line (for a search that found nothing)."""
        skipped = "".join(f"; left out {n} bucket(s) of {d} whose requests are still in flight"
                          for d, n in sorted(self.left_out.items()))
        if not self.groups:
            return "no requests in the window to search" + skipped
        span = f"{self.start:%Y-%m-%d %H:%M} .. {self.end:%Y-%m-%d %H:%M}" if self.start and self.end else "?"
        return (f"searched {self.series} series ({len(METRICS)} latency metrics x {len(self.groups)} deployment/tier: "
                f"{', '.join(self.groups[:8])}{' ...' if len(self.groups) > 8 else ''}) over {span} in {self.buckets} "
                f"buckets of {self.bucket}{' (chosen for the window)' if self.chosen else ''}; no step of p95 of at least "
                f"{self.min_change:.0%} with Welch's t >= "
                f"{self.t_min:g} (series need 8 buckets of >= {MIN_REQUESTS} ok requests)" + skipped)


def _ratio(before: float, after: float) -> float:
    if before is None or after is None or not np.isfinite(before) or not np.isfinite(after) or before <= 0:
        return float("nan")
    return after / before - 1.0


def _median(frame: pd.DataFrame, col: str) -> float:
    v = frame[col].dropna()
    return float(v.median()) if len(v) else float("nan")


def bucket_label(seconds: float) -> str:
    """``30s``, ``1m``, ``2h``, ``1d``: a width as the command line's --bucket takes it."""
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{int(seconds // n)}{unit}"
    return f"{seconds:g}s"


def choose_bucket(groups: list[tuple[int, float]]) -> int:
    """The bucket width in seconds for a window whose (deployment, tier) series hold ``(requests, seconds)``:
    ``PER_BUCKET`` requests of the median series per bucket, at least ``MIN_WIDTH_S`` and at most ``MAX_BUCKETS`` over
    the longest span, but never fewer than ``MIN_BUCKETS`` buckets; rounded to a width people use."""
    spans = [sec for n, sec in groups if n > 0 and sec > 0]
    if not spans:
        return 300
    span = max(spans)
    rates = sorted(n / max(sec, 1.0) for n, sec in groups if n > 0)
    want = max(MIN_WIDTH_S, span / MAX_BUCKETS, PER_BUCKET / rates[len(rates) // 2])
    most = span / MIN_BUCKETS
    wide = [w for w in NICE_BUCKETS_S if w >= want]
    if wide and wide[0] <= most:
        return wide[0]
    fits = [w for w in NICE_BUCKETS_S if w <= most]
    return fits[-1] if fits else NICE_BUCKETS_S[0]


def find_regressions(con: Backend | duckdb.DuckDBPyConnection, releases: list[Release], **kw) -> list[Regression]:
    """The change points of ``scan_regressions``, most significant first."""
    return scan_regressions(con, releases, **kw).found


def scan_regressions(con: Backend | duckdb.DuckDBPyConnection, releases: list[Release], *, bucket: str | None = None,
                     window: timedelta = timedelta(minutes=30), since: datetime | None = None,
                     until: datetime | None = None, deployment: str | None = None, t_min: float = 4.0,
                     min_change: float = 0.1) -> Scan:
    """Search every series of the window; ``bucket`` (an interval, e.g. ``"5 minutes"``) or None: chosen for the
    window by ``choose_bucket``."""
    where = {"since": since, "until": until, "deployment": deployment}
    chosen = bucket is None
    if bucket is None:
        spans = backend(con).rows("series_span", where).rows
        bucket = f"{choose_bucket([(n, sec) for _dep, _tier, n, sec in spans])} seconds"
    width = pd.to_timedelta(interval_us(bucket), unit="us")
    series = backend(con).frame("bucket_series", {"bucket": bucket, "bucket_us": interval_us(bucket), **where})
    series, left_out = drop_incomplete(con, series, width, deployment)  # only final buckets (goodput/analyzer/completeness.py)
    scan = Scan([], bucket_label(width.total_seconds()), min_change, t_min, chosen, left_out=left_out)
    if len(series):
        scan.buckets = series["bucket"].nunique()
        scan.start, scan.end = series["bucket"].min().to_pydatetime(), series["bucket"].max().to_pydatetime() + width
    found: list[tuple[Regression, pd.DataFrame, pd.DataFrame]] = []
    for (dep, tier), g in series.groupby(["deployment", "tier"], sort=True):
        scan.groups.append(f"{dep}/{tier}")
        g = g[g["ok"] >= MIN_REQUESTS].reset_index(drop=True)
        for metric in METRICS:
            s = g[["bucket", metric]].dropna()
            s = s[s[metric] > 0]
            if len(s) < 8:
                continue
            scan.series += 1
            idx = s.index.to_numpy()
            cps = detect(s[metric].to_numpy(), t_min=t_min, min_change=min_change)
            edges = [0] + [c.index for c in cps] + [len(s)]
            for j, cp in enumerate(cps):
                lo, hi = edges[j], edges[j + 2]
                before = g.loc[idx[max(lo, cp.index - 12):cp.index]]
                after = g.loc[idx[cp.index:min(hi, cp.index + 12)]]
                at = s["bucket"].iloc[cp.index].to_pydatetime()
                reg = Regression(str(dep), str(tier), metric, at, cp.change, cp.before, cp.after, "", "",
                                 "regression" if cp.change > 0 else "improvement", scan.bucket)
                found.append((reg, before, after))
    if not found:
        return scan
    shifts = _shifts(con, found, width)
    for i, (reg, before, after) in enumerate(found):
        _evidence(reg, before, after, shifts.get(i, []),
                  in_window(releases, reg.deployment, reg.time, reg.time + width.to_pytimedelta(), window))
    out = _backlog([r for r, _, _ in found])
    scan.found = sorted(out, key=lambda r: -abs(math.log1p(r.change)) if r.change > -1 else 0)
    return scan


BACKLOG = "backlog: the queue from release {}, still building"  # nothing new caused it


def _backlog(found: list[Regression]) -> list[Regression]:
    """A queue step up that nothing explains, after a release blamed for a step up of the same deployment and tier,
    is the backlog that release started still building (a ramp cut into steps): said so, not "unexplained"."""
    blamed: dict[tuple[str, str], list[tuple[datetime, str]]] = {}
    for r in found:
        if r.blame is not None and r.direction == "regression":
            blamed.setdefault((r.deployment, r.tier), []).append((r.time, r.blame.release))
    for r in found:
        before = sorted(b for b in blamed.get((r.deployment, r.tier), []) if b[0] <= r.time)
        if before and r.blame is None and r.direction == "regression" and r.segment == "queue":
            r.cause = BACKLOG.format(before[-1][1])
    return found


def in_window(releases: Sequence[Release], deployment: str, at: datetime, bucket_end: datetime,
              window: timedelta) -> list[Blame]:
    """The releases and scale events that may explain a change point of ``deployment`` at ``at``: its own or every
    deployment's (``*``), at or before the end of the bucket where the change shows and at most ``window`` before
    the change point; the latest first."""
    near = [r for r in releases if r.deployment in (deployment, "*") and at - window <= r.time <= bucket_end]
    return [Blame.of(r) for r in sorted(near, key=lambda r: r.time, reverse=True)]


def _shifts(con, found, width) -> dict[int, list[tuple]]:
    """Per change point (its index in ``found``): (dim, value, before, after, buckets) of each tenant and route, the
    median of their per-bucket p95 from up to 12 buckets before it to 12 after (one statement for all of them)."""
    ends = [after["bucket"].max().to_pydatetime() + width for _, _, after in found]
    res = backend(con).rows("tenant_route_shift", {
        "ids": list(range(len(found))), "deployments": [r.deployment for r, _, _ in found],
        "tiers": [r.tier for r, _, _ in found], "metrics": [r.metric for r, _, _ in found],
        "ats": [r.time for r, _, _ in found], "starts": [b["bucket"].min().to_pydatetime() for _, b, _ in found],
        "ends": ends, "bucket": width.to_pytimedelta()})
    out: dict[int, list[tuple]] = {}
    for cid, *row in res.rows:
        out.setdefault(int(cid), []).append(tuple(row))
    return out


PER_TOKEN = {"prefill": "prefill_s_per_token", "decode": "decode_s_per_token",
             "kv_transfer": "kv_transfer_s_per_token"}  # per prompt token: the link's cost per byte moved


@dataclass(frozen=True)
class Moved:
    """What moved across a change point: the segment that moved most, and the relative change (after / before - 1 of
    the medians; NaN where unknown) of the request lengths, the arrival rate and that segment's per-token cost."""

    segment: str
    input_tokens: float = math.nan
    output_tokens: float = math.nan
    arrival_rate: float = math.nan
    per_token_cost: float = math.nan


def attribute(moved: Moved, candidates: Sequence[Blame]) -> tuple[str, Blame | None]:
    """The cause of a change point and what it is blamed on (None: nothing), from what moved and the releases and
    scale events before it (``in_window``, the latest first): the latest candidate whose kind can explain what moved.
    A length shift is a release's only when that release can change request lengths (``LENGTH_KINDS``); an arrival
    rate shift is no release's; a per-token cost may change with any release or scale event; a queue that moved with
    neither changed with the capacity, a scale event's."""
    finite = [abs(x) for x in (moved.input_tokens, moved.output_tokens) if math.isfinite(x)]
    if finite and max(finite) >= LENGTH_SHIFT:
        what = "input" if math.isfinite(moved.input_tokens) and abs(moved.input_tokens) >= LENGTH_SHIFT else "output"
        pick = next((c for c in candidates if c.kind in LENGTH_KINDS), None)
        return (f"workload shift: {what} length changed after a {pick.kind} release" if pick else
                f"workload shift: {what} length changed (no release changes request lengths here)"), pick
    if math.isfinite(moved.arrival_rate) and abs(moved.arrival_rate) >= RATE_SHIFT:
        return "workload shift: arrival rate changed", None
    if math.isfinite(moved.per_token_cost) and abs(moved.per_token_cost) >= COST_CHANGE:
        pick = candidates[0] if candidates else None  # any release or scale event can change what a token costs
        since = (" after a scale event (the batch per replica changed)" if pick and pick.kind == SCALE_KIND else
                 f" after a {pick.kind} release" if pick else "")
        what = ("KV-transfer time per prompt token (the prefill -> decode link)" if moved.segment == "kv_transfer"
                else f"per-token {moved.segment} cost")
        return f"{what} changed{since}", pick
    scale = next((c for c in candidates if c.kind == SCALE_KIND), None)
    if moved.segment == "queue" and scale:
        return "queue wait changed after a scale event (capacity changed)", scale
    return "unexplained: neither the workload nor the per-token cost moved", None


def _segment(reg: Regression, before: pd.DataFrame, after: pd.DataFrame) -> str:
    """The segment whose mean moved most in the change's direction (the metric itself for a segment series); the
    deltas go into the evidence."""
    if reg.metric not in SEGMENTS_OF:
        return reg.metric.removesuffix("_s")
    deltas = {seg: _median(after, f"mean_{seg}_s") - _median(before, f"mean_{seg}_s") for seg in SEGMENTS_OF[reg.metric]}
    deltas = {k: v for k, v in deltas.items() if np.isfinite(v)}
    sign = 1 if reg.change > 0 else -1
    reg.evidence["segment_delta_s"] = {k: round(v, 6) for k, v in deltas.items()}
    return max(deltas, key=lambda k: sign * deltas[k]) if deltas else ""


def _who_moved(change: float, shifts: list[tuple]) -> dict[str, list[str]]:
    """The tenants and routes whose p95 moved with the change (at least half of it, or 5 %), the most moved first."""
    moved: dict[str, list[tuple[str, float]]] = {"tenant": [], "route": []}
    for dim, value, b, a, _n in shifts:
        ch = _ratio(b, a)
        if np.isfinite(ch) and (ch >= min(0.5 * change, 0.05) if change > 0 else ch <= max(0.5 * change, -0.05)):
            moved[dim].append((value, round(ch, 3)))
    return {dim: [v for v, _ in sorted(vs, key=lambda x: -abs(x[1]))] for dim, vs in moved.items()}


def _evidence(reg: Regression, before: pd.DataFrame, after: pd.DataFrame, shifts: list[tuple],
              candidates: list[Blame]) -> None:
    """What moved across ``reg`` (its segment, workload, per-token cost, tenants and routes) and, from it, its cause
    and blame."""
    reg.segment = _segment(reg, before, after)
    cost_col = PER_TOKEN.get(reg.segment)
    moved = Moved(reg.segment, _ratio(_median(before, "input_tokens"), _median(after, "input_tokens")),
                  _ratio(_median(before, "output_tokens"), _median(after, "output_tokens")),
                  _ratio(_median(before, "arrivals"), _median(after, "arrivals")),
                  _ratio(_median(before, cost_col), _median(after, cost_col)) if cost_col else math.nan)
    who = _who_moved(reg.change, shifts)
    reg.evidence.update({"arrival_rate_change": _round(moved.arrival_rate),
                         "input_tokens_change": _round(moved.input_tokens),
                         "output_tokens_change": _round(moved.output_tokens),
                         "per_token_cost_change": _round(moved.per_token_cost),
                         "tenants": who["tenant"], "routes": who["route"]})
    reg.cause, reg.blame = attribute(moved, candidates)
    if reg.blame is None:
        reg.evidence["nearest_release"] = candidates[0].release if candidates else None


def _round(x: float) -> float | None:
    return round(float(x), 4) if np.isfinite(x) else None
