"""``goodput plan disagg``: where prefill/decode disaggregation saves GPUs and where it does not, and why; its step
costs against the simulator's roofline, its prefill queue against the simulator itself, and both planned layouts
replayed in the simulator from ``--fleet-out`` (``python -m tests.plan.test_plan_disagg`` prints the table of
docs/capacity.md "Checked against the simulator")."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from goodput.cli import main
from goodput.plan.demand import Candidate, Stream, TierSlo, token_mix
from goodput.plan.disagg import erlang_c, plan_aggregated, plan_decode_pool, plan_prefill_pool, replica_state, step_s
from goodput.plan.disaggfile import load_disagg
from goodput.plan.fleetspec import fleet_config, meets_slo, stream_workload, ttft_tpot
from goodput.plan.prices import load_prices
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.workload import generate
from tests.conftest import REPO

LONG = REPO / "examples" / "disagg_long.yaml"
SHORT = REPO / "examples" / "disagg_short.yaml"


def plan(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(["plan", "disagg", *argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _json(capsys, path) -> dict:
    rc, out, err = plan(capsys, "--demand", str(path), "--format", "json")
    assert rc == 0, err
    (p,) = json.loads(out)["plans"]
    return p


def test_long_prompts_disaggregated_save_gpus_because_prefill_slows_decode(capsys):
    p = _json(capsys, LONG)
    a, d = p["aggregated"], p["disaggregated"]
    assert p["verdict"] == "disaggregated"
    assert d["gpus"] < a["gpus"], (d["gpus"], a["gpus"])
    assert d["gpus"] == d["prefill"]["replicas"] * d["prefill"]["tp"] + d["decode"]["replicas"] * d["decode"]["tp"]
    assert a["gpus"] == a["replicas"] * a["tp"]
    assert d["usd_per_hour"] < a["usd_per_hour"] and d["usd_per_million_tokens"] < a["usd_per_million_tokens"]
    assert d["ratio"] == f"{d['prefill']['replicas']}:{d['decode']['replicas']}"
    # the interference is there in the figures: a step with a prefill chunk is far slower than decode alone ...
    r = a["replica"]
    assert r["prefill_step_ms"] > 1.5 * r["decode_step_ms"]
    # ... and the reason names what binds each side, and the figures it rests on
    assert a["binding"] == "tpot" and f"{a['binding']} binds one replica fewer" in p["reason"]
    assert f"({d['decode']['binding']} binds)" in p["reason"]
    assert f"{d['gpus']} vs {a['gpus']}" in p["reason"] and "interferes with decode" in p["reason"]
    # every layout meets the SLO it was planned for
    assert r["tpot_ms"] <= p["demand"]["tpot_s"] * 1000 and r["ttft_ms"] <= p["demand"]["ttft_s"] * 1000
    assert d["decode"]["tpot_ms"] <= p["demand"]["tpot_s"] * 1000
    assert d["prefill"]["replica"]["ttft_ms"] <= p["demand"]["ttft_s"] * 1000


def test_short_prompts_stay_aggregated_because_two_pools_round_up(capsys):
    p = _json(capsys, SHORT)
    a, d = p["aggregated"], p["disaggregated"]
    assert p["verdict"] == "aggregated"
    assert a["gpus"] < d["gpus"], (a["gpus"], d["gpus"])
    assert d["decode"]["work_replicas"] < d["decode"]["replicas"] - 0.5  # the decode pool rounds up a lot
    assert d["prefill"]["replica"]["prefill_busy"] < 0.5  # and its prefill replica idles
    assert "two pools' rounding" in p["reason"] and f"{a['gpus']} vs {d['gpus']}" in p["reason"]
    assert f"{d['decode']['work_replicas']:.2f} replicas of work" in p["reason"]


def test_the_table_shows_both_layouts_and_the_verdict(capsys):
    rc, out, err = plan(capsys, "--demand", str(LONG))
    assert rc == 0, err
    for row in ("aggregated", "disaggregated", "  prefill pool", "  decode pool", "KV transfer:", "verdict: "):
        assert row in out


def _cases():
    return {c.deployment: c for path in (LONG, SHORT) for c in load_disagg(path, load_prices())}


def test_steps_cost_what_the_simulator_charges():
    """Decode-only, prefill-only and mixed steps are the simulator's roofline exactly, so a plan and its replay
    price the interference of a prefill chunk with the decodes beside it alike."""
    pool = _cases()["rag-70b"].aggregated
    rf, ctx = pool.roofline, 8000.0
    assert step_s(pool, 16, ctx) == pytest.approx(rf.step_time(16, 16 * ctx, 16 * ctx))
    c = 512  # one 512-token chunk after 1536 computed tokens of a 2048-token prompt
    pairs, kv = c * 768 + c * (c + 1) / 2, 768 + c
    assert step_s(pool, 0, ctx, 1, c, 2048) == pytest.approx(rf.step_time(c, pairs, kv))
    assert step_s(pool, 64, ctx, 1, c, 2048) == pytest.approx(rf.step_time(64 + c, 64 * ctx + pairs, 64 * ctx + kv))


def test_erlang_c_is_the_textbook_figure():
    assert erlang_c(1, 0.6) == pytest.approx(0.6)  # M/M/1: an arrival waits with the server's utilisation
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(10, 8.0) == pytest.approx(0.4092, abs=1e-4)
    assert erlang_c(4, 4.0) == 1.0


def test_more_load_means_a_slower_replica_and_littles_law_holds():
    case = _cases()["rag-70b"]
    states = [replica_state(replace(case.load, rps=rate), case.aggregated, 1, chunk=512) for rate in (0.05, 0.2, 0.35)]
    for lo, hi in zip(states, states[1:], strict=False):
        assert hi.ttft_s > lo.ttft_s and hi.tpot_mean_s > lo.tpot_mean_s and hi.batch > lo.batch
    for s in states:
        assert s.batch == pytest.approx(s.rate * case.load.output_mean * s.tpot_mean_s, rel=1e-4)
        assert s.tpot_s >= s.tpot_mean_s
    # far too much load for one replica: the prefill cannot keep up, and the state says so
    assert replica_state(replace(case.load, rps=50.0), case.aggregated, 1).failed == ("prefill_throughput",)


def test_the_decode_pool_names_the_kv_cache_when_it_binds():
    case = _cases()["rag-70b"]
    loose = replace(case.load, tpot_s=1.0)  # TPOT no longer binds: the KV cache of 10k-token sequences does
    d = plan_decode_pool(loose, case.decode, 0.0, "tpot")
    assert d.limit == "kv" and d.batch == d.limits["kv"] < d.limits["tpot"]
    assert d.batch * (loose.context // case.decode.block_size + 1) * case.decode.block_size <= case.decode.kv_tokens


PREFILL_ONLY = """
deployments:
  p:
    streams:
      - {scene: rag, tier: P0, peak_rps: 1, input_tokens: {min: 3000, p50: 4096, max: 6000}, output_tokens: 1}
    candidates:
      - {name: p, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1,
         engine: {max_num_seqs: 256, max_model_len: 16384, prefill_chunk_tokens: CHUNK}}
    disaggregation: {kv_link_gbps: 50}
"""


@pytest.mark.parametrize("chunk", [8192, 512])
def test_the_prefill_queue_matches_the_simulator_under_load(tmp_path, chunk):
    """A replica that only prefills (one output token), simulated 60% busy, with whole prompts a step or 512-token
    chunks of several at once: its TTFT, mean and p95, against the planner's queue."""
    path = tmp_path / "p.yaml"
    path.write_text(PREFILL_ONLY.replace("CHUNK", str(chunk)))
    (case,) = load_disagg(path, load_prices())
    alone = replica_state(replace(case.load, rps=1e-6), case.prefill, 1, decodes=False).ttft_mean_s
    rate = 0.6 / alone
    planned = replica_state(replace(case.load, rps=rate), case.prefill, 1, decodes=False)
    iq, imean = token_mix("t", "i", {"min": 3000, "p50": 4096, "max": 6000})
    stream = Stream("rag", "P0", rate, iq, {"p50": 1, "max": 1}, imean, 1.0)
    cand = Candidate("p", "Llama-3.1-8B", "H100-80GB-SXM", 1,
                     {"max_num_seqs": 256, "max_model_len": 16384, "prefill_chunk_tokens": chunk})
    cfg = fleet_config("test", "p", cand, 1, [stream_workload("p", stream, {"process": "poisson", "rate": rate})],
                       seed=3)
    duration = 4000.0 / rate
    fleet = Fleet(cfg, generate(cfg, duration, 3))
    fleet.run(duration)
    fleet.drain(duration + 60.0)
    ttft = np.array([ttft_tpot(r)[0] for r in fleet.done if r.arrival > 30.0])
    assert ttft.size > 3000
    assert planned.prefill_busy == pytest.approx(0.6, abs=0.05)
    assert planned.ttft_mean_s == pytest.approx(ttft.mean(), rel=0.2)
    assert planned.ttft_s == pytest.approx(np.percentile(ttft, 95), rel=0.2)


@pytest.mark.parametrize(("edit", "key"), [
    (lambda d: d["deployments"]["rag-70b"].pop("disaggregation"), "deployments.rag-70b.disaggregation: is required"),
    (lambda d: d["deployments"]["rag-70b"]["disaggregation"].update(kv_link_gbps=-1),
     "deployments.rag-70b.disaggregation.kv_link_gbps: must be >="),
    (lambda d: d["deployments"]["rag-70b"]["disaggregation"]["prefill_pool"].update(replicas=3),
     "deployments.rag-70b.disaggregation.prefill_pool.replicas: unknown key"),
    (lambda d: d["deployments"]["rag-70b"]["disaggregation"]["decode_pool"].update(tp=3),
     "deployments.rag-70b.disaggregation.decode_pool"),
    (lambda d: d["slos"]["P0"].update(tpot_s=0.001), "deployments.rag-70b: candidate 70b-h100-tp4: "),
])
def test_bad_input_is_one_line_naming_the_key(tmp_path, capsys, edit, key):
    import yaml

    data = yaml.safe_load(LONG.read_text())
    edit(data)
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    rc, out, err = plan(capsys, "--demand", str(path))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and key in err, err


def test_an_unknown_deployment_is_refused(capsys):
    rc, _, err = plan(capsys, "--demand", str(LONG), "--deployment", "nope")
    assert rc == 2 and "--deployment: nope: no such deployment" in err and "rag-70b" in err


def _edited(tmp_path, edit):
    import yaml

    data = yaml.safe_load(LONG.read_text())
    edit(data["deployments"]["rag-70b"]["disaggregation"])
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_each_pool_takes_its_own_tp(tmp_path, capsys):
    p = _json(capsys, _edited(tmp_path, lambda d: d["decode_pool"].update(tp=8)))
    dc = p["disaggregated"]["decode"]
    assert dc["tp"] == 8 and p["disaggregated"]["prefill"]["tp"] == 4
    assert p["disaggregated"]["gpus"] == p["disaggregated"]["prefill"]["replicas"] * 4 + dc["replicas"] * 8
    base = _json(capsys, LONG)["disaggregated"]["decode"]
    assert dc["kv_tokens"] > 2 * base["kv_tokens"]  # eight GPUs' memory less one copy of the weights' share


def test_where_the_transfer_counts_moves_its_time(capsys):
    rc, out, _ = plan(capsys, "--demand", str(LONG), "--format", "json", "--transfer-in", "ttft")
    assert rc == 0
    in_ttft = json.loads(out)["plans"][0]
    in_tpot = _json(capsys, LONG)
    transfer = in_tpot["kv_link"]["transfer_ms"]
    assert in_ttft["kv_link"]["counted_in"] == "ttft" and transfer > 10  # 8k tokens x 80 KiB a GPU at 400 Gbit/s
    pf_ttft, pf_tpot = in_ttft["disaggregated"]["prefill"], in_tpot["disaggregated"]["prefill"]
    # before the first token it costs the prefill pool TTFT (more replicas, or the same ones slower) ...
    assert pf_ttft["replicas"] >= pf_tpot["replicas"]
    if pf_ttft["replicas"] == pf_tpot["replicas"]:
        assert pf_ttft["replica"]["ttft_ms"] == pytest.approx(pf_tpot["replica"]["ttft_ms"] + transfer, abs=0.2)
    # ... and leaves the decode step the whole TPOT: a batch at least as large
    assert in_ttft["disaggregated"]["decode"]["batch"] >= in_tpot["disaggregated"]["decode"]["batch"]
    assert in_ttft["disaggregated"]["decode"]["tpot_ms"] == in_ttft["disaggregated"]["decode"]["step_ms"]


def test_a_slow_kv_link_breaks_the_decode_tpot_and_says_so(tmp_path, capsys):
    rc, out, err = plan(capsys, "--demand", str(_edited(tmp_path, lambda d: d.update(kv_link_gbps=0.2))))
    assert rc == 2 and out == ""
    assert "decode pool: tpot:" in err and "ms of KV transfer" in err, err


def _attainment(cand: Candidate, stream: Stream, replicas: int, slo: TierSlo, duration: float = 600.0) -> float:
    cfg = fleet_config("test", "p", cand, replicas,
                       [stream_workload("p", stream, {"process": "poisson", "rate": stream.peak_rps})], seed=1)
    fleet = Fleet(cfg, generate(cfg, duration, 1))
    fleet.run(duration)
    fleet.drain(duration + 120.0)
    judged = [r for r in fleet.done if 60.0 < r.arrival < duration]
    return sum(meets_slo(r, slo) for r in judged) / len(judged)


def test_the_planned_prefill_pool_is_the_fewest_the_simulator_accepts():
    """The long example's prefill pool, simulated as replicas that only prefill (one output token): the planned
    count meets the TTFT objective and one replica fewer does not (the gateway pools the prompts over replicas)."""
    case = _cases()["rag-70b"]
    planned = plan_prefill_pool(case.load, case.prefill, 0.0, "tpot")
    iq, imean = token_mix("t", "i", {"min": 6000, "p50": 8192, "p95": 9500, "max": 10240})
    stream = Stream("rag", "P0", case.load.rps, iq, {"p50": 1, "max": 1}, imean, 1.0)
    cand = Candidate("p", "Llama-3.1-70B", "H100-80GB-SXM", 4,
                     {"max_num_seqs": 256, "max_model_len": 16384, "prefill_chunk_tokens": 8192})
    slo = TierSlo(case.load.ttft_s, 1.0, case.load.objective)
    assert _attainment(cand, stream, planned.replicas, slo) >= slo.objective
    assert _attainment(cand, stream, planned.replicas - 1, slo) < slo.objective


def test_the_simulator_accepts_the_planned_aggregated_pool_and_not_a_quarter_less():
    """The long example's aggregated pool at its planned chunk, simulated: the plan meets the SLO there; the
    planner is conservative (docs/capacity.md: 17 simulated replicas suffice), but not by a quarter."""
    case = _cases()["rag-70b"]
    planned = plan_aggregated(case.load, case.aggregated)
    iq, imean = token_mix("t", "i", {"min": 6000, "p50": 8192, "p95": 9500, "max": 10240})
    stream = Stream("rag", "P0", case.load.rps, iq, {"p50": 256, "max": 256}, imean, 256.0)
    cand = Candidate("a", "Llama-3.1-70B", "H100-80GB-SXM", 4,
                     {"max_num_seqs": 256, "max_model_len": 16384, "prefill_chunk_tokens": planned.at.chunk})
    slo = TierSlo(case.load.ttft_s, case.load.tpot_s, case.load.objective)
    assert _attainment(cand, stream, planned.replicas, slo) >= slo.objective
    assert _attainment(cand, stream, planned.replicas * 3 // 4, slo) < slo.objective


def _simulate(fleet: dict, duration: float = 1800.0, seed: int = 1) -> dict[str, list]:
    """Per layout (the deployment name's last word), the requests the fleet finished, those after the first minute."""
    cfg = parse_fleet(fleet, "fleet-out")
    sim = Fleet(cfg, generate(cfg, duration, seed))
    sim.run(duration)
    sim.drain(duration + 120.0)
    done: dict[str, list] = {}
    for r in sim.done:
        if 60.0 < r.arrival < duration:
            done.setdefault(cfg.deployments[r.deployment].name.rsplit("-", 1)[1], []).append(r)
    return done


def _replayed(demand: Path, fleet_out: Path) -> tuple[dict, dict, dict]:
    """The plan of ``demand`` (its one candidate), its ``--fleet-out`` fleet, and that fleet's requests per layout."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["plan", "disagg", "--demand", str(demand), "--format", "json", "--fleet-out", str(fleet_out)]) == 0
    (p,) = json.loads(stdout.getvalue())["plans"]
    fleet = yaml.safe_load(fleet_out.read_text())
    return p, fleet, _simulate(fleet)


def _simulated(p: dict, reqs: list) -> dict[str, float]:
    dm = p["demand"]
    slo = TierSlo(dm["ttft_s"], dm["tpot_s"], dm["objective"])
    ttft, tpot = np.array([ttft_tpot(r) for r in reqs]).T
    q = dm["objective"] * 100
    return {"attainment": sum(meets_slo(r, slo) for r in reqs) / len(reqs), "ttft_s": float(np.percentile(ttft, q)),
            "tpot_s": float(np.percentile(tpot, q)), "kv_link_s": float(np.mean([r.kv_link_s for r in reqs]))}


@pytest.mark.parametrize("demand", [LONG, SHORT])
def test_both_planned_layouts_meet_their_slo_in_the_simulator(tmp_path, demand):
    """``--fleet-out`` writes both layouts as planned; replayed at the demand's rate each meets the SLO it was planned
    for, and a KV transfer takes in the simulator what the plan charged (one unit, Gbit/s per prefill GPU)."""
    p, _, done = _replayed(demand, tmp_path / "fleet.yaml")
    dm = p["demand"]
    for layout in ("aggregated", "disaggregated"):
        sim = _simulated(p, done[layout])
        assert len(done[layout]) > 0.9 * dm["rps"] * 1740, layout
        assert sim["attainment"] >= dm["objective"], (layout, sim)
        assert sim["ttft_s"] <= dm["ttft_s"] and sim["tpot_s"] <= dm["tpot_s"], (layout, sim)
    # and the plan is not optimistic by more than 15%: the TPOT of both layouts, the prefill pool's queued TTFT
    a, d = p["aggregated"], p["disaggregated"]
    agg, dis = _simulated(p, done["aggregated"]), _simulated(p, done["disaggregated"])
    assert a["replica"]["tpot_ms"] >= 0.85 * agg["tpot_s"] * 1000 and d["decode"]["tpot_ms"] >= 0.85 * dis["tpot_s"] * 1000
    assert d["prefill"]["replica"]["ttft_ms"] >= 0.85 * dis["ttft_s"] * 1000
    moved = dis["kv_link_s"] * 1000.0
    assert moved == pytest.approx(p["kv_link"]["transfer_ms"], rel=0.02)


def test_the_planned_disaggregated_layout_is_the_fewest_the_simulator_accepts(tmp_path):
    """The long example's P:D layout with one prefill or one decode replica fewer misses the SLO in the simulator."""
    p, fleet, _ = _replayed(LONG, tmp_path / "fleet.yaml")
    (dis,) = [d for d in fleet["deployments"] if d["name"].endswith("-disaggregated")]
    for pool in (dis, dis["disaggregation"]["decode_pool"]):
        pool["replicas"] -= 1
        assert _simulated(p, _simulate(fleet)["disaggregated"])["attainment"] < p["demand"]["objective"], pool
        pool["replicas"] += 1


def _doc_table() -> str:
    """docs/capacity.md's planned-against-simulated table: both examples, both layouts, p95 TTFT and TPOT."""
    import tempfile

    rows = ["| example | layout | planned: replicas (GPUs) | planned p95 TTFT / TPOT | simulated: attainment | "
            "simulated p95 TTFT / TPOT |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for demand in (LONG, SHORT):
            p, _, done = _replayed(demand, Path(tmp) / "fleet.yaml")
            a, d = p["aggregated"], p["disaggregated"]
            planned = {"aggregated": (f"{a['replicas']} ({a['gpus']})", a["replica"]["ttft_ms"], a["replica"]["tpot_ms"]),
                       "disaggregated": (f"{d['ratio']} ({d['gpus']})", d["prefill"]["replica"]["ttft_ms"],
                                         d["decode"]["tpot_ms"])}
            for layout, (n, ttft, tpot) in planned.items():
                sim = _simulated(p, done[layout])
                rows.append(f"| {demand.stem} | {layout} | {n} | {ttft / 1000:.2f} s / {tpot:.1f} ms | "
                            f"{sim['attainment']:.3f} | {sim['ttft_s']:.2f} s / {sim['tpot_s'] * 1000:.1f} ms |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(_doc_table())
