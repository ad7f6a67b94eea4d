"""The runner: open loop without coordinated omission, closed-loop concurrency, steps, stop, client health, sweep."""

import asyncio
import copy
import threading
import time

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.foundation.quantiles import percentile
from goodput.loadtest.client import Client, ClientOptions
from goodput.loadtest.patterns import Step
from goodput.loadtest.runner import ClientHealth, run_plan, sweep_rates
from goodput.loadtest.workload import RequestSpec
from goodput.simulator.live import LiveFleet
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet
from tests.loadtest.stub_target import StubTarget

SPEC = RequestSpec(50, 4, "lt", "P1", "chat", 0)


def _step(index: int, start_s: float, end_s: float, concurrency: int | None = None,
          arrivals_s: np.ndarray | None = None) -> Step:
    return Step(index, f"step {index}", start_s, end_s, 0.0, None, concurrency, arrivals_s)


@pytest.fixture
def stub():
    s = StubTarget(free_port_block(1))
    yield s
    s.close()


def _open_gate_when(stub, ready, delay_s=0.0):
    """Open the stub's gate once ``ready()`` holds (or after 20 s, so a broken runner fails instead of hanging)."""
    def run():
        deadline = time.monotonic() + 20
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay_s)
        stub.gate_open.set()
    threading.Thread(target=run, daemon=True).start()


def _run(url, steps, max_in_flight=64, stop_when=None, model="stub-model", **opts):
    async def go():
        client = Client([url], ClientOptions(model=model, timeout_s=30.0, **opts), max_in_flight)
        stop = asyncio.Event()

        async def stopper():
            while not stop_when():
                await asyncio.sleep(0.01)
            stop.set()
        watcher = asyncio.ensure_future(stopper()) if stop_when else None
        try:
            return await run_plan(client, steps, lambda i: SPEC, max_in_flight=max_in_flight, stop=stop)
        finally:
            if watcher:
                watcher.cancel()
            await client.aclose()
    return asyncio.run(go())


def _max_overlap(records):
    edges = sorted([(r.sent_s, 1) for r in records] + [(r.done_s, -1) for r in records])
    level = peak = 0
    for _, d in edges:
        level += d
        peak = max(peak, level)
    return peak


def test_open_loop_sends_every_due_request_without_waiting_for_earlier_ones(stub):
    """The stub answers nothing until it holds all 12 requests: a runner that waited would never get there."""
    _open_gate_when(stub, lambda: stub.held == 12)
    res = _run(stub.url + "/gate", [_step(0, 0.0, 0.6, arrivals_s=np.arange(12) * 0.05)])
    assert stub.max_held == 12
    assert [r.error for r in res.records] == [""] * 12
    assert [r.scheduled_s for r in res.records] == pytest.approx(list(np.arange(12) * 0.05))
    assert all(r.sent_s >= r.scheduled_s for r in res.records)
    assert res.complete and res.client.wall_s > 0


def test_a_client_that_cannot_keep_the_schedule_marks_the_run_invalid(stub):
    """One connection for 20 requests due at once: each waits for the one before, and the lag says so."""
    _open_gate_when(stub, lambda: stub.held == 1, delay_s=0.2)
    res = _run(stub.url + "/gate", [_step(0, 0.0, 0.1, arrivals_s=np.zeros(20))], max_in_flight=1)
    assert [r.error for r in res.records] == [""] * 20
    assert min(r.sent_s - r.scheduled_s for r in res.records[1:]) >= 0.2  # all queued behind the held first one
    assert res.client.schedule_lag_p99_s >= 0.2
    assert not res.valid and "schedule lag p99" in res.invalid_reasons[0]


def test_client_health_reasons():
    ok = ClientHealth(0.001, 0.004, cpu_s=1.0, wall_s=10.0, cpu_per_token_us=5.0)
    assert ok.invalid_reasons() == []
    busy = ClientHealth(0.001, 0.004, cpu_s=9.5, wall_s=10.0, cpu_per_token_us=5.0)
    assert busy.invalid_reasons() == ["client event loop busy 95% of the run (> 90%)"]
    starved = ClientHealth(0.001, 0.004, cpu_s=1.0, wall_s=10.0, cpu_per_token_us=5.0, cpu_wait_s=6.0)
    assert starved.invalid_reasons() == ["client waited 60% of the run for a CPU (> 50%): the machine, busy with "
                                         "other work, set the pace"]
    assert ClientHealth(0.001, 0.004, 1.0, 10.0, 5.0, cpu_wait_s=4.0).invalid_reasons() == []
    assert percentile([], 99) == 0.0
    assert percentile(list(range(1, 101)), 99) == pytest.approx(float(np.percentile(range(1, 101), 99)))
    assert percentile([3, 1, 2], 50) == 2 and percentile([5], 99) == 5 and percentile([1, 2], 100) == 2


def test_closed_loop_keeps_exactly_the_concurrency_in_flight(stub):
    _open_gate_when(stub, lambda: stub.held == 3)
    res = _run(stub.url + "/gate", [_step(0, 0.0, 0.8, concurrency=3)])
    assert stub.max_held == 3
    assert len(res.records) > 3 and {r.step for r in res.records} == {0}
    assert {r.error for r in res.records} == {""}
    assert _max_overlap(res.records) == 3
    assert all(r.scheduled_s < 0.8 for r in res.records)


def test_steps_run_in_order_and_records_carry_their_step(stub):
    stub.gate_open.set()
    steps = [_step(0, 0.0, 0.3, arrivals_s=np.array([0.0, 0.1, 0.2])), _step(1, 0.3, 0.6, concurrency=2),
             _step(2, 0.6, 0.9, arrivals_s=np.array([0.65, 0.7]))]
    res = _run(stub.url + "/gate", steps)
    assert res.complete and res.steps == steps
    by_step = {i: [r for r in res.records if r.step == i] for i in range(3)}
    assert len(by_step[0]) == 3 and len(by_step[2]) == 2 and len(by_step[1]) >= 2
    for s in steps:
        assert all(s.start_s <= r.scheduled_s < s.end_s + 1e-9 for r in by_step[s.index])
    assert [r.index for r in res.records] == list(range(len(res.records)))


def test_stop_keeps_what_was_measured_and_marks_the_run_incomplete(stub):
    """Ctrl-C mid-run: requests in flight are cut (aborted), later steps never start, nothing measured is lost."""
    steps = [_step(0, 0.0, 1.0, arrivals_s=np.array([0.0, 0.01, 0.02])), _step(1, 1.0, 2.0, concurrency=2)]
    res = _run(stub.url + "/gate", steps, stop_when=lambda: stub.held == 3)
    assert not res.complete
    assert len(res.records) == 3 and res.steps == steps[:1]
    assert all(r.error == "aborted" and r.done_s is None for r in res.records)
    assert res.cut == [0, 1, 2] and res.measured() == []  # cut by the client: kept, but not held against the target


def test_the_fleet_counts_what_the_client_counted(tmp_path):
    """Against the live fleet at a low rate: every request succeeds, and the fleet's success counter agrees."""
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    base = free_port_block(1)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0)
    lf.start()
    url = f"http://127.0.0.1:{base}"

    def successes():
        text = httpx.get(url + "/metrics").text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "vllm:request_success_total")
    try:
        before = successes()
        res = _run(url, [_step(0, 0.0, 1.0, arrivals_s=np.arange(8) * 0.1)], model="Llama-3.1-8B")
        after = successes()
    finally:
        lf.close()
    assert [r.error for r in res.records] == [""] * 8
    assert after - before == 8
    assert all(r.output_tokens == 4 and r.ttft_s > 0 for r in res.records)
    assert res.client.cpu_s > 0 and res.client.cpu_per_token_us > 0
    assert res.client.cpu_wait_s is not None and 0 <= res.client.cpu_wait_s <= res.client.wall_s  # Linux schedstat


def test_sweep_finds_the_knee_within_tolerance_in_few_steps():
    capacity = 37.0
    calls = []

    def measure(rate):
        calls.append(rate)
        return rate <= capacity, min(rate, capacity), None  # no completion rate: plain bisection
    knee, tried = sweep_rates(measure, 5.0, max_steps=8, tolerance=0.1)
    assert len(tried) <= 8 and calls == [t[0] for t in tried]
    assert knee <= capacity and knee >= 0.9 * capacity
    assert [t[0] for t in tried[:4]] == [5.0, 10.0, 20.0, 40.0]  # coarse doubling until the SLO is missed


def test_a_saturated_step_guides_the_sweep_to_the_knee():
    """Doubling from 1 overshoots a capacity of 37 at 64: bisection alone would still be 5 probes from 5% after
    8 steps; the rate the saturated step completed (its capacity) is probed next and the knee is found in 8."""
    capacity = 37.0

    def measure(rate):
        return rate <= 0.97 * capacity, min(rate, capacity), min(rate, capacity)
    knee, tried = sweep_rates(measure, 1.0, max_steps=8)
    assert [t[0] for t in tried[:8]][:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    assert tried[7][0] == capacity  # what the 64 req/s step completed, not the midpoint 48
    assert knee == 32.0 and len(tried) == 8
    knee, tried = sweep_rates(measure, 5.0, max_steps=8)
    assert [t[0] for t in tried[:5]] == [5.0, 10.0, 20.0, 40.0, 30.0]  # 40 completed 37: the midpoint is lower
    assert 0.95 * 0.97 * capacity <= knee <= 0.97 * capacity and len(tried) <= 8


def test_sweep_stops_when_goodput_falls_even_if_the_slo_holds():
    tried_rates = []

    def measure(rate):
        tried_rates.append(rate)
        return True, rate if rate < 15 else 30 - rate, rate
    knee, tried = sweep_rates(measure, 4.0, max_steps=8, tolerance=0.1)
    assert [t[0] for t in tried[:4]] == [4.0, 8.0, 16.0, 32.0] and 64.0 not in tried_rates  # 32 fell: no 64
    assert all(16.0 < t[0] < 32.0 for t in tried[4:])  # then bisection between the best and the fall
    assert knee == pytest.approx(15.0, rel=0.1)  # goodput peaks at 15


def test_sweep_with_nothing_meeting_the_slo():
    knee, tried = sweep_rates(lambda r: (False, 0.0, 0.0), 1.0)
    assert knee is None and len(tried) == 1


def test_every_request_in_flight_has_its_connection(stub):
    """130 due at once: the stub holds all 130 before answering any, so the one connector has a connection for
    each request in flight and none waited for one (a wait the schedule lag would not show)."""
    _open_gate_when(stub, lambda: stub.held == 130)
    res = _run(stub.url + "/gate", [_step(0, 0.0, 0.1, arrivals_s=np.zeros(130))], max_in_flight=130)
    assert stub.max_held == 130 and [r.error for r in res.records] == [""] * 130
