"""The demo's timeline, told in the terminal as it happens: releases, scale-outs, replicas ready, pages, resolutions.

Fleet events come from the live fleet itself (the events it has applied, each at its own virtual second; replicas
once their cold start is over, however they were added); pages from what Alertmanager posts to the webhook
(``startsAt`` for a firing alert, ``endsAt`` for a resolved one), each told once per change of its status. Every
line carries the wall-clock time (UTC, as Prometheus, the console and the trace store show it) and the fleet's
virtual time since its start::

    [20:41:07 UTC  T+08:00] RELEASE   rag-70b-h200 prompt_template rag-v3 -> rag-v4: retrieval returns ...
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

__all__ = ["Timeline", "alert_line", "alert_times", "parse_time"]

NARRATED_RECEIVERS = ("pager", "ticket")


def parse_time(ts: str) -> datetime | None:
    """An RFC 3339 time from Alertmanager (nanosecond fractions and Go's zero time included); None if unset."""
    if not ts or ts.startswith("0001-"):
        return None
    head, _, frac = ts.rstrip("Z").partition(".")
    frac = frac.split("+")[0].split("-")[0][:6]
    try:
        return datetime.fromisoformat(head + (f".{frac}" if frac else "")).replace(tzinfo=UTC)
    except ValueError:
        return None


def alert_times(alert: dict) -> tuple[str, str]:
    """(start, end) as the alerts log writes them: RFC 3339, end ``-`` while the alert fires."""
    start = alert.get("startsAt") or "-"
    end = alert.get("endsAt") if alert.get("status") == "resolved" and parse_time(alert.get("endsAt", "")) else None
    return start, end or "-"


def alert_line(receiver: str, alert: dict) -> str:
    """One line of ``alerts.log``: start, end, receiver, status, alert name, labels."""
    labels = alert.get("labels") or {}
    start, end = alert_times(alert)
    return (f"{start} {end} {receiver:6s} {alert.get('status', ''):8s} {labels.get('alertname', '')} "
            + " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname"))


class Timeline:
    """Narrates one live fleet (``goodput.simulator.live.LiveFleet``) and the alerts posted about it."""

    def __init__(self, live, out: TextIO | None = None, every_s: float = 0.5) -> None:
        self.live = live
        self.out = out or sys.stdout
        self.every_s = every_s
        self.lines: list[tuple[float, str]] = []  # (virtual second, line), as printed
        self._events_told = 0
        self._ready_told: set[tuple[int, int]] = set()
        self._status: dict[str, str] = {}  # alert fingerprint -> last status told
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def stamp(self, virtual_s: float) -> str:
        wall = datetime.fromtimestamp(self.live.started + virtual_s / self.live.speed, UTC)
        sign, v = ("-", -virtual_s) if virtual_s < 0 else ("", virtual_s)
        return f"[{wall:%H:%M:%S} UTC  T{sign or '+'}{int(v // 60):02d}:{int(v % 60):02d}]"

    def say(self, virtual_s: float, what: str, text: str) -> None:
        line = f"{self.stamp(virtual_s)} {what:9s} {text}"
        with self._lock:
            self.lines.append((virtual_s, line))
        print(line, file=self.out, flush=True)

    def poll(self) -> None:
        """Tell what the fleet did since the last poll (call it often; the engine thread keeps its clock)."""
        told: list[tuple[float, str, str]] = []
        with self.live.lock:
            fleet = self.live.fleet
            applied = list(fleet.events[self._events_told:fleet.next_event])
            self._events_told = fleet.next_event
            sizes = {d.cfg.name: sum(r.alive for r in d.replicas) for d in fleet.deployments}
            added: dict[tuple[str, float], int] = {}
            for ev in applied:
                if ev.kind == "release":
                    told.append((ev.at, "RELEASE", f"{ev.deployment} {ev.release_kind} {ev.from_version} -> "
                                                   f"{ev.to_version}" + (f": {ev.note}" if ev.note else "")))
                elif ev.kind == "replica_added":
                    added[(ev.deployment, ev.at)] = added.get((ev.deployment, ev.at), 0) + 1
                elif ev.kind == "replica_lost":
                    told.append((ev.at, "LOST", f"{ev.deployment} replica {ev.replica}"))
            for (dep, at), n in added.items():
                cold = max((c.total_s for (d, _, _), (asked, c) in fleet.cold_starts.items()
                            if fleet.deployments[d].cfg.name == dep and asked == at), default=0.0)
                now = sizes.get(dep, n)
                told.append((at, "SCALE-OUT", f"{dep} {now - n} -> {now} replicas ({n} added, cold start "
                                              f"{cold:g} s)"))
            for d in fleet.deployments:
                ready = [r for r in d.replicas if r.alive and r.available_from <= fleet.now]
                new = [r for r in ready if (d.index, r.index) not in self._ready_told]
                self._ready_told.update((d.index, r.index) for r in new)
                if new and any(r.available_from > 0 for r in new):
                    told.append((max(r.available_from for r in new), "READY",
                                 f"{d.cfg.name} {len(ready)} of {sizes[d.cfg.name]} replicas serving "
                                 f"({len(new)} new)"))
        for at, what, text in sorted(told, key=lambda t: t[0]):
            self.say(at, what, text)

    def alert(self, receiver: str, alert: dict) -> None:
        """An alert as Alertmanager posted it: told when its status changes (repeats and resends are not)."""
        if receiver not in NARRATED_RECEIVERS:
            return
        status = alert.get("status", "")
        key = f"{receiver}/{alert.get('fingerprint') or sorted((alert.get('labels') or {}).items())}"
        with self._lock:
            if self._status.get(key) == status:
                return
            self._status[key] = status
        labels = alert.get("labels") or {}
        start, end = parse_time(alert.get("startsAt", "")), parse_time(alert.get("endsAt", ""))
        at = end if status == "resolved" and end else start
        virtual = (at.timestamp() - self.live.started) * self.live.speed if at else self.live.virtual_now()
        what = {"firing": "PAGE" if receiver == "pager" else "TICKET", "resolved": "RESOLVED"}.get(status, status)
        where = " ".join(f"{k}={labels[k]}" for k in ("deployment", "tier", "route") if k in labels)
        self.say(virtual, what, f"{labels.get('alertname', '?')} {where}".rstrip()
                 + (f" (fired at {self.stamp((start.timestamp() - self.live.started) * self.live.speed)})"
                    if status == "resolved" and start else ""))

    def _run(self, extra: Callable[[], None] | None) -> None:
        while not self._stop.wait(self.every_s):
            self.poll()
            if extra is not None:
                extra()

    def start(self, extra: Callable[[], None] | None = None) -> Timeline:
        """Poll in a thread; ``extra`` runs after each poll (the demo's watch on its children)."""
        self._thread = threading.Thread(target=self._run, args=(extra,), name="timeline", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.poll()
