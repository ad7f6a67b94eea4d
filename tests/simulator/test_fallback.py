"""Fallback routes in virtual time and over HTTP: the backup carries only what the compatibility matrix lets it, the
circuit breaker keeps the clients' retries from swamping it, and every decision reaches the spans and
requests.parquet."""

import copy
import dataclasses
import json
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import openai
import pyarrow.parquet as pq
import pytest
import yaml

from goodput.contracts.vocabulary import CIRCUIT_STATE_ATTR
from goodput.foundation.errors import ConfigError
from goodput.simulator.circuit import CLOSED, HALF_OPEN, OPEN
from goodput.simulator.config import load_fleet, parse_fleet
from goodput.simulator.fallback import Fallbacks
from goodput.simulator.live import LiveFleet
from goodput.simulator.run import simulate, write_outputs
from goodput.simulator.span_sink import SpanSink
from tests.conftest import REPO, free_port_block

EXAMPLE = REPO / "examples" / "primary_down.yaml"
DURATION = 240.0
LOST, BACK = 60.0, 180.0  # large's replicas are lost, and its new ones serve (the example's events)
TTFT_S, OBJECTIVE = 1.0, 0.99  # P0: first token within 1 s for 99% of requests


def _data():
    return yaml.safe_load(EXAMPLE.read_text())


def _cfg(data):
    return parse_fleet(data, str(EXAMPLE))


def _without_breaker(cfg):
    return dataclasses.replace(cfg, gateway=dataclasses.replace(cfg.gateway, circuit_breaker=None))


def _attainment(table, workload):
    rows = np.array([w == workload for w in table.workload])
    ft, arr = table.ts["first_token"][rows], table.ts["arrival"][rows]
    return float(np.mean((ft >= 0) & ((ft - arr) / 1e9 <= TTFT_S)))  # a refused request misses too


def _open_intervals(log):
    """[opened, half-open) spans of a circuit's log, in virtual seconds."""
    out, start = [], None
    for t, state, _ in log:
        if state == OPEN:
            start = t
        elif start is not None:
            out.append((start, t))
            start = None
    return out + ([(start, np.inf)] if start is not None else [])


def _allowed(cfg, workload, prompt):
    """The matrix, worked out here from the fleet file alone: may ``small`` serve this request of ``large``'s?"""
    w = next(x for x in cfg.workloads if x.name == workload)
    cap = cfg.deployment("small").capabilities
    return (prompt + w.max_tokens <= cap.context and (cap.vision or not w.needs.vision)
            and (cap.tools or not w.needs.tools) and w.needs.residency in ("", cap.residency))


@pytest.fixture(scope="module")
def runs():
    cfg = load_fleet(EXAMPLE)
    return cfg, simulate(cfg, DURATION), simulate(_without_breaker(cfg), DURATION)


def test_while_the_primary_is_down_the_backup_carries_only_what_the_matrix_allows(runs):
    cfg, guarded, _ = runs
    t, circuit = guarded.table, guarded.fleet.gateway.circuits["large"]
    opened = _open_intervals(circuit.log)
    assert opened[0][0] == pytest.approx(LOST) and circuit.log[1][2] == "5 failures in a row"
    base = t.base_ns
    entered = (t.ts["queue_start"] - base) / 1e9 - np.array([w or 0.0 for w in t.gateway_wait_s])
    primary = {w.name for w in cfg.workloads if w.deployment == "large"}
    during = [i for i in range(t.n) if t.workload[i] in primary and any(a <= entered[i] < b for a, b in opened)]
    allowed = [_allowed(cfg, t.workload[i], int(t.input_tokens[i])) for i in during]
    fell_back = [t.decisions["fallback_from"][i] == "large" for i in during]
    assert 0.3 < np.mean(allowed) < 0.95  # the matrix keeps some of large's traffic off small, and lets most through
    for i, ok, moved in zip(during, allowed, fell_back, strict=True):
        if ok:  # on small, or refused because small had no free slot
            assert moved or t.reject_reason[i] == "circuit_open", i
        else:
            assert t.reject_reason[i] == "capability" and not moved, i
    refused_full = sum(t.reject_reason[i] == "circuit_open" for i in during)
    assert np.mean(fell_back) + refused_full / len(during) == pytest.approx(np.mean(allowed))
    assert sum(fell_back) > 5 * refused_full  # small carried most of what it may
    moved = [i for i in range(t.n) if t.decisions["fallback_from"][i]]
    assert all(t.deployment[i] == "small" and t.decisions["fallback_reason"][i] == "circuit_open" for i in moved)
    assert all(_allowed(cfg, t.workload[i], int(t.input_tokens[i])) for i in moved)  # over the whole run too


def test_the_breaker_keeps_the_backups_own_p0_within_its_objective_and_retries_without_it_do_not(runs):
    _, guarded, bare = runs
    assert _attainment(guarded.table, "own") >= OBJECTIVE
    assert _attainment(bare.table, "own") < OBJECTIVE - 0.03
    assert bare.fleet.gateway.circuits == {}
    retried = [i for i in range(bare.table.n) if bare.table.decisions["fallback_reason"][i] == "unavailable"]
    assert len(retried) > 500  # large's requests timed out there, and their retries queued on small
    assert all(bare.table.deployment[i] == "small" for i in retried)


def test_the_circuit_probes_while_half_open_and_closes_once_the_primary_serves_again(runs):
    _, guarded, _ = runs
    log = guarded.fleet.gateway.circuits["large"].log
    states = [s for _, s, _ in log]
    assert states[:3] == [CLOSED, OPEN, HALF_OPEN] and states[-1] == CLOSED
    assert all(why == "the probe failed" for t, s, why in log[3:-1] if s == OPEN)
    closed_at = log[-1][0]
    assert BACK <= closed_at <= BACK + 5  # the probe waiting then is sent as soon as a replica serves
    t = guarded.table
    after = [i for i in range(t.n) if (t.ts["queue_start"][i] - t.base_ns) / 1e9 > closed_at + 1
             and t.workload[i] != "own"]
    assert after and all(t.deployment[i] == "large" and not t.decisions["fallback_from"][i] for i in after)


def test_every_fallback_is_on_the_spans_and_in_requests_parquet(runs, tmp_path):
    _, guarded, _ = runs
    paths = write_outputs(guarded, tmp_path)
    cols = pq.read_table(paths["requests"], columns=["deployment", "fallback_from", "fallback_reason",
                                                     "reject_reason"]).to_pydict()
    n_moved = cols["fallback_from"].count("large")
    assert n_moved == guarded.table.decisions["fallback_from"].count("large") > 0
    assert {r for f, r in zip(cols["fallback_from"], cols["fallback_reason"], strict=True) if f} == {"circuit_open"}
    assert {"capability", "circuit_open"} <= set(cols["reject_reason"])
    seen = {"llm.request": 0, "llm.gateway": 0}
    for line in paths["spans"].read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for span in rs["scopeSpans"][0]["spans"]:
                a = {x["key"]: next(iter(x["value"].values())) for x in span.get("attributes", [])}
                if span["name"] in seen and "llm.fallback_from" in a:
                    assert (a["llm.fallback_from"], a["llm.fallback_reason"], a["llm.deployment"]) == (
                        "large", "circuit_open", "small")
                    seen[span["name"]] += 1
                elif span["name"] in seen:
                    assert "llm.fallback_reason" not in a  # absent when empty
    assert seen == {"llm.request": n_moved, "llm.gateway": n_moved}


def _state_at(log, t: float) -> str:
    """A circuit's state at ``t`` by its log: the last change at or before ``t``."""
    return [s for when, s, _ in log if when <= t][-1]


def test_each_gateway_span_carries_its_primarys_breaker_as_its_log_had_it_when_the_gateway_routed_it(monkeypatch,
                                                                                                     tmp_path):
    """``llm.circuit_state`` on every llm.gateway span of a request routed at ``large`` (by its primary, not where it
    went), the same as requests.parquet, equal to the circuit's own log at the time the gateway last routed it (an
    admission, or the move of what waited when the circuit opened); absent on ``small``'s own traffic."""
    routed: dict[int, float] = {}  # rid -> when the gateway last routed it
    real_route, real_overflow = Fallbacks.route, Fallbacks.overflow

    def route(self, req, context, t, room):
        routed[req.rid] = t
        return real_route(self, req, context, t, room)

    def overflow(self, req, context, t, room):  # a wait that ran out routes it again only if a backup takes it
        moved = real_overflow(self, req, context, t, room)
        if moved:
            routed[req.rid] = t
        return moved

    monkeypatch.setattr(Fallbacks, "route", route)
    monkeypatch.setattr(Fallbacks, "overflow", overflow)
    result = simulate(load_fleet(EXAMPLE), DURATION)
    log = result.fleet.gateway.circuits["large"].log
    paths = write_outputs(result, tmp_path)
    t = result.table
    rid = dict(zip(t.request_id, t.rid.tolist(), strict=True))
    spans: dict[str, str | None] = {}
    for line in paths["spans"].read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for span in rs["scopeSpans"][0]["spans"]:
                if span["name"] == "llm.gateway":
                    a = {x["key"]: next(iter(x["value"].values())) for x in span["attributes"]}
                    spans[a["llm.request_id"]] = a.get(CIRCUIT_STATE_ATTR)
    cols = pq.read_table(paths["requests"], columns=["request_id", "deployment", "fallback_from", "circuit_state"])
    seen = Counter()
    for req_id, dep, moved_from, state in zip(*cols.to_pydict().values(), strict=True):
        assert spans[req_id] == state, req_id
        if (moved_from or dep) != "large":
            assert state is None, req_id
            continue
        assert state == _state_at(log, routed[rid[req_id]]), req_id
        seen[state] += 1
    assert set(seen) == {CLOSED, OPEN, HALF_OPEN}  # the outage went through all three


def test_a_request_its_own_primary_cannot_serve_is_refused_capability():
    data = _data()
    data["events"] = []
    data["workloads"][1]["deployment"] = "small"  # vision traffic sent to a model without vision
    t = simulate(_cfg(data), 20.0).table
    vision = [i for i in range(t.n) if t.workload[i] == "vision"]
    assert vision and all(t.reject_reason[i] == "capability" and t.admission[i] == "rejected" for i in vision)
    assert not any(t.reject_reason[i] for i in range(t.n) if t.workload[i] != "vision")


def test_a_backup_that_costs_more_than_a_workload_allows_never_takes_its_requests():
    data = _data()
    data["deployments"][1]["capabilities"]["cost_per_mtok"] = 1.5  # small now costs more than large (0.9)
    data["workloads"][0]["needs"]["max_cost_per_mtok"] = 1.0  # the assistant's limit: large may serve it, small not
    result = simulate(_cfg(data), 90.0)
    t, opened = result.table, _open_intervals(result.fleet.gateway.circuits["large"].log)
    assistant = [i for i in range(t.n) if t.workload[i] == "assistant"]
    served = [i for i in assistant if t.outcome[i] == "ok"]
    assert served and all(t.deployment[i] == "large" for i in served)  # its primary is within the limit
    assert not any(t.decisions["fallback_from"][i] for i in range(t.n))  # the assistant was all small could take
    arrived = (t.ts["arrival"] - t.base_ns) / 1e9
    during = [i for i in assistant if any(a + 1 < arrived[i] < b for a, b in opened)]  # no backup within the limit
    assert len(during) > 100 and all(t.reject_reason[i] == "capability" for i in during)
    data["workloads"][0]["needs"]["max_cost_per_mtok"] = 0.5  # below large's price too: refused at its primary
    t = simulate(_cfg(data), 10.0).table
    assistant = [i for i in range(t.n) if t.workload[i] == "assistant"]
    assert assistant and all(t.reject_reason[i] == "capability" for i in assistant)


def test_without_a_breaker_a_retry_is_a_new_request_that_walks_to_the_next_backup():
    data = _data()
    data["gateway"].pop("circuit_breaker")
    data["gateway"]["retry"] = {"attempts": 2, "backoff_s": 0.5}
    data["gateway"]["tiers"] = {"P0": {"max_wait_s": 2}}
    result = simulate(_cfg(data), 90.0)
    done = result.fleet.done
    retries = [r for r in done if r.meta.get("attempt") == 2]
    assert retries and len({r.rid for r in done}) == len(done)  # each try its own request
    failed = {}
    for r in done:
        if r.meta.get("attempt") is None and r.finish_reason in ("error", "timeout"):
            failed.setdefault((r.workload, r.prompt_tokens), []).append(r.completed + 0.5)
    cfg = result.fleet.cfg
    moved = 0
    for r in retries:
        assert any(at == pytest.approx(r.arrival) for at in failed[(r.workload, r.prompt_tokens)])
        w = cfg.workloads[r.workload]
        if w.deployment == "large" and _allowed(cfg, w.name, r.prompt_tokens):
            assert (r.meta["fallback_from"], r.meta["fallback_reason"], r.deployment) == ("large", "unavailable", 1)
            moved += 1
        else:  # nowhere else to go (small's own, or what small cannot serve): its primary again
            assert "fallback_from" not in r.meta and cfg.deployments[r.deployment].name == w.deployment
    assert moved > 100
    assert not [r for r in done if r.meta.get("attempt", 1) > 2]


@pytest.mark.parametrize(("patch", "where", "problem"), [
    (lambda d: d["gateway"].update(fallbacks={"large": ["nowhere"]}), "gateway.fallbacks.large[0]",
     "no deployment named 'nowhere'"),
    (lambda d: d["gateway"].update(fallbacks={"large": ["large"]}), "gateway.fallbacks.large[0]", "is the primary"),
    # found by tests/fuzz: a backup given as a list was a TypeError (unhashable), not a ConfigError
    (lambda d: d["gateway"].update(fallbacks={"large": [["small"]]}), "gateway.fallbacks.large[0]",
     "no deployment named ['small']"),
    (lambda d: d["gateway"].update(fallbacks={"ghost": ["small"]}), "gateway.fallbacks.ghost", "no deployment"),
    (lambda d: d["deployments"][1].pop("capabilities"), "gateway.fallbacks.large[0]", "declares no capabilities"),
    (lambda d: d["deployments"][1]["capabilities"].update(context=9000), "deployments[1].capabilities.context",
     "must be <= 8192"),
    (lambda d: d["deployments"][1]["capabilities"].update(audio=True), "deployments[1].capabilities.audio",
     "unknown key"),
    (lambda d: d["workloads"][0]["needs"].update(tools="yes"), "workloads[0].needs.tools", "expected true/false"),
    (lambda d: d["workloads"][0]["needs"].update(max_cost_per_mtok=-1), "workloads[0].needs.max_cost_per_mtok",
     "must be >= 0"),
    (lambda d: d["gateway"]["circuit_breaker"].update(error_ratio=0), "gateway.circuit_breaker.error_ratio",
     "must be >= 0.01"),
    (lambda d: d["gateway"]["circuit_breaker"].update(half_open=1), "gateway.circuit_breaker.half_open",
     "unknown key"),
    (lambda d: d["gateway"]["retry"].update(attempts=50), "gateway.retry.attempts", "must be <= 10"),
    (lambda d: d["gateway"].pop("fallbacks"), "gateway.circuit_breaker", "there are none"),
])
def test_a_bad_fallback_section_names_its_key(patch, where, problem):
    data = copy.deepcopy(_data())
    patch(data)
    with pytest.raises(ConfigError) as e:
        _cfg(data)
    assert e.value.key == where and problem in e.value.problem
    assert "\n" not in str(e.value)


def test_over_http_a_request_to_a_primary_whose_circuit_opened_is_served_by_the_backup(tmp_path):
    data = _data()
    data["deployments"][0]["replicas"] = 2
    data["workloads"] = [dict(data["workloads"][0], arrival={"process": "poisson", "rate": 20})]
    data["events"] = [{"at": 2.0, "kind": "replica_lost", "deployment": "large", "replica": 0}]
    data["gateway"]["circuit_breaker"]["open_s"] = 600  # stays open for the test
    cfg = _cfg(data)
    spans = tmp_path / "spans.jsonl"
    sink = SpanSink(cfg, 1, None, spans, interval_s=0.2)
    base = free_port_block(3)
    lf = LiveFleet(cfg, base_port=base, traffic=1.0, sink=sink)
    lf.start()
    try:
        deadline = time.monotonic() + 20
        while lf.fleet.gateway.circuits["large"].state != OPEN and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lf.fleet.gateway.circuits["large"].state == OPEN  # replica 0's requests failed; replica 1 serves on
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{base + 1}/v1", api_key="none", max_retries=0, timeout=30)
        stream = client.chat.completions.create(
            model="Qwen2.5-14B", max_tokens=40, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True}, extra_headers={"x-tenant": "http-client", "x-tier": "P0"},
            messages=[{"role": "user", "content": "hi"}])
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert len(text.split()) == 40 and chunks[-1].usage.completion_tokens == 40
        # streamed as the backup's replica decodes, not in one burst
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 10
    finally:
        lf.close()
    ours = []
    for line in spans.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for span in rs["scopeSpans"][0]["spans"]:
                a = {x["key"]: next(iter(x["value"].values())) for x in span.get("attributes", [])}
                if span["name"] == "llm.request" and a.get("llm.tenant") == "http-client":
                    ours.append(a)
    assert len(ours) == 1
    a = ours[0]
    assert (a["llm.deployment"], a["llm.fallback_from"], a["llm.fallback_reason"]) == ("small", "large", "circuit_open")
    assert a["llm.replica"] == "small-0" and a["llm.outcome"] == "ok" and a["gen_ai.usage.output_tokens"] == "40"


@pytest.mark.parametrize("breaker", [True, False])
def test_every_request_and_retry_ends_once_and_the_gateway_holds_nothing_after_a_primary_down_run(breaker):
    cfg = load_fleet(EXAMPLE)
    result = simulate(cfg if breaker else _without_breaker(cfg), DURATION, drain_s=60.0)
    gw, done = result.fleet.gateway, result.fleet.done
    retries = [r for r in done if r.meta.get("attempt", 1) > 1]
    assert retries and len(done) == result.arrivals + len(retries) == len({r.rid for r in done})
    assert gw.held == {} and gw.waiting() == 0 and gw.sent == [0, 0]
    assert all(lane.waiting == 0 and lane.sent == 0 for lanes in gw.lanes for lane in lanes)
    assert all(t.use.in_flight == 0 for t in gw.tenants.values())


def test_what_waits_at_the_primary_when_its_circuit_opens_moves_then_instead_of_timing_out():
    data = _data()
    data["gateway"]["max_in_flight_per_replica"] = 16  # large's 32 slots: some of its traffic waits at the gateway
    data["workloads"][2]["arrival"]["rate"] = 0.5  # small keeps room for what moves
    data["deployments"][1]["replicas"] = 4
    result = simulate(_cfg(data), 90.0, drain_s=30.0)
    t, gw = result.table, result.fleet.gateway
    assert gw.circuits["large"].log[1][0] == pytest.approx(LOST)
    assert gw.waiting() == 0 and all(lane.waiting == 0 for lanes in gw.lanes for lane in lanes)
    sent = (t.ts["queue_start"] - t.base_ns) / 1e9
    entered = sent - np.array([w or 0.0 for w in t.gateway_wait_s])
    waiting = [i for i in range(t.n) if t.workload[i] != "own" and entered[i] < LOST <= sent[i]]
    assert len(waiting) > 20
    for i in waiting:
        assert sent[i] == pytest.approx(LOST), i  # sent on, or refused, the moment it opened
        if t.decisions["fallback_from"][i]:
            assert t.deployment[i] == "small" and t.outcome[i] == "ok"
        else:
            assert t.reject_reason[i] in ("capability", "circuit_open")
    assert sum(bool(t.decisions["fallback_from"][i]) for i in waiting) > len(waiting) / 2


def test_simulate_exits_2_in_one_line_on_a_bad_fallback_route(tmp_path):
    data = _data()
    data["gateway"]["fallbacks"] = {"large": ["smol"]}
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(data))
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(f), "--duration", "10", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"goodput: error: {f}: gateway.fallbacks.large[0]: no deployment named 'smol'; "
                                "have large, small")


def test_with_capacity_fallback_a_request_that_waited_out_an_overloaded_primary_goes_to_a_backup_with_room():
    data = _data()
    data["events"] = []
    data["gateway"].pop("circuit_breaker")
    data["gateway"].pop("retry")
    data["gateway"]["max_in_flight_per_replica"] = 4  # large's 8 slots: its queue runs past P0's 10 s
    data["deployments"][1]["replicas"] = 4
    data["workloads"][2]["arrival"]["rate"] = 1
    bare = simulate(_cfg(data), 60.0).table
    data["gateway"]["capacity_fallback"] = True
    cfg = _cfg(data)
    t = simulate(cfg, 60.0).table
    timeouts = bare.reject_reason.count("queue_timeout")
    moved = [i for i in range(t.n) if t.decisions["fallback_reason"][i] == "capacity"]
    assert timeouts > 50 and len(moved) > timeouts / 2
    for i in moved:
        assert t.deployment[i] == "small" and t.gateway_wait_s[i] == pytest.approx(10.0)  # P0's max wait, then moved
        assert _allowed(cfg, t.workload[i], int(t.input_tokens[i]))
    assert t.reject_reason.count("queue_timeout") < timeouts - len(moved) / 2  # (small's room ran out at times)
    assert not [i for i in range(bare.n) if bare.decisions["fallback_from"][i]]  # off by default
