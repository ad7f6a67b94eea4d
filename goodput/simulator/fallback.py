"""Where the gateway sends a request when its primary deployment fails: a backup the compatibility matrix allows, with
circuit breakers, and the simulated clients' retries (docs/simulator.md#fallback).

The matrix is ``gateway.fallbacks`` (``{primary: [backup, ...]}``) narrowed per request by capability: a backup may
stand in only if its ``capabilities`` cover what the request needs (its workload's tools, vision, residency and
highest price per million tokens; its own prompt + max_tokens as context), because not every model can stand in for
every other.

With ``gateway.circuit_breaker`` each primary has a ``Circuit``: while it is closed requests go to the primary; while
it is open they go to the first backup that covers them, is not itself open, and has a gateway slot free right now
(meta ``fallback_from``, ``fallback_reason`` ``circuit_open``); a request no backup covers is refused ``capability``,
one whose backups are all full or open ``circuit_open``. A fallback never queues at its backup, so the backup's own
traffic never waits behind it, and nothing is sent to an open primary but its one half-open probe. Each request
routed at a primary with a breaker carries its state then (meta ``circuit_state``: closed, open, half_open; set again
when the gateway routes it again, as it does what waited at a primary whose circuit opened), the span attribute
``llm.circuit_state`` that the request exporter's ``llm_gateway_circuit_state`` reads.

Without a breaker the fallback routes are what a naive gateway does with a retry: ``gateway.retry`` makes the
simulated clients retry a failed request (an error, a timeout, ``overloaded``, ``queue_full``) after a doubling
backoff, each retry a new request, and a retry of a request whose primary failed goes to its next covering backup
(``fallback_reason`` ``unavailable``) and queues there like any other. HTTP clients do their own retries.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from goodput.simulator.circuit import CLOSED, Circuit
from goodput.simulator.config import Capabilities, FleetConfig, Needs
from goodput.simulator.request import Request, gateway_meta

__all__ = ["Fallbacks", "covers", "failed"]

_ANY = Needs()
_FAILED_FINISH = ("error", "timeout")
_FAILED_REJECT = ("overloaded", "queue_full")


def covers(cap: Capabilities, needs: Needs, context: int) -> bool:
    """Whether a deployment of ``cap`` can serve a request of ``needs`` taking ``context`` tokens (one that states
    no price serves no request with a price limit, as one that states no residency serves none that needs one)."""
    return (context <= cap.context and (cap.tools or not needs.tools) and (cap.vision or not needs.vision)
            and (not needs.residency or needs.residency == cap.residency)
            and (needs.max_cost_per_mtok is None
                 or (cap.cost_per_mtok is not None and cap.cost_per_mtok <= needs.max_cost_per_mtok)))


def _attempt(req: Request) -> int:
    """Which try of its client ``req`` is: 1, or a retry's number (``Fallbacks._retry`` notes it in the meta)."""
    return req.meta.get("attempt", 1) if req.meta is not None else 1


def failed(req: Request) -> bool | None:
    """A finished request's outcome as a breaker and a client judge it: True failed (an error, a timeout, refused as
    overloaded or full), False served, None neither (refused for its tenant's quota or its needs, gone away)."""
    if req.finish_reason in ("stop", "length"):
        return False
    if req.finish_reason in _FAILED_FINISH or req.reject_reason in _FAILED_REJECT:
        return True
    return None


class Fallbacks:
    """The fleet's fallback routes, circuits and pending client retries; the gateway asks, tells and collects."""

    def __init__(self, cfg: FleetConfig, new_rid: Callable[[], int]) -> None:
        gw = cfg.gateway
        assert gw is not None, "fallback routes are the gateway's"
        self.names = [d.name for d in cfg.deployments]
        index = {name: i for i, name in enumerate(self.names)}
        self.index = index
        self.caps = [d.capabilities for d in cfg.deployments]
        self.needs = [w.needs for w in cfg.workloads]
        self.backups: list[tuple[int, ...]] = [()] * len(self.names)
        for primary, backups in gw.fallbacks:
            self.backups[index[primary]] = tuple(index[b] for b in backups)
        self.circuits: dict[int, Circuit] = ({index[p]: Circuit(gw.circuit_breaker) for p, _ in gw.fallbacks}
                                             if gw.circuit_breaker is not None else {})
        self.retry = gw.retry
        self.capacity = gw.capacity_fallback
        self.new_rid = new_rid
        self.opened: list[int] = []  # primaries whose circuit opened since the gateway last took them
        self.retries: list[tuple[float, int, Request]] = []  # (when, rid, the retry): a heap

    def route(self, req: Request, context: int, t: float, room: Callable[[int], bool]) -> str | None:
        """Send ``req`` (stamped with its primary) to its primary or a backup, by moving its ``deployment``; the reason
        it is refused instead, or None."""
        d = req.deployment
        circuit = self.circuits.get(d)
        if circuit is not None:  # what the breaker was when the gateway routed it: the span's llm.circuit_state
            gateway_meta(req)["circuit_state"] = circuit.state_at(t)
        needs = self._needs(req)
        cap = self.caps[d]
        if cap is not None and not covers(cap, needs, context):
            return "capability"
        able = self._able(d, needs, context)
        if circuit is None:
            attempt = _attempt(req)
            if attempt > 1 and able:  # a retry: the next backup that can serve it
                self._move(req, able[min(attempt - 2, len(able) - 1)], "unavailable")
            return None
        if circuit.admits(t, req.rid):
            return None
        if not able:
            return "capability" if self.backups[d] else "circuit_open"
        b = self._stand_in(able, t, room)
        if b is None:
            return "circuit_open"
        self._move(req, b, "circuit_open")
        return None

    def overflow(self, req: Request, context: int, t: float, room: Callable[[int], bool]) -> bool:
        """``req`` waited its tier's ``max_wait_s`` at its primary: with ``capacity_fallback`` a backup that covers it
        and has a slot free takes it (``fallback_reason`` ``capacity``; a timeout for the primary's breaker)."""
        d = req.deployment
        if not self.capacity or "fallback_from" in gateway_meta(req):
            return False
        b = self._stand_in(self._able(d, self._needs(req), context), t, room)
        if b is None:
            return False
        circuit = self.circuits.get(d)
        if circuit is not None:
            if circuit.record(t, req.rid, True):
                self.opened.append(d)
            gateway_meta(req)["circuit_state"] = circuit.state_at(t)
        self._move(req, b, "capacity")
        return True

    def _needs(self, req: Request) -> Needs:
        """What ``req`` needs: its workload's; an HTTP request states none."""
        return _ANY if gateway_meta(req).get("workload") == "http" else self.needs[req.workload]

    def _able(self, d: int, needs: Needs, context: int) -> list[int]:
        """The backups of ``d`` that cover a request of ``needs`` taking ``context`` tokens, in order (a backup always
        declares capabilities: the fleet file's check)."""
        return [b for b in self.backups[d] if (cap := self.caps[b]) is not None and covers(cap, needs, context)]

    def _stand_in(self, able: list[int], t: float, room: Callable[[int], bool]) -> int | None:
        """The first of the covering backups ``able`` that is not itself open and has a slot free."""
        for b in able:
            c = self.circuits.get(b)
            if (c is None or c.state_at(t) == CLOSED) and room(b):
                return b
        return None

    def _move(self, req: Request, backup: int, reason: str) -> None:
        meta = gateway_meta(req)
        meta["fallback_from"] = self.names[req.deployment]
        meta["fallback_reason"] = reason
        req.deployment = backup

    def finished(self, req: Request, d: int, reached: bool) -> None:
        """``req`` ended, last routed to ``d``; ``reached``: it got past admission there (its outcome is ``d``'s)."""
        outcome = failed(req)
        circuit = self.circuits.get(d)
        if circuit is not None and circuit.record(req.completed, req.rid, outcome if reached else None):
            self.opened.append(d)
        attempt = _attempt(req)
        retry = self.retry
        if (outcome and retry is not None and attempt < retry.attempts
                and (req.meta is None or req.meta.get("workload") != "http")):
            self._retry(req, attempt, retry.backoff_s * 2 ** (attempt - 1))

    def _retry(self, req: Request, attempt: int, backoff_s: float) -> None:
        """The client of failed ``req`` tries again after ``backoff_s``, at the primary it first asked."""
        at = req.completed + backoff_s
        moved_from = req.meta.get("fallback_from") if req.meta is not None else None
        primary = self.index[moved_from] if moved_from is not None else req.deployment
        again = Request(self.new_rid(), req.workload, req.tenant, req.tier, at, at, req.prompt_tokens,
                        req.output_target, req.natural_stop, primary, req.prefix, req.prefix_block_tokens, req.send_s)
        again.max_tokens = req.max_tokens
        again.meta = {"attempt": attempt + 1}
        heapq.heappush(self.retries, (at, again.rid, again))

    def next_time(self, now: float) -> float:
        """Now if a circuit opened (its waiting requests move), else when the next retry arrives."""
        if self.opened:
            return now
        return self.retries[0][0] if self.retries else float("inf")

    def take_opened(self) -> list[int]:
        opened, self.opened = self.opened, []
        return opened

    def due(self, t: float) -> list[Request]:
        """The retries that arrive by ``t``, in time order."""
        out = []
        while self.retries and self.retries[0][0] <= t:
            out.append(heapq.heappop(self.retries)[2])
        return out
