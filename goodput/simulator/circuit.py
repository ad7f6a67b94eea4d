"""A primary deployment's circuit breaker, pure: the gateway tells it outcomes and asks it whether a request may go.

closed -> open after ``failures`` failures in a row, or when the last ``window_s`` seconds hold at least
``min_requests`` outcomes of which ``error_ratio`` or more failed. open -> half-open ``open_s`` later: the next
request is the one probe, the others still fall back. half-open -> closed when the probe succeeds, -> open (for
another ``open_s``) when it fails. Outcomes of requests sent before the circuit opened, and while it is open, change
nothing: the breaker judges the primary by what it did while trusted, then by its probe.

``log`` keeps every change, ``(time, state, why)``, from ``(0, "closed", "")``: the timeline a plan or a page reads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from goodput.contracts.vocabulary import CIRCUIT_STATES
from goodput.simulator.config import BreakerConfig

__all__ = ["CLOSED", "Circuit", "HALF_OPEN", "OPEN"]

CLOSED, OPEN, HALF_OPEN = CIRCUIT_STATES


@dataclass
class Circuit:
    cfg: BreakerConfig
    state: str = CLOSED
    opened_at: float = 0.0
    in_a_row: int = 0  # failures in a row while closed
    window: deque = field(default_factory=deque)  # (time, failed) of the outcomes of the last window_s, while closed
    failed_in_window: int = 0
    probe: int | None = None  # the request id of the half-open probe in flight
    log: list[tuple[float, str, str]] = field(default_factory=lambda: [(0.0, CLOSED, "")])

    def state_at(self, t: float) -> str:
        """The state at ``t`` (an open circuit whose ``open_s`` ran out reads half-open)."""
        if self.state == OPEN and t >= self.opened_at + self.cfg.open_s:
            self._set(self.opened_at + self.cfg.open_s, HALF_OPEN, f"{self.cfg.open_s:g} s open")
        return self.state

    def admits(self, t: float, rid: int) -> bool:
        """Whether request ``rid`` may go to the primary at ``t``: yes while closed; when half-open, if it is the
        probe (the first asked, until that one's outcome is known)."""
        state = self.state_at(t)
        if state == CLOSED:
            return True
        if state == HALF_OPEN and self.probe is None:
            self.probe = rid
            return True
        return False

    def record(self, t: float, rid: int, failed: bool | None) -> bool:
        """The outcome of request ``rid`` that went to the primary, at ``t`` (``None``: neither a success nor a
        failure, e.g. the client went away). True when this opened the circuit."""
        state = self.state_at(t)
        if state == HALF_OPEN:
            if rid != self.probe:
                return False
            self.probe = None
            if failed is None:
                return False
            if failed:
                self._open(t, "the probe failed")
                return True
            self._set(t, CLOSED, "the probe succeeded")
            return False
        if state != CLOSED or failed is None:
            return False
        self.in_a_row = self.in_a_row + 1 if failed else 0
        window = self.window
        window.append((t, failed))
        self.failed_in_window += failed
        while window and window[0][0] <= t - self.cfg.window_s:
            self.failed_in_window -= window.popleft()[1]
        if self.in_a_row >= self.cfg.failures:
            self._open(t, f"{self.in_a_row} failures in a row")
            return True
        n = len(window)
        if n >= self.cfg.min_requests and self.failed_in_window >= self.cfg.error_ratio * n:
            self._open(t, f"{self.failed_in_window} of {n} failed in {self.cfg.window_s:g} s")
            return True
        return False

    def _open(self, t: float, why: str) -> None:
        self.opened_at = t
        self.in_a_row = self.failed_in_window = 0
        self.window.clear()
        self._set(t, OPEN, why)

    def _set(self, t: float, state: str, why: str) -> None:
        self.state = state
        self.log.append((t, state, why))
