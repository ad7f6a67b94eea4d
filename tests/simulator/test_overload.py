"""The overload ladder: the state machine's order and hysteresis, each step's effect at the gateway, a 3x burst in
which it keeps P0 at its objective where the same gateway without it does not, and the live fleet applying it."""

import concurrent.futures
import copy
import dataclasses
import json
import subprocess
import sys
import time

import numpy as np
import openai
import pyarrow.parquet as pq
import pytest
import yaml

from goodput.cli import main
from goodput.contracts.catalog import OVERLOAD_STEPS as CATALOG_STEPS
from goodput.foundation.errors import ConfigError
from goodput.simulator.config import OVERLOAD_STEPS, OverloadStep, load_fleet
from goodput.simulator.live import LiveFleet
from goodput.simulator.overload import Ladder
from goodput.simulator.request import Request
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, fleet_data, free_port_block, make_fleet

BURST = REPO / "examples" / "overload_burst.yaml"
BURST_AT, BURST_END = 60.0, 150.0  # the example's bursts: x3 from 60 s for 90 s
TTFT_S, OBJECTIVE = 1.0, 0.99  # P0: first token within 1 s for 99% of requests


def _step(kind, above=1.0, below=0.5, hold_s=10.0, signal="p0_wait_s", **kw):
    return OverloadStep(kind, signal, above, below, hold_s, **kw)


def _ladder(*steps):
    return Ladder(steps or (_step("defer_p2"), _step("degrade_p1", above=2.0, below=1.0, max_tokens=64)), ["chat"])


def _on(lad):
    return [(c.step, c.on) for c in lad.log]


# ---------------------------------------------------------------------- the state machine


def test_steps_engage_in_order_one_per_look_and_only_above_their_level():
    lad = _ladder()
    assert lad.observe(0, 0.0, {"p0_wait_s": 1.0}) is None  # not above 1.0
    assert lad.observe(0, 1.0, {"p0_wait_s": 5.0}).step == "defer_p2"  # far above both: still one step a look
    assert lad.top(0) == "defer_p2" and lad.engaged(0, "degrade_p1") is None
    assert lad.observe(0, 2.0, {"p0_wait_s": 5.0}).step == "degrade_p1"
    assert lad.observe(0, 3.0, {"p0_wait_s": 9.0}) is None  # no step left
    assert _on(lad) == [("defer_p2", True), ("degrade_p1", True)]


def test_a_later_step_never_engages_before_an_earlier_one_even_when_only_its_own_signal_is_high():
    lad = _ladder(_step("defer_p2", signal="kv_usage", above=0.9, below=0.5), _step("fail_fast", tiers=("P1",)))
    for t in range(5):
        lad.observe(0, float(t), {"kv_usage": 0.2, "p0_wait_s": 30.0})
    assert lad.log == [] and not lad.refuses(0, "P1")


def test_a_step_releases_only_after_its_signal_stayed_below_its_level_for_its_hold():
    lad = _ladder(_step("defer_p2", above=1.0, below=0.5, hold_s=10.0))
    lad.observe(0, 0.0, {"p0_wait_s": 2.0})
    for t, v in ((1.0, 0.7), (5.0, 0.4), (14.0, 0.6), (15.0, 0.3), (24.0, 0.1)):  # between the levels: stays
        assert lad.observe(0, t, {"p0_wait_s": v}) is None, t  # 0.6 at 14 s restarted the hold counted from 5 s
    assert lad.observe(0, 25.0, {"p0_wait_s": 0.1}).on is False  # 10 s calm since 15 s
    assert lad.top(0) == "" and _on(lad) == [("defer_p2", True), ("defer_p2", False)]


def test_steps_release_in_reverse_order_each_after_its_own_hold_from_when_it_became_the_top():
    lad = _ladder(_step("defer_p2", hold_s=10.0), _step("degrade_p1", above=2.0, hold_s=5.0, max_tokens=64))
    lad.observe(0, 0.0, {"p0_wait_s": 3.0})
    lad.observe(0, 1.0, {"p0_wait_s": 3.0})
    released = [(t, c.step) for t in np.arange(2.0, 40.0, 0.5) if (c := lad.observe(0, t, {"p0_wait_s": 0.0}))]
    assert released == [(7.0, "degrade_p1"), (17.0, "defer_p2")]  # 5 s from 2 s, then 10 s from 7 s


def test_the_ladder_engages_every_step_the_catalog_numbers_and_no_other():
    """One list of step kinds (issue 35 item 8): the catalog's, which llm_gateway_overload_step numbers. It had a
    ``fallback`` the fleet file could not name, so the gauge's value 3 and the console's tick were never reached.
    A ladder of every kind in the catalog's order engages each in turn, and the fleet file refuses any other."""
    assert tuple(OVERLOAD_STEPS) == CATALOG_STEPS
    keys = {"degrade_p1": {"max_tokens": 64}, "tpm_limit": {"limit": 0.5}, "fail_fast": {"tiers": ("P2",)}}
    lad = _ladder(*(_step(kind, above=float(i), below=0.5, **keys.get(kind, {})) for i, kind in enumerate(CATALOG_STEPS)))
    for t in range(len(CATALOG_STEPS) + 1):
        lad.observe(0, float(t), {"p0_wait_s": 100.0})
    assert _on(lad) == [(kind, True) for kind in CATALOG_STEPS]
    with pytest.raises(ConfigError, match="fallback"):
        make_fleet(gateway={"overload": [{"step": "fallback", "signal": "p0_wait_s", "above": 1, "below": 0.5,
                                          "hold_s": 1}]})


def test_each_deployment_has_its_own_ladder():
    lad = Ladder((_step("defer_p2"),), ["chat", "code"])
    lad.observe(1, 0.0, {"p0_wait_s": 3.0})
    assert (lad.defers(0, 2), lad.defers(1, 2), lad.defers(1, 1)) == (False, True, False)
    assert lad.log[0].deployment == "code"


def test_degrade_caps_the_output_and_trims_the_prompt_and_says_which():
    lad = _ladder(_step("degrade_p1", max_tokens=100, context_tokens=1000))
    lad.observe(0, 0.0, {"p0_wait_s": 3.0})
    req = Request(1, 0, 0, "P1", 0.0, 0.0, 3000, 500, True, 0, prefix=tuple(range(100)), prefix_block_tokens=16)
    assert lad.degrade(0, req, 1024) == "output_cap+context_trim"
    assert (req.prompt_tokens, req.prefill_target, req.output_target, req.max_tokens, req.natural_stop) == \
        (1000, 1000, 100, 100, False)
    assert len(req.prefix) == 1000 // 16
    short = Request(2, 0, 0, "P1", 0.0, 0.0, 300, 50, True, 0)
    assert lad.degrade(0, short, 80) == ""  # it asked for less than the cap: untouched
    assert lad.degrade(0, Request(3, 0, 0, "P0", 0.0, 0.0, 3000, 500, True, 0), 1024) == ""  # P0 never


# ---------------------------------------------------------------------- the fleet file


@pytest.mark.parametrize(("overload", "where", "problem"), [
    ([{"step": "shed", "signal": "kv_usage", "above": 0.9}], "gateway.overload[0].step", "must be one of"),
    ([{"step": "defer_p2", "signal": "qps", "above": 1}], "gateway.overload[0].signal", "must be one of"),
    ([{"step": "defer_p2", "signal": "kv_usage"}], "gateway.overload[0].above", "is required"),
    ([{"step": "defer_p2", "signal": "kv_usage", "above": 1.5}], "gateway.overload[0].above", "must be <= 1"),
    ([{"step": "defer_p2", "signal": "p0_wait_s", "above": 1, "below": 2}], "gateway.overload[0].below",
     "must be <= 1"),
    ([{"step": "defer_p2", "signal": "p0_wait_s", "above": 1, "max_tokens": 5}], "gateway.overload[0].max_tokens",
     "unknown key"),
    ([{"step": "degrade_p1", "signal": "p0_wait_s", "above": 1}], "gateway.overload[0]", "needs max_tokens"),
    ([{"step": "tpm_limit", "signal": "p0_wait_s", "above": 1, "limit": 0}], "gateway.overload[0].limit",
     "needs a limit"),
    ([{"step": "fail_fast", "signal": "p0_wait_s", "above": 1, "tiers": ["P0"]}], "gateway.overload[0].tiers[0]",
     "must be P1 or P2"),
    ([{"step": "defer_p2", "signal": "p0_wait_s", "above": 1}, {"step": "defer_p2", "signal": "kv_usage", "above": 1}],
     "gateway.overload[1].step", "already a step"),
    ({"step": "defer_p2"}, "gateway.overload", "expected a list"),
])
def test_a_bad_overload_step_names_its_key(overload, where, problem):
    with pytest.raises(ConfigError) as e:
        make_fleet(gateway={"overload": overload})
    assert e.value.key == where and problem in e.value.problem
    assert "\n" not in str(e.value)


def test_the_docs_ladder_is_a_valid_gateway_section():
    block = (REPO / "docs" / "simulator.md").read_text().split("### overload", 1)[1].split("```yaml", 1)[1]
    steps = make_fleet(gateway=yaml.safe_load(block.split("```", 1)[0])["gateway"]).gateway.overload
    assert [s.step for s in steps] == ["defer_p2", "degrade_p1", "tpm_limit", "fail_fast"]
    assert (steps[2].below, steps[2].hold_s) == (0.25, 10.0)  # the defaults: above / 2, 10 s


def test_the_examples_ladder_reads_as_written():
    steps = load_fleet(BURST).gateway.overload
    assert [s.step for s in steps] == ["defer_p2", "degrade_p1", "fail_fast"]
    assert (steps[1].max_tokens, steps[1].context_tokens, steps[2].tiers) == (128, 2048, ("P1", "P2"))


# ---------------------------------------------------------------------- in virtual time


def _p0_attainment(table):
    p0 = np.array([t == "P0" for t in table.tier])
    ft, arr = table.ts["first_token"][p0], table.ts["arrival"][p0]
    return float(np.mean((ft >= 0) & ((ft - arr) / 1e9 <= TTFT_S)))  # a refused P0 request misses too


def test_a_3x_burst_the_ladder_keeps_p0_at_its_objective_deferring_p2_then_degrading_p1_and_recovers_in_reverse():
    cfg = load_fleet(BURST)
    bare = simulate(dataclasses.replace(cfg, gateway=dataclasses.replace(cfg.gateway, overload=())), 300.0).table
    run = simulate(cfg, 300.0)
    assert _p0_attainment(bare) < OBJECTIVE  # the same gateway, quotas and tier queues, without the ladder
    assert _p0_attainment(run.table) >= OBJECTIVE
    log = run.fleet.gateway.ladder.log
    during = [(c.step, c.on) for c in log if BURST_AT <= c.t < BURST_AT + 10]
    assert during == [("defer_p2", True), ("degrade_p1", True)]  # in the configured order, as the burst starts
    assert not [c for c in log if c.t < BURST_AT]
    after = [(c.step, c.on) for c in log if c.t >= BURST_END]
    assert after[:2] == [("degrade_p1", False), ("defer_p2", False)]  # reversed once it is over
    level = 0  # and at every change the steps engaged are a prefix of the ladder
    for c in log:
        index = ["defer_p2", "degrade_p1", "fail_fast"].index(c.step)
        assert index == (level if c.on else level - 1), c
        level += 1 if c.on else -1
    assert level == 0  # the run ended with the ladder down: nothing deferred forever
    table = run.table
    degraded = [i for i in range(table.n) if table.degraded[i]]
    assert degraded and {table.tier[i] for i in degraded} == {"P1"}
    assert all(table.output_tokens[i] <= 128 for i in degraded)
    assert {table.degraded[i] for i in degraded} <= {"output_cap", "output_cap+context_trim"}
    assert all(table.input_tokens[i] <= 2048 for i in degraded if "context_trim" in table.degraded[i])
    p2 = [i for i in range(table.n) if table.tier[i] == "P2" and table.overload_step[i] == "degrade_p1"]
    assert p2 and all(table.admission[i] == "deferred" for i in p2 if table.admission[i] != "rejected")


def test_no_p2_request_is_sent_while_defer_p2_is_engaged():
    run = simulate(load_fleet(BURST), 300.0)
    engaged, since = [], None  # (engaged, released) of each time defer_p2 was on
    for c in run.fleet.gateway.ladder.log:
        if c.step == "defer_p2":
            if c.on:
                since = c.t
            else:
                engaged.append((since, c.t))
    assert engaged
    table = run.table
    base = table.base_ns
    sent = [(table.ts["queue_start"][i] - base) / 1e9 for i in range(table.n)
            if table.tier[i] == "P2" and table.admission[i] != "rejected"]
    assert sent
    assert not [s for s in sent for a, b in engaged if a < s < b]


def _fleet(overload, workloads, **gateway):
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["replicas"] = 1
    return make_fleet([dep], workloads, gateway={"overload": overload, **gateway})


def _wl(**kw):
    w = copy.deepcopy(BASE_WORKLOAD)
    w.update(kw)
    return w


def test_fail_fast_refuses_p1_busy_while_p0_is_still_served_and_the_spans_and_parquet_say_so(tmp_path):
    cfg = _fleet([{"step": "fail_fast", "signal": "queue_per_slot", "above": 0.5, "below": 0.1, "hold_s": 5,
                   "tiers": ["P1"]}],
                 [_wl(arrival={"process": "poisson", "rate": 6.0}),
                  _wl(name="std", tier="P1", arrival={"process": "poisson", "rate": 6.0})],
                 max_in_flight_per_replica=4)
    result = simulate(cfg, 30.0)
    table = result.table
    busy = [i for i in range(table.n) if table.reject_reason[i] == "busy"]
    assert busy and {table.tier[i] for i in busy} == {"P1"}
    assert all(table.overload_step[i] == "fail_fast" for i in busy)
    assert any(table.tier[i] == "P0" and table.overload_step[i] == "fail_fast" and table.reject_reason[i] is None
               for i in range(table.n))
    paths = write_outputs(result, tmp_path)
    cols = pq.read_table(paths["requests"], columns=["reject_reason", "overload_step", "degraded"]).to_pydict()
    assert cols["reject_reason"].count("busy") == len(busy) and "fail_fast" in cols["overload_step"]
    seen = {}
    for line in paths["spans"].read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for span in rs["scopeSpans"][0]["spans"]:
                a = {x["key"]: next(iter(x["value"].values())) for x in span.get("attributes", [])}
                if a.get("llm.reject_reason") == "busy":
                    seen.setdefault(span["name"], set()).add(a.get("llm.overload_step"))
                if span["name"] == "llm.gateway" and "llm.overload_step" not in a:
                    seen.setdefault("calm", set()).add(a["llm.tier"])
    assert seen["llm.gateway"] == seen["llm.request"] == {"fail_fast"}
    assert "calm" in seen  # absent when no step was engaged


def test_degrade_p1_shows_on_the_spans():
    cfg = _fleet([{"step": "degrade_p1", "signal": "queue_per_slot", "above": 0.2, "below": 0.1, "hold_s": 5,
                   "max_tokens": 16}],
                 [_wl(arrival={"process": "poisson", "rate": 10.0}), _wl(name="std", tier="P1")],
                 max_in_flight_per_replica=4)
    table = simulate(cfg, 20.0).table
    p1 = [i for i in range(table.n) if table.tier[i] == "P1" and table.degraded[i] == "output_cap"]
    assert p1 and all(table.output_tokens[i] <= 16 for i in p1)
    assert all(table.degraded[i] is None for i in range(table.n) if table.tier[i] == "P0")


def test_tpm_limit_scales_the_quota_of_non_core_tenants_only():
    steps = [{"step": "tpm_limit", "signal": "queue_per_slot", "above": 0.2, "below": 0.1, "hold_s": 30,
              "limit": 0.1}]
    cfg = _fleet(steps, [_wl(arrival={"process": "poisson", "rate": 12.0})], max_in_flight_per_replica=4,
                 default_tenant={"tpm": 3_000_000, "burst_s": 5}, tenants={"acme": {"core": True}})
    table = simulate(cfg, 40.0).table
    refused = {table.tenant[i] for i in range(table.n) if table.reject_reason[i] == "tpm_limit"}
    assert refused == {"globex"}  # 12 req/s x ~1.7k tokens is far under 3M a minute, over a tenth of it
    bare = _fleet([], [_wl(arrival={"process": "poisson", "rate": 12.0})], max_in_flight_per_replica=4,
                  default_tenant={"tpm": 3_000_000, "burst_s": 5})
    assert "tpm_limit" not in set(simulate(bare, 40.0).table.reject_reason)


# ---------------------------------------------------------------------- the live fleet


def test_the_live_fleets_gateway_applies_the_ladder_to_http_requests(tmp_path):
    """One slot: a long request holds it, a P0 one waits for it, so the queue per slot is 1 and the next P1 request
    is told busy (503) at once."""
    cfg = _fleet([{"step": "fail_fast", "signal": "queue_per_slot", "above": 0.5, "below": 0.1, "hold_s": 30,
                   "tiers": ["P1"]}], [_wl()], max_in_flight_per_replica=1)
    base = free_port_block(2)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0, targets=tmp_path / "targets.yaml")
    lf.start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{base}/v1", api_key="none", max_retries=0, timeout=20)

    def ask(tier, max_tokens):
        return client.chat.completions.create(model="Llama-3.1-8B", max_tokens=max_tokens,
                                              extra_headers={"x-tier": tier}, extra_body={"ignore_eos": True},
                                              messages=[{"role": "user", "content": "hi"}])
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        pool.submit(ask, "P1", 3000)  # ~3000 decode steps: holds the slot for many seconds
        time.sleep(0.5)
        pool.submit(ask, "P0", 3)
        time.sleep(0.5)
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError, match="busy") as e:
            ask("P1", 3)
        assert e.value.status_code == 503 and time.monotonic() - started < 2.0  # refused at once, not queued
        assert [(c.step, c.on) for c in lf.fleet.gateway.ladder.log] == [("fail_fast", True)]
    finally:
        lf.close()
        pool.shutdown(wait=False, cancel_futures=True)


def test_simulate_prints_the_ladder_and_reports_it_in_json(tmp_path, capsys):
    assert main(["simulate", str(BURST), "--duration", "300", "--out", str(tmp_path), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [c["step"] for c in summary["ladder"][:2]] == ["defer_p2", "degrade_p1"]
    assert summary["ladder"][0]["on"] and summary["ladder"][0]["signal"] == "kv_usage"
    assert set(summary["gateway"]["degraded"]) <= {"output_cap", "context_trim", "output_cap+context_trim"}
    assert main(["simulate", str(BURST), "--duration", "300", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "chat defer_p2 on (kv_usage" in text and "chat defer_p2 off" in text


def test_simulate_exits_2_in_one_line_on_a_bad_overload_step(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(fleet_data(gateway={"overload": [{"step": "fail_fast", "signal": "p0_wait_s",
                                                                  "above": 1, "tiers": ["P0"]}]})))
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(f), "--duration", "10", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"goodput: error: {f}: gateway.overload[0].tiers[0]: must be P1 or P2 (P0 is what "
                                "the ladder protects); got 'P0'")
