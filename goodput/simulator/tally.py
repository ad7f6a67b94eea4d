"""Counts kept as requests finish, for runs that need totals rather than every request.

A simulated day is about a million requests. Keeping each finished ``Request`` (``Fleet(keep_done=True)``)
costs memory and, worse, a cyclic garbage collector walking a million live objects again and again; a fleet
that keeps none hands each finished request to its sinks (``Fleet.watch``) and lets it go. Two sinks:

- ``ScrapeCounts``: output tokens and queue waits of one deployment's requests since the last scrape (what
  the autoscaler's demand and queue signals read);
- ``SloTally``: per tier and arrival bucket, the requests that arrived and those that met their tier's TTFT
  and TPOT, and the rejected ones (what ``goodput plan evaluate`` reports).

Both count exactly what a pass over the kept requests would (``tests/plan/test_plan_evaluate.py``).
"""

from __future__ import annotations

import math
from bisect import bisect_left

from goodput.simulator.request import Request

__all__ = ["ScrapeCounts", "SloTally"]


class ScrapeCounts:
    """Finished requests of deployment ``deployment`` since the last ``take``: the output tokens they produced
    (whatever their outcome) and a histogram of the queue waits of those that left the queue."""

    def __init__(self, deployment: int, bounds: tuple[float, ...]) -> None:
        self.deployment = deployment
        self.bounds = list(bounds)
        self.tokens = 0
        self.waits = 0
        self.counts = [0] * (len(bounds) + 1)  # bucket i: bounds[i-1] < wait <= bounds[i]; the last is +Inf

    def add(self, req: Request) -> None:
        if req.deployment != self.deployment:
            return
        self.tokens += req.generated
        w = req.scheduled - req.queue_start
        if w == w:  # not NaN: it was scheduled
            self.counts[bisect_left(self.bounds, w)] += 1
            self.waits += 1

    def take(self) -> tuple[int, list[int] | None]:
        """(output tokens, wait histogram or None without waits) since the last take, and start again."""
        out = (self.tokens, self.counts if self.waits else None)
        self.tokens = self.waits = 0
        self.counts = [0] * (len(self.bounds) + 1)
        return out


class SloTally:
    """Requests that arrived before ``until``, by tier rank and ``bucket_s`` bucket of their arrival: all of them
    (``total``) and those that finished (stop or length) within their tier's TTFT and mean TPOT (``good``);
    ``rejected`` counts the rejected ones. ``limits`` maps a tier rank to its (TTFT, TPOT) limits in seconds."""

    def __init__(self, limits: dict[int, tuple[float, float]], bucket_s: float, until: float) -> None:
        n = max(1, math.ceil(until / bucket_s))
        self.bucket_s, self.until = bucket_s, until
        ranks = range(max(limits) + 1)
        self.ttft = [limits[r][0] if r in limits else -1.0 for r in ranks]
        self.tpot = [limits[r][1] if r in limits else -1.0 for r in ranks]
        self.total = [[0] * n for _ in ranks]
        self.good = [[0] * n for _ in ranks]
        self.rejected = 0

    def add(self, req: Request) -> None:
        a = req.arrival
        if a >= self.until:
            return
        b = int(a // self.bucket_s)
        rank = req.tier_rank
        self.total[rank][b] += 1
        fr = req.finish_reason
        if fr == "stop" or fr == "length":
            n = req.generated
            if req.first_token - a <= self.ttft[rank] and (
                    n < 2 or (req.last_token - req.first_token) / (n - 1) <= self.tpot[rank]):
                self.good[rank][b] += 1
        elif fr == "rejected":
            self.rejected += 1
