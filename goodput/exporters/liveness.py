"""Liveness of an exporter's background loop, for ``/healthz`` (``metrics_routes(render, heartbeat.problem)``).

A scrape or sample loop that died, or that has not finished a round for several periods, means
``/metrics`` serves stale numbers; saying 200 then would hide it from whoever watches the exporter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Heartbeat"]


class Heartbeat:
    """``beat()`` after each finished round; ``problem()`` says why the loop is unhealthy, or None."""

    def __init__(self, name: str, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.grace_s, self.clock = name, grace_s, clock
        self.last = clock()
        self.thread: threading.Thread | None = None

    def beat(self) -> None:
        self.last = self.clock()

    def problem(self) -> str | None:
        if self.thread is not None and not self.thread.is_alive():
            return f"the {self.name} loop is not running"
        late = self.clock() - self.last
        if late > self.grace_s:
            return f"the {self.name} loop has not finished a round for {late:.1f} s (limit {self.grace_s:g} s)"
        return None

