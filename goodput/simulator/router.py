"""Router policies: which replica of a deployment gets the next request.

The router runs once per request, so it avoids per-call allocations: the list of ready replicas is
cached until a replica is added, lost or finishes its cold start.
"""

from __future__ import annotations

from math import inf

from goodput.simulator.replica import Replica
from goodput.simulator.request import Request

__all__ = ["Router"]

ROUND_ROBIN, LEAST_OUTSTANDING, KV_AWARE = 0, 1, 2
HELD_WEIGHT = 1 / 16  # kv-aware: one request a replica holds weighs 1/16 of its KV cache
PREFIX_CREDIT_REQUESTS = 4  # kv-aware: a cached prefix is worth this many held requests
_POLICIES = {"round-robin": ROUND_ROBIN, "least-outstanding": LEAST_OUTSTANDING, "kv-aware": KV_AWARE}


class Router:
    """Picks among replicas that are alive and past their cold start; ``None`` when there are none."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.kind = _POLICIES[policy]
        self.next = 0
        self._ready: list[Replica] = []
        self._valid_until = -inf  # the cache is valid for t < this (next cold start ends)
        self._n_seen = -1

    def invalidate(self) -> None:
        self._valid_until = -inf

    def _ready_at(self, replicas: list[Replica], t: float) -> list[Replica]:
        if t >= self._valid_until or len(replicas) != self._n_seen:
            self._ready = [r for r in replicas if r.alive and r.available_from <= t]
            pending = [r.available_from for r in replicas if r.alive and r.available_from > t]
            self._valid_until = min(pending, default=inf)
            self._n_seen = len(replicas)
        return self._ready

    def pick(self, replicas: list[Replica], req: Request, t: float) -> Replica | None:
        ready = self._ready_at(replicas, t)
        n = len(ready)
        if not n:
            return None
        start = self.next % n
        self.next += 1
        if self.kind == ROUND_ROBIN:
            return ready[start]
        best, best_score = None, inf
        if self.kind == LEAST_OUTSTANDING:
            for i in range(start, start + n):  # rotated so ties spread evenly
                r = ready[i % n]
                s: float = r.n_waiting + len(r.running) + r.incoming
                if s < best_score:
                    best, best_score = r, s
            return best
        # kv-aware: most free KV, penalise the work a replica holds (running, queued, on the link), prefer a replica
        # that caches the prompt's prefix. The prefix credit is worth PREFIX_CREDIT_REQUESTS held requests: counting
        # only queued work, an old replica's cached prefix outbid an added, empty one for ever under a gateway's cap or
        # light load (it ran everything and queued nothing), so a scale-out's new replica got no traffic
        head = req.prefix[0] if req.prefix else None
        for i in range(start, start + n):
            r = ready[i % n]
            s = r.used_blocks / r.total_blocks + (len(r.running) + r.n_waiting + r.incoming) * HELD_WEIGHT
            if head is not None and r.cache is not None and head in r.cache:
                s -= PREFIX_CREDIT_REQUESTS * HELD_WEIGHT
            if s < best_score:
                best, best_score = r, s
        return best
