"""``goodput demo --headless``: the scripted incident's story, checked end to end, for CI.

In order, each with a deadline in virtual seconds (a miss prints what was seen):

1. before the release, the RAG deployment met its SLO and was not short of replicas, as the Overview reads
   Prometheus (TTFT and TPOT attainment over the five minutes before it, replicas available vs required);
2. the release pages ``LLMQueueWaitRisingReplicasShort`` (the webhook log), before the replicas come, and the
   Overview lists it (Alertmanager's API through ``goodput.console.tables.alert_rows``) with a console link for the
   deployment and tier;
3. the release is found: by the Releases page's verdicts, and by exactly the ``ingest`` and ``regressions``
   commands the demo prints, within ten minutes of the page;
4. the alert resolves after the replicas are added, not before;
5. nothing pages for the deployment once the added replicas serve (watched ``QUIET_S`` after the resolution);
6. all along, every virtual minute: the arrival rate the console's SQL and triage read from the store is within
   ``ARRIVALS_WITHIN`` of the fleet's true arrivals (``LiveFleet.arrived``), and the regression search never reports
   an improvement in queue wait, TTFT or E2E before the added replicas serve (no p95 "recovery" from survivors).

A check that misses does not stop the ones that do not depend on it; the run exits 1 when any missed. A child
(Prometheus, Alertmanager) that dies fails the run at once, naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from goodput.analyzer.completeness import arrival_count
from goodput.analyzer.regressions import scan_regressions
from goodput.analyzer.releases import load_releases
from goodput.analyzer.triage import triage
from goodput.console import traces
from goodput.console.filters import Filters
from goodput.console.prom import Alertmanager, Prometheus
from goodput.console.tables import alert_rows, verdict_table
from goodput.demo.incident import ALERT, COLD_START_S, INCIDENT_AT_S, RESCUE_AT_S
from goodput.demo.timeline import parse_time
from goodput.foundation.errors import ConfigError
from goodput.foundation.promapi import PromError
from goodput.simulator.live import ARRIVED_BIN_S

__all__ = ["check_incident", "log_entries"]

PAGE_BY_S = RESCUE_AT_S  # it must page before the replicas come
READY_AT_S = RESCUE_AT_S + COLD_START_S
RESOLVE_BY_S = READY_AT_S + 900.0
FOUND_WITHIN_S = 600.0  # the printed commands name the release within this long after the page
QUIET_S = 600.0  # after the resolution, this long without a new page
SLACK_S = 60.0  # wall seconds for Prometheus, Alertmanager and the webhook on a loaded machine
RELEASE = "prompt_template rag-v3 -> rag-v4"
ARRIVALS_WITHIN = 0.10  # the store's arrival rate against the fleet's true arrivals
SETTLED_S = 120.0  # virtual seconds a minute needs behind it before its spans are in the console's database
LAG_GRACE_S = 30.0  # real seconds the last check of arrivals waits for an ingest loop lagging on a loaded machine
RECOVERY_METRICS = ("queue_s", "ttft_s", "e2e_s")
T = TypeVar("T")


class Missed(Exception):
    """A check missed its deadline or saw the wrong thing."""


class Died(Exception):
    """A child of the demo exited."""


@dataclass(frozen=True)
class LogEntry:
    """One line of the demo's alerts.log (goodput/demo/timeline.py ``alert_line``)."""

    start: datetime | None
    end: datetime | None
    receiver: str
    status: str
    alertname: str
    labels: dict[str, str]
    line: str


def log_entries(text: str) -> list[LogEntry]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        labels = dict(p.split("=", 1) for p in parts[5:] if "=" in p)
        out.append(LogEntry(parse_time(parts[0]), parse_time(parts[1]), parts[2], parts[3], parts[4], labels, line))
    return out


def _regression(row: dict) -> bool:
    """A verdict of a slowdown: its own word where the analyzer gives one (issue 21's ``direction``), else its sign
    (a drop blamed on the release is the scale-out's doing, not the release's)."""
    return row["direction"] == "regression" if "direction" in row else (row.get("change") or 0) > 0


class Story:
    def __init__(self, demo) -> None:
        self.demo = demo
        self.dep = demo.incident_deployment()
        self.passed: list[str] = []
        self.failed: list[str] = []

    def virtual(self, at: datetime) -> float:
        return (at.timestamp() - self.demo.live.started) * self.demo.live.speed

    def wall(self, virtual_s: float) -> datetime:
        return datetime.fromtimestamp(self.demo.live.started + virtual_s / self.demo.live.speed, UTC)

    def say(self, ok: bool, what: str) -> None:
        (self.passed if ok else self.failed).append(what)
        print(f"  {'ok  ' if ok else 'FAIL'} {self.demo.timeline.stamp(self.demo.live.virtual_now())} {what}",
              flush=True)

    def pages(self, status: str, alertname: str | None = None) -> list[LogEntry]:
        log = self.demo.alerts_log
        entries = log_entries(log.read_text()) if log.exists() else []
        return [e for e in entries if e.receiver == "pager" and e.status == status
                and (alertname is None or e.alertname == alertname) and e.labels.get("deployment") == self.dep]

    def wait(self, what: str, check: Callable[[], T | None], by_virtual_s: float, every_s: float = 0.5,
             slack_s: float = SLACK_S) -> T:
        """``check``'s first true answer, asked every ``every_s`` until the virtual deadline (and ``slack_s``)."""
        deadline = self.demo.live.t0 + by_virtual_s / self.demo.args.speed + slack_s
        while True:  # looked at once at least, however late
            if self.demo.died:
                raise Died(", ".join(f"{n} exited with code {c}" for n, c in self.demo.died.items()))
            last = check()
            if last:
                return last
            if time.monotonic() >= deadline:
                break
            time.sleep(every_s)
        raise Missed(f"no {what} by virtual second {by_virtual_s:.0f} (+{SLACK_S:.0f} s); last seen: {last!r}")

    # ------------------------------------------------------------------ the checks

    def slo_before(self) -> None:
        """TTFT and TPOT attainment over the five minutes before the release, and replicas, as the Overview reads."""
        self.wait("release", lambda: self.demo.live.virtual_now() >= INCIDENT_AT_S + 1, INCIDENT_AT_S)
        prom = Prometheus(next(p.url for p in self.demo.processes if p.name == "prometheus"))
        at, sel = self.wall(INCIDENT_AT_S - 1), f'{{deployment="{self.dep}"}}'
        time.sleep(2.0)  # the scrape and rule evaluation of that second
        objective = {(s.labels["tier"], s.labels["route"]): s.value
                     for s in prom.query("tier_route:llm_slo_objective:config", at)}
        att = {f"{kind} {s.labels['tier']}/{s.labels['route']}": (s.value, objective.get((s.labels["tier"],
                                                                                          s.labels["route"])))
               for kind in ("ttft", "tpot")
               for s in prom.query(f"deployment_tier_route:llm_slo_{kind}:attainment_5m{sel}", at)}
        avail = [s.value for s in prom.query(f"deployment:llm_replicas_available:max{sel}", at)]
        need = [s.value for s in prom.query(f"deployment:llm_replicas_required:ceil{sel}", at)]
        met = bool(att) and all(o is not None and v >= o for v, o in att.values())
        short = not avail or not need or need[0] > avail[0]
        shown = ", ".join(f"{k} {v:.1%} (objective {o:.0%})" if o is not None else f"{k} {v:.1%}"
                          for k, (v, o) in sorted(att.items()))
        self.say(met and not short, f"before the release {self.dep} met its SLO ({shown or 'no attainment'}) with "
                                    f"{avail[0] if avail else '?':g} replicas available, "
                                    f"{need[0] if need else '?':g} required")

    def page(self) -> LogEntry:
        page = self.wait(f"page of {ALERT} for {self.dep} in {self.demo.alerts_log}",
                         lambda: self.pages("firing", ALERT), PAGE_BY_S)[0]
        self.say(True, f"paged: {page.line}")
        return page

    def overview(self) -> None:
        am = Alertmanager(next(p.url for p in self.demo.processes if p.name == "alertmanager"))

        def listed() -> list[dict]:
            try:
                alerts = am.alerts()
            except PromError:
                return []
            rows = alert_rows(alerts, self.dep, None)
            return [x for x in alerts if x["labels"].get("alertname") == ALERT] if (rows["alert"] == ALERT).any() else []

        link = self.wait("the alert in the console's Overview (Alertmanager's API)", listed, PAGE_BY_S)[0][
            "annotations"].get("console", "")
        ok = True
        if not self.demo.args.no_console:
            filters, bad = Filters.from_query(parse_qs(urlsplit(link).query))
            ok = not bad and filters.deployment == self.dep and filters.tier == "P1"
        self.say(ok, f"the Overview lists {ALERT} for {self.dep}; the alert links to {link}")

    def releases_page(self) -> None:
        a = self.demo.args

        def blamed() -> list[str]:
            releases = load_releases(a.out / "releases.yaml") if (a.out / "releases.yaml").exists() else []
            with traces.snapshot(self.demo.db) as con:
                found = scan_regressions(con, releases, bucket="1 minute", deployment=self.dep).found
            table = verdict_table([r.record() for r in found], None)
            hit = table[table["blamed"] & table["release"].fillna("").str.startswith("prompt_template")
                        & (table["change"] > 0)]
            return [f"p95 {r.metric} {r.change:+.0%} after {r.release}: {r.cause}" for r in hit.itertuples()]

        verdicts = self.wait("the Releases page blaming the prompt-template release", blamed, RESOLVE_BY_S, 3.0)
        self.say(True, f"Releases blames the release: {verdicts[0]}")

    def printed_commands(self, paged_at_s: float) -> None:
        """``ingest`` then ``regressions --format json``, exactly as the demo prints them, run over and over from the
        page on; the release must be named by a run that began within FOUND_WITHIN_S of the page (in virtual time:
        the store then held what a person running them at that moment would have had)."""
        cmds = self.demo.commands(self.demo.args.out / "headless-analysis.duckdb")
        by = paged_at_s + FOUND_WITHIN_S

        def run(argv: list[str]) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "goodput", *argv], capture_output=True, text=True, timeout=120)

        def found() -> tuple[float, list[str]] | None:
            began = self.demo.live.virtual_now()
            if run(cmds["ingest"]).returncode != 0:
                return None
            r = run([*cmds["regressions"], "--format", "json"])
            rows = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
            hits = [f"{row.get('metric')} {row.get('change', 0):+.0%} after {row['release']}: {row.get('cause')}"
                    for row in rows if row.get("deployment") == self.dep and row.get("blamed")
                    and str(row.get("release") or "").startswith(RELEASE) and _regression(row)]
            return (began, hits) if hits or began > by else None

        began, hits = self.wait(f"'{RELEASE}' blamed by `goodput {' '.join(cmds['regressions'])}`", found, by, 1.0)
        stamp = self.demo.timeline.stamp
        if hits and began <= by:
            self.say(True, f"the printed regressions command, run at {stamp(began)} ({began - paged_at_s:.0f} s after "
                           f"the page, {FOUND_WITHIN_S:.0f} s allowed), finds the release: {hits[0]}")
        else:
            self.say(False, f"the printed regressions command did not name '{RELEASE}' in any run begun within "
                            f"{FOUND_WITHIN_S:.0f} s of the page (by {stamp(by)}; its last run began at {stamp(began)}"
                            + (f" and found it: {hits[0]})" if hits else ")"))

    def resolved(self) -> float:
        got = self.wait(f"{ALERT} resolved", lambda: self.pages("resolved", ALERT), RESOLVE_BY_S)[0]
        at = self.virtual(got.end) if got.end else self.demo.live.virtual_now()
        self.say(at >= RESCUE_AT_S and got.end is not None,
                 f"resolved at {self.demo.timeline.stamp(at)} (after the scale-out at "
                 f"{self.demo.timeline.stamp(RESCUE_AT_S)}; ends {got.end and got.end.isoformat()}): {got.line}")
        return at

    def true_arrivals(self, t0_s: float, t1_s: float) -> float:
        """The fleet's arrivals for the deployment in virtual [t0_s, t1_s), bins at the edges taken pro rata."""
        total = 0.0
        for (dep, b), n in list(self.demo.live.arrived.items()):
            lo, hi = b * ARRIVED_BIN_S, (b + 1) * ARRIVED_BIN_S
            if dep == self.dep and hi > t0_s and lo < t1_s:
                total += n * (min(hi, t1_s) - max(lo, t0_s)) / ARRIVED_BIN_S
        return total

    def _store_time(self, virtual_s: float) -> datetime:
        """The store's timestamp (naive UTC) of a virtual second: spans are stamped start + virtual seconds."""
        return datetime.fromtimestamp(self.demo.live.started + virtual_s, UTC).replace(tzinfo=None)

    def _virtual_of(self, value: str) -> float:
        at = datetime.fromisoformat(value)
        return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() - self.demo.live.started

    def _minutes_off(self, con: Any, upto_s: float, good: set[int], off: dict[int, str]) -> None:
        """Judge each settled minute's arrivals in the store against the fleet's; a minute off is judged again on the
        next sample, since on a loaded machine the ingest loop can lag past ``SETTLED_S`` (a lag, not a loss: only a
        minute still off at the end counts)."""
        for m in range(int((upto_s - SETTLED_S) // 60)):
            if m in good:
                continue
            truth = self.true_arrivals(m * 60.0, m * 60.0 + 60.0)
            seen = arrival_count(con, self.dep, self._store_time(m * 60.0), self._store_time(m * 60.0 + 60))
            if truth >= 20 and abs(seen - truth) > ARRIVALS_WITHIN * truth:
                off[m] = f"minute {m}: store {seen}, fleet {truth:.0f}"
            else:
                good.add(m)
                off.pop(m, None)

    def watch_figures(self, stop: threading.Event) -> None:
        """Check 6, sampled every virtual minute until ``stop``: each minute's arrivals once it has settled, triage's
        two arrival rates, and no improvement verdict between the release and the replicas serving (a change point
        before the release is the warm-up's, not a recovery: a loaded machine once gave the first minutes a queue)."""
        good: set[int] = set()
        off: dict[int, str] = {}
        misses: list[str] = []
        samples, recoveries, last_s = 0, [], 0.0
        released = self._store_time(INCIDENT_AT_S)
        while not stop.wait(60.0 / self.demo.live.speed):
            now = self.demo.live.virtual_now()
            if not self.demo.db.exists():
                continue
            try:
                with traces.snapshot(self.demo.db) as con:
                    self._minutes_off(con, now, good, off)
                    last_s = now
                    try:
                        t = triage(con, self.dep)
                    except ConfigError:  # no requests of the deployment final yet: no figure, not a failure
                        t = None
                    if t is not None and "arrival_rate" in t.facts:
                        r = t.facts["arrival_rate"]
                        for side, a, b in (("before", r["from"], r["split"]), ("recent", r["split"], r["until"])):
                            v0, v1 = self._virtual_of(a), self._virtual_of(b)
                            if v1 - v0 < 60:
                                continue
                            truth = self.true_arrivals(v0, v1) / (v1 - v0)
                            samples += 1
                            if truth > 0 and abs(r[side] - truth) > ARRIVALS_WITHIN * truth:
                                misses.append(f"triage at {self.demo.timeline.stamp(now)}, {side}: "
                                              f"{r[side]:.2f} req/s, fleet {truth:.2f}")
                    if now < READY_AT_S:  # a false recovery is one of the incident's: after the release
                        recoveries += [f"{r.metric} {r.change:+.0%} at {r.time:%H:%M:%S}"
                                       for r in scan_regressions(con, [], deployment=self.dep).found
                                       if r.direction == "improvement" and r.metric in RECOVERY_METRICS
                                       and r.time.replace(tzinfo=None) >= released]
            except (traces.StoreBusy, traces.StoreMissing):  # the ingest loop is replacing it: the next sample reads it
                continue
        deadline = time.monotonic() + LAG_GRACE_S
        while off and time.monotonic() < deadline:  # the minutes a lagging ingest left off, once more
            try:
                with traces.snapshot(self.demo.db) as con:
                    self._minutes_off(con, last_s, good, off)
            except (traces.StoreBusy, traces.StoreMissing):
                pass
            if off:
                time.sleep(1.0)
        misses = list(off.values()) + misses
        self.say(not misses and len(good) + len(off) >= 10,
                 f"arrival rate of {self.dep}: {len(good) + len(off)} minutes and {samples} triage windows against the "
                 f"fleet's true arrivals, {len(misses)} off by more than {ARRIVALS_WITHIN:.0%}"
                 + (f" ({'; '.join(misses[:5])})" if misses else ""))
        self.say(not recoveries, "no improvement in queue wait, TTFT or E2E reported before the replicas serve"
                 + (f" (reported: {'; '.join(sorted(set(recoveries))[:5])})" if recoveries else ""))

    def quiet_after(self, resolved_at_s: float) -> None:
        """No new page for the deployment once the added replicas serve (one that was not already firing then),
        for QUIET_S after the resolution."""
        ready = self.wall(READY_AT_S).timestamp()
        until = max(resolved_at_s, READY_AT_S) + QUIET_S

        def new_pages() -> list[str]:
            firing = [(t, a) for t, r, a in list(self.demo.received) if r == "pager" and a.get("status") == "firing"
                      and (a.get("labels") or {}).get("deployment") == self.dep]
            before = {a.get("fingerprint") for t, a in firing if t < ready}
            stamp = self.demo.timeline.stamp
            return [f"{a['labels'].get('alertname')} at {stamp((t - self.demo.live.started) * self.demo.live.speed)}"
                    for t, a in firing if t >= ready and a.get("fingerprint") not in before]

        try:
            late = self.wait("a page after the fix", new_pages, until, 1.0, slack_s=0.0)
        except Missed:
            self.say(True, f"no new page for {self.dep} from the replicas' readiness at "
                           f"{self.demo.timeline.stamp(READY_AT_S)} to {self.demo.timeline.stamp(until)}")
            return
        self.say(False, "paged after the fix: " + "; ".join(late))


def check_incident(demo) -> int:
    if {p.name for p in demo.processes} < {"prometheus", "alertmanager"}:
        print("goodput demo --headless: needs Prometheus and Alertmanager (Debian's prometheus and "
              "prometheus-alertmanager; without --no-prometheus)", flush=True)
        return 2
    story = Story(demo)
    print(f"goodput demo --headless: {story.dep}, speed x{demo.args.speed:g}; release at "
          f"{demo.timeline.stamp(INCIDENT_AT_S)}, replicas added at {demo.timeline.stamp(RESCUE_AT_S)}", flush=True)

    def independent(check: Callable[[], object]) -> None:
        try:
            check()
        except Missed as e:
            story.say(False, str(e))

    stop = threading.Event()

    def watch() -> None:
        try:
            story.watch_figures(stop)
        except Exception as e:  # noqa: BLE001 - in its thread a crash would end check 6 unheard: it is a failed check
            story.say(False, f"check 6 stopped: {type(e).__name__}: {e}")

    watcher = threading.Thread(target=watch, name="figures", daemon=True)
    watcher.start()
    try:
        independent(story.slo_before)
        page = story.page()
        paged_at = story.virtual(page.start) if page.start else demo.live.virtual_now()
        independent(story.overview)
        independent(lambda: story.printed_commands(paged_at))
        independent(story.releases_page)
        story.quiet_after(story.resolved())
    except (Missed, Died) as e:
        story.say(False, str(e))
    finally:
        stop.set()
        watcher.join(timeout=120)
    if story.failed:
        print(f"goodput demo --headless: FAILED {len(story.failed)} of {len(story.passed) + len(story.failed)} checks:",
              flush=True)
        for f in story.failed:
            print(f"  - {f}", flush=True)
        log = demo.alerts_log.read_text() if demo.alerts_log.exists() else "(no alerts yet)"
        print("webhook log:\n" + log[-3000:], flush=True)
        return 1
    print("goodput demo --headless: met before, paged, found, resolved, quiet after.", flush=True)
    return 0
