"""``goodput demo --headless``: the scripted incident, checked end to end, for CI.

It waits for the page in the webhook log, reads it back the way the console's Overview does (Alertmanager's API
through ``console.pages.overview.alert_rows``), asks the analyzer — as the Releases page does — whether the
prompt-template release is blamed for the RAG deployment's regression, and waits for the alert to resolve after
the replicas are added. Each wait has a deadline in virtual seconds; a miss prints what was seen and exits 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from analyzer.regressions import scan_regressions
from analyzer.releases import load_releases
from console import traces
from console.filters import Filters
from console.prom import Alertmanager, Unreachable
from console.tables import alert_rows, verdict_table
from goodput.foundation.yamlfile import load_mapping
from goodput.incident import ALERT, COLD_START_S, INCIDENT_AT_S, RESCUE_AT_S, rag_deployment

__all__ = ["check_incident"]

PAGE_BY_S = RESCUE_AT_S  # it must page before the replicas come
RESOLVE_BY_S = RESCUE_AT_S + COLD_START_S + 900.0
SLACK_S = 60.0  # wall seconds for Prometheus, Alertmanager and the webhook on a loaded machine


def _log_lines(demo, status: str, deployment: str) -> list[str]:
    if not demo.alerts_log.exists():
        return []
    out = []
    for line in demo.alerts_log.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "pager" and parts[2] == status and parts[3] == ALERT \
                and f"deployment={deployment}" in parts[4:]:
            out.append(line)
    return out


def _wait(demo, what: str, check: Callable[[], object], by_virtual_s: float, every_s: float = 0.5) -> object:
    deadline = demo.live.t0 + by_virtual_s / demo.args.speed + SLACK_S
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise TimeoutError(f"no {what} by virtual second {by_virtual_s:.0f} (+{SLACK_S:.0f} s); last seen: {last!r}")


def _now(demo) -> str:
    return f"virtual {demo.live.virtual_now():6.0f} s"


def check_incident(demo) -> int:
    a = demo.args
    dep = rag_deployment(load_mapping(demo.fleet_path, "a fleet"), str(demo.fleet_path))
    am = next(p.url for p in demo.processes if p.name == "alertmanager")
    print(f"goodput demo --headless: {dep}, speed x{a.speed:g}; release at virtual {INCIDENT_AT_S:.0f} s, "
          f"replicas added at {RESCUE_AT_S:.0f} s", flush=True)
    try:
        page = _wait(demo, f"page of {ALERT} for {dep} in {demo.alerts_log}",
                     lambda: _log_lines(demo, "firing", dep), PAGE_BY_S)
        print(f"  {_now(demo)}: PAGE {page[0]}", flush=True)

        def overview() -> list[dict]:
            try:
                alerts = Alertmanager(am).alerts()
            except Unreachable:
                return []
            rows = alert_rows(alerts, dep, None)
            return [x for x in alerts if x["labels"].get("alertname") == ALERT] if (rows["alert"] == ALERT).any() else []

        shown = _wait(demo, "the alert in the console's Overview (Alertmanager's API)", overview, PAGE_BY_S)
        link = shown[0]["annotations"].get("console", "")
        print(f"  {_now(demo)}: the Overview lists {ALERT} for {dep}; the alert links to {link}", flush=True)
        if not a.no_console:
            query = parse_qs(urlsplit(link).query)
            filters, bad = Filters.from_query(query)
            if bad or filters.deployment != dep or filters.tier != "P1":
                raise TimeoutError(f"the alert's console link {link!r} does not select {dep} tier P1")

        def blamed() -> list[str]:
            releases = load_releases(a.out / "releases.yaml") if (a.out / "releases.yaml").exists() else []
            with traces.snapshot(demo.db) as con:
                found = scan_regressions(con, releases, bucket="1 minute", deployment=dep).found
            table = verdict_table([r.record() for r in found], None)
            hit = table[table["blamed"] & table["release"].fillna("").str.startswith("prompt_template")
                        & (table["change"] > 0)]
            return [f"p95 {r.metric} {r.change:+.0%} after {r.release}: {r.cause}" for r in hit.itertuples()]

        verdicts = _wait(demo, "the Releases page blaming the prompt-template release", blamed, RESOLVE_BY_S,
                         every_s=3.0)
        print(f"  {_now(demo)}: Releases blames the release: {verdicts[0]}", flush=True)
        resolved = _wait(demo, f"{ALERT} resolved", lambda: _log_lines(demo, "resolved", dep), RESOLVE_BY_S)
        at = demo.live.virtual_now()
        print(f"  {_now(demo)}: RESOLVED {resolved[0]}", flush=True)
        if at < RESCUE_AT_S:
            raise TimeoutError(f"{ALERT} resolved at virtual {at:.0f} s, before the replicas were added: it flapped")
    except TimeoutError as e:
        print(f"goodput demo --headless: FAILED: {e}", flush=True)
        log = demo.alerts_log.read_text() if demo.alerts_log.exists() else "(no alerts yet)"
        print("webhook log:\n" + log[-3000:], flush=True)
        return 1
    print("goodput demo --headless: paged, attributed and resolved.", flush=True)
    return 0
