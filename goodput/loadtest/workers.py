"""The open-loop schedule sharded over client processes (``--workers N``), each with its own event loop and pool.

One event loop streams about 50,000 tokens per second of one core at most (~20 µs each); 500 req/s × 128 tokens is
64,000. So the parent deals the run out: the arrivals, computed once, go to the workers in turn (arrival i to worker
i mod N, so each worker's share keeps the whole schedule's instants exactly), a closed loop's concurrency is split
between them, and every worker sends on one run clock whose origin the parent picks once all are ready: a
``time.monotonic()`` instant, CLOCK_MONOTONIC, the same in every process of the machine. Worker k numbers its
requests k, k + N, k + 2N, ..., which for open-loop arrivals is each one's place in the whole schedule, so
``specs(i)`` gives every request the spec it would have had in one process.

The parent merges what the workers measured into one run (records renumbered by their scheduled time, which for an
open loop keeps each request's number), with the client's health over all of them: schedule lag p50/p99 over every
request, the CPU and CPU wait summed, the busiest worker's CPU judged against the wall. What runs beside the load
(the server's view, faults) stays in the parent, on the same clock. A worker that dies is a failure naming it;
the others are stopped and what they measured is kept, the run incomplete, as after Ctrl-C (which the workers
ignore: the parent stops them). Processes are started with ``spawn``: never a fork of a process that has threads
or a running event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from goodput.loadtest.client import Client, ClientOptions
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.runner import RunResult, Step, client_health, run_plan
from goodput.loadtest.workload import RequestSpec

__all__ = ["STREAMS_PER_WORKER", "TOKENS_PER_WORKER", "auto_workers", "run_workers", "shares"]

TOKENS_PER_WORKER = 20_000  # streamed tokens/s one worker is given: ~40% of a core at ~20 µs each, room to keep time
STREAMS_PER_WORKER = 500  # a closed loop's streams per worker (its token rate is the target's to set)
START_TIMEOUT_S = 120.0  # a worker not ready by then (importing, on a loaded machine) fails the start
START_LEAD_S = 0.2  # the run clock's origin is this far after the last worker said ready: every "go" arrives first
JOIN_S = 10.0  # how long a finished worker is given to exit before it is terminated
POLL_S = 0.25  # the progress bar's pace


@dataclass(frozen=True)
class Share:
    """One worker's part of a step: what the runner reads of it."""

    index: int
    start_s: float
    end_s: float
    concurrency: int | None
    arrivals_s: np.ndarray | None


def shares(steps: Sequence[Step], n: int) -> list[list[Share]]:
    """Each of ``n`` workers' part of every step: open-loop arrivals dealt in turn across the whole plan (arrival i
    to worker i mod n), a closed loop's concurrency split as evenly as it goes (a worker may get 0)."""
    out: list[list[Share]] = [[] for _ in range(n)]
    dealt = 0
    for s in steps:
        for k in range(n):
            if s.arrivals_s is None:
                c = s.concurrency or 0
                out[k].append(Share(s.index, s.start_s, s.end_s, c // n + (k < c % n), None))
            else:
                out[k].append(Share(s.index, s.start_s, s.end_s, None, np.asarray(s.arrivals_s)[(k - dealt) % n::n]))
        if s.arrivals_s is not None:
            dealt += len(s.arrivals_s)
    return out


def auto_workers(steps: Sequence[Step], specs: Callable[[int], RequestSpec], cpus: int | None = None) -> int:
    """``--workers auto``: enough workers that each streams at most ``TOKENS_PER_WORKER`` tokens/s at the plan's
    peak (the most arrivals in any one second × the mean output length of the first requests), or holds at most
    ``STREAMS_PER_WORKER`` of a closed loop's streams; at least 1, at most the machine's CPUs."""
    need = 1
    arrivals = sum(len(s.arrivals_s) for s in steps if s.arrivals_s is not None)
    mean_out = float(np.mean([specs(i).output_tokens for i in range(min(arrivals, 4096))])) if arrivals else 0.0
    for s in steps:
        if s.arrivals_s is None:
            need = max(need, math.ceil((s.concurrency or 0) / STREAMS_PER_WORKER))
        elif len(s.arrivals_s):
            a = np.sort(np.asarray(s.arrivals_s, dtype=float))
            peak = int(np.max(np.searchsorted(a, a + 1.0) - np.arange(len(a))))
            need = max(need, math.ceil(peak * mean_out / TOKENS_PER_WORKER))
    return max(1, min(need, cpus or os.cpu_count() or 1))


@dataclass(frozen=True)
class _Job:
    """What a worker is sent at its start (pickled by ``spawn``)."""

    k: int
    n: int
    targets: list[str]
    options: ClientOptions
    steps: list[Share]
    specs: Callable[[int], RequestSpec]
    max_in_flight: int
    drain_s: float | None


def _worker(conn, job: _Job) -> None:
    """A worker process: Ctrl-C is the parent's to act on (SIGINT comes blocked, and is ignored should anything
    unblock it); SIGTERM, a "stop" or the parent gone stop the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_work(conn, job))
    except BaseException as e:  # noqa: BLE001 - whatever ends the worker goes to the parent, which names it in the failure
        with contextlib.suppress(OSError):
            conn.send(("failed", f"{type(e).__name__}: {e}"))
        raise SystemExit(1) from None


async def _work(conn, job: _Job) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    go: asyncio.Future = loop.create_future()

    def readable() -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone: stop, never run on alone
            msg = ("stop",)
            loop.remove_reader(conn.fileno())
        if msg[0] == "go" and not go.done():
            go.set_result(msg[1])
        else:
            stop.set()
            if not go.done():
                go.set_result(None)

    loop.add_reader(conn.fileno(), readable)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    client = Client(job.targets, replace(job.options, seed=job.options.seed + job.k), job.max_in_flight)
    result = None
    try:
        conn.send(("ready",))
        origin = await go
        if origin is not None:
            result = await run_plan(client, job.steps, job.specs, max_in_flight=job.max_in_flight, stop=stop,
                                    drain_s=job.drain_s, shard=(job.k, job.n), origin=origin)
    finally:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(conn.fileno())
        await client.aclose()
    conn.send(("done", result))


class _Fleet:
    """The worker processes and their pipes, seen from the parent's event loop."""

    def __init__(self, jobs: list[_Job]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.queue: asyncio.Queue = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.procs, self.conns = [], []
        self.open: set[int] = set()
        with _sigint_blocked():
            for job in jobs:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, job), name=f"goodput-loadtest-worker-{job.k}",
                                   daemon=True)
                self.procs.append(proc)
                self.conns.append(parent)
                proc.start()
                child.close()  # the worker's end lives in the worker only: its death is our EOF
                self.open.add(job.k)
                self.loop.add_reader(parent.fileno(), self._readable, job.k)

    def _readable(self, k: int) -> None:
        try:
            msg = self.conns[k].recv()
        except (EOFError, OSError):
            msg = ("died", "")
        if msg[0] in ("done", "failed", "died"):
            self.loop.remove_reader(self.conns[k].fileno())
            self.open.discard(k)
        self.queue.put_nowait((k, msg))

    def send(self, msg: tuple) -> None:
        for k in sorted(self.open):
            with contextlib.suppress(OSError):
                self.conns[k].send(msg)

    def name(self, k: int) -> str:
        return f"load-test worker {k} (pid {self.procs[k].pid})"

    def exit_of(self, k: int) -> str:
        proc = self.procs[k]
        proc.join(2.0)
        code = proc.exitcode
        return "still running" if code is None else (f"killed by signal {-code}" if code < 0 else f"exit code {code}")

    def close(self) -> None:
        """Every worker gone: joined, else terminated, else killed; no process is left behind."""
        for k in list(self.open):
            self.loop.remove_reader(self.conns[k].fileno())
        deadline = time.monotonic() + JOIN_S
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for stubborn in (p for p in self.procs if p.is_alive()):
            stubborn.terminate()
            stubborn.join(2.0)
            if stubborn.is_alive():
                stubborn.kill()
                stubborn.join()
        for conn in self.conns:
            conn.close()


@contextlib.contextmanager
def _sigint_blocked():
    """Ctrl-C held back while the workers are started: a process inherits its signal mask across fork and exec, so
    a worker never sees SIGINT (the parent stops the workers), and a Ctrl-C meanwhile reaches the parent once the
    mask is restored, not lost."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@dataclass
class _Supervision:
    """What the parent learns of its workers while they run: their results, the failures, whether it stopped them."""

    fleet: _Fleet
    results: dict[int, RunResult] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    stopping: bool = False

    def stop_all(self) -> None:
        self.stopping = True
        self.fleet.send(("stop",))

    async def next_message(self, also: set[asyncio.Future], timeout: float) -> tuple[int, tuple] | None:
        """The next (worker, message), or None when one of ``also`` (the stop) or the timeout came first."""
        got = asyncio.ensure_future(self.fleet.queue.get())
        await asyncio.wait({got, *also}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if not got.done():
            got.cancel()
            return None
        return got.result()

    async def await_ready(self, n: int, stop: asyncio.Event, stopper: asyncio.Future) -> None:
        """Wait for all ``n`` workers to say ready: a worker that fails first, or none ready in time, is a failure;
        a stop meanwhile ends the wait."""
        ready: set[int] = set()
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(ready) < n and not self.failures and not stop.is_set():
            got = await self.next_message({stopper}, max(0.0, deadline - time.monotonic()))
            if got is None:
                if time.monotonic() >= deadline:
                    self.failures.append(f"{n - len(ready)} load-test worker(s) not ready after {START_TIMEOUT_S:g} s")
                continue
            k, msg = got
            if msg[0] == "ready":
                ready.add(k)
            else:
                self.failures.append(f"{self.fleet.name(k)} failed before the run: {msg[1] or self.fleet.exit_of(k)}")

    async def follow(self, stop: asyncio.Event, stopper: asyncio.Future, clock: Callable[[], float],
                     on_progress: Callable[[float], None] | None) -> None:
        """Until every worker has ended: progress now and then, the stop passed on, each result kept; a worker
        that dies stops the others (the run is a partial one, kept)."""
        while self.fleet.open:
            # once stopping, the stop (long set) is no more to wait on: only the workers' answers
            got = await self.next_message(set() if self.stopping else {stopper}, POLL_S)
            if on_progress is not None and not self.stopping:
                on_progress(clock())
            if stop.is_set() and not self.stopping:
                self.stop_all()
            if got is None:
                continue
            k, msg = got
            if msg[0] == "done":
                if msg[1] is not None:
                    self.results[k] = msg[1]
            elif msg[0] in ("failed", "died"):
                self.failures.append(f"{self.fleet.name(k)} died mid-run: {msg[1] or self.fleet.exit_of(k)}")
                if not self.stopping:
                    self.stop_all()
        while not self.fleet.queue.empty():  # a "done" that came with the last EOF
            k, msg = self.fleet.queue.get_nowait()
            if msg[0] == "done" and msg[1] is not None:
                self.results[k] = msg[1]


async def run_workers(targets: list[str], options: ClientOptions, steps: Sequence[Step],
                      specs: Callable[[int], RequestSpec], *, workers: int, max_in_flight: int,
                      stop: asyncio.Event | None = None, drain_s: float | None = None,
                      on_start: Callable[[Callable[[], float]], None] | None = None,
                      on_progress: Callable[[float], None] | None = None) -> RunResult:
    """``run_plan`` over ``workers`` processes: the same steps, specs and stop, one merged result. Each worker's pool
    holds its share of ``max_in_flight``. ``on_start(clock)`` is called with the run clock as it starts;
    ``on_progress(t)`` now and then with its time. The result's ``failures`` name the workers that died."""
    stop = stop or asyncio.Event()
    n = workers
    per_pool = max(1, math.ceil(max_in_flight / n))
    jobs = [_Job(k, n, list(targets), options, part, specs, per_pool, drain_s) for k, part in enumerate(shares(steps, n))]
    sup = _Supervision(_Fleet(jobs))
    origin = time.monotonic() + START_TIMEOUT_S  # until the real one is set, the clock reads before 0

    def clock() -> float:
        return time.monotonic() - origin

    try:
        stopper = asyncio.ensure_future(stop.wait())
        await sup.await_ready(n, stop, stopper)
        if sup.failures or stop.is_set():
            sup.stop_all()
        else:
            origin = time.monotonic() + START_LEAD_S
            sup.fleet.send(("go", origin))
            if on_start is not None:
                on_start(clock)
        await sup.follow(stop, stopper, clock, on_progress)
        stopper.cancel()
        wall = clock() if sup.results else 0.0  # the run's end, before the workers' exit (which can take seconds)
    finally:
        sup.fleet.close()
    return merge(sup.results, steps, n, wall, complete=not sup.stopping and not sup.failures, failures=sup.failures)


def merge(results: dict[int, RunResult], steps: Sequence[Step], n: int, wall_s: float, *, complete: bool,
          failures: list[str]) -> RunResult:
    """One run from the workers' runs: records in scheduled order (numbered anew; an open loop keeps its numbers),
    health over them all, the steps any worker started."""
    records: list[RequestRecord] = [r for res in results.values() for r in res.records]
    cut = {i for res in results.values() for i in res.cut}
    records.sort(key=lambda r: (r.scheduled_s, r.index))
    cut_now = []
    for i, r in enumerate(records):
        if r.index in cut:
            cut_now.append(i)
        r.index = i
    healths = [res.client for res in results.values()]
    waits = [h.cpu_wait_s for h in healths if h.cpu_wait_s is not None]
    cpu_wait = sum(waits) if healths and len(waits) == len(healths) else None  # None: some worker's kernel did not say
    cpu = sum(h.cpu_s for h in healths)
    health = client_health(records, cpu, wall_s, cpu_wait, n, max((h.cpu_s for h in healths), default=0.0))
    health.per_worker = [{"worker": k, "requests": len(res.records),
                          "output_tokens": sum(r.output_tokens for r in res.records),
                          "cpu_s": res.client.cpu_s, "cpu_wait_s": res.client.cpu_wait_s,
                          "schedule_lag_p99_s": res.client.schedule_lag_p99_s, "complete": res.complete}
                         for k, res in sorted(results.items())]
    started = max((len(res.steps) for res in results.values()), default=0)
    complete = complete and len(results) == n and all(res.complete for res in results.values())
    return RunResult(records, list(steps[:started]), health, complete, health.invalid_reasons(), cut_now,
                     failures)
