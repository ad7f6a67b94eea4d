"""``goodput analyze triage``: the seed's troubleshooting order, walked for one deployment, ending in a verdict.

1. split E2E into gateway, queue, prefill, kv_transfer, decode, send (and which segment grew); 2. did request lengths
or arrivals change; 3. KV cache, preemptions, KV rejections, and for a P/D-disaggregated deployment the KV transfer
from prefill to decode replicas; 4. routing balance, prefix-cache hits, the gateway's refusals, and what its overload
ladder degraded and its fallback routes moved, per tier; 5. releases.
The recent period (the last quarter of the window) is compared with what came before it. A cause is
named only when latency regressed — p95 E2E or TTFT of the recent period at least ``REGRESSION`` above
what came before, or a step up in any p95 series of the window; otherwise the verdict says "no
regression" and what was checked, since every window has a largest segment and some drift.

Step 5 also weighs every release of the deployment in the window on its own evidence — per-token prefill and decode
cost, prompt and output length of the requests after it against those before — so a release whose evidence moved is
named even when the queue (too little capacity) is what the requests feel, or when the window is too short for a
change point. Scale events in the window are said beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import duckdb

from goodput.analyzer.backend import Backend, backend
from goodput.analyzer.completeness import Completeness, arrival_count, verdict_window
from goodput.analyzer.decompose import SEGMENTS, decompose
from goodput.analyzer.regressions import COST_CHANGE, LENGTH_SHIFT, Regression, find_regressions
from goodput.analyzer.releases import Release
from goodput.contracts.vocabulary import GATEWAY_REJECT_REASONS, QUOTA_REASONS, SCALE_KIND
from goodput.foundation.errors import ConfigError

__all__ = ["REGRESSION", "Cause", "Step", "Triage", "triage"]

REGRESSION = 0.1  # relative rise of recent p95 E2E or TTFT that counts as a regression
BEFORE_S = 1800.0  # a release's evidence: requests of up to this long before it against all after it
MIN_OK = 20  # finished requests each side of a release before its evidence counts
EVIDENCE = (("prefill_s_per_token", "per-token prefill cost", COST_CHANGE),
            ("decode_s_per_token", "per-token decode cost", COST_CHANGE),
            ("input_tokens", "prompt length", LENGTH_SHIFT), ("output_tokens", "output length", LENGTH_SHIFT))


@dataclass
class Triage:
    deployment: str
    picked: str = ""  # why this deployment, when the caller did not name it
    steps: list[tuple[str, str]] = field(default_factory=list)  # (step, finding)
    verdict: str = ""
    regressed: bool = False
    facts: dict = field(default_factory=dict)
    completeness: dict = field(default_factory=dict)  # in flight, oldest age, final_before (goodput/analyzer/completeness.py)
    left_out: str = ""  # what the verdict did not read: buckets whose requests are still in flight

    def record(self) -> dict:
        return {"deployment": self.deployment, "picked": self.picked, "regressed": self.regressed, "verdict": self.verdict,
                "steps": [{"step": s, "finding": f} for s, f in self.steps], "facts": self.facts,
                "completeness": self.completeness, "left_out": self.left_out}


@dataclass(frozen=True, order=True)
class Cause:
    """A cause a step names; the verdict is the most likely one (the lowest priority, then the text)."""

    priority: float  # 0 a release, 1 KV, 2 workload, 3 routing, cache or a fallback, 3.5 the gateway, 4 capacity
    text: str


@dataclass
class Step:
    """One step of the troubleshooting order: what it found (one line), the causes it names (none unless what it
    read moved), and the facts it measured (merged into ``Triage.facts`` in the order of the steps)."""

    name: str
    finding: str
    causes: list[Cause] = field(default_factory=list)
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    """What every step reads: the deployment's final requests in the window, split into the recent period (its last
    quarter) and the one before it, and each period's figures (goodput/analyzer/sql/triage.sql)."""

    con: Backend | duckdb.DuckDBPyConnection
    deployment: str
    since: datetime | None
    until: datetime | None
    first: datetime  # the first and last arrival of the window's requests
    last: datetime
    split: datetime
    now: dict
    before: dict


def _chg(before, after) -> float | None:
    if before in (None, 0) or after is None:
        return None
    return after / before - 1.0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{round(x * 100):+d}%"  # round first: -0.1% is "+0%", never "-0%"


def _span(con: Backend | duckdb.DuckDBPyConnection, deployment: str, since: datetime | None, until: datetime | None) -> tuple:
    return backend(con).rows("deployment_span", {"deployment": deployment, "since": since, "until": until}).rows[0]


def triage(con: Backend | duckdb.DuckDBPyConnection, deployment: str, *, since: datetime | None = None,
           until: datetime | None = None, releases: list[Release] | None = None,
           prometheus_in_flight: dict[str, float] | None = None) -> Triage:
    """The troubleshooting order for ``deployment``: each step says what it found and names the causes it sees;
    the verdict is the most likely cause where latency regressed (``_verdict``)."""
    w, comp, left_out = _window(con, deployment, since, until, prometheus_in_flight)
    latency, grew, queued = _latency_split(w)
    releases_step, regs = _releases(w, releases or [])
    steps = [s for s in (_in_flight(comp), latency, _workload(w), _kv_cache(w, grew),
                         _routing(w, _scale_outs(w, releases or [])), releases_step) if s is not None]
    t = Triage(deployment, steps=[(s.name, s.finding) for s in steps],
               facts={"recent_from": w.split.isoformat(), "recent": w.now, "before": w.before},
               completeness=comp.record() if comp else {}, left_out=left_out)
    for s in steps:
        t.facts.update(s.facts)
    t.verdict, t.regressed = _verdict(w, steps, regs, queued, left_out, t.facts)
    return t


def _window(con: Backend | duckdb.DuckDBPyConnection, deployment: str, since: datetime | None, until: datetime | None,
            prometheus_in_flight: dict[str, float] | None) -> tuple[Window, Completeness | None, str]:
    """Step 0's window: only buckets whose requests have all finished (goodput/analyzer/completeness.py), or, when
    nothing is final yet (a store minutes old), everything there is, said in ``left_out``; ``ConfigError`` when the
    deployment has no requests in it."""
    asked = until
    comp, until, left_out = verdict_window(con, deployment, until, prometheus_in_flight)
    span = _span(con, deployment, since, until)
    if span[0] is None and left_out:
        until, span = asked, _span(con, deployment, since, asked)
        left_out = ("nothing final yet, so every figure includes requests still in flight"
                    + (f" ({comp.describe()})" if comp is not None else ""))
    if span[0] is None:
        why = f" that are final ({comp.describe()})" if comp is not None and left_out else ""
        raise ConfigError("--deployment", deployment, f"no requests of this deployment in the window{why}")
    split = span[0] + (span[1] - span[0]) * 3 / 4
    rel = backend(con).rows("triage", {"deployment": deployment, "since": since, "until": until, "split": split})
    periods = {row[0]: dict(zip(rel.columns, row, strict=True)) for row in rel.rows}
    return (Window(con, deployment, since, until, span[0], span[1], split, periods.get("recent", {}),
                   periods.get("before", {})), comp, left_out)


def _in_flight(comp: Completeness | None) -> Step | None:
    """Step 0: what is still in flight, and up to where the figures are final (none without a completeness)."""
    return Step("0. in flight", comp.describe()) if comp is not None else None


def _latency_split(w: Window) -> tuple[Step | None, str, bool]:
    """Step 1: where the time goes (mean seconds per segment of the recent period) and which segment grew against
    before; with it the segment that grew ("" none) and whether the recent p95 E2E tail is mostly queue (None as
    the step when the recent period has no finished request)."""
    d = decompose(w.con, ["deployment"], since=w.split, until=w.until, deployment=w.deployment).records()
    if not d:
        return None, "", False
    rec = d[0]
    prior = decompose(w.con, ["deployment"], since=w.since or w.first, until=w.split, deployment=w.deployment).records()
    # kv_transfer only where the deployment has one (P/D disaggregated)
    segs = [s for s in SEGMENTS if s != "kv_transfer" or rec["kv_transfer_s"] or prior and prior[0]["kv_transfer_s"]]
    means = {s: rec[f"{s}_s"] or 0.0 for s in segs}
    e2e, ttft = rec["e2e_p95_s"] or 0.0, rec["ttft_p95_s"] or 0.0
    growth = {s: v - (prior[0][f"{s}_s"] or 0.0) for s, v in means.items() if s != "other"} if prior else {}
    grew = max(growth, key=lambda s: growth[s]) if growth and max(growth.values()) > 0 else ""
    finding = (f"recent p95 E2E {e2e:.3f} s, TTFT {ttft:.3f} s; the p95 E2E tail is mostly {rec['e2e_p95_top_segment']}, "
               f"the TTFT tail mostly {rec['ttft_p95_top_segment']}; mean s: "
               + ", ".join(f"{k} {round(v, 3) + 0.0:.3f}" for k, v in means.items())
               + (f"; grew most: {grew} ({growth[grew]:+.3f} s mean)" if grew else ""))
    step = Step("1. latency split", finding, facts={"decomposition": rec, "segment_growth_s": growth})
    return step, grew, rec["e2e_p95_top_segment"] == "queue"


def _workload(w: Window) -> Step:
    """Step 2: did more requests arrive (counted by arrival, finished or in flight, never only the finished), or did
    the prompts grow; either is a cause. The recent period is compared with the period of equal length just before
    it (a start-up minute against a quarter hour, or a day against an hour, is no shift); request lengths only where
    each side has ``MIN_OK`` finished requests. What it cannot compare it says, and names no cause from it."""
    end = min(w.until, w.last) if w.until else w.last
    length = end - w.split
    start = max(w.split - length, w.since or w.first, w.first)
    rel = backend(w.con).rows("triage", {"deployment": w.deployment, "since": start, "until": w.until, "split": w.split})
    sides = {row[0]: dict(zip(rel.columns, row, strict=True)) for row in rel.rows}
    now, before = sides.get("recent", {}), sides.get("before", {})
    facts: dict[str, dict] = {"arrival_rate": {"from": start.isoformat(), "split": w.split.isoformat(),
                                                "until": end.isoformat()}}
    if start > w.split - length:
        return Step("2. workload", f"not enough before to compare: {(w.split - start).total_seconds():.0f} s before the "
                    f"recent {length.total_seconds():.0f} s", facts=facts)
    rate_b = arrival_count(w.con, w.deployment, start, w.split) / max((w.split - start).total_seconds(), 1)
    rate_n = arrival_count(w.con, w.deployment, w.split, end) / max(length.total_seconds(), 1)
    rate, burst = _chg(rate_b, rate_n), now.get("burstiness") or 0
    facts["arrival_rate"].update(before=rate_b, recent=rate_n)
    few = [f"{n} finished requests {side}" for side, n in (("before", before.get("ok") or 0),
                                                           ("recent", now.get("ok") or 0)) if n < MIN_OK]
    inp = None if few else _chg(before.get("input_tokens"), now.get("input_tokens"))
    outp = None if few else _chg(before.get("output_tokens"), now.get("output_tokens"))
    lengths = (f"request lengths not compared (only {' and '.join(few)}; needs {MIN_OK} each)" if few
               else f"input tokens {_pct(inp)}, output tokens {_pct(outp)}")
    step = Step("2. workload", f"against the {length.total_seconds() / 60:.0f} min before: arrival rate {_pct(rate)} "
                f"({rate_b:.2f} -> {rate_n:.2f} req/s), {lengths}, peak-minute / mean {burst:.1f}", facts=facts)
    if inp is not None and abs(inp) >= 0.2:
        step.causes.append(Cause(2, f"request lengths changed: input tokens {_pct(inp)}"))
    if rate is not None and rate >= 0.5 or burst >= 3:
        step.causes.append(Cause(2, f"more or burstier traffic: arrival rate {_pct(rate)}, peak-minute / mean "
                                    f"{burst:.1f}"))
    return step


def _kv_cache(w: Window, grew: str) -> Step:
    """Step 3: preemptions and KV-capacity rejections of the recent period (a cause from 0.05 preemptions per request
    or any rejection), and for a P/D-disaggregated deployment the KV transfer (``_kv_transfer``)."""
    now = w.now
    pre = (now.get("preemptions") or 0) / max(now.get("requests") or 1, 1)
    rejections = now.get("kv_rejections") or 0
    step = Step("3. KV cache", f"{pre:.3f} preemptions per request, {rejections} KV-capacity rejections, "
                f"{now.get('rejected') or 0} rejected and {now.get('timeouts') or 0} timed out of "
                f"{now.get('requests') or 0}")
    if pre >= 0.05 or rejections > 0:
        step.causes.append(Cause(1, f"KV cache exhausted: {pre:.3f} preemptions per request, {rejections} "
                                    "KV-capacity rejections"))
    if now.get("kv_transfer_p95") is not None:  # P/D disaggregated: the KV cache moves from prefill to decode replicas
        finding, cause = _kv_transfer(w.before, now, grew)
        step.finding += f"; {finding}"
        step.causes += [Cause(1, cause)] if cause else []
    return step


def _scale_outs(w: Window, releases: list[Release]) -> list[Release]:
    """The scale events of the window that added replicas (to more than from)."""
    def count(v: str) -> float:
        try:
            return float(v)
        except ValueError:
            return float("nan")
    return [r for r in releases if r.kind == SCALE_KIND and r.deployment in (w.deployment, "*")
            and w.first <= r.time <= w.last and count(r.to_version) > count(r.from_version)]


def _routing(w: Window, scale_outs: list[Release]) -> Step:
    """Step 4: routing balance (one replica's p95 queue wait against another's), the prefix-cache hit ratio, the
    gateway's refusals (``_gateway``) and its overload ladder and fallback routes (``_overload``). Replicas first seen
    in the recent period (a scale-out: the releases file's scale event, or the requests' replicas) started empty
    while the old ones held the backlog: their queue waits are compared among themselves, never across, and the
    scale-out is named instead of a skew."""
    reps = backend(w.con).rows("replicas", {"deployment": w.deployment, "split": w.split, "until": w.until}).rows
    held = {r for r, _, _ in backend(w.con).rows("replicas", {"deployment": w.deployment, "split": w.since or w.first,
                                                               "until": w.split}).rows}
    added = sorted(r for r, _, _ in reps if held and r not in held)
    groups = [[q for r, _, q in reps if q is not None and (r in added) == new] for new in (False, True)]
    imbalance = max((max(g) / max(min(g), 1e-3) for g in groups if len(g) > 1), default=1.0)
    hit = _chg(w.before.get("cache_hit_ratio"), w.now.get("cache_hit_ratio"))
    event = (f"{scale_outs[-1].from_version} -> {scale_outs[-1].to_version} replicas at {scale_outs[-1].time:%H:%M}"
             if scale_outs else f"{', '.join(added)} first seen from {w.split:%H:%M}" if added else "")
    scale = f"after the scale-out ({event}); " if event else ""
    if added:
        old = [q for r, _, q in reps if q is not None and r not in added]
        scale = (f"scale-out ({event}): the added replicas started empty while the old held the backlog, so their "
                 f"queue waits are not a routing skew (p95 old {max(old, default=0.0):.3f} s, added "
                 f"{max(groups[1], default=0.0):.3f} s); ")
    step = Step("4. routing and cache", f"{len(reps)} replicas, {scale}p95 queue wait max/min {imbalance:.1f}x"
                f"{' within each' if added else ''}; prefix-cache hit ratio {w.now.get('cache_hit_ratio') or 0:.2f} "
                f"({_pct(hit)})", facts={"replicas_added": added, "scale_out": event})
    waits = [q for g in groups for q in g]
    if imbalance >= 3 and max(waits) > 0.1:
        step.causes.append(Cause(3, f"routing imbalance: one replica's p95 queue wait is {imbalance:.1f}x another's"))
    if hit is not None and hit <= -0.3:
        step.causes.append(Cause(3, f"prefix-cache hit ratio fell {_pct(hit)}"))
    gateway, refused = _gateway(w.con, w.deployment, w.split, w.until, step.facts)
    overload, moved_away = _overload(w.con, w.deployment, w.split, w.until, step.facts)
    step.finding += f"; {gateway}; {overload}"
    # a fallback route that moved the tier explains the refusals it leaves behind (circuit_open, capability): first
    step.causes += [Cause(p, c) for p, c in ((3, moved_away), (3.5, refused)) if c]
    return step


def _releases(w: Window, releases: list[Release]) -> tuple[Step, list[Regression]]:
    """Step 5: each release's own evidence (``_release_evidence``), then the change points of the window (only the
    steps up) and the release blamed for one, and the scale events beside them; with the change points found."""
    moved = _release_evidence(w.con, w.deployment, releases, w.since, w.until, (w.first, w.last))
    scales = [r for r in releases if r.kind == SCALE_KIND and r.deployment in (w.deployment, "*")
              and w.first <= r.time <= w.last]
    regs = [r for r in find_regressions(w.con, releases, deployment=w.deployment, since=w.since, until=w.until)
            if r.change > 0]
    named = [(r, m) for r, m in moved if m]
    findings, causes = [], []
    if named:
        release, m = named[-1]
        what = ", ".join(f"{k} {_pct(v)}" for k, v in m.items())
        findings.append(f"{release.label()} at {release.time:%Y-%m-%d %H:%M}: after it {what}")
        causes.append(Cause(0, f"release {release.label()} at {release.time:%H:%M} ({what} after it)"))
    said, blamed = _change_point(regs)
    findings.append(said)
    causes += [blamed] if blamed and not named else []
    if moved and not named:
        findings.append(f"{', '.join(r.label() for r, _ in moved)}: no per-token cost or request length moved after it")
    if scales:
        findings.append("scale events: " + ", ".join(f"{r.from_version} -> {r.to_version} replicas at {r.time:%H:%M}"
                                                     for r in scales))
    facts = {"releases": [{"release": r.label(), "time": r.time.isoformat(), "moved": m} for r, m in moved],
             "regressions": [r.record() for r in regs[:10]]}
    return Step("5. releases", "; ".join(findings), causes, facts), regs


def _change_point(regs: list[Regression]) -> tuple[str, Cause | None]:
    """Step 5's change points (the steps up, most significant first): the first blamed on a release, and the cause
    that names it (a scale event's blame is said beside, not named); else the first, which no release explains."""
    blamed = [(r, r.blame) for r in regs if r.blame and r.blame.kind != SCALE_KIND]
    if blamed:
        top, blame = blamed[0]
        metric = top.metric.removesuffix("_s")
        return (f"{blame.release} at {blame.time:%Y-%m-%d %H:%M} preceded a {_pct(top.change)} step in p95 {metric} "
                f"({top.segment}): {top.cause}",
                Cause(0, f"release {blame.release} ({top.cause}; p95 {metric} {_pct(top.change)})"))
    if regs:
        top = regs[0]
        return (f"no release explains the {_pct(top.change)} step in p95 {top.metric.removesuffix('_s')} at "
                f"{top.time:%H:%M}: {top.cause}"), None
    return "no significant step in latency in the window", None


def _verdict(w: Window, steps: list[Step], regs: list[Regression], queued: bool, left_out: str,
             facts: dict) -> tuple[str, bool]:
    """The verdict, and whether latency regressed: "no regression" and what was checked unless p95 E2E or TTFT rose
    by ``REGRESSION``, a p95 series stepped up, or the deployment served none of its recent requests; else the most
    likely cause, said with the queue where requests wait in it. The changes it weighed go into ``facts``."""
    now, before = w.now, w.before
    e2e_chg, ttft_chg = _chg(before.get("e2e_p95"), now.get("e2e_p95")), _chg(before.get("ttft_p95"), now.get("ttft_p95"))
    facts.update({"e2e_p95_change": e2e_chg, "ttft_p95_change": ttft_chg})
    rose = [x for x in (e2e_chg, ttft_chg) if x is not None and x >= REGRESSION]
    # served none of its recent requests (all refused, timed out or failed) where it served before: no p95 to compare,
    # and worse than any regression
    down = bool(now.get("requests")) and now.get("e2e_p95") is None and before.get("e2e_p95") is not None
    facts["served_none_recently"] = down
    said = f"; {left_out}" if left_out else ""
    if not rose and not regs and not down:
        return (f"no regression: recent p95 E2E {_pct(e2e_chg)}, TTFT {_pct(ttft_chg)} against the earlier window "
                f"(threshold +{REGRESSION:.0%}) and no step up in any p95 series; checked "
                + ", ".join(s.name.split(". ", 1)[1] for s in steps if not s.name.startswith("0.")) + said), False
    causes = [c for s in steps for c in s.causes]
    # after a scale-out the queue is the backlog from before it, draining: not a pool still short
    drains = f"the backlog from before the scale-out ({facts['scale_out']}) still drains" if facts.get("scale_out") else ""
    if not causes and queued:
        causes.append(Cause(4, f"requests wait in the queue: {drains}" if drains else
                            "too little capacity: requests wait in the queue (neither more traffic, longer prompts, the "
                            "KV cache nor a release explains it)"))
    if not causes:
        return (f"it served none of its {now['requests']} recent requests and nothing explains it" if down
                else "latency rose but nothing explains it: workload, KV, routing and releases are steady") + said, True
    top = min(causes)
    queue = ("" if not queued or top.priority >= 4 else f"; requests wait in the queue: {drains}" if drains
             else "; requests wait in the queue: the pool is short of capacity for it")
    return top.text + queue + said, True


def _kv_transfer(before: dict, now: dict, grew: str) -> tuple[str, str]:
    """Step 3's KV transfer: its recent p95 and cost per prompt token against before, and the cause to name (empty:
    none) when it is the segment that grew and its cost per prompt token rose — the link between the pools slowed (a
    degraded or shared interconnect), where longer prompts would have moved more bytes at the same cost."""
    p95, per_token = _chg(before.get("kv_transfer_p95"), now["kv_transfer_p95"]), _chg(
        before.get("kv_transfer_s_per_token"), now.get("kv_transfer_s_per_token"))
    finding = (f"KV transfer prefill -> decode p95 {now['kv_transfer_p95']:.3f} s ({_pct(p95)}), "
               f"{_pct(per_token)} per prompt token")
    if grew != "kv_transfer" or per_token is None or per_token < COST_CHANGE:
        return finding, ""
    return finding, (f"the KV transfer from prefill to decode replicas slowed: p95 {before['kv_transfer_p95']:.3f} -> "
                     f"{now['kv_transfer_p95']:.3f} s, {_pct(per_token)} per prompt token (the link between the pools, "
                     "not the prompts)")


def _release_evidence(con: Backend | duckdb.DuckDBPyConnection, deployment: str, releases: list[Release],
                      since: datetime | None, until: datetime | None,
                      span: tuple[datetime, datetime]) -> list[tuple[Release, dict[str, float]]]:
    """Each release of ``deployment`` inside the window (scale events aside), with what moved after it: the
    evidence of ``EVIDENCE`` whose relative change reached its threshold (empty: nothing moved)."""
    out = []
    for r in releases:
        if r.kind == SCALE_KIND or r.deployment not in (deployment, "*") or not span[0] < r.time <= span[1]:
            continue
        res = backend(con).rows("release_evidence", {"deployment": deployment, "at": r.time, "before_s": BEFORE_S,
                                                     "since": since, "until": until})
        sides = {row[0]: dict(zip(res.columns, row, strict=True)) for row in res.rows}
        if any(sides.get(p, {}).get("ok", 0) < MIN_OK for p in ("before", "after")):
            continue
        moved: dict[str, float] = {}
        for col, name, threshold in EVIDENCE:
            ch = _chg(sides["before"][col], sides["after"][col])
            if ch is not None and abs(ch) >= threshold:
                moved[name] = ch
        out.append((r, moved))
    return out


GATEWAY_SHARE = 0.5  # the gateway's share of a deployment's rejections from which it is named a cause
# what a refusal that is not a tenant's quota says about the deployment (goodput/simulator/admission.py's reasons)
REFUSED = {"queue_timeout": "the {tier} queue timing out", "busy": "the overload ladder failing {tier} fast",
           "circuit_open": "no route left for {tier} (its circuit breaker open, no backup free)",
           "capability": "no deployment left able to serve these {tier} requests' needs"}


def _gateway(con: Backend | duckdb.DuckDBPyConnection, deployment: str, split: datetime, until: datetime | None,
             facts: dict) -> tuple[str, str]:
    """Step 4's gateway: whom it refused in the recent period and why, and the cause to name (empty: none) when its
    refusals are most of the deployment's rejections — a tenant held at its quota, or a tier queue full or timing out
    (the requests were not slow: they were never served)."""
    res = backend(con).rows("gateway_refusals", {"deployment": deployment, "split": split, "until": until,
                                                 "reasons": list(GATEWAY_REJECT_REASONS)})
    rows = [dict(zip(res.columns, r, strict=True)) for r in res.rows]
    facts["gateway_refusals"] = rows
    if not rows:
        return "the gateway refused none", ""
    refused, rejected, top = sum(r["refused"] for r in rows), rows[0]["rejected"], rows[0]
    who = (f"tenant {top['tenant']} held at its quota ({top['reason']})" if top["reason"] in QUOTA_REASONS
           else REFUSED.get(top["reason"], "the {tier} queue full").format(tier=top["tier"])
           + f" ({top['reason']}, most for tenant {top['tenant']})")
    finding = (f"the gateway refused {refused} of {top['requests']} requests ({refused / max(rejected, 1):.0%} of the "
               f"rejections), {top['refused'] / refused:.0%} of them {who}")
    share = refused / max(rejected, 1)
    return finding, (f"{who}: the gateway made {share:.0%} of the rejections ({refused} of {top['requests']} requests)"
                     if share >= GATEWAY_SHARE else "")


FALLBACK_SHARE = 0.2  # the share of a tier's requests moved by a fallback route from which it is named a cause
_ACTIONS = {"degraded": "degraded by the overload ladder", "fallback_in": "fell back to it from",
            "fallback_out": "fell back away from it to"}


def _overload(con: Backend | duckdb.DuckDBPyConnection, deployment: str, split: datetime, until: datetime | None,
              facts: dict) -> tuple[str, str]:
    """Step 4's overload ladder and fallback routes: the share of each tier's recent requests degraded here, fallen
    back to it from a primary, or fallen back away from it to a backup (the largest part each), and the cause to
    name (empty: none) when a fallback moved ``FALLBACK_SHARE`` of a tier: requests served elsewhere, or load from
    elsewhere, explain latency that degradation (which makes requests cheaper) does not."""
    res = backend(con).rows("gateway_overload", {"deployment": deployment, "split": split, "until": until})
    rows = [dict(zip(res.columns, r, strict=True)) for r in res.rows]
    facts["gateway_overload"] = rows
    if not rows:
        return "nothing degraded or fallen back", ""
    parts: dict[tuple[str, str], list[dict]] = {}
    for r in rows:  # largest first (the query's order)
        parts.setdefault((r["tier"], r["action"]), []).append(r)
    said, cause = [], ""
    for (tier, action), rs in parts.items():
        share = sum(r["n"] for r in rs) / max(rs[0]["requests"], 1)
        top = rs[0]
        what = top["detail"] + (f" ({top['reason']})" if top["reason"] else "")
        said.append(f"{share:.0%} of {tier} {_ACTIONS[action]} ({what} most)" if action == "degraded"
                    else f"{share:.0%} of {tier} {_ACTIONS[action]} {what}")
        if action != "degraded" and share >= FALLBACK_SHARE and not cause:
            whose = "its" if action == "fallback_out" else "the primary's"
            cause = (f"{tier} requests moved by a fallback route: {share:.0%} {_ACTIONS[action]} {what}"
                     + (f" ({whose} circuit breaker is open)" if top["reason"] == "circuit_open" else ""))
    return "; ".join(said), cause
