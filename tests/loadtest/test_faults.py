"""Fault specs, and time to detect / time to recover judged over a sliding window of ended requests."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx
import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.faults import Fault, FaultDriver, detect_and_recover, fault_summary, parse_faults
from goodput.loadtest.records import RequestRecord
from goodput.simulator.live import LiveFleet
from tests.conftest import free_port_block, make_fleet


@dataclass(frozen=True)
class Term:  # the fields of the contract's SLO term (goodput.loadtest.slo)
    metric: str
    percentile: float
    threshold_s: float


@dataclass(frozen=True)
class Slo:
    terms: tuple[Term, ...]


TTFT_P95 = Slo((Term("ttft", 95, 0.5),))
STEP = 0.125  # binary fractions: window edges fall exactly on request ends


def record(i: int, end: float, ttft: float = 0.1, error: str = "", tokens: int = 5) -> RequestRecord:
    sent = end - 0.3
    ok = not error
    return RequestRecord(i, 0, sent, sent, sent + ttft if ok else None, end,  # an error answer ends too
                         [0.05] * (tokens - 1) if ok else [], 100, tokens if ok else 0, 200 if ok else 0, error,
                         "acme", "P1", "chat", f"{i:032x}")


def steady(n: int, bad=lambda t: False, **bad_kw) -> list[RequestRecord]:
    return [record(i, i * STEP, **(bad_kw if bad(i * STEP) else {})) for i in range(1, n + 1)]


def test_specs_parse_with_units_and_deployment():
    assert parse_faults(["replica_lost@120s", "replica_added@5m:chat", "abort_rate=0.02", "replica_lost@1500ms"]) == [
        Fault("replica_lost", at_s=120.0), Fault("replica_added", at_s=300.0, deployment="chat"),
        Fault("abort_rate", rate=0.02), Fault("replica_lost", at_s=1.5)]
    assert parse_faults(["replica_lost@30"]) == [Fault("replica_lost", at_s=30.0)]


@pytest.mark.parametrize("spec", ["replica_gone@10s", "replica_lost@", "replica_lost@-3s", "replica_lost@10h",
                                  "abort_rate=1.5", "abort_rate=nan", "abort_rate=x", "replica_lost@10s:"])
def test_a_bad_spec_is_one_config_error_naming_it(spec):
    with pytest.raises(ConfigError) as e:
        parse_faults(["replica_lost@1s", spec])
    assert str(e.value).startswith(f"--fault: {spec}: ")


def test_failures_after_the_fault_are_detected_and_recovery_waits_for_them_to_leave_the_window():
    # requests end every 1/8 s; those ending in [10, 15) fail; 16 per 2 s window, so p95 is the window's max
    recs = steady(200, bad=lambda t: 10.0 <= t < 15.0, error="http_5xx")
    detect, recover = detect_and_recover(recs, TTFT_P95, fault_at_s=9.5, window_s=2.0)
    assert detect == 0.5  # the first failure ends at 10.0
    assert recover == 16.875 - 9.5  # the last failure (14.875) leaves the window 2 s later


def test_the_summary_judges_each_fault_from_when_it_fired():
    recs = steady(200, bad=lambda t: 10.0 <= t < 15.0, error="http_5xx")
    fired = [{"kind": "replica_lost", "at_s": 9.0, "fired_s": 9.5, "deployment": "chat", "replica": "chat-1"},
             {"kind": "replica_added", "at_s": 12.0, "fired_s": 12.0, "error": "admin API answered 409: port taken"}]
    lost, added = fault_summary(fired, recs, TTFT_P95, window_s=2.0)
    assert (lost["detect_s"], lost["recover_s"], lost["replica"], lost["error"]) == (0.5, 16.875 - 9.5, "chat-1", "")
    assert (added["detect_s"], added["recover_s"]) == (None, None) and "409" in added["error"]


def test_recovery_is_the_instant_the_last_failure_leaves_even_where_float_sums_round():
    # (10.1 + 2.3) - 2.3 < 10.1 in floating point: the window must still drop 10.1 at 12.4, not at the next end
    recs = [record(k, k + 0.1, error="http_5xx" if k == 10 else "") for k in range(20)]
    detect, recover = detect_and_recover(recs, TTFT_P95, fault_at_s=9.5, window_s=2.3)
    assert detect == pytest.approx(0.6) and recover == pytest.approx(12.4 - 9.5)


def test_slow_first_tokens_breach_like_failures():
    recs = steady(200, bad=lambda t: 10.0 <= t < 12.0, ttft=0.9)
    assert detect_and_recover(recs, TTFT_P95, fault_at_s=9.0, window_s=2.0) == (1.0, 13.875 - 9.0)


def test_a_percentile_tolerates_a_few_bad_requests():
    # one slow request in each 16-request window: p50 holds, p95 (the max of 16) does not
    recs = steady(200, bad=lambda t: t in (10.0, 12.5), ttft=0.9)
    assert detect_and_recover(recs, Slo((Term("ttft", 50, 0.5),)), fault_at_s=9.0, window_s=2.0) == (None, None)
    assert detect_and_recover(recs, TTFT_P95, fault_at_s=9.0, window_s=2.0) == (1.0, 12.0 - 9.0)  # (10, 12] is clean


def test_every_term_must_hold_and_itl_pools_the_gaps():
    recs = steady(200)
    slo = Slo((Term("ttft", 95, 0.5), Term("itl", 99, 0.04)))  # every gap is 0.05 s
    assert detect_and_recover(recs, slo, fault_at_s=5.0, window_s=2.0) == (0.0, None)
    assert detect_and_recover(recs, Slo((Term("itl", 99, 0.06), Term("tpot", 90, 0.06), Term("e2e", 99, 0.4))),
                              fault_at_s=5.0, window_s=2.0) == (None, None)


def test_a_stall_with_nothing_ending_is_a_breach():
    recs = [r for r in steady(200) if not 10.0 < r.done_s < 14.0]  # nothing ends between 10 and 14
    assert detect_and_recover(recs, TTFT_P95, fault_at_s=9.0, window_s=2.0) == (3.0, 14.0 - 9.0)


def test_requests_still_in_flight_are_neither_met_nor_missed():
    recs = steady(100)
    recs.append(RequestRecord(999, 0, 5.0, 5.0, None, None, [], 100, 0, 0, "", "acme", "P1", "chat", "0" * 32))
    assert detect_and_recover(recs, TTFT_P95, fault_at_s=5.0, window_s=2.0) == (None, None)
    assert detect_and_recover([], TTFT_P95, fault_at_s=5.0) == (None, None)


# ---------------------------------------------------------------------------------------------- live fleet


async def _one(client: httpx.AsyncClient, i: int, url: str, t0: float) -> RequestRecord:
    """One streamed completion, measured as the contract's RequestRecord (the core client's job, done small here)."""
    sent = time.monotonic() - t0
    done = None
    arrivals: list[float] = []
    status, error, tokens = 0, "", 0
    body = {"model": "Llama-3.1-8B", "prompt": "hi", "max_tokens": 32, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
            status = resp.status_code
            if status != 200:
                error = "http_5xx" if status >= 500 else "http_4xx"
            else:
                finish = None
                async for line in resp.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    event = json.loads(line[6:])
                    if event.get("usage"):
                        tokens = event["usage"]["completion_tokens"]
                    for choice in event["choices"]:
                        finish = choice["finish_reason"] or finish
                        if choice["text"]:
                            arrivals.append(time.monotonic() - t0)
                if finish != "length":
                    error = "disconnect"
                else:
                    done = time.monotonic() - t0
    except httpx.ConnectError:
        error = "connect"
    except httpx.HTTPError:
        error = "disconnect"
    first = arrivals[0] if arrivals else None
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return RequestRecord(i, 0, sent, sent, first, done, gaps, 2, tokens, status, error, "acme", "P1", "chat", f"{i:032x}")


def test_replica_lost_on_the_live_fleet_is_detected_and_recovered_from(tmp_path):
    base = free_port_block(4)  # two replicas, the one added, the admin port
    fleet = LiveFleet(make_fleet(), base_port=base, traffic=0, admin_port=base + 3)
    fleet.start()
    urls = [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    fault_at, rate, duration = 2.0, 20.0, 6.0

    async def run() -> tuple[list[RequestRecord], FaultDriver]:
        t0 = time.monotonic()
        faults = parse_faults(["replica_added@4s:chat", f"replica_lost@{fault_at}s", "abort_rate=0.1"])
        driver = FaultDriver(f"http://127.0.0.1:{base + 3}", faults, lambda: time.monotonic() - t0)
        up = list(urls)  # round robin over the targets that still answer: a client that fails over
        records: list[RequestRecord] = []

        async def send(i: int, url: str) -> None:
            rec = await _one(client, i, url, t0)
            records.append(rec)
            if rec.error and url in up and len(up) > 1:
                up.remove(url)

        async with httpx.AsyncClient(timeout=30) as client:
            firing = asyncio.create_task(driver.run())
            tasks = []
            for i in range(int(rate * duration)):  # open loop: sent on schedule, never waiting for earlier ones
                await asyncio.sleep(max(0.0, i / rate - (time.monotonic() - t0)))
                tasks.append(asyncio.create_task(send(i, up[i % len(up)])))
            await asyncio.gather(*tasks, firing)
        return records, driver

    try:
        records, driver = asyncio.run(run())
    finally:
        fleet.close()
    assert [(f["kind"], f.get("replica"), f.get("error")) for f in driver.fired] == [
        ("replica_lost", "chat-1", None), ("replica_added", "chat-2", None)]  # in time order; abort_rate is the client's
    assert all(f["fired_s"] >= f["at_s"] for f in driver.fired)
    failed = [r for r in records if r.error]
    assert failed, "losing a replica failed no request"
    assert all(r.sent_s >= fault_at - 1.0 for r in failed), "requests failed before the fault"
    detect, recover = detect_and_recover(records, Slo((Term("ttft", 95, 1.0),)), fault_at_s=fault_at, window_s=1.0)
    assert detect is not None, "the failures after the replica was lost were not detected"
    assert recover is not None and recover > detect, f"no recovery after detection at +{detect} s"
    assert recover <= duration - fault_at, "recovered after the last request"


def test_a_fault_the_fleet_cannot_take_is_recorded_not_raised():
    base = free_port_block(1)  # nobody listens there

    async def run() -> list[dict]:
        driver = FaultDriver(f"http://127.0.0.1:{base}", parse_faults(["replica_lost@0s:chat"]), lambda: 0.0)
        await driver.run()
        return driver.fired

    [fired] = asyncio.run(run())
    assert fired["kind"] == "replica_lost" and fired["error"].startswith("ConnectError"), fired


def test_faults_due_after_the_run_are_reported_unfired():
    base = free_port_block(1)

    async def run() -> FaultDriver:
        driver = FaultDriver(f"http://127.0.0.1:{base}", parse_faults(["replica_lost@0s", "replica_added@1000s"]),
                             lambda: 0.0)
        task = asyncio.create_task(driver.run())
        deadline = time.monotonic() + 30
        while not driver.fired:
            assert time.monotonic() < deadline, "the first fault never fired"
            await asyncio.sleep(0.01)
        task.cancel()  # the run ends
        await asyncio.gather(task, return_exceptions=True)
        return driver

    driver = asyncio.run(run())
    assert [f["kind"] for f in driver.fired] == ["replica_lost"]
    [late] = driver.unfired()
    assert late["kind"] == "replica_added" and late["error"].startswith("not fired")
    [summary_late] = fault_summary(driver.unfired(), [], TTFT_P95)
    assert summary_late["detect_s"] is None and summary_late["error"].startswith("not fired")
