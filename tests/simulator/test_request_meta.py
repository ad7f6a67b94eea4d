"""Client headers become bounded labels and a parsed W3C trace context."""

import copy

import pytest

from goodput.simulator.request_meta import MAX_LABEL_CHARS, LabelGuard, parse_traceparent
from tests.conftest import BASE_WORKLOAD, make_fleet

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_a_valid_traceparent_is_parsed():
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-01") == (TRACE, SPAN)
    assert parse_traceparent(f" 00-{TRACE}-{SPAN}-00 ") == (TRACE, SPAN)  # unsampled is still a parent


@pytest.mark.parametrize("value", [
    None, "", "garbage",
    f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
    f"00-{TRACE}-{'0' * 16}-01",  # all-zero span id
    f"01-{TRACE}-{SPAN}-01",  # only version 00 is understood
    f"ff-{TRACE}-{SPAN}-01",
    f"00-{TRACE.upper()}-{SPAN}-01",  # hex must be lowercase
    f"00-{TRACE[:-1]}-{SPAN}-01",
    f"00-{TRACE}-{SPAN}x-01",
    f"00-{TRACE}-{SPAN}-1",
    f"00-{TRACE}-{SPAN}-01-extra",
])
def test_invalid_traceparents_are_ignored(value):
    assert parse_traceparent(value) is None


def _guard():
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl.update(route="support", scene="rag")
    return LabelGuard.of(make_fleet(workloads=[wl]))


def test_routes_and_scenes_outside_the_fleet_file_read_other():
    g = _guard()
    assert g.meta({"x-route": "support", "x-scene": "rag"}, True, None)["route"] == "support"
    meta = g.meta({"x-route": "/api/user/12345", "x-scene": "anything"}, True, None)
    assert meta["route"] == "other" and meta["scene"] == "other"
    assert g.meta({}, True, None)["route"] == "chat" and g.meta({}, False, None)["route"] == "completions"


def test_tenants_are_capped_and_fall_back_to_the_user_field():
    g = _guard()
    assert g.meta({"x-tenant": "x" * 10_000}, True, None)["tenant"] == "x" * MAX_LABEL_CHARS
    assert g.meta({}, True, "alice")["tenant"] == "alice"
    assert g.meta({}, True, None)["tenant"] == "default"


def test_tiers():
    g = _guard()
    assert g.tier({}) == "P1" and g.tier({"x-tier": "P0"}) == "P0" and g.tier({"x-tier": "gold"}) is None


def test_meta_carries_the_trace_context_only_when_valid():
    g = _guard()
    assert g.meta({"traceparent": f"00-{TRACE}-{SPAN}-01"}, True, None)["traceparent"] == (TRACE, SPAN)
    assert "traceparent" not in g.meta({"traceparent": "00-bad"}, True, None)
