"""The circuit breaker's state machine: when it opens, how long it stays open, what its one half-open probe decides,
and what it ignores."""

from goodput.simulator.circuit import CLOSED, HALF_OPEN, OPEN, Circuit
from goodput.simulator.config import BreakerConfig

CFG = BreakerConfig(failures=3, error_ratio=0.5, window_s=10.0, min_requests=6, open_s=5.0)


def _feed(c, outcomes, start=0.0, step=0.1):
    """Outcomes (True failed) at ``start``, ``start + step``, ...; returns the index of the one that opened it."""
    for i, failed in enumerate(outcomes):
        if c.record(start + i * step, 1000 + i, failed):
            return i
    return None


def test_it_opens_after_its_failures_in_a_row_and_a_success_resets_the_count():
    c = Circuit(CFG)
    assert _feed(c, [True, True, False, True, True]) is None and c.state == CLOSED
    assert c.record(1.0, 1, True) and c.state == OPEN
    assert c.log[-1] == (1.0, OPEN, "3 failures in a row")


def test_it_opens_on_its_error_ratio_once_the_window_holds_enough_outcomes():
    c = Circuit(CFG)
    assert _feed(c, [True, False, True, False, True]) is None  # 3 of 5: too few outcomes to judge
    assert c.record(0.5, 1, False) and c.state == OPEN  # 3 of 6 failed
    assert c.log[-1][2] == "3 of 6 failed in 10 s"


def test_outcomes_older_than_the_window_no_longer_count():
    c = Circuit(CFG)
    assert _feed(c, [True, False, True, False, True], step=4.0) is None  # 0, 4, 8, 12, 16 s: at most 3 in 10 s
    assert not c.record(17.0, 1, False) and c.state == CLOSED  # 12, 16, 17: 1 failed of 3


def test_open_lets_nothing_through_until_open_s_then_exactly_one_probe():
    c = Circuit(CFG)
    _feed(c, [True] * 3)
    opened = c.opened_at
    assert not c.admits(opened + 4.9, 7)
    assert c.state_at(opened + 5.0) == HALF_OPEN and c.log[-1][:2] == (opened + 5.0, HALF_OPEN)
    assert c.admits(opened + 6.0, 7)  # the probe
    assert not c.admits(opened + 6.0, 8) and not c.admits(opened + 9.0, 9)  # the others wait for its outcome


def test_a_probe_that_succeeds_closes_it_and_one_that_fails_opens_it_again_for_open_s():
    c = Circuit(CFG)
    _feed(c, [True] * 3)
    assert c.admits(10.0, 7)
    assert c.record(11.0, 7, True) and c.state == OPEN and c.opened_at == 11.0
    assert not c.admits(15.9, 8) and c.admits(16.0, 8)
    assert not c.record(17.0, 8, False) and c.state == CLOSED
    assert [s for _, s, _ in c.log] == [CLOSED, OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]
    assert c.admits(17.0, 9) and c.admits(17.0, 10)  # closed: everyone


def test_while_open_late_outcomes_change_nothing_and_a_neutral_probe_frees_the_probe_slot():
    c = Circuit(CFG)
    _feed(c, [True] * 3)
    assert not c.record(0.3, 50, True) and not c.record(0.4, 51, False)  # sent before it opened
    assert c.state == OPEN and len(c.log) == 2
    assert c.admits(6.0, 7)
    assert not c.record(6.5, 99, False) and c.state == HALF_OPEN  # not the probe
    assert not c.record(7.0, 7, None) and c.state == HALF_OPEN  # the probe went away: no verdict
    assert c.admits(7.0, 8)  # the next request probes


def test_a_closed_circuit_counts_no_neutral_outcome():
    c = Circuit(CFG)
    assert _feed(c, [True, True, None, None, None, None, True]) == 6  # the Nones neither break nor extend the run
