"""The simulated fleet: deployments of replicas, routers, scheduled events, one virtual clock.

``Fleet.run(until)`` advances a discrete-event loop over three sources in time order: replica
segment ends (a step or a run of decode steps, kept in a ``ReplicaQueue``), request arrivals, and
scheduled fleet events (replica lost or added, releases). It can be called repeatedly, which is how
the live fleet drives the same model in real time. Releases and replica-count changes after the start (kind
``scale``: a fleet event, the admin API, an autoscaler) are kept in ``releases``, the analyzer's causes.

Finished requests are kept in ``done`` (``keep_done``, the default) and handed to the sinks given to
``watch``; a long replay that only needs counts keeps none (``goodput/simulator/tally.py``). A controller outside the
loop (the autoscaler, the live fleet's admin API) changes the fleet through ``add_replica``, ``drain_replica``,
``retire_replica`` and ``lose_replica``. With a fleet file's ``gateway:`` section, arrivals pass the gateway
(``goodput/simulator/gateway.py``: quotas, tier queues, fair queueing) before a router, and the gateway is a fourth source
of the loop's times (a slot freed, a queue wait ran out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heappop, heappush
from math import inf

import numpy as np

from goodput.contracts.vocabulary import SCALE_KIND
from goodput.simulator.catalog import gpus
from goodput.simulator.cold_start import ColdStart
from goodput.simulator.config import DeploymentConfig, EventConfig, FleetConfig
from goodput.simulator.gateway import Gateway
from goodput.simulator.replica import Replica
from goodput.simulator.replica_queue import ReplicaQueue
from goodput.simulator.request import Request
from goodput.simulator.roofline import Roofline
from goodput.simulator.router import Router
from goodput.simulator.workload import Arrivals

__all__ = ["Deployment", "Fleet", "ReleaseRecord"]


@dataclass
class ReleaseRecord:
    time: float
    deployment: str
    kind: str
    from_version: str
    to_version: str
    note: str


@dataclass
class Deployment:
    index: int
    cfg: DeploymentConfig
    roofline: Roofline
    num_blocks: int
    router: Router
    replicas: list[Replica] = field(default_factory=list)
    step_scale: float = 1.0
    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    role: str = ""  # "": aggregated; a disaggregated deployment is its "prefill" pool, with its "decode" pool in decode
    decode: Deployment | None = None


class Fleet:
    replica_class = Replica  # a subclass can check the replica's invariants after every segment

    def __init__(self, cfg: FleetConfig, arrivals: Arrivals | None = None,
                 observer_factory: Callable[[Deployment, int], object] | None = None,
                 max_run_steps: int = 1 << 60, keep_done: bool = True) -> None:
        self.cfg = cfg
        self.max_run_steps = max_run_steps
        self.done: list[Request] = []
        self.keep_done = keep_done
        self.sinks: list = []
        self.observer_factory = observer_factory
        self.deployments: list[Deployment] = []
        # (deployment, role, replica) -> (asked for at, its cold start): the replicas added after the start
        self.cold_starts: dict[tuple[int, str, int], tuple[float, ColdStart]] = {}
        self.cold_rng = np.random.default_rng((cfg.seed, 36))  # apart from the arrivals' draws
        self.by_name: dict[str, Deployment] = {}
        self.transfers: list = []  # KV caches on the link: heap of (arrival, rid, request, decode replica)
        for i, d in enumerate(cfg.deployments):
            dep = self._pool(i, d)
            self.deployments.append(dep)
            self.by_name[d.name] = dep
            if d.disaggregation is not None:
                dep.role = "prefill"
                dep.decode = self._pool(i, d.disaggregation.decode)
                dep.decode.role = "decode"
                for _ in range(d.disaggregation.decode.replicas):
                    self.add_replica(dep.decode, 0.0, note="")
            for _ in range(d.replicas):
                self.add_replica(dep, 0.0, note="")
        self.queue = ReplicaQueue()
        self.now = 0.0
        self.arrivals = arrivals
        self.next_arrival = 0
        self.events: list[EventConfig] = list(cfg.events)
        self.next_event = 0
        self.releases: list[ReleaseRecord] = []
        self.next_rid = 0
        self.workload_deployment = [self.by_name[w.deployment].index for w in cfg.workloads]
        self.workload_tier = [w.tier for w in cfg.workloads]
        self.gateway = Gateway(cfg.gateway, self) if cfg.gateway is not None else None

    @staticmethod
    def _pool(index: int, d: DeploymentConfig) -> Deployment:
        rf = Roofline.build(d.spec, gpus()[d.gpu], tp=d.tp, engine=d.engine)
        assert d.budget is not None, "parse_fleet sizes every deployment's KV cache"
        return Deployment(index, d, rf, d.budget.num_blocks, Router(d.router))

    # ------------------------------------------------------------------ structure

    def pools(self) -> list[Deployment]:
        """Every pool of replicas: the deployments, and the decode pools of the disaggregated ones."""
        return [p for d in self.deployments for p in ((d,) if d.decode is None else (d, d.decode))]

    def replica_of(self, req: Request) -> Replica | None:
        """The replica that holds ``req`` now (its decode replica once its KV arrived there), None if none."""
        dep = self.deployments[req.deployment]
        pool = dep.decode if dep.decode is not None and req.kv_ready == req.kv_ready else dep
        return pool.replicas[req.replica] if 0 <= req.replica < len(pool.replicas) else None

    def serving(self, dep: Deployment) -> int:
        """Replicas of ``dep`` alive and not draining (starting ones included): the count a scale record gives."""
        return sum(1 for r in dep.replicas if r.alive and r.available_from != inf)

    def record_scale(self, dep: Deployment, t: float, before: int, note: str) -> None:
        """A ``scale`` release: ``dep`` went from ``before`` replicas to its count now at ``t``. Changes at one instant
        with one note (three replicas added by one event or one autoscaler decision) are one record."""
        after = self.serving(dep)
        if after == before or not note:
            return
        last = self.releases[-1] if self.releases else None
        if (last is not None and last.kind == SCALE_KIND and last.time == t and last.deployment == dep.cfg.name
                and last.note == note):
            last.to_version = str(after)
            return
        self.releases.append(ReleaseRecord(t, dep.cfg.name, SCALE_KIND, str(before), str(after), note))

    def add_replica(self, dep: Deployment, available_from: float, t: float | None = None,
                    note: str = "replica added") -> Replica:
        """A new replica of ``dep`` (the next index), asked for at ``t`` (default: the fleet's now) and routed to from
        ``available_from`` (its cold start's end); recorded as a scale release with ``note`` (empty: not recorded, the
        fleet's initial size)."""
        before = self.serving(dep)
        idx = len(dep.replicas)
        obs = self.observer_factory(dep, idx) if self.observer_factory else None
        rep = self.replica_class(idx, dep.cfg.engine, dep.roofline, dep.num_blocks, self._finished, obs, self.max_run_steps)
        rep.available_from = available_from
        rep.step_scale, rep.prefill_scale, rep.decode_scale = dep.step_scale, dep.prefill_scale, dep.decode_scale
        rep.deployment = dep.index
        if dep.role == "prefill":
            rep.handoff = self._hand_off
        dep.replicas.append(rep)
        dep.router.invalidate()
        if note:
            t = self.now if t is None else t
            wait = available_from - t
            self.record_scale(dep, t, before, f"{note}, serving after {wait:g} s" if wait > 0 else note)
        return rep

    def start_replica(self, dep: Deployment, t: float, cold_start_s: float | None = None,
                      note: str = "replica added") -> Replica:
        """A replica of ``dep`` asked for at ``t``, serving after its cold start: ``cold_start_s`` when given (all of it
        after its process starts), else drawn from the deployment's ``cold_start`` model (none: 0)."""
        model = dep.cfg.cold_start
        if cold_start_s is not None or model is None:
            cold = ColdStart.in_process(cold_start_s or 0.0)
        else:
            assert dep.cfg.budget is not None, "parse_fleet sizes every deployment's memory"
            cold = model.sample(dep.cfg.budget.weights * dep.cfg.tp, self.cold_rng)
        rep = self.add_replica(dep, t + cold.total_s, t, note)
        self.cold_starts[(dep.index, dep.role, rep.index)] = (t, cold)
        return rep

    def drain_replica(self, dep: Deployment, index: int, t: float, note: str = "replica drained") -> None:
        """Replica ``index`` takes no new requests from ``t`` on; it finishes what it holds (then ``retire_replica``)."""
        before = self.serving(dep)
        dep.replicas[index].available_from = inf
        dep.router.invalidate()
        self.record_scale(dep, t, before, note)

    def retire_replica(self, dep: Deployment, index: int, t: float) -> None:
        """A drained replica is gone at ``t``: what it still holds is aborted (finish_reason ``abort``)."""
        rep = dep.replicas[index]
        if rep.alive and rep.outstanding:
            rep.abort_all(t)
        self.lose_replica(dep, index, t)

    def lose_replica(self, dep: Deployment, index: int, t: float) -> None:
        """Replica ``index`` dies at ``t``: its requests fail and the router stops sending to it."""
        rep = dep.replicas[index]
        if rep.alive:
            before = self.serving(dep)
            rep.fail_all(t)
            self.queue.update(rep)
            dep.router.invalidate()
            self.record_scale(dep, t, before, "replica lost")

    def watch(self, sink) -> None:
        """Hand every request that finishes from now on to ``sink.add(request)``."""
        self.sinks.append(sink)

    def _finished(self, req: Request) -> None:
        if self.gateway is not None:
            self.gateway.release(req)
        if self.keep_done:
            self.done.append(req)
        for sink in self.sinks:
            sink.add(req)

    def _hand_off(self, req: Request, t: float) -> None:
        """A prefill replica produced ``req``'s first token at ``t``: its KV leaves for a decode replica, picked now
        by the decode pool's router, and arrives after the link's time (``DisaggConfig.transfer_s``)."""
        dep = self.deployments[req.deployment]
        dis, decode = dep.cfg.disaggregation, dep.decode
        assert dis is not None and decode is not None, "only a disaggregated deployment's replicas hand off"
        req.kv_bytes = dis.transfer_bytes(req.prompt_tokens)
        req.kv_link_s = dis.transfer_s(req.prompt_tokens)
        rep = decode.router.pick(decode.replicas, req, t)
        if rep is None:  # no decode replica to send it to
            self._transfer_failed(req, None, t)
            return
        rep.incoming += 1
        heappush(self.transfers, (t + req.kv_link_s, req.rid, req, rep))

    def _transfer_failed(self, req: Request, rep: Replica | None, t: float) -> None:
        if rep is not None and rep.obs is not None:
            rep.obs.on_kv_transfer_failed(rep, req)
        req.finish_reason, req.completed, req.state = "error", t, 4
        self._finished(req)

    def _arrive(self, t: float) -> None:
        """The KV cache at the head of the link reached its decode replica at ``t``."""
        _, _, req, rep = heappop(self.transfers)
        rep.incoming -= 1
        if req.state == 4:  # the client went away while it was on the link
            return
        if not rep.alive:  # the decode replica died while it was on the link
            self._transfer_failed(req, rep, t)
            return
        if rep.obs is not None:
            rep.obs.on_kv_transfer(rep, req, req.kv_link_s, req.kv_bytes)
        if rep.receive(req, t):
            self.queue.update(rep)

    def abort(self, req: Request, t: float) -> None:
        """The client went away at ``t``: drop ``req`` wherever it is (an engine, or the link to its decode replica)."""
        if req.state == 4:
            return
        if req.prefill_replica >= 0 and req.kv_ready != req.kv_ready:  # on the link
            req.finish_reason, req.completed, req.state = "abort", t, 4
            self._finished(req)
            return
        rep = self.replica_of(req)
        if rep is not None and rep.abort(req, t):
            self.queue.update(rep)

    def reschedule(self, rep: Replica) -> None:
        """``rep``'s current segment changed (it was handed a request, aborted one, or sped up)."""
        self.queue.update(rep)

    # ------------------------------------------------------------------ input

    def submit(self, req: Request, t: float) -> None:
        """Route ``req`` (already stamped with its deployment) at time ``t`` and hand it to a replica."""
        dep = self.deployments[req.deployment]
        rep = dep.router.pick(dep.replicas, req, t)
        if rep is None:
            req.finish_reason, req.reject_reason, req.completed = "rejected", "overloaded", t
            req.state = 4
            self._finished(req)
            return
        if rep.submit(req, t):
            self.queue.update(rep)

    def _columns(self) -> tuple:
        """The arrival arrays as Python lists (indexing a list is far cheaper than a numpy scalar)."""
        a = self.arrivals
        assert a is not None, "only a fleet fed arrivals reads them"
        if getattr(self, "_cols_for", None) is not a:
            self._cols_for = a
            self._cols = (a.workload.tolist(), a.tenant.tolist(), a.arrival.tolist(), a.queue_start.tolist(),
                          a.prompt.tolist(), a.output.tolist(), a.natural_stop.tolist(), a.prefix,
                          a.prefix_block_tokens.tolist(), a.send_s.tolist())
        return self._cols

    def _arrival_request(self, i: int) -> Request:
        wl, tenant, arrival, qs, prompt, output, natural, prefix, pbt, send = self._columns()
        w = wl[i]
        self.next_rid += 1
        return Request(self.next_rid, w, tenant[i], self.workload_tier[w], arrival[i], qs[i], prompt[i], output[i],
                       natural[i], self.workload_deployment[w], prefix[i], pbt[i], send[i])

    def _apply(self, ev: EventConfig) -> None:
        t = ev.at
        deps = self.deployments if ev.deployment == "*" else [self.by_name[ev.deployment]]
        if ev.kind == "replica_lost":
            assert ev.replica is not None, "parse_fleet requires it of replica_lost"
            if ev.replica < len(deps[0].replicas):  # an event may name a replica the fleet never grew to
                self.lose_replica(deps[0], ev.replica, t)
        elif ev.kind == "replica_added":
            self.start_replica(deps[0], t, ev.cold_start_s)
        elif ev.kind == "release":
            for dep in (p for d in deps for p in ((d,) if d.decode is None else (d, d.decode))):
                dep.step_scale *= ev.effect("step_time_scale")
                dep.prefill_scale *= ev.effect("prefill_time_scale")
                dep.decode_scale *= ev.effect("decode_time_scale")
                for rep in dep.replicas:
                    if rep.alive and rep.set_scales(t, dep.step_scale, dep.prefill_scale, dep.decode_scale):
                        self.queue.update(rep)
            self.releases.append(ReleaseRecord(t, ev.deployment, ev.release_kind, ev.from_version, ev.to_version, ev.note))

    # ------------------------------------------------------------------ loop

    def run(self, until: float, progress: Callable[[float], None] | None = None) -> None:
        """Process everything that happens at or before ``until`` (virtual seconds)."""
        queue = self.queue
        qs = self._columns()[3] if self.arrivals is not None else []
        n_arr = len(qs)
        events = self.events
        gw = self.gateway
        ticks = 0
        while True:
            t_rep = queue.next_time()
            i = self.next_arrival
            t_arr = qs[i] if i < n_arr else inf
            t_ev = events[self.next_event].at if self.next_event < len(events) else inf
            t_gw = gw.next_time() if gw is not None else inf
            t_kv = self.transfers[0][0] if self.transfers else inf
            if t_kv < inf and t_kv <= t_rep and t_kv <= t_arr and t_kv <= t_ev and t_kv <= t_gw:
                if t_kv > until:
                    break
                self.now = max(self.now, t_kv)
                self._arrive(t_kv)
            elif t_gw < inf and t_gw <= t_rep and t_gw <= t_arr and t_gw <= t_ev:
                if t_gw > until:
                    break
                self.now = max(self.now, t_gw)
                assert gw is not None  # t_gw is inf without a gateway
                gw.advance(self.now)
            elif t_rep <= t_arr and t_rep <= t_ev:
                if t_rep > until or t_rep == inf:
                    break
                rep = queue.first()
                self.now = t_rep
                rep.complete_segment()
                queue.update(rep)
            elif t_ev <= t_arr:
                if t_ev > until:
                    break
                self.now = t_ev
                self._apply(events[self.next_event])
                self.next_event += 1
            else:
                if t_arr > until:
                    break
                self.now = t_arr
                self.next_arrival = i + 1
                if gw is None:
                    self.submit(self._arrival_request(i), t_arr)
                else:
                    gw.arrive(self._arrival_request(i), t_arr)
            ticks += 1
            if progress is not None and ticks % 4096 == 0:
                progress(self.now)
        self.now = max(self.now, until) if until != inf else self.now

    def in_flight(self) -> int:
        """Requests in the engines, and those waiting at the gateway."""
        waiting = self.gateway.waiting() if self.gateway is not None else 0
        return (waiting + len(self.transfers)
                + sum(r.outstanding for d in self.pools() for r in d.replicas if r.alive))

    def drain(self, limit: float, progress: Callable[[float], None] | None = None) -> None:
        """After the last arrival, run until every request has finished or ``limit`` is reached,
        then abort what is left (finish_reason ``abort``)."""
        step = 60.0
        t = self.now
        while self.in_flight() and t < limit:
            t = min(limit, t + step)
            self.run(t, progress)
        if self.gateway is not None:
            self.gateway.abort_all(limit)
        while self.transfers:
            _, _, req, rep = heappop(self.transfers)
            rep.incoming -= 1
            if req.state != 4:
                req.finish_reason, req.completed, req.state = "abort", limit, 4
                self._finished(req)
        for dep in self.pools():
            for rep in dep.replicas:
                if rep.alive:
                    rep.abort_all(limit)
                    self.queue.update(rep)
