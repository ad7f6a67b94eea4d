"""goodput plan replicas: the headroom arithmetic by hand, prefill- and decode-bound demand, runs and their
comparability, prices, the plan the engine exporter reads, bad demand and price files."""

import json

import pytest
import yaml

from goodput.cli import main
from goodput.exporters.config import load_plan
from goodput.loadtest.results import new_summary, write_run
from goodput.plan.demand import Candidate, Headroom, Stream, TierSlo, load_demand
from goodput.plan.fleetspec import deployment_config
from goodput.plan.replicas import headroom_terms
from goodput.plan.sides import check_sides
from tests.plan.plan_fixtures import CHAT
from tests.plan.plan_fixtures import knee_run as _run


def test_each_headroom_term_by_hand():
    h = Headroom(failure_domains=3, tolerate=1, release_surge=0.25, cold_start_s=180, burst_factor=1.5,
                 burst_rise_s=360)
    t = headroom_terms(10_000, 3_000, 1.3, h)
    # base ceil(10000/3000)=4; at growth ceil(13000/3000)=5; losing 1 of 3 domains: ceil(5*3/2)=8 -> +3;
    # a quarter out in a release: ceil(1.25)=2; during a 180 s cold start demand rises 0.5 x 180/360: ceil(5*0.25)=2
    assert (t.base, t.growth, t.failure, t.release, t.cold_start, t.total) == (4, 1, 3, 2, 2, 12)
    per_replica = headroom_terms(10_000, 3_000, 1.0, Headroom(tolerate=2))
    assert (per_replica.base, per_replica.growth, per_replica.failure, per_replica.total) == (4, 0, 2, 6)
    floor = headroom_terms(10_000, 3_000, 1.0, Headroom(tolerate=0, cold_start_s=0), floor=7)
    assert (floor.base, floor.growth, floor.total) == (4, 3, 7)  # a side check lifts the need, shown as growth


def _stream(inp, out, rps):
    return Stream("chat", "P0", rps, {"p50": inp, "max": inp}, {"p50": out, "max": out}, inp, out)


def test_decode_bound_and_prefill_bound_demand_name_their_side():
    dep = deployment_config("t", Candidate("c", "Llama-3.1-8B", "H100-80GB-SXM", 1))
    slos = {"P0": TierSlo(2.0, 0.03, 0.95)}
    decode = check_sides(dep, [_stream(50, 2000, 20)], slos, 1.0)
    assert decode.binding == "decode" and decode.decode_replicas > decode.prefill_replicas
    prefill = check_sides(dep, [_stream(30_000, 10, 20)], slos, 1.0)
    assert prefill.binding == "prefill" and prefill.prefill_replicas > prefill.decode_replicas
    # decode's limit: 20 req/s x 2000 tokens x 30 ms = 1200 sequences in flight over the replica's concurrency
    assert decode.concurrent_sequences == pytest.approx(1200)
    assert decode.decode_replicas == -(-1200 // decode.max_concurrency)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_simulated_plan_is_read_by_the_engine_exporter(tmp_path, capsys):
    demand = _write(tmp_path, "demand.yaml", CHAT)
    out = tmp_path / "plan.yaml"
    assert main(["plan", "replicas", "--demand", demand, "--simulate", "--out", str(out), "--format", "json",
                 "--jobs", "1", "--report", str(tmp_path / "plan.html")]) == 0
    printed = json.loads(capsys.readouterr().out)
    exporter = load_plan(out)
    dep = printed["deployments"]["chat"]
    assert exporter.goodput == {"chat": dep["replica_goodput_tokens_per_second"]}
    assert exporter.desired == {"chat": dep["desired_replicas"]}
    assert dep["desired_replicas"] == sum(dep["headroom"].values())
    rows = {c["name"]: c for c in dep["compared"]}
    assert set(rows) == {"h100", "a100", "l40s"}
    for c in rows.values():  # every candidate side by side: GPUs, $/hour from the default prices, $/M tokens
        assert c["gpus"] == c["replicas"] * c["tp"] and c["usd_per_hour"] > 0 and c["usd_per_million_tokens"] > 0
        assert c["checks"]["binding"] in ("prefill", "decode")
    cheapest = min(rows.values(), key=lambda c: c["usd_per_hour"])
    assert dep["candidate"]["name"] == cheapest["name"]
    html = (tmp_path / "plan.html").read_text()
    assert "cold_start_buffer" in html and "<script src=" not in html


def test_runs_give_the_knee_goodput_and_mixed_runs_are_refused(tmp_path, capsys):
    demand = _write(tmp_path, "demand.yaml", CHAT)
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b", arrival_rate=3.0)
    out = tmp_path / "plan.yaml"
    rc = main(["plan", "replicas", "--demand", demand, "--runs", f"h100={a}", f"a100={b}", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "arrival" in err and "--allow-mixed" in err and err.count("\n") == 1
    rc = main(["plan", "replicas", "--demand", demand, "--runs", f"h100={a}", f"a100={b}", "--allow-mixed",
               "--out", str(out), "--format", "json"])
    assert rc == 0
    dep = json.loads(capsys.readouterr().out)["deployments"]["chat"]
    rows = {c["name"]: c for c in dep["compared"]}
    # knee step: 1.6 good req/s x (1600 + 400) / 2.0 tokens per request = 1600 tokens/s; concurrency 2.0 x 1.5 s
    assert rows["h100"]["replica_goodput_tokens_per_second"] == pytest.approx(1600)
    assert rows["h100"]["replica_concurrency_at_slo"] == pytest.approx(3.0)
    assert dep["unmeasured_candidates"] == ["l40s"]
    same = _run(tmp_path, "c")
    assert main(["plan", "replicas", "--demand", demand, "--runs", f"h100={a}", f"l40s={same}",
                 "--out", str(out)]) == 0


@pytest.mark.parametrize("edit, where", [
    (lambda d: d["deployments"]["chat"]["headroom"].update(burst_factr=2), "deployments.chat.headroom.burst_factr"),
    (lambda d: d["deployments"]["chat"]["streams"][0].update(peak_rps=-1), "deployments.chat.streams[0].peak_rps"),
    (lambda d: d["deployments"]["chat"]["streams"][1].update(tier="P9"), "deployments.chat.streams[1].tier"),
    (lambda d: d.update(growht=1.1), "growht"),
    (lambda d: d["deployments"]["chat"]["candidates"][0].update(gpu="H900"), "deployments.chat.candidates[0].gpu"),
])
def test_bad_demand_keys_are_one_line_naming_file_and_key(tmp_path, capsys, edit, where):
    data = yaml.safe_load(CHAT)
    edit(data)
    demand = _write(tmp_path, "demand.yaml", yaml.safe_dump(data))
    rc = main(["plan", "replicas", "--demand", demand, "--simulate", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("goodput: error: ") and demand in err and where in err
    assert err.count("\n") == 1 and "Traceback" not in err
    if "H900" in yaml.safe_dump(data):
        assert "H100-80GB-SXM" in err  # the known GPUs are listed


def test_a_price_file_overrides_the_defaults_and_bad_keys_are_named(tmp_path, capsys):
    demand = _write(tmp_path, "demand.yaml", CHAT)
    prices = _write(tmp_path, "prices.yaml", "as_of: '2026-11'\ngpus:\n  H100-80GB-SXM: {usd_per_gpu_hour: 1.0, "
                                             "source: our contract}\n")
    a = _run(tmp_path, "a")
    assert main(["plan", "replicas", "--demand", demand, "--runs", f"h100={a}", "--prices", prices,
                 "--out", str(tmp_path / "p.yaml"), "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)["deployments"]["chat"]["compared"][0]
    assert row["usd_per_hour"] == pytest.approx(row["gpus"] * 1.0) and "our contract" in row["price_source"]
    bad = _write(tmp_path, "bad.yaml", "as_of: '2026-11'\ngpus:\n  H100-80GB-SXM: {usd_per_hour: 1.0}\n")
    assert main(["plan", "replicas", "--demand", demand, "--runs", f"h100={a}", "--prices", bad,
                 "--out", str(tmp_path / "p.yaml")]) == 2
    assert f"{bad}: gpus.H100-80GB-SXM.usd_per_hour: unknown key" in capsys.readouterr().err


def test_demand_candidates_take_typed_names_and_a_model_config(tmp_path):
    """Names resolve to the catalog's (prices and runs are keyed by them); model_config is read relative to the
    demand file and reaches the simulated fleet."""
    from tests.conftest import REPO
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text((REPO / "tests/fixtures/model_configs/codellama-7b-hf.json").read_text())
    data = yaml.safe_load(CHAT)
    data["deployments"]["chat"]["candidates"] = [
        {"name": "typed", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100"},
        {"name": "own", "model": "my-coder", "model_config": "cfg/config.json", "gpu": "a100-80gb",
         "engine": {"max_model_len": 16384}}]
    d = load_demand(_write(tmp_path, "demand.yaml", yaml.safe_dump(data)))
    typed, own = d.deployments[0].candidates
    assert (typed.model, typed.gpu, typed.model_config) == ("Llama-3.1-8B", "H100-80GB-SXM", None)
    assert (own.model, own.gpu, own.model_config) == ("my-coder", "A100-80GB", str(tmp_path / "cfg" / "config.json"))
    dep = deployment_config(str(tmp_path / "demand.yaml"), own)
    assert dep.spec.vocab_size == 32016 and dep.budget.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2


def test_the_example_demand_file_parses():
    from tests.conftest import REPO
    d = load_demand(REPO / "examples" / "demand.yaml")
    assert [c.name for c in d.deployments[0].candidates]


@pytest.mark.parametrize("terms, says", [
    ([], "the run has no SLO"),
    ([{"metric": "ttft", "percentile": 95, "threshold_s": 0.5}], "no step that met its SLO"),
])
def test_a_run_without_a_knee_says_whether_it_had_an_slo(tmp_path, capsys, terms, says):
    s = new_summary()
    s["slo"]["terms"], s["knee"] = terms, None
    run = str(write_run(tmp_path / "run", None, s))
    rc = main(["plan", "replicas", "--demand", _write(tmp_path, "demand.yaml", CHAT), "--runs", f"h100={run}",
               "--out", str(tmp_path / "plan.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and err.count("\n") == 1


def test_pricing_picks_which_price_the_dollars_are_at_and_says_so(tmp_path, capsys):
    demand = _write(tmp_path, "demand.yaml", CHAT)
    prices = _write(tmp_path, "prices.yaml", "as_of: '2026-11'\ngpus:\n  H100-80GB-SXM: {usd_per_gpu_hour: 3.0, "
                                             "source: list, spot: {usd_per_gpu_hour: 1.25, source: our spot bids}}\n")
    a = _run(tmp_path, "a")
    args = ["plan", "replicas", "--demand", demand, "--runs", f"h100={a}", "--prices", prices,
            "--out", str(tmp_path / "p.yaml")]
    usd = {}
    for pricing in ("on_demand", "spot", "reserved"):
        assert main([*args, "--pricing", pricing, "--format", "json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert plan["pricing"] == pricing
        row = plan["deployments"]["chat"]["compared"][0]
        usd[pricing] = row["usd_per_hour"]
        if pricing == "spot":
            assert row["usd_per_hour"] == pytest.approx(row["gpus"] * 1.25) and "our spot bids" in row["price_source"]
    assert usd["on_demand"] == pytest.approx(usd["spot"] / 1.25 * 3.0)
    assert usd["reserved"] is None  # no reserved price for the H100 in this file: no cost, not a guessed one
    assert main([*args, "--pricing", "spot"]) == 0
    assert capsys.readouterr().out.startswith("dollars at spot GPU prices\n")
    with pytest.raises(SystemExit) as e:
        main([*args, "--pricing", "preemptible"])
    assert e.value.code == 2 and "invalid choice: 'preemptible'" in capsys.readouterr().err
