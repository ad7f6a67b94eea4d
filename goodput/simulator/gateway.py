"""The gateway in front of a fleet's routers: tenant quotas, then per-tier queues served by weighted fair queueing.

A request that reaches the gateway (its ``queue_start``, after the gateway hop) is checked against its tenant's
quotas (``goodput/simulator/admission.py``) and refused at once with the reason, or put in its deployment's lane for its
tier. A deployment takes at most ``max_in_flight_per_replica`` x its ready replicas from the gateway at once; when
a slot is free the gateway sends the waiting request with the smallest fair-queueing tag of the highest tier that
waits and is under its ``max_share`` of the slots, so P2 is deferred while P0 or P1 waits. A request that waited
``max_wait_s`` times out (``queue_timeout``). Every decision is kept in ``Request.meta`` (``admission``:
admitted / queued / deferred / rejected; ``gateway_wait_s``), which the spans carry on ``llm.gateway``.
With ``fallbacks`` (``goodput/simulator/fallback.py``) an admitted request is first routed: to its primary, or, while the
primary's circuit is open, to a backup that can serve it and has a slot free (``fallback_from``, ``fallback_reason``);
the simulated clients' retries come back through ``arrive`` as new requests.

With ``overload:`` steps, each deployment's ladder (``goodput/simulator/overload.py``) is observed at each arrival, each
freed slot (at most every ``LADDER_LOOK_S``) and every ``LADDER_TICK_S`` while a step is engaged (so it releases
when traffic stops); its engaged steps defer P2, degrade P1 as it is sent, scale TPM quotas and refuse ``busy``, and
each request's meta says the top step at its admission (``overload_step``) and what degraded it (``degraded``).

The fleet calls ``arrive`` for each arrival (the live fleet for each HTTP request too, pinned to the replica
whose port it came to), ``release`` for each finished request, and ``advance`` when
``next_time`` comes (a slot freed, a wait ran out); the gateway never calls into a replica from inside one's
callback, only from the fleet's loop.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field, replace
from math import inf

from goodput.contracts.vocabulary import TIER_RANK
from goodput.simulator.admission import TenantUse, admission_cost, refusal, wfq_tag
from goodput.simulator.config import GatewayConfig, TenantQuota, TierQueue
from goodput.simulator.fallback import Fallbacks
from goodput.simulator.overload import Ladder
from goodput.simulator.replica import Replica
from goodput.simulator.request import Request, gateway_meta

__all__ = ["Gateway"]

DONE = 4  # Request.state of a finished request
NEW = 0  # not yet handed to a replica
P2 = TIER_RANK["P2"]
LADDER_TICK_S = 1.0  # while a ladder step is engaged the gateway looks at least this often
LADDER_LOOK_S = 0.1  # and at most this often per deployment, however many arrivals and freed slots: a control loop


@dataclass
class _Lane:
    """One tier's queue at one deployment."""

    cfg: TierQueue
    heap: list = field(default_factory=list)  # (tag, seq, request)
    order: deque = field(default_factory=deque)  # (deadline, request) in arrival order: the timeouts
    waiting: int = 0
    sent: int = 0  # in the engines
    virtual: float = 0.0


@dataclass
class _Tenant:
    quota: TenantQuota
    use: TenantUse
    tags: dict = field(default_factory=dict)  # (deployment, tier rank) -> last tag


@dataclass
class _Held:
    """A request the gateway admitted and that has not finished."""

    tenant: _Tenant
    lane: _Lane
    deployment: int
    cost: int
    entered: float
    replica: Replica | None = None  # the replica a live request addressed (its port); None: the router picks
    sent: bool = False


class Gateway:
    def __init__(self, cfg: GatewayConfig, fleet) -> None:
        self.cfg = cfg
        self.fleet = fleet  # the Fleet it fronts (submit, _finished, deployments, now)
        wls = fleet.cfg.workloads
        self.tenant_names = [[name for name, _ in w.tenants] for w in wls]
        self.max_tokens = [w.max_tokens for w in wls]
        self.per_replica = [cfg.max_in_flight_per_replica or d.cfg.engine.max_num_seqs for d in fleet.deployments]
        self.lanes = [[_Lane(q) for q in cfg.tiers] for _ in fleet.deployments]
        self.sent = [0] * len(fleet.deployments)
        self.tenants: dict[str, _Tenant] = {}
        self.held: dict[int, _Held] = {}
        self.due: set[int] = set()  # deployments with a slot freed since the last dispatch
        self.seq = 0
        self.first_deadline = inf  # of the requests waiting, valid unless ``stale`` (a lane changed since)
        self.stale = False
        self.ladder = Ladder(cfg.overload, [d.cfg.name for d in fleet.deployments]) if cfg.overload else None
        self.ladder_due = inf  # when the ladder is next looked at if nothing else happens
        self.looked = [-inf] * len(fleet.deployments)  # when each deployment's ladder was last looked at
        # fallback routes, circuit breakers, client retries (goodput/simulator/fallback.py); None: the fleet file has none
        self.fallback = Fallbacks(fleet.cfg, self._new_rid) if cfg.fallbacks or cfg.retry is not None else None

    @property
    def circuits(self) -> dict:
        """Each primary's circuit breaker by deployment name (``.log``: its timeline)."""
        fb = self.fallback
        return {fb.names[d]: c for d, c in fb.circuits.items()} if fb is not None else {}

    def _new_rid(self) -> int:
        self.fleet.next_rid += 1
        return self.fleet.next_rid

    # ------------------------------------------------------------------ the fleet's calls

    def arrive(self, req: Request, t: float, replica=None) -> None:
        meta = req.meta if req.meta is not None else {}
        req.meta = meta
        name = meta.get("tenant") or self.tenant_names[req.workload][req.tenant]
        ten = self.tenants.get(name)
        if ten is None:
            q = self.cfg.quota(name)
            ten = self.tenants[name] = _Tenant(q, TenantUse.full(q, t))
        cost = admission_cost(req.prompt_tokens, self._max_tokens(req))
        quota = ten.quota if self.ladder is None else self._ladder_quota(self.ladder, req, ten.quota, t)
        reason, requests, tokens = refusal(quota, ten.use, cost, t)
        if reason is None and self.ladder is not None and self.ladder.refuses(req.deployment, req.tier):
            reason = "busy"
        primary = req.deployment
        if reason is None and self.fallback is not None:
            reason = self.fallback.route(req, cost, t, self._room)
            replica = replica if req.deployment == primary else None
        lane = self.lanes[req.deployment][req.tier_rank]
        if reason is None and lane.waiting >= lane.cfg.max_queued:
            reason = "queue_full"
        if reason is not None:
            self._refuse(req, t, reason, "rejected")
            return
        use = ten.use
        use.requests, use.tokens, use.at = requests - 1.0, tokens - cost, t
        use.in_flight += 1
        use.spent += cost
        self.held[req.rid] = _Held(ten, lane, req.deployment, cost, t, replica)
        self._enqueue(req, ten, lane, cost, t + lane.cfg.max_wait_s)
        meta["admission"] = "admitted"
        self._dispatch(req.deployment, t)
        if req.deployment != primary:  # a replica of the primary that came up since takes its half-open probe now
            self._dispatch(primary, t)
        if req.state == NEW:
            above = self.lanes[req.deployment][:req.tier_rank]
            deferred = any(x.waiting for x in above) or (self.ladder is not None and
                                                         self.ladder.defers(req.deployment, req.tier_rank))
            meta["admission"] = "deferred" if deferred else "queued"

    def release(self, req: Request) -> None:
        """``req`` finished (served, refused by an engine, timed out, failed): its slot and quota come back."""
        held = self.held.pop(req.rid, None)
        if self.fallback is not None:
            self.fallback.finished(req, req.deployment if held is None else held.deployment, held is not None)
        if held is None:
            return
        use = held.tenant.use
        use.in_flight -= 1
        used = req.generated + (req.prompt_tokens if req.scheduled == req.scheduled else 0)
        use.spent -= held.cost - used  # the budget keeps what the request used, not the admission estimate
        if held.sent:
            held.lane.sent -= 1
            self.sent[held.deployment] -= 1
            self.due.add(held.deployment)

    def next_time(self) -> float:
        """When the gateway next has something to do: now if a slot freed, else the first wait to run out."""
        if self.due:
            return self.fleet.now
        first = self.fallback.next_time(self.fleet.now) if self.fallback is not None else inf
        if not self.stale:  # most of the loop's events are engine steps, which leave the lanes as they were
            return min(first, self.first_deadline, self.ladder_due)
        deadline = inf
        for lanes in self.lanes:
            for lane in lanes:
                order = lane.order
                while order and order[0][1].state != NEW:
                    order.popleft()
                if order and order[0][0] < deadline:
                    deadline = order[0][0]
        self.first_deadline, self.stale = deadline, False
        return min(first, deadline, self.ladder_due)

    def advance(self, t: float) -> None:
        for lanes in self.lanes:
            for lane in lanes:
                order = lane.order
                while order and (order[0][1].state != NEW or order[0][0] <= t):
                    deadline, req = order.popleft()
                    if req.state == NEW:
                        lane.waiting -= 1
                        if not self._overflow(req, deadline):
                            self._refuse(req, deadline, "queue_timeout", "timeout")
        fb = self.fallback
        if fb is not None:
            for d in fb.take_opened():
                self._reroute(fb, d, t)
            for retry in fb.due(t):
                self.arrive(retry, retry.arrival)
        due, self.due = self.due, set()
        ladder = self.ladder
        if ladder is not None and t >= self.ladder_due:  # ladder_due is inf without a ladder
            self.ladder_due = inf
            due.update(d for d, level in enumerate(ladder.level) if level)
        for d in sorted(due):
            if ladder is not None:
                self._observe(ladder, d, t)
            self._dispatch(d, t)

    def cancel(self, req: Request, t: float) -> bool:
        """The client of ``req`` went away while it waited at the gateway: it ends ``abort`` there (True), never
        reaching an engine; False when the gateway does not hold it waiting."""
        held = self.held.get(req.rid)
        if held is None or held.sent or req.state != NEW:
            return False
        held.lane.waiting -= 1
        self._refuse(req, t, "", "abort")
        return True

    def waiting(self) -> int:
        """Requests waiting at the gateway, and client retries not yet sent."""
        retries = len(self.fallback.retries) if self.fallback is not None else 0
        return retries + sum(lane.waiting for lanes in self.lanes for lane in lanes)

    def _entered(self, lane: _Lane) -> float:
        """When the oldest request waiting in ``lane`` arrived at the gateway (inf: none waits)."""
        order = lane.order
        while order and order[0][1].state != NEW:  # sent or timed out since
            order.popleft()
        return self.held[order[0][1].rid].entered if order else inf

    def queued_since(self, d: int) -> float:
        """When the oldest request waiting at the gateway for deployment ``d`` arrived there (inf: none waits)."""
        return min((self._entered(lane) for lane in self.lanes[d]), default=inf)

    def abort_all(self, t: float) -> None:
        """The run ends at ``t``: what still waits at the gateway is aborted, as the engines abort what they hold."""
        for lanes in self.lanes:
            for lane in lanes:
                for _, req in lane.order:
                    if req.state == NEW:
                        lane.waiting -= 1
                        self._refuse(req, t, "", "abort")
                lane.order.clear()
                lane.heap.clear()
        if self.fallback is not None:
            self.fallback.retries.clear()  # never sent: not requests yet

    # ------------------------------------------------------------------ inside

    def _max_tokens(self, req: Request) -> int:
        """The output limit ``req`` asked for: an HTTP request's own, else its workload's."""
        return req.max_tokens if gateway_meta(req).get("workload") == "http" else self.max_tokens[req.workload]

    def _observe(self, ladder: Ladder, d: int, t: float) -> None:
        """Step deployment ``d``'s ladder on its signals now (see goodput/simulator/overload.py); look again within a tick
        while a step is engaged."""
        if t - self.looked[d] >= LADDER_LOOK_S:
            self.looked[d] = t
            ladder.observe(d, t, self._signals(ladder, d, t))
        if ladder.level[d]:
            self.ladder_due = min(self.ladder_due, t + LADDER_TICK_S)

    def _signals(self, ladder: Ladder, d: int, t: float) -> dict[str, float]:
        """Deployment ``d``'s overload signals its ladder's steps name, at ``t``."""
        signals = {}
        for name in ladder.signals:
            if name == "p0_wait_s":
                entered = self._entered(self.lanes[d][0])
                signals[name] = t - entered if entered < inf else 0.0
            elif name == "queue_per_slot":
                signals[name] = sum(x.waiting for x in self.lanes[d]) / max(1, self._slots(d, t))
            else:
                ready = [r.kv_usage for r in self.fleet.deployments[d].replicas if r.alive and r.available_from <= t]
                signals[name] = sum(ready) / len(ready) if ready else 0.0
        return signals

    def _ladder_quota(self, ladder: Ladder, req: Request, quota: TenantQuota, t: float) -> TenantQuota:
        """Observe ``req``'s deployment's ladder at its arrival; note the top step; the quota it is checked against."""
        d = req.deployment
        self._observe(ladder, d, t)
        meta = gateway_meta(req)
        meta["overload_step"] = ladder.top(d)
        meta["degraded"] = ""
        scale = ladder.tpm_scale(d)
        if scale is None or quota.core or quota.tpm is None:
            return quota
        return replace(quota, tpm=quota.tpm * scale)

    def _refuse(self, req: Request, t: float, reason: str, finish: str) -> None:
        held = self.held.get(req.rid)
        meta = gateway_meta(req)
        meta["admission"] = "rejected"
        if held is not None:
            meta["gateway_wait_s"] = t - held.entered
        req.finish_reason, req.reject_reason, req.queue_start, req.completed = finish, reason, t, t
        req.state = DONE
        self.stale = True
        self.fleet._finished(req)

    def _enqueue(self, req: Request, ten: _Tenant, lane: _Lane, cost: int, deadline: float) -> None:
        key = (req.deployment, req.tier_rank)
        tag = wfq_tag(lane.virtual, ten.tags.get(key, 0.0), cost, ten.quota.weight)
        ten.tags[key] = tag
        self.seq += 1
        heapq.heappush(lane.heap, (tag, self.seq, req))
        lane.order.append((deadline, req))
        lane.waiting += 1
        self.stale = True

    def _slots(self, d: int, t: float) -> int:
        dep = self.fleet.deployments[d]
        return self.per_replica[d] * sum(1 for r in dep.replicas if r.alive and r.available_from <= t)

    def _room(self, d: int) -> bool:
        """A slot of deployment ``d`` is free and nothing waits for one: a fallback sent there would not queue."""
        return self.sent[d] + sum(x.waiting for x in self.lanes[d]) < self._slots(d, self.fleet.now)

    def _reroute(self, fb: Fallbacks, d: int, t: float) -> None:
        """``d``'s circuit opened: what waits in its lanes goes where a new request would now (a backup with room, the
        half-open probe's lane) or is refused there."""
        for lane in self.lanes[d]:
            waiting = [req for _, req in lane.order if req.state == NEW]
            lane.heap.clear()
            lane.order.clear()
            lane.waiting = 0
            self.stale = True
            for req in waiting:
                held = self.held[req.rid]
                reason = fb.route(req, held.cost, t, self._room)
                if reason is not None:
                    self._refuse(req, t, reason, "rejected")
                    continue
                if req.deployment != d:
                    held.deployment, held.replica = req.deployment, None
                held.lane = self.lanes[req.deployment][req.tier_rank]
                self._enqueue(req, held.tenant, held.lane, held.cost, held.entered + held.lane.cfg.max_wait_s)
                self._dispatch(req.deployment, t)

    def _overflow(self, req: Request, t: float) -> bool:
        """``req``'s wait at its primary ran out at ``t``: a backup with a free slot takes it, if the fleet file says so."""
        if self.fallback is None:
            return False
        held = self.held[req.rid]
        if not self.fallback.overflow(req, held.cost, t, self._room):
            return False
        held.deployment, held.replica = req.deployment, None
        held.lane = self.lanes[req.deployment][req.tier_rank]
        self._enqueue(req, held.tenant, held.lane, held.cost, t + held.lane.cfg.max_wait_s)
        self._dispatch(req.deployment, t)
        return True

    def _dispatch(self, d: int, t: float) -> None:
        slots = self._slots(d, t)
        lanes = self.lanes[d]
        if self.ladder is not None and self.ladder.defers(d, P2):
            lanes = lanes[:P2]  # defer_p2: P2 waits
        while self.sent[d] < slots:
            lane = None
            for x in lanes:  # the highest tier that waits and is under its share; lower tiers only after it
                if x.waiting and x.sent < x.cfg.max_share * slots:
                    lane = x
                    break
            if lane is None:
                return
            tag, _, req = heapq.heappop(lane.heap)
            if req.state != NEW or self.held[req.rid].lane is not lane:  # timed out, or moved to a backup's lane
                continue
            lane.virtual = tag
            self._send(req, lane, d, t)

    def _send(self, req: Request, lane: _Lane, d: int, t: float) -> None:
        held = self.held[req.rid]
        held.sent = True
        self.stale = True
        lane.waiting -= 1
        lane.sent += 1
        self.sent[d] += 1
        meta = gateway_meta(req)
        meta["gateway_wait_s"] = t - held.entered
        req.queue_start = t
        if self.ladder is not None:
            meta["degraded"] = self.ladder.degrade(d, req, self._max_tokens(req))
        rep = held.replica
        if rep is None:
            self.fleet.submit(req, t)
        elif not rep.alive:
            rep.reject(req, t, "overloaded")
        elif rep.submit(req, t):
            self.fleet.reschedule(rep)

