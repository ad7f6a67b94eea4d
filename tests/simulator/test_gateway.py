"""The gateway in virtual time: each quota refuses with its reason, tier queues time out and defer P2, fair queueing
keeps a flooding tenant from taking the fleet, and every decision reaches the spans and requests.parquet."""

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
from goodput.contracts.vocabulary import GATEWAY_REJECT_REASONS, REJECT_REASONS
from goodput.foundation.errors import ConfigError
from goodput.simulator.config import load_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.gateway import Gateway
from goodput.simulator.live import LiveFleet
from goodput.simulator.request import Request
from goodput.simulator.run import simulate, write_outputs
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, fleet_data, free_port_block, make_fleet

# one replica of an 8B model on an H100, which serves ~16 req/s of this chat mix within a second's TTFT: a, b and c
# at 4 req/s each, flood at 20 (five times its share); the gateway gives each tenant about its share of tokens
FLOOD = REPO / "examples" / "tenant_flood.yaml"
FLOOD_RATE = 32.0
FLOOD_TENANTS = {"a": 1, "b": 1, "c": 1, "flood": 5}
TTFT_S, OBJECTIVE = 1.0, 0.99  # P0: first token within 1 s for 99% of requests


def _fleet(gateway=None, workloads=None, replicas=1, **engine):
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["replicas"] = replicas
    dep["engine"].update(engine)
    extra = {"gateway": gateway} if gateway is not None else {}
    return make_fleet([dep], workloads or [copy.deepcopy(BASE_WORKLOAD)], **extra)


def _wl(**kw):
    w = copy.deepcopy(BASE_WORKLOAD)
    w.update(kw)
    return w


def _run(cfg, duration=60.0):
    return simulate(cfg, duration).table


def _attainment(table, tenant):
    rows = np.array([t == tenant for t in table.tenant]) & np.array([t == "P0" for t in table.tier])
    ft, arr = table.ts["first_token"][rows], table.ts["arrival"][rows]
    return float(np.mean((ft >= 0) & ((ft - arr) / 1e9 <= TTFT_S)))  # a refused request misses too


def _engine_done(table, i):
    """When request ``i`` gave back its slot and its tenant's concurrency: its last token, or its end if none."""
    last = table.ts["last_token"][i]
    return last if last >= 0 else table.ts["completed"][i]


def _reasons(table):
    return {r for r in table.reject_reason if r}


def test_a_tenant_flood_misses_every_other_tenants_p0_objective_without_quotas_and_wfq_and_meets_it_with_them():
    cfg = load_fleet(FLOOD)
    assert cfg.gateway.default_tenant.tpm and not cfg.gateway.tenants  # every tenant gets the same quota
    bare = _run(dataclasses.replace(cfg, gateway=None), 120.0)
    guarded = _run(cfg, 120.0)
    for tenant in "abc":
        assert _attainment(bare, tenant) < OBJECTIVE, tenant
        assert _attainment(guarded, tenant) >= OBJECTIVE, tenant
    flood = np.array([t == "flood" for t in guarded.tenant])
    refused = [r for r, f in zip(guarded.reject_reason, flood, strict=True) if f and r]
    assert refused and set(refused) <= {"tpm_limit", "queue_timeout"}  # the flood pays for itself
    assert not [r for r, f in zip(guarded.reject_reason, flood, strict=True) if not f and r]


def test_fair_queueing_alone_puts_the_light_tenants_ahead_of_a_flood():
    wl = _wl(tenants=FLOOD_TENANTS, arrival={"process": "poisson", "rate": FLOOD_RATE})
    table = _run(_fleet({}, [wl]), 120.0)
    wait = np.array([w if w is not None else np.nan for w in table.gateway_wait_s])
    flood = np.array([t == "flood" for t in table.tenant])
    assert np.nanmedian(wait[~flood]) * 10 < np.nanmedian(wait[flood])
    assert "queue_timeout" in _reasons(table)  # the flood waited its tier's 10 s and gave up


def test_an_rpm_quota_admits_at_most_its_bucket_and_its_rate():
    table = _run(_fleet({"default_tenant": {"rpm": 60, "burst_s": 5}}), 60.0)  # 5 req/s offered, 1 allowed
    admitted = [r is None for r in table.reject_reason]
    for tenant in ("acme", "globex"):
        n = sum(a and t == tenant for a, t in zip(admitted, table.tenant, strict=True))
        assert 30 < n <= 5 + 60
    assert _reasons(table) == {"rate_limit"}


def test_a_tpm_quota_counts_prompt_and_max_tokens_at_admission():
    table = _run(_fleet({"default_tenant": {"tpm": 60_000, "burst_s": 10}}), 60.0)
    for tenant in ("acme", "globex"):
        rows = [i for i in range(table.n) if table.tenant[i] == tenant and table.reject_reason[i] is None]
        charged = sum(int(table.input_tokens[i]) + 1024 for i in rows)
        assert charged <= 10_000 + 60_000 + 4000 + 1024  # the bucket, a minute's refill, one request's debt
    assert _reasons(table) == {"tpm_limit"}


def test_a_concurrency_quota_bounds_what_a_tenant_holds_at_once():
    table = _run(_fleet({"default_tenant": {"concurrency": 2}}, [_wl(arrival={"process": "poisson", "rate": 20.0})]),
                 30.0)
    assert "concurrency_limit" in _reasons(table)
    for tenant in ("acme", "globex"):
        edges = []
        for i in range(table.n):
            if table.tenant[i] == tenant and table.admission[i] != "rejected":
                entered = table.ts["queue_start"][i] - round(table.gateway_wait_s[i] * 1e9)
                edges += [(_engine_done(table, i), -1), (entered, 1)]
        held = np.cumsum([d for _, d in sorted(edges)])
        assert held.max() == 2


def test_a_token_budget_settles_on_what_requests_used():
    table = _run(_fleet({"tenants": {"acme": {"token_budget": 100_000}}}), 60.0)
    acme = [i for i in range(table.n) if table.tenant[i] == "acme"]
    admitted = [i for i in acme if table.reject_reason[i] is None]
    used = sum(int(table.input_tokens[i] + table.output_tokens[i]) for i in admitted)
    assert used <= 100_000
    assert sum(int(table.input_tokens[i]) + 1024 for i in admitted) > 100_000  # more than the estimates allowed
    assert {table.reject_reason[i] for i in acme} == {None, "budget_exhausted"}
    assert all(table.reject_reason[i] is None for i in range(table.n) if table.tenant[i] == "globex")


def test_a_request_that_waits_its_tiers_max_wait_times_out_at_the_gateway():
    table = _run(_fleet({"max_in_flight_per_replica": 1, "tiers": {"P0": {"max_wait_s": 0.5}}}), 30.0)
    out = [i for i in range(table.n) if table.reject_reason[i] == "queue_timeout"]
    assert out
    for i in out:
        assert table.finish_reason[i] == "timeout" and table.admission[i] == "rejected"
        assert table.gateway_wait_s[i] == pytest.approx(0.5)
        assert table.ts["completed"][i] == table.ts["queue_start"][i]  # it never reached an engine
    assert max(w for w in table.gateway_wait_s if w is not None) <= 0.5 + 1e-9


def test_a_full_tier_queue_refuses_at_once():
    table = _run(_fleet({"max_in_flight_per_replica": 1, "tiers": {"P0": {"max_queued": 1}}}), 30.0)
    assert "queue_full" in _reasons(table)


def test_p2_is_deferred_while_p0_waits_and_holds_at_most_its_share():
    slots = 8
    cfg = _fleet({"max_in_flight_per_replica": slots, "tiers": {"P2": {"max_share": 0.25}}},
                 [_wl(arrival={"process": "poisson", "rate": 12.0}),
                  _wl(name="batch", tier="P2", arrival={"process": "batch", "batches": [{"at": 5, "count": 200}]})])
    table = _run(cfg, 60.0)
    sent = lambda i: table.ts["queue_start"][i]  # noqa: E731 -- where the gateway let it go
    entered = lambda i: sent(i) - round((table.gateway_wait_s[i] or 0.0) * 1e9)  # noqa: E731
    p0 = [i for i in range(table.n) if table.tier[i] == "P0" and table.admission[i] != "rejected"]
    p2 = [i for i in range(table.n) if table.tier[i] == "P2" and table.admission[i] != "rejected"]
    assert any(table.admission[i] == "deferred" for i in p2)
    waits = [(entered(i), sent(i)) for i in p0 if sent(i) > entered(i)]
    assert waits
    for i in p2:
        assert not any(a < sent(i) < b for a, b in waits), "a P2 request went ahead of a waiting P0 one"
    edges = sorted([(sent(i), 1) for i in p2] + [(_engine_done(table, i), -1) for i in p2])
    assert max(np.cumsum([d for _, d in edges])) <= slots * 0.25


def test_every_decision_is_on_the_gateway_span_and_in_requests_parquet(tmp_path):
    cfg = _fleet({"default_tenant": {"rpm": 60, "burst_s": 5}})
    result = simulate(cfg, 30.0)
    paths = write_outputs(result, tmp_path)
    reasons = pq.read_table(paths["requests"], columns=["reject_reason"]).column(0).to_pylist()
    assert "rate_limit" in reasons
    decisions = {}
    for line in paths["spans"].read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for span in rs["scopeSpans"][0]["spans"]:
                if span["name"] == "llm.gateway":
                    a = {x["key"]: next(iter(x["value"].values())) for x in span["attributes"]}
                    decisions[a["llm.admission"]] = decisions.get(a["llm.admission"], 0) + 1
                    assert ("llm.reject_reason" in a) == (a["llm.admission"] == "rejected")
                    assert a.get("llm.reject_reason") in (None, "rate_limit")
    assert decisions["rejected"] == reasons.count("rate_limit")
    assert decisions["admitted"] > 0


def test_without_a_gateway_section_the_spans_carry_no_decision():
    result = simulate(_fleet(), 10.0)
    assert result.fleet.gateway is None
    assert set(result.table.admission) == {None}


def test_every_arrival_ends_once_and_the_gateway_holds_nothing_after_the_run():
    cfg = _fleet({"max_in_flight_per_replica": 2, "default_tenant": {"concurrency": 40},
                  "tiers": {"P0": {"max_wait_s": 3}}}, [_wl(arrival={"process": "poisson", "rate": 30.0})])
    result = simulate(cfg, 30.0, drain_s=5.0)
    gw: Gateway = result.fleet.gateway
    assert len(result.fleet.done) == result.arrivals == len({r.rid for r in result.fleet.done})
    assert gw.held == {} and gw.waiting() == 0 and gw.sent == [0]
    assert all(t.use.in_flight == 0 for t in gw.tenants.values())


@pytest.mark.parametrize(("gateway", "where", "problem"), [
    ({"tenants": {"acme": {"tpm": -1}}}, "gateway.tenants.acme.tpm", "must be >= 0"),
    ({"tenants": {"acme": {"qps": 3}}}, "gateway.tenants.acme.qps", "unknown key"),
    ({"default_tenant": {"weight": 0}}, "gateway.default_tenant.weight", "must be >= 1e-06"),
    ({"default_tenant": {"rpm": float("inf")}}, "gateway.default_tenant.rpm", "must be a finite number"),
    ({"default_tenant": {"token_budget": 1e13}}, "gateway.default_tenant.token_budget", "must be <= 1000000000000"),
    ({"tiers": {"P3": {}}}, "gateway.tiers.P3", "unknown key"),
    ({"tiers": {"P2": {"max_share": 0}}}, "gateway.tiers.P2.max_share", "must be > 0"),
    ({"tiers": {"P0": {"max_wait_s": 1e9}}}, "gateway.tiers.P0.max_wait_s", "must be <= 86400"),
    ({"max_in_flight_per_replica": 0}, "gateway.max_in_flight_per_replica", "must be >= 1"),
    ({"ladder": []}, "gateway.ladder", "unknown key"),
])
def test_a_bad_gateway_section_names_its_key(gateway, where, problem):
    with pytest.raises(ConfigError) as e:
        _fleet(gateway)
    assert e.value.key == where and problem in e.value.problem
    assert "\n" not in str(e.value)


def test_a_tenant_without_its_own_quota_gets_the_default_one_and_listed_ones_inherit_it():
    gw = _fleet({"default_tenant": {"rpm": 100, "weight": 2}, "tenants": {"acme": {"tpm": 5000}}}).gateway
    assert gw.quota("globex").rpm == 100
    assert (gw.quota("acme").rpm, gw.quota("acme").tpm, gw.quota("acme").weight) == (100, 5000, 2)


def test_simulate_exits_2_in_one_line_on_a_bad_gateway_section(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(fleet_data(gateway={"tenants": {"acme": {"concurrency": "lots"}}})))
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(f), "--duration", "10", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"goodput: error: {f}: gateway.tenants.acme.concurrency: expected an integer, got 'lots'"


def test_the_live_fleet_passes_its_own_traffic_through_the_same_gateway(tmp_path):
    cfg = _fleet({"default_tenant": {"rpm": 60, "burst_s": 2}}, [_wl(arrival={"process": "poisson", "rate": 10.0})])
    sink = SpanSink(cfg, 1, None, tmp_path / "spans.jsonl", interval_s=0.2)
    lf = LiveFleet(cfg, base_port=free_port_block(2), traffic=1.0, targets=tmp_path / "targets.yaml", sink=sink)
    lf.start()
    decisions = {}
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not {"admitted", "rejected"} <= set(decisions):
            time.sleep(0.5)
            path = tmp_path / "spans.jsonl"
            for line in path.read_text().splitlines() if path.exists() else []:
                for rs in json.loads(line)["resourceSpans"]:
                    for span in rs["scopeSpans"][0]["spans"]:
                        a = {x["key"]: next(iter(x["value"].values())) for x in span.get("attributes", [])}
                        if span["name"] == "llm.gateway" and "llm.admission" in a:
                            decisions.setdefault(a["llm.admission"], set()).add(a.get("llm.reject_reason"))
    finally:
        lf.close()
    assert decisions.get("rejected") == {"rate_limit"} and decisions.get("admitted") == {None}


def test_simulate_reports_what_the_gateway_decided(tmp_path, capsys):
    assert main(["simulate", str(FLOOD), "--duration", "20", "--out", str(tmp_path), "--format", "json"]) == 0
    gateway = json.loads(capsys.readouterr().out)["gateway"]
    assert set(gateway["admission"]) == {"admitted", "rejected"}
    assert list(gateway["reject_reasons"]) == ["tpm_limit"]
    assert gateway["reject_reasons"]["tpm_limit"] == gateway["admission"]["rejected"]


def test_a_live_http_request_passes_the_gateway_and_a_tenant_over_its_rate_is_told_429(tmp_path):
    cfg = _fleet({"tenants": {"capped": {"rpm": 6, "burst_s": 10}}})  # one request, then one every 10 s
    base = free_port_block(2)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0, targets=tmp_path / "targets.yaml")
    lf.start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{base}/v1", api_key="none", max_retries=0, timeout=30)

    def ask(tenant):
        return client.chat.completions.create(model="Llama-3.1-8B", max_tokens=3, extra_headers={"x-tenant": tenant},
                                              messages=[{"role": "user", "content": "hi"}])
    try:
        assert ask("capped").choices[0].finish_reason in ("stop", "length")
        with pytest.raises(openai.RateLimitError, match="rate_limit"):
            ask("capped")
        assert ask("other").choices[0].finish_reason in ("stop", "length")  # the quota is the tenant's, not the fleet's
    finally:
        lf.close()


def test_a_client_that_goes_away_while_queued_at_the_gateway_never_reaches_an_engine():
    fleet = Fleet(_fleet({"max_in_flight_per_replica": 1}, replicas=1))
    first, second = (Request(i, 0, 0, "P0", 0.0, 0.0, 100, 50, True, 0) for i in (1, 2))
    fleet.gateway.arrive(first, 0.0)
    fleet.gateway.arrive(second, 0.0)
    assert first.state != 0 and second.state == 0 and second.meta["admission"] == "queued"
    assert fleet.gateway.cancel(second, 0.5) and not fleet.gateway.cancel(first, 0.5)
    assert (second.finish_reason, second.replica, second.meta["gateway_wait_s"]) == ("abort", -1, 0.5)
    fleet.run(60.0)
    assert [r.rid for r in fleet.done] == [2, 1] and fleet.gateway.held == {} and fleet.gateway.waiting() == 0


def test_every_gateway_reason_is_a_reject_reason_of_the_request_model():
    assert set(GATEWAY_REJECT_REASONS) <= set(REJECT_REASONS)
