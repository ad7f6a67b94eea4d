"""Router policies: which replica of a deployment gets the next request."""

from __future__ import annotations

from simulator.replica import Replica
from simulator.request import Request

__all__ = ["Router"]


class Router:
    """Picks among replicas that are alive and past their cold start; ``None`` when there are none."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.next = 0

    def pick(self, replicas: list[Replica], req: Request, t: float) -> Replica | None:
        ready = [r for r in replicas if r.alive and r.available_from <= t]
        if not ready:
            return None
        start = self.next % len(ready)
        self.next += 1
        order = ready[start:] + ready[:start]  # rotate so ties spread evenly
        if self.policy == "round-robin":
            return order[0]
        if self.policy == "least-outstanding":
            return min(order, key=lambda r: r.outstanding)
        # kv-aware: most free KV, penalise queued work, prefer a replica that caches the prompt's prefix
        head = req.prefix[0] if req.prefix else None

        def score(r: Replica) -> float:
            hit = 0.25 if head is not None and r.cache is not None and head in r.cache else 0.0
            return r.kv_usage + r.n_waiting / 16.0 - hit

        return min(order, key=score)
