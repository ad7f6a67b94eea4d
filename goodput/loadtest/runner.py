"""Runs a plan of steps against the target and returns every request's record, honestly timed.

Open loop: each step's arrivals are due at fixed instants of a monotonic run clock, and a due request is sent
whether or not earlier ones have answered (no coordinated omission); how late the client sent it is its schedule
lag. Closed loop: ``concurrency`` workers each send the next request as soon as their previous one ends. Each step
has a settle period at its start whose requests are still sent but lie outside its measured window.

The client's own health is part of the result: schedule lag p50/p99 and the event loop's CPU time (the client is
one thread; a fleet served from the same process does not count). A run whose lag or CPU says the client, not the
target, set the pace is marked invalid. Stopping early (Ctrl-C) keeps everything measured so far, in-flight
requests marked ``aborted``, and the run incomplete.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from goodput.foundation.quantiles import percentile
from goodput.loadtest.client import Client
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.workload import RequestSpec

__all__ = ["MAX_CPU_BUSY", "MAX_CPU_WAIT", "MAX_LAG_P99_S", "ClientHealth", "RunResult", "Step", "client_health", "cpu_wait_s",
           "run_plan", "sweep_rates"]

MAX_LAG_P99_S = 0.025  # schedule lag p99 above this: the client could not keep the schedule
SHORT_WAIT_S = 0.05  # waits shorter than this are plain sleeps (a stop is noticed at the next arrival)
MAX_CPU_BUSY = 0.9  # the client's event loop busy this fraction of the wall time: it was the bottleneck
SATURATED = 0.9  # a step that completed less than this fraction of its offered rate was limited by the target
MAX_CPU_WAIT = 0.5  # the client's thread ready to run but given no CPU this fraction of the time: the machine was


class Step(Protocol):
    """What the runner reads of a step (``patterns.Step`` and a worker's ``Share`` have it): times on the run clock,
    arrivals absolute. Read-only, so frozen dataclasses qualify."""

    @property
    def index(self) -> int: ...
    @property
    def start_s(self) -> float: ...
    @property
    def end_s(self) -> float: ...
    @property
    def concurrency(self) -> int | None: ...
    @property
    def arrivals_s(self) -> Sequence[float] | np.ndarray | None: ...  # None: closed loop at ``concurrency``


@dataclass
class ClientHealth:
    schedule_lag_p50_s: float
    schedule_lag_p99_s: float
    cpu_s: float
    wall_s: float
    cpu_per_token_us: float
    cpu_wait_s: float | None = None  # ready to run but waiting for a CPU (Linux schedstat; None elsewhere)
    workers: int = 1  # client processes (``--workers``); cpu_s and cpu_wait_s are their sums
    busiest_cpu_s: float | None = None  # the busiest worker's CPU (None: the one process, cpu_s)
    per_worker: list[dict] = field(default_factory=list)  # each worker's requests, tokens, CPU, lag p99 (workers > 1)

    def invalid_reasons(self) -> list[str]:
        out = []
        if self.schedule_lag_p99_s > MAX_LAG_P99_S:
            out.append(f"client schedule lag p99 {self.schedule_lag_p99_s * 1e3:.1f} ms > {MAX_LAG_P99_S * 1e3:g} ms")
        busiest = self.cpu_s if self.busiest_cpu_s is None else self.busiest_cpu_s
        loop = "client event loop" if self.workers == 1 else "busiest client worker's event loop"
        if self.wall_s > 0 and busiest / self.wall_s > MAX_CPU_BUSY:
            out.append(f"{loop} busy {busiest / self.wall_s:.0%} of the run (> {MAX_CPU_BUSY:.0%})")
        waited = None if self.cpu_wait_s is None or self.wall_s <= 0 else self.cpu_wait_s / self.wall_s / self.workers
        if waited is not None and waited > MAX_CPU_WAIT:
            out.append(f"client waited {waited:.0%} of the run for a CPU (> {MAX_CPU_WAIT:.0%}): "
                       f"the machine, busy with other work, set the pace")
        return out


def client_health(records: Sequence[RequestRecord], cpu_s: float, wall_s: float, cpu_wait_s: float | None,
                  workers: int = 1, busiest_cpu_s: float | None = None) -> ClientHealth:
    """The client's health over ``records``: schedule lag p50/p99 of every request, CPU per streamed token."""
    lags = [r.sent_s - r.scheduled_s for r in records]
    tokens = sum(r.output_tokens for r in records)
    return ClientHealth(percentile(lags, 50), percentile(lags, 99), cpu_s, wall_s,
                        cpu_s / tokens * 1e6 if tokens else 0.0, cpu_wait_s, workers, busiest_cpu_s)


@dataclass
class RunResult:
    records: list[RequestRecord]
    steps: list[Step]  # the steps that were started
    client: ClientHealth
    complete: bool
    invalid_reasons: list[str] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)  # indexes of the requests the client cut at the end (``aborted``)
    failures: list[str] = field(default_factory=list)  # client workers that died, named (the run is incomplete)

    def measured(self) -> list[RequestRecord]:
        """The records that count in the summary: a request the client itself cut (Ctrl-C, or still running after
        the drain) says nothing about the target."""
        cut = set(self.cut)
        return [r for r in self.records if r.index not in cut]

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons


def cpu_wait_s() -> float | None:
    """Seconds the calling thread has spent ready to run but waiting for a CPU (Linux ``schedstat``), None where
    the kernel does not say. On a shared machine this, not the client's own CPU, is what delays a schedule."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class _Run:
    def __init__(self, client: Client, specs: Callable[[int], RequestSpec], max_in_flight: int,
                 stop: asyncio.Event, on_record: Callable[[RequestRecord], None] | None, shard: tuple[int, int]) -> None:
        self.client, self.specs, self.stop = client, specs, stop
        self.first, self.stride = shard
        self.slots = asyncio.Semaphore(max_in_flight)
        self.records: list[RequestRecord] = []
        self.tasks: set[asyncio.Task] = set()
        self.on_record = on_record

    def _start(self, step: int, scheduled_s: float) -> asyncio.Task:
        index = self.first + self.stride * len(self.records)
        spec = self.specs(index)
        rec = self.client.record(index, step, scheduled_s, spec)
        self.records.append(rec)
        task = asyncio.get_running_loop().create_task(self._send(rec, spec))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _send(self, rec: RequestRecord, spec: RequestSpec) -> None:
        try:
            async with self.slots:  # never more in flight than the pool has connections
                await self.client.send(rec, spec)
        finally:
            if self.on_record is not None:
                self.on_record(rec)

    async def _sleep_until(self, t: float) -> bool:
        """Wait until run time ``t``; False when stopped first."""
        delay = t - self.client.clock()
        if 0 < delay < SHORT_WAIT_S:
            await asyncio.sleep(delay)  # the common case at a high rate: no task per arrival
        elif delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay)
        return not self.stop.is_set()

    async def open_step(self, step: Step, arrivals: Sequence[float] | np.ndarray) -> None:
        for due in arrivals:
            if not await self._sleep_until(due):
                return
            self._start(step.index, float(due))
        await self._sleep_until(step.end_s)

    async def closed_step(self, step: Step) -> None:
        async def worker() -> None:
            clock = self.client.clock
            while not self.stop.is_set() and clock() < step.end_s:
                # shielded: cancelling the worker at the step's end must not cancel its request in flight
                await asyncio.shield(self._start(step.index, clock()))

        await self._sleep_until(step.start_s)
        workers = [asyncio.ensure_future(worker()) for _ in range(step.concurrency or 0)]
        await self._sleep_until(step.end_s)
        for w in workers:  # a worker's request in flight at the step's end finishes in its own time
            if not w.done():
                w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def run_plan(client: Client, steps: Sequence[Step], specs: Callable[[int], RequestSpec], *,
                   max_in_flight: int, stop: asyncio.Event | None = None, drain_s: float | None = None,
                   on_record: Callable[[RequestRecord], None] | None = None,
                   on_start: Callable[[], None] | None = None, shard: tuple[int, int] = (0, 1),
                   origin: float | None = None) -> RunResult:
    """Run ``steps`` in order on a run clock that starts now (or at ``origin``, a ``time.monotonic()`` instant);
    ``specs(i)`` is the i-th request to send. Setting ``stop`` ends the run early (incomplete); requests still in
    flight ``drain_s`` after the last step (default: the client's timeout) are cut. ``on_start()`` is called the moment
    the run clock starts, so what runs beside the run (a server view, a fault driver) shares its time 0.

    ``shard`` = (k, n): this is worker k of n (``workers``), given its share of the steps; its requests are numbered
    k, k + n, k + 2n, ..., which for open-loop arrivals dealt out in turn is each one's place in the whole schedule."""
    stop = stop or asyncio.Event()
    run = _Run(client, specs, max_in_flight, stop, on_record, shard)
    client.start_clock(origin)
    if on_start is not None:
        on_start()
    cpu0, wait0 = time.thread_time(), cpu_wait_s()
    started: list[Step] = []
    for step in steps:
        if stop.is_set():
            break
        started.append(step)
        arrivals = step.arrivals_s
        await (run.closed_step(step) if arrivals is None else run.open_step(step, arrivals))
    complete = not stop.is_set()
    if run.tasks and complete:
        stopper = asyncio.ensure_future(stop.wait())
        deadline = client.clock() + (client.opt.timeout_s if drain_s is None else drain_s)
        while run.tasks and not stop.is_set() and (left := deadline - client.clock()) > 0:
            await asyncio.wait(run.tasks | {stopper}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        complete = not stop.is_set()
    while run.tasks:
        for task in list(run.tasks):
            task.cancel()
        await asyncio.gather(*run.tasks, return_exceptions=True)
    cut = []
    for rec in run.records:
        if rec.done_s is None and not rec.error:  # cut while waiting or streaming: the client gave up on it
            rec.error = "aborted"
            cut.append(rec.index)
    cpu, wall, wait1 = time.thread_time() - cpu0, client.clock(), cpu_wait_s()
    health = client_health(run.records, cpu, wall, None if wait0 is None or wait1 is None else wait1 - wait0)
    return RunResult(run.records, started, health, complete, health.invalid_reasons(), cut)


def sweep_rates(measure: Callable[[float], tuple[bool, float, float | None]], start: float, *, factor: float = 2.0,
                max_steps: int = 8, tolerance: float = 0.05) -> tuple[float | None, list[tuple[float, bool, float]]]:
    """The highest rate whose step meets the SLO: coarse steps (``start``, ×``factor``, …) until a step misses the
    SLO or its goodput falls, then a search between the last good rate and the first bad one until they are within
    ``tolerance`` (relative) or ``max_steps`` steps are spent. ``measure(rate)`` runs a step and returns (SLO met,
    goodput, the rate at which the target completed requests during the step, or None).

    A saturated target completes no more than its capacity, however much is offered, so a bad step that completed
    clearly less than it offered bounds the knee near what it completed: the next probe is that rate (kept at least
    ``tolerance`` above the good rate) instead of the midpoint, when it is lower. Without it a doubling that overshot
    by far leaves a wide interval that bisection narrows only one halving per step.
    Returns (the knee or None, every (rate, met, goodput) measured)."""
    tried: list[tuple[float, bool, float]] = []
    good, bad, best, served = None, None, -math.inf, None
    rate = start
    while len(tried) < max_steps:
        met, goodput, served = measure(rate)
        tried.append((rate, met, goodput))
        if not met or goodput < best:
            bad = rate
            break
        good, best = rate, goodput
        rate *= factor
    while good is not None and bad is not None and len(tried) < max_steps and bad - good > tolerance * good:
        rate = (good + bad) / 2
        if served is not None and served < SATURATED * bad:
            rate = min(rate, max(served, good * (1 + tolerance)))
        met, goodput, served = measure(rate)
        tried.append((rate, met, goodput))
        if met and goodput >= best:
            good, best, served = rate, goodput, None
        else:
            bad = rate
    return good, tried
