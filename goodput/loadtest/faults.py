"""Faults during a load test, and how long the SLO took to notice and to come back.

``--fault replica_lost@120s[:deployment]`` and ``replica_added@300s[:deployment]`` are fired by
``FaultDriver`` through the live fleet's admin API (``goodput.simulator.admin_api``, ``fleet serve --admin-port``);
``abort_rate=0.02`` is the client's (it disconnects that fraction of streams mid-way), so the driver
skips it. ``detect_and_recover`` is pure: it reads the measured records only.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from goodput.foundation.errors import ConfigError
from goodput.loadtest.records import RequestRecord

__all__ = ["TIMED_KINDS", "Fault", "FaultDriver", "abort_summary", "detect_and_recover", "fault_summary", "parse_faults"]

TIMED_KINDS = ("replica_lost", "replica_added")
_TIMED = re.compile(r"^(replica_lost|replica_added)@([0-9]+(?:\.[0-9]+)?)(ms|s|m)?(?::([A-Za-z0-9_.-]+))?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str                      # replica_lost | replica_added | abort_rate
    at_s: float | None = None      # run clock; None for abort_rate (it lasts the whole run)
    deployment: str | None = None  # None: the fleet's first deployment
    rate: float | None = None      # abort_rate only: fraction of streams the client abandons

    def as_dict(self) -> dict:
        return {"kind": self.kind, "at_s": self.at_s, "deployment": self.deployment, "rate": self.rate}


def parse_faults(specs: list[str]) -> list[Fault]:
    """``--fault`` values in order; a spec that does not parse is a ConfigError naming it."""
    faults = []
    for spec in specs:
        text = spec.strip()
        if text.startswith("abort_rate="):
            raw = text.removeprefix("abort_rate=")
            try:
                rate = float(raw)
            except ValueError:
                rate = math.nan
            if not 0.0 <= rate <= 1.0:  # NaN fails too
                raise ConfigError("--fault", spec, "abort_rate must be a fraction between 0 and 1 (e.g. abort_rate=0.02)")
            faults.append(Fault("abort_rate", rate=rate))
            continue
        m = _TIMED.match(text)
        if m is None:
            raise ConfigError("--fault", spec, "expected replica_lost@SECONDS[:DEPLOYMENT], replica_added@SECONDS"
                                               "[:DEPLOYMENT] or abort_rate=FRACTION (e.g. replica_lost@120s)")
        at = float(m.group(2)) * _UNIT[m.group(3)]
        faults.append(Fault(m.group(1), at_s=at, deployment=m.group(4)))
    return faults


def _due(fault: Fault) -> float:
    """A timed fault's run-clock time (``parse_faults`` gives every timed kind one)."""
    if fault.at_s is None:
        raise ValueError(f"a {fault.kind} fault needs a time (at_s)")
    return fault.at_s


class FaultDriver:
    """Fires the timed faults at their run-clock times through the admin API at ``admin_url``.

    ``clock()`` is the run clock (seconds since the run started). Each firing is recorded in ``fired``
    (with the replica the fleet answered, or the error): a fault that cannot be fired is reported, never
    fatal to the run.
    """

    def __init__(self, admin_url: str, faults: Sequence[Fault], clock: Callable[[], float],
                 timeout_s: float = 10.0) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.faults = sorted((f for f in faults if f.kind in TIMED_KINDS), key=_due)
        self.clock = clock
        self.timeout_s = timeout_s
        self.fired: list[dict] = []

    async def run(self) -> None:
        import httpx

        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for fault in self.faults:
                delay = _due(fault) - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                entry = fault.as_dict() | {"fired_s": self.clock()}
                try:
                    entry |= await self._fire(client, fault)
                except (httpx.HTTPError, ValueError, LookupError) as e:
                    entry["error"] = f"{type(e).__name__}: {e}"
                self.fired.append(entry)

    def unfired(self) -> list[dict]:
        """The timed faults not fired (the run ended first), as ``fired`` entries with the reason."""
        return [f.as_dict() | {"fired_s": None, "error": "not fired: the run ended before it was due"}
                for f in self.faults[len(self.fired):]]

    async def _fire(self, client, fault: Fault) -> dict:
        deployment = fault.deployment
        if deployment is None:
            resp = await client.get(f"{self.admin_url}/admin/replicas")
            resp.raise_for_status()
            listed = resp.json()["replicas"]
            deployment = listed[0]["deployment"]
        verb = "lose" if fault.kind == "replica_lost" else "add"
        resp = await client.post(f"{self.admin_url}/admin/replicas/{deployment}/{verb}", json={})  # JSON: see admin_api
        if resp.status_code != 200:
            return {"deployment": deployment, "error": f"admin API answered {resp.status_code}: {resp.text[:200]}"}
        return {"deployment": deployment, "replica": resp.json()["name"]}


def _end_s(r: RequestRecord) -> float | None:
    """When the request stopped counting: its last byte, or for a failure the last instant known of it."""
    if r.done_s is not None:
        return r.done_s
    if not r.error:
        return None  # still in flight when the run ended: neither met nor missed
    return r.first_token_s + sum(r.itl_s) if r.first_token_s is not None else r.sent_s


def _values(r: RequestRecord, metric: str) -> list[float]:
    """The request's own values of ``metric``; a failed request misses every term (+inf)."""
    if r.error or r.done_s is None:
        return [math.inf]
    if metric == "itl":
        return list(r.itl_s)
    v = getattr(r, f"{metric}_s")
    return [] if v is None else [v]


def detect_and_recover(records: Iterable[RequestRecord], slo, fault_at_s: float,
                       window_s: float = 10.0) -> tuple[float | None, float | None]:
    """(time to detect, time to recover), both in seconds after ``fault_at_s``, or None when it never happened.

    The SLO is judged over a sliding window of the requests that ended (by completion time; a failure at its
    last known instant) in ``(t - window_s, t]``: the window meets it when, for every term of ``slo.terms``
    (``metric``, ``percentile``, ``threshold_s``), the nearest-rank percentile of the window's values is
    within the threshold. Failed requests count as +inf; an empty window (nothing ended for ``window_s``)
    does not meet it. Detect = the first t >= the fault where the window stops meeting the SLO; recover =
    the first t after that where it meets it again. The window changes only when a request enters or
    leaves it, so t runs over exactly those instants, up to the last request's end.
    """
    ended = sorted(((e, r) for r in records if (e := _end_s(r)) is not None), key=lambda x: x[0])
    if not ended:
        return None, None
    ends = np.array([e for e, _ in ended])
    terms = [(t.metric, float(t.percentile), float(t.threshold_s)) for t in slo.terms]
    per_term = []
    for metric, _, _ in terms:
        vals = [_values(r, metric) for _, r in ended]
        offsets = np.cumsum([0] + [len(v) for v in vals])
        per_term.append((np.array([x for v in vals for x in v], dtype=float), offsets))
    leaves = ends + window_s  # a request is in the window at t while end <= t < leave (compared as computed here,
    # never as t - window_s, which rounds differently and would keep a request one event too long)
    horizon = ends[-1]
    times = np.unique(np.concatenate([ends, leaves, [fault_at_s]]))
    times = times[(times >= fault_at_s) & (times <= horizon)]

    def meets(t: float) -> bool:
        lo, hi = np.searchsorted(leaves, t, "right"), np.searchsorted(ends, t, "right")
        if hi <= lo:
            return False
        for (_, pct, threshold), (flat, offsets) in zip(terms, per_term, strict=True):
            window = flat[offsets[lo]:offsets[hi]]
            if window.size == 0:
                continue  # e.g. tpot of single-token answers: the term has nothing to judge here
            k = max(0, math.ceil(pct / 100.0 * window.size) - 1)
            if np.partition(window, k)[k] > threshold:
                return False
        return True

    detect = next((t for t in times if not meets(t)), None)
    if detect is None:
        return None, None
    recover = next((t for t in times if t > detect and meets(t)), None)
    return float(detect - fault_at_s), None if recover is None else float(recover - fault_at_s)


def fault_summary(fired: Iterable[dict], records: Sequence[RequestRecord], slo, window_s: float = 10.0) -> list[dict]:
    """summary.json's ``faults``: each fired fault (``FaultDriver.fired``) with its time to detect and to recover,
    judged from when it actually fired; one the fleet refused keeps its error and has neither."""
    out = []
    for f in fired:
        entry = {"kind": f["kind"], "at_s": f["at_s"], "fired_s": f.get("fired_s"), "deployment": f.get("deployment"),
                 "replica": f.get("replica"), "error": f.get("error", ""), "detect_s": None, "recover_s": None,
                 "window_s": window_s}
        if not entry["error"] and entry["fired_s"] is not None:
            entry["detect_s"], entry["recover_s"] = detect_and_recover(records, slo, entry["fired_s"], window_s)
        out.append(entry)
    return out


def abort_summary(rate: float, records: Sequence[RequestRecord], slo, window_s: float = 10.0) -> dict:
    """summary.json's entry for ``abort_rate``: how many streams the client dropped mid-way (``aborted`` among the
    measured records; those cut at a Ctrl-C are not measured), of how many sent, and whether the SLO was missed
    over any window of the run because of them or anything else (``detect_s``/``recover_s`` from the start)."""
    sent = [r for r in records if r.status or r.error]
    aborted = sum(1 for r in sent if r.error == "aborted")
    detect, recover = detect_and_recover(records, slo, 0.0, window_s)
    return {"kind": "abort_rate", "at_s": 0.0, "fired_s": 0.0, "deployment": None, "replica": None, "error": "",
            "rate": rate, "requests": len(sent), "aborted": aborted,
            "aborted_rate": aborted / len(sent) if sent else None, "detect_s": detect, "recover_s": recover,
            "window_s": window_s}
