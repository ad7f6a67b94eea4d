"""goodput plan overload: the tenant flood that quotas and fair queueing contain and nothing else does, as the report
computes it; on examples/overload.yaml the ladder keeping P0 through a burst in its configured order and recovering
in reverse, and the fallback route carrying only what the capability matrix allows while the breaker keeps the
backup's own traffic at its objective; a burst's minutes below the objective and the recovery after; a primary lost
and what it costs; the three variants on the same arrivals; the ladder's steps, degradations and fallbacks read from
the requests and the ladder log; the JSON and HTML reports; bad input in one line."""

import copy
import json
import subprocess
import sys

import pytest
import yaml

from goodput.cli import main
from goodput.plan.demand import DEFAULT_SLOS, TierSlo
from goodput.plan.overload import Outcomes, figures, ladder_minutes
from goodput.plan.overload_scenarios import BURST_FACTOR, VARIANTS, primary_deployment, scenario, variants, window
from goodput.plan.prices import load_prices
from goodput.plan.report import write_overload_report
from goodput.simulator.config import parse_fleet
from goodput.simulator.request import Request
from goodput.simulator.workload import generate
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, fleet_data

FLOOD = REPO / "examples" / "tenant_flood.yaml"
OVERLOAD = REPO / "examples" / "overload.yaml"
SLOS = {t: TierSlo(*v) for t, v in DEFAULT_SLOS.items()}


def _overload(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["plan", "overload", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _write(tmp_path, data: dict, name: str = "fleet.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_a_tenant_flood_misses_every_other_tenants_p0_ttft_objective_without_quotas_and_wfq_and_meets_it_with_them(
        capsys):
    out = _overload(capsys, "--fleet", str(FLOOD), "--scenario", "tenant_flood", "--seconds", "120")
    objective = out["slos"]["P0"]["objective"]
    v = out["variants"]
    assert set(v["none"]["tenants"]) == {"a", "b", "c", "flood"}
    for tenant in "abc":
        assert v["none"]["tenants"][tenant]["P0"]["ttft_attainment"] < objective, tenant
        for protected in ("quotas", "ladder"):
            g = v[protected]["tenants"][tenant]["P0"]
            assert g["ttft_attainment"] >= objective and g["meets_objective"], (protected, tenant)
            assert g["rejected"] == 0
    assert set(v["quotas"]["tenants"]["flood"]["P0"]["rejects"]) == {"tpm_limit"}  # the flood pays for itself
    assert not v["quotas"]["tenants"]["flood"]["P0"]["meets_objective"]
    # one set of arrivals for all three
    assert v["none"]["requests"] == v["quotas"]["requests"] == v["ladder"]["requests"] > 0


def test_on_the_overload_example_a_flood_of_one_tenant_misses_the_others_p0_without_a_gateway_and_not_with_quotas(
        capsys):
    out = _overload(capsys, "--fleet", str(OVERLOAD), "--scenario", "tenant_flood", "--tenant", "umbrella")
    objective = out["slos"]["P0"]["objective"]
    v = out["variants"]
    for tenant in ("acme", "globex", "initech"):
        assert v["none"]["tenants"][tenant]["P0"]["ttft_attainment"] < objective, tenant
        assert v["quotas"]["tenants"][tenant]["P0"]["ttft_attainment"] >= objective, tenant
    assert "tpm_limit" in v["quotas"]["tenants"]["umbrella"]["P0"]["rejects"]


def test_the_ladder_keeps_p0_through_a_burst_in_its_configured_order_and_recovers_in_reverse(capsys):
    out = _overload(capsys, "--fleet", str(OVERLOAD), "--scenario", "burst")
    objective = out["slos"]["P0"]["objective"]
    v = out["variants"]
    ladder, quotas = v["ladder"], v["quotas"]
    assert ladder["workloads"]["support-chat"]["slo_attainment"] >= objective  # P0 on the bursting pool
    assert quotas["workloads"]["support-chat"]["slo_attainment"] < objective
    assert ladder["tiers"]["P0"]["slo_attainment"] > quotas["tiers"]["P0"]["slo_attainment"]
    start, end = out["window_s"]
    changes = [(c["step"], c["on"]) for c in ladder["ladder"] if c["deployment"] == "chat" and c["t"] >= start]
    order = [s["step"] for s in yaml.safe_load(OVERLOAD.read_text())["gateway"]["overload"]]
    first_off = next(i for i, (_, on) in enumerate(changes) if not on)
    engaged = [step for step, _ in changes[:first_off]]
    assert engaged == order[:len(engaged)] and engaged[:2] == ["defer_p2", "degrade_p1"], changes  # P2, then P1
    released = [step for step, on in changes[first_off:first_off + len(engaged)]]
    assert released == engaged[::-1], changes  # last on, first off
    assert all(not c["on"] for c in ladder["ladder"][-1:]) and ladder["ladder"][-1]["t"] > end  # off after the burst
    on = ladder["timeline"]["ladder_engaged"]["chat: defer_p2"]  # the HTML's strip
    minute = int(start // 60)
    assert on[minute] > 0.9 and max(on[:minute - 1]) == 0.0, on
    assert ladder["tiers"]["P1"]["degraded_share"] > 0 and quotas["tiers"]["P1"]["degraded_share"] == 0
    assert quotas["ladder"] == [] and v["none"]["ladder"] == []


def test_a_lost_primary_falls_back_only_with_what_the_matrix_allows_and_the_breaker_keeps_the_backups_slo(capsys):
    out = _overload(capsys, "--fleet", str(OVERLOAD), "--scenario", "primary_down")
    objective = out["slos"]["P0"]["objective"]
    fleet = yaml.safe_load(OVERLOAD.read_text())
    backup = next(d for d in fleet["deployments"] if d["name"] == "chat-small")["capabilities"]
    ladder, quotas = out["variants"]["ladder"], out["variants"]["quotas"]
    carried = {w for w, g in ladder["workloads"].items() if g["fallbacks"]}
    assert carried == {"support-chat", "nightly-batch"}, carried
    for w in fleet["workloads"]:  # a workload the backup cannot serve at all is never carried, only refused
        g = ladder["workloads"][w["name"]]
        lacks = any(w.get("needs", {}).get(k) and not backup.get(k) for k in ("tools", "vision"))
        never = lacks or w["max_tokens"] >= backup["context"]
        if w["deployment"] == "chat" and never:
            assert not g["fallbacks"] and g["rejects"].get("capability", 0) > 0, w["name"]
    assert ladder["workloads"]["support-chat"]["rejects"]["capability"] > 0  # a long prompt exceeds the 4k context
    assert set(ladder["tiers"]["P0"]["fallbacks"]) == {"circuit_open"}
    assert [s for _, s, _ in ladder["circuits"]["chat"][:2]] == ["closed", "open"]
    # the breaker: fallbacks take the backup's free slots, never its queue, and the clients stop retrying
    own = ladder["workloads"]["helpdesk"]
    assert own["slo_attainment"] >= objective and own["fallbacks"] == {} and not own["rejects"]
    assert own["slo_attainment"] > quotas["workloads"]["helpdesk"]["slo_attainment"]
    assert set(quotas["tiers"]["P0"]["fallbacks"]) == {"unavailable"}  # no breaker: retries walk to the backup
    assert quotas["retries"] > 20 * ladder["retries"] and quotas["circuits"] == {}
    assert ladder["workloads"]["support-chat"]["slo_attainment"] > quotas["workloads"]["support-chat"]["slo_attainment"]


def test_the_report_says_what_it_replayed_in_json_and_in_text(capsys):
    out = _overload(capsys, "--fleet", str(FLOOD), "--scenario", "burst", "--seconds", "90", "--seed", "5")
    assert out["scenario"] == "burst" and out["seconds"] == 90.0 and out["seed"] == 5
    assert out["window_s"] == [30.0, 60.0]
    assert out["ladder_configured"] is False and out["fallbacks_configured"] is False
    assert out["breaker_configured"] is False
    assert set(out["slos"]["P0"]) == {"ttft_s", "tpot_s", "objective"}
    assert list(out["variants"]) == ["none", "quotas", "ladder"]
    for label, r in out["variants"].items():
        assert r["gateway"] == (label != "none")
        assert set(r) >= {"protection", "gpu_hours", "usd", "requests", "served_by_deployment", "tiers", "workloads",
                          "tenants", "timeline", "ladder", "circuits"}
        g = r["tiers"]["P0"]
        assert set(g) == {"requests", "retries", "slo_attainment", "ttft_attainment", "meets_objective", "goodput_rps",
                          "rejected", "rejects", "degraded_share", "fallback_share", "fallbacks", "usd"}
        assert r["workloads"]["chat"] == g  # the example's one workload is its P0
        assert g["rejected"] == sum(g["rejects"].values())
        assert sum(t["P0"]["requests"] for t in r["tenants"].values()) == g["requests"] == r["requests"]
        assert sum(t["P0"]["usd"] for t in r["tenants"].values()) == pytest.approx(r["usd"], abs=1e-3)
        assert len(r["timeline"]["slo_attainment"]["P0"]) == 2  # 90 s: two minutes
    capsys.readouterr()
    assert main(["plan", "overload", "--fleet", str(FLOOD), "--scenario", "burst", "--seconds", "90"]) == 0
    text = capsys.readouterr().out
    assert "no overload ladder, fallbacks or circuit breaker" in text and "per tier:" in text
    assert "per workload:" in text and "per tenant:" in text and "ladder: no change" in text
    assert "tpm_limit" in text


def test_a_burst_pushes_the_unprotected_fleet_below_its_objective_for_the_window_and_it_recovers_after(tmp_path,
                                                                                                         capsys):
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 8.0  # one replica serves this within the P0 objective, not three times it
    gateway = {"max_in_flight_per_replica": 48}  # the variant read here, "none", drops it
    fleet = _write(tmp_path, fleet_data(deployments=[dep], workloads=[wl], gateway=gateway))
    out = _overload(capsys, "--fleet", str(fleet), "--scenario", "burst", "--seconds", "540")
    objective = out["slos"]["P0"]["objective"]
    series = out["variants"]["none"]["timeline"]["slo_attainment"]["P0"]  # minutes 0-2 calm, 3-5 burst, 6-8 after
    assert min(series[:3]) >= objective, series
    assert max(series[3:6]) < objective, series
    assert series[-1] >= objective, series


def test_the_burst_triples_arrivals_in_its_window_in_place_of_the_files_own_bursts():
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"] = {"process": "burst", "rate": 5.0, "bursts": [{"at": 20, "factor": 10, "duration": 60}]}
    data = fleet_data(workloads=[wl])
    cfg = parse_fleet(scenario("burst", data, 600.0, "t.yaml"), "t.yaml")
    t = generate(cfg, 600.0, 3).arrival
    start, end = window(600.0)
    inside, before, after = ((t >= start) & (t < end)).sum(), (t < start).sum(), (t >= end).sum()
    assert inside / before == pytest.approx(BURST_FACTOR, rel=0.15)
    assert after / before == pytest.approx(1.0, rel=0.15)  # the file's own 10x at 20 s is gone
    assert data["workloads"][0]["arrival"]["bursts"] == [{"at": 20, "factor": 10, "duration": 60}]  # input untouched


def test_the_primary_is_lost_for_the_window_in_place_of_the_files_own_losses():
    small = dict(copy.deepcopy(BASE_DEPLOYMENT), name="small", replicas=1)
    data = fleet_data(deployments=[copy.deepcopy(BASE_DEPLOYMENT), small],
                      events=[{"at": 5, "kind": "replica_lost", "deployment": "chat", "replica": 0},
                              {"at": 7, "kind": "replica_lost", "deployment": "small", "replica": 0},
                              {"at": 9, "kind": "release", "deployment": "chat", "from": "a", "to": "b"}])
    events = sorted((e["at"], e["kind"], e["deployment"], e.get("replica"))
                    for e in scenario("primary_down", data, 300.0, "t.yaml")["events"])
    assert events == [(7, "replica_lost", "small", 0), (9, "release", "chat", None),
                      (100.0, "replica_lost", "chat", 0), (100.0, "replica_lost", "chat", 1),
                      (200.0, "replica_added", "chat", None), (200.0, "replica_added", "chat", None)]
    down = scenario("primary_down", data, 300.0, "t.yaml", deployment="small")["events"]
    assert [e["at"] for e in down if e["deployment"] == "small"] == [100.0, 200.0]


def test_a_flood_raises_one_tenant_to_five_times_its_share_and_leaves_the_others_rates():
    data = fleet_data()  # acme 0.7, globex 0.3 at 5 req/s; globex's share becomes 5 x acme's
    out = scenario("tenant_flood", data, 60.0, "t.yaml", tenant="globex")
    wl = out["workloads"][0]
    assert wl["tenants"] == {"acme": 0.7, "globex": pytest.approx(3.5)}
    assert wl["arrival"]["rate"] * 0.7 / (0.7 + 3.5) == pytest.approx(5.0 * 0.7)  # acme keeps 3.5 req/s
    flood = parse_fleet(yaml.safe_load(FLOOD.read_text()), str(FLOOD))
    again = parse_fleet(scenario("tenant_flood", yaml.safe_load(FLOOD.read_text()), 60.0, str(FLOOD)), str(FLOOD))
    assert again.workloads == flood.workloads  # the example is already a flood: flood at 5 x a, b and c


def test_a_lost_primary_rejects_only_in_its_window_and_costs_only_the_hours_it_ran(tmp_path, capsys):
    gateway = {"max_in_flight_per_replica": 48}  # the variant read here, "none", drops it
    fleet = _write(tmp_path, fleet_data(gateway=gateway))  # two replicas of chat on H100s
    out = _overload(capsys, "--fleet", str(fleet), "--scenario", "primary_down", "--seconds", "360", "--pricing", "spot")
    none = out["variants"]["none"]
    assert set(none["tiers"]["P0"]["rejects"]) == {"overloaded"}  # no replica to route to
    series = none["timeline"]["slo_attainment"]["P0"]
    assert series[2] == 0.0 and series[3] == 0.0 and min(series[:2]) > 0.9 and series[5] > 0.9, series
    hours = 2 * (360.0 - 120.0) / 3600.0  # two GPUs, down for the middle third
    assert none["gpu_hours"] == pytest.approx(hours, abs=2 / 3600.0)
    assert none["usd"] == pytest.approx(none["gpu_hours"] * out["prices"]["H100-80GB-SXM"], rel=1e-3)
    assert out["pricing"] == "spot"  # at the spot price, not the on-demand one
    assert out["prices"]["H100-80GB-SXM"] == load_prices(None, "spot").usd_per_gpu_hour("H100-80GB-SXM")


def test_the_variants_drop_the_gateway_then_only_its_ladder_and_breaker():
    data = fleet_data(gateway={"default_tenant": {"tpm": 1000}, "overload": [{"step": "x"}], "fallbacks": {"b": ["a"]}})
    data["gateway"].update(circuit_breaker={"failures": 3}, retry={"attempts": 2})
    v = variants(data)
    assert "gateway" not in v["none"]
    assert v["quotas"]["gateway"] == {"default_tenant": {"tpm": 1000}, "fallbacks": {"b": ["a"]},
                                      "retry": {"attempts": 2}}  # routes and retries stay: a failover, no breaker
    assert v["ladder"] == data and "overload" in data["gateway"]  # as written, and not changed
    assert primary_deployment(data, "t.yaml") == "b"  # the first primary with a fallback route
    assert primary_deployment(fleet_data(), "t.yaml") == "chat"


def _req(rid: int, arrival: float, meta: dict, *, ttft: float = 0.1, reject: str = "") -> Request:
    r = Request(rid, 0, 0, "P0", arrival, arrival, 100, 10, True, 0)
    r.meta = {"tenant": "acme", **meta}
    if reject:
        r.finish_reason, r.reject_reason = "rejected", reject
    else:
        r.finish_reason, r.scheduled, r.first_token, r.generated = "stop", arrival, arrival + ttft, 10
        r.last_token = r.first_token + 9 * 0.02
    return r


def test_the_ladders_steps_degradations_and_fallbacks_are_read_from_the_requests_per_minute():
    cfg = parse_fleet(fleet_data(), "t.yaml")
    sink = Outcomes(cfg)
    reqs = [_req(1, 10.0, {}), _req(2, 70.0, {"overload_step": "defer_p2"}),
            _req(3, 80.0, {"overload_step": "output_cap", "degraded": "output_cap"}),
            _req(4, 90.0, {"overload_step": "output_cap", "fallback_from": "big", "fallback_reason": "capacity"},
                 ttft=2.0),
            _req(5, 100.0, {"overload_step": "fail_fast"}, reject="busy"), _req(6, 130.0, {}),
            _req(7, 140.0, {"attempt": 2, "fallback_from": "big", "fallback_reason": "unavailable"})]  # a retry
    for r in [reqs[2], reqs[0], reqs[1], *reqs[3:]]:  # finished out of arrival order
        sink.add(r)
    f = figures(sink.columns(), SLOS, 180.0, 1.0)
    tl = f["timeline"]
    assert tl["overload_step"] == {"defer_p2": [0.0, 0.25, 0.0], "output_cap": [0.0, 0.5, 0.0],
                                   "fail_fast": [0.0, 0.25, 0.0]}
    assert list(tl["overload_step"]) == ["defer_p2", "output_cap", "fail_fast"]  # in the order they came on
    assert tl["degraded_share"] == [0.0, 0.25, 0.0] and tl["fallback_share"] == [0.0, 0.25, 0.5]
    assert tl["slo_attainment"]["P0"] == [1.0, 0.5, 1.0]  # the fallback came too late, the busy one never
    g = f["tiers"]["P0"]
    assert g["requests"] == 6 and g["retries"] == 1 == f["retries"]  # the retry is no request of a client's
    assert g["rejects"] == {"busy": 1} and g["degraded_share"] == pytest.approx(1 / 7)
    assert g["fallback_share"] == pytest.approx(2 / 7)
    assert g["goodput_rps"] == pytest.approx(4 / 180.0, abs=1e-4)  # the retry met its SLO, the client did not
    assert g["usd"] == pytest.approx(1.0)  # the one deployment's whole cost


def test_the_ladder_log_becomes_each_steps_share_of_each_minute_engaged():
    log = [{"t": 30.0, "deployment": "chat", "step": "defer_p2", "on": True},
           {"t": 75.0, "deployment": "chat", "step": "degrade_p1", "on": True},
           {"t": 90.0, "deployment": "chat", "step": "degrade_p1", "on": False},
           {"t": 150.0, "deployment": "chat", "step": "defer_p2", "on": False},
           {"t": 170.0, "deployment": "small", "step": "defer_p2", "on": True}]  # still on at the end
    assert ladder_minutes(log, 180.0) == {"chat: defer_p2": [0.5, 1.0, 0.5], "chat: degrade_p1": [0.0, 0.25, 0.0],
                                          "small: defer_p2": [0.0, 0.0, pytest.approx(1 / 6, abs=1e-4)]}
    assert list(ladder_minutes(log, 180.0)) == ["chat: defer_p2", "chat: degrade_p1", "small: defer_p2"]
    assert ladder_minutes([], 60.0) == {}


def test_the_html_report_draws_the_ladders_steps_from_its_log_with_their_names_escaped(tmp_path):
    cfg = parse_fleet(fleet_data(), "t.yaml")
    sink = Outcomes(cfg)
    for i, t in enumerate((10.0, 70.0, 80.0, 130.0)):
        sink.add(_req(i + 1, t, {"overload_step": "<b>defer</b>"} if 60 <= t < 120 else {}))
    f = figures(sink.columns(), SLOS, 180.0, None)
    log = [{"t": 65.0, "deployment": "chat", "step": "<b>defer</b>", "on": True, "signal": "kv_usage", "value": 0.9},
           {"t": 125.0, "deployment": "chat", "step": "<b>defer</b>", "on": False, "signal": "kv_usage", "value": 0.1}]
    f["timeline"]["ladder_engaged"] = ladder_minutes(log, 180.0)
    result = {"scenario": "burst", "fleet": "t.yaml", "seconds": 180.0, "window_s": [60.0, 120.0], "seed": 0,
              "pricing": "on_demand", "prices": {"H100-80GB-SXM": 3.24},
              "ladder_configured": True, "fallbacks_configured": False, "breaker_configured": False,
              "slos": {t: {"ttft_s": s.ttft_s, "tpot_s": s.tpot_s, "objective": s.objective} for t, s in SLOS.items()},
              "variants": {k: {"protection": p, "gateway": k != "none", "gpu_hours": 0.1, "usd": None, **f,
                               "ladder": log if k == "ladder" else [], "circuits": {}} for k, p in VARIANTS.items()}}
    text = write_overload_report(tmp_path / "r.html", result).read_text()
    assert "&lt;b&gt;defer&lt;" in text and "<b>defer" not in text  # (plotly's JSON writes / as \\u002f)
    assert '"type":"heatmap"' in text and "no step was on" not in text
    assert "65.0 s chat &lt;b&gt;defer&lt;/b&gt; on (kv_usage 0.9)" in text  # the log, in order, below the tables
    assert "[0.0,0.9167,0.0833]" in text.replace(" ", "")  # engaged 65-120 s and 120-125 s


def test_the_html_report_is_one_file_with_every_name_escaped(tmp_path, capsys):
    wl = dict(copy.deepcopy(BASE_WORKLOAD), tenants={"<i>evil</i>": 1.0, "ok": 1.0})
    fleet = _write(tmp_path, fleet_data(workloads=[wl], gateway={"default_tenant": {"tpm": 200000}}))
    page = tmp_path / "overload.html"
    _overload(capsys, "--fleet", str(fleet), "--scenario", "tenant_flood", "--seconds", "60", "--html", str(page))
    text = page.read_text()
    assert "&lt;i&gt;evil&lt;/i&gt;" in text and "<i>evil</i>" not in text
    assert "SLO attainment per minute" in text and "stepping in and out" in text
    assert 'src="http' not in text  # plotly.js inlined, nothing fetched


@pytest.mark.parametrize(("argv", "fragments"), [
    (["--scenario", "nope"], ["--scenario", "invalid choice"]),
    (["--scenario", "tenant_flood", "--tenant", "nobody"], ["--tenant: nobody", "have a, b, c, flood"]),
    (["--scenario", "burst", "--seconds", "0"], ["--seconds"]),
    (["--scenario", "burst", "--seconds", "21600"], ["--seconds", "at most 7200"]),  # ran past 120 s before
])
def test_bad_flags_are_one_line_and_exit_2(argv, fragments):
    r = subprocess.run([sys.executable, "-m", "goodput", "plan", "overload", "--fleet", str(FLOOD), *argv],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(f in err for f in fragments), err
    assert not r.stdout


def test_a_bad_fleet_file_is_one_line_naming_its_key(tmp_path, capsys):
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = "lots"
    fleet = _write(tmp_path, fleet_data(workloads=[wl]))
    capsys.readouterr()
    assert main(["plan", "overload", "--fleet", str(fleet), "--scenario", "burst"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{fleet}: workloads[0].arrival.rate" in err[0], err


def test_a_fleet_without_a_gateway_is_refused_since_its_three_variants_are_one_fleet(tmp_path, capsys):
    """Replayed three times and reported as three protections, exit 0, before."""
    data = yaml.safe_load(FLOOD.read_text())
    del data["gateway"]
    fleet = _write(tmp_path, data)
    capsys.readouterr()
    assert main(["plan", "overload", "--fleet", str(fleet), "--scenario", "burst", "--seconds", "60"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{fleet}: gateway: missing" in err[0], err


def test_a_bad_slo_file_is_one_line_naming_its_key(tmp_path, capsys):
    slos = _write(tmp_path, {"slos": {"P0": {"ttft_s": -1}}}, "slos.yaml")
    capsys.readouterr()
    assert main(["plan", "overload", "--fleet", str(FLOOD), "--scenario", "burst", "--slos", str(slos)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{slos}: slos.P0.ttft_s" in err[0], err


def test_the_slos_of_a_demand_file_judge_the_replay(tmp_path, capsys):
    slos = _write(tmp_path, {"slos": {"P0": {"ttft_s": 0.05}}}, "slos.yaml")  # a long prompt's prefill takes longer
    out = _overload(capsys, "--fleet", str(FLOOD), "--scenario", "tenant_flood", "--seconds", "60", "--slos", str(slos))
    assert out["slos"]["P0"] == {"ttft_s": 0.05, "tpot_s": 0.05, "objective": 0.95}
    a = out["variants"]["quotas"]["tenants"]["a"]["P0"]  # at the default 0.5 s: 1.0 (the flood test)
    assert a["ttft_attainment"] < 0.95 and not a["meets_objective"]
