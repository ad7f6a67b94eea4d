"""Fault specs, and time to detect / time to recover judged over a sliding window of ended requests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from capacity.loadtest.faults import Fault, detect_and_recover, parse_faults
from capacity.loadtest.records import RequestRecord
from goodput.foundation.errors import ConfigError


@dataclass(frozen=True)
class Term:  # the fields of the contract's SLO term (capacity.loadtest.slo)
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
