"""Release attribution as a table: what moved across a change point and which releases (and scale events) are in its
window -> the cause named and the release blamed (goodput/analyzer/regressions.py's ``in_window`` and
``attribute``, pure functions: no store, no simulation)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from goodput.analyzer.regressions import Blame, Moved, Regression, attribute, in_window
from goodput.analyzer.releases import Release

AT = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)  # the change point
WIDTH, WINDOW = timedelta(minutes=1), timedelta(minutes=30)


def _release(minutes_before: float, kind: str, frm: str = "v1", to: str = "v2", deployment: str = "chat") -> Release:
    return Release(AT - timedelta(minutes=minutes_before), deployment, kind, frm, to, "")


PROMPT = _release(10, "prompt_template", "p1", "p2")  # can change request lengths
FRAMEWORK = _release(5, "framework", "vllm-0.10.1", "vllm-0.10.2")  # cannot
SCALE = _release(3, "scale", "4", "2")  # replicas 4 -> 2


NAN = math.nan
# case -> (what moved, releases in the window (any order), cause, blamed)
CASES = {
    "lengths moved after a prompt template": (
        Moved("prefill", input_tokens=0.5), [PROMPT],
        "workload shift: input length changed after a prompt_template release", PROMPT),
    "lengths moved: the prompt template, not the later framework release": (
        Moved("prefill", input_tokens=0.5), [PROMPT, FRAMEWORK],
        "workload shift: input length changed after a prompt_template release", PROMPT),
    "output lengths moved, only a framework release: no release changes lengths": (
        Moved("decode", output_tokens=-0.3), [FRAMEWORK],
        "workload shift: output length changed (no release changes request lengths here)", None),
    "a release, but the arrival rate moved": (
        Moved("queue", input_tokens=0.05, arrival_rate=0.8), [FRAMEWORK],
        "workload shift: arrival rate changed", None),
    "per-token decode cost after a framework release": (
        Moved("decode", per_token_cost=0.3), [FRAMEWORK],
        "per-token decode cost changed after a framework release", FRAMEWORK),
    "per-token cost after a scale event, the latest": (
        Moved("decode", per_token_cost=0.3), [FRAMEWORK, SCALE],
        "per-token decode cost changed after a scale event (the batch per replica changed)", SCALE),
    "KV-transfer cost, no release": (
        Moved("kv_transfer", per_token_cost=0.4), [],
        "KV-transfer time per prompt token (the prefill -> decode link) changed", None),
    "the queue after a scale event (a release in between)": (
        Moved("queue"), [SCALE, FRAMEWORK],
        "queue wait changed after a scale event (capacity changed)", SCALE),
    "the queue, a release but no scale event": (
        Moved("queue"), [FRAMEWORK],
        "unexplained: neither the workload nor the per-token cost moved", None),
    "nothing moved, nothing released": (
        Moved("decode", NAN, NAN, NAN, NAN), [],
        "unexplained: neither the workload nor the per-token cost moved", None),
    "under every threshold (lengths 19 %, rate 49 %, cost 9 %)": (
        Moved("prefill", 0.19, -0.19, 0.49, 0.09), [PROMPT],
        "unexplained: neither the workload nor the per-token cost moved", None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_attribution(case):
    moved, releases, cause, blamed = CASES[case]
    window = in_window(releases, "chat", AT, AT + WIDTH, WINDOW)
    assert attribute(moved, window) == (cause, Blame.of(blamed) if blamed else None)


def test_the_window_holds_the_deployments_releases_and_every_deployments_latest_first():
    late = _release(-0.5, "config")  # inside the bucket where the change shows: it may have caused it
    after = _release(-2, "config")  # after that bucket
    early = _release(31, "model")  # more than the window before
    everyone = _release(20, "hardware", deployment="*")
    other = _release(1, "model", deployment="code")
    got = in_window([early, everyone, PROMPT, FRAMEWORK, other, late, after], "chat", AT, AT + WIDTH, WINDOW)
    assert got == [Blame.of(r) for r in (late, FRAMEWORK, PROMPT, everyone)]


def test_the_record_of_a_blamed_and_an_unblamed_change_point_is_flat():
    reg = Regression("chat", "P0", "e2e_s", AT, 0.5, 1.0, 1.5, "prefill", "c", "regression", "1m",
                     blame=Blame.of(PROMPT), evidence={"tenants": []})
    rec = reg.record()
    assert list(rec)[-4:] == ["release", "release_time", "blamed", "evidence"]
    assert (rec["release"], rec["release_time"], rec["blamed"]) == ("prompt_template p1 -> p2",
                                                                     PROMPT.time.isoformat(), True)
    assert rec["evidence"] == {"tenants": [], "release_kind": "prompt_template"} and reg.evidence == {"tenants": []}
    rec = Regression("chat", "P0", "e2e_s", AT, 0.5, 1.0, 1.5, "queue", "c",
                     evidence={"nearest_release": None}).record()
    assert (rec["release"], rec["release_time"], rec["blamed"], rec["evidence"]) == (None, None, False,
                                                                                     {"nearest_release": None})
    assert rec["time"] == AT.isoformat() and "blame" not in rec
