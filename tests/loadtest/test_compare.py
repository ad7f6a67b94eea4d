"""compare: which comparability fields differ (and whether that forbids the comparison), and what changed."""

import copy
import json

import pytest

from goodput.loadtest.compare import compare, render_text
from goodput.loadtest.imports import import_run
from goodput.loadtest.results import new_summary
from goodput.loadtest.slo import parse_slo
from tests.conftest import REPO
from tests.loadtest.exits import run_exit

FIX = REPO / "tests" / "fixtures" / "loadtest"


def _summary(goodput=(1.0, 2.0), ttft_p95=(0.2, 0.4), knee_rate=2.0):
    s = new_summary()
    c = s["comparability"]
    c.update(model="llama-8b", hardware="H100", arrival={"pattern": "poisson", "rate": None, "rates": [1.0, 2.0]},
             input_tokens={"mean": 500.0, "p50": 480.0, "p90": 800.0, "p99": 1000.0}, slo="ttft_p95=500ms")
    s["steps"] = [
        {"index": i, "label": f"rate={r:g}", "offered_rate": r, "concurrency": None, "achieved_rate": r,
         "goodput_requests_per_s": g, "goodput_tokens_per_s": 100 * g, "slo_attainment": g / r, "error_rate": 0.0,
         "ttft_s": {"p50": t / 2, "p90": t, "p95": t, "p99": t}, "tpot_s": {}, "itl_s": {}, "e2e_s": {}}
        for i, (r, g, t) in enumerate(zip((1.0, 2.0), goodput, ttft_p95, strict=True))
    ]
    s["knee"] = {"step": 1, "offered_rate": knee_rate, "goodput_requests_per_s": goodput[1]}
    return s


def test_same_run_is_comparable_with_no_change():
    a = _summary()
    r = compare(a, copy.deepcopy(a))
    assert r["comparable"] and r["differences"] == [] and r["unknown"] == []
    assert [row["load"] for row in r["steps"]] == [{"rate": 1.0}, {"rate": 2.0}]
    assert all(row["goodput_requests_per_s"]["change"] == 0 for row in r["steps"])


def test_changes_in_goodput_latency_and_knee():
    r = compare(_summary(), _summary(goodput=(1.0, 1.5), ttft_p95=(0.2, 0.6), knee_rate=1.0))
    row = r["steps"][1]
    assert row["goodput_requests_per_s"]["change"] == pytest.approx(-0.5)
    assert row["goodput_requests_per_s"]["relative"] == pytest.approx(-0.25)
    assert row["ttft_s"]["p95"]["relative"] == pytest.approx(0.5)
    assert r["knee"]["offered_rate"]["change"] == -1.0
    text = render_text(r)
    assert "comparable: yes" in text and "goodput_requests_per_s" in text and "(-25.0%)" in text and "600.0ms" in text


@pytest.mark.parametrize(("field", "value"), [
    ("model", "llama-70b"),
    ("arrival", {"pattern": "gamma", "rates": [1.0, 2.0]}),
    ("arrival", {"pattern": "poisson", "rates": [1.0, 3.0]}),
    ("slo", "ttft_p95=800ms"),
    ("input_tokens", {"mean": 600.0, "p50": 480.0, "p90": 800.0, "p99": 1000.0}),  # 20% longer on average
])
def test_a_different_workload_is_not_comparable(field, value):
    b = _summary()
    b["comparability"][field] = value
    r = compare(_summary(), b)
    assert not r["comparable"]
    assert [(d["field"], d["blocking"]) for d in r["differences"]] == [(field, True)]
    assert "comparable: NO" in render_text(r) and field in render_text(r)


def test_a_different_system_is_what_is_compared():
    b = _summary()
    b["comparability"]["hardware"] = "H200"
    b["comparability"]["input_tokens"]["mean"] = 520.0  # within the 10% length tolerance
    r = compare(_summary(), b)
    assert r["comparable"] and [(d["field"], d["blocking"]) for d in r["differences"]] == [("hardware", False)]


def test_unknown_fields_and_unpaired_steps():
    b = _summary()
    b["comparability"]["hardware"] = ""
    b["steps"] = b["steps"][:1]
    r = compare(_summary(), b)
    assert r["unknown"] == ["hardware"] and r["only_in_a"] == ["rate=2"] and r["only_in_b"] == []
    assert "steps only in run A: rate=2" in render_text(r)


def test_imported_runs_of_different_patterns_are_flagged(tmp_path):
    slo = parse_slo("ttft_p50=0.5s")
    g = import_run(FIX / "guidellm_report_constant.json", tmp_path / "g", slo)
    v = import_run(FIX / "vllm_bench_serve_detailed.json", tmp_path / "v", slo)
    r = compare(g, v)
    assert not r["comparable"] and "arrival" in [d["field"] for d in r["differences"]]
    assert r["tools"] == ["guidellm", "vllm-bench"]
    same = compare(v, import_run(FIX / "vllm_bench_serve_detailed.json", tmp_path / "v2", slo))
    assert same["comparable"] and same["differences"] == []


def test_two_tools_runs_of_the_same_requests_agree_after_import(tmp_path):
    """The GuideLLM sample records the very requests of the vLLM sample. Their own TPOTs disagree (GuideLLM's
    includes the first token); converted to goodput's definitions every figure agrees."""
    slo = parse_slo("ttft_p50=0.5s,e2e_p50=1s")
    v = import_run(FIX / "vllm_bench_serve_detailed.json", tmp_path / "v", slo)
    g = import_run(FIX / "guidellm_report_poisson.json", tmp_path / "g", slo)
    r = compare(v, g)
    assert r["comparable"] and r["differences"] == [], r["differences"]
    [row] = r["steps"]
    for key in ("achieved_rate", "goodput_requests_per_s", "goodput_tokens_per_s", "slo_attainment", "error_rate"):
        assert row[key]["change"] == pytest.approx(0, abs=1e-6), key
    for lat in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for p in ("p50", "p90", "p95", "p99"):
            assert row[lat][p]["a"] is not None and row[lat][p]["change"] == pytest.approx(0, abs=1e-5), (lat, p)
    theirs = json.loads((FIX / "guidellm_report_poisson.json").read_text())["benchmarks"][0]["requests"]["successful"]
    vllm = json.loads((FIX / "vllm_bench_serve_detailed.json").read_text())
    guidellm_tpot_ms = sum(x["time_per_output_token_ms"] for x in theirs) / len(theirs)
    assert guidellm_tpot_ms > 1.5 * vllm["mean_tpot_ms"]  # unconverted, the two tools would disagree


# prompts of the lengths the fleet counted for the two real clients' 256-token prompts (inference-perf's mean 171,
# AIPerf's 186: the fleet counts 4 characters a token), 128 output tokens: the same workload as both imports
SAME_WORKLOAD = """\
api: completions
input_tokens: {min: 150, p50: 180, p95: 198, max: 208}
output_tokens: {min: 128, p50: 128, max: 128}
"""


def test_a_goodput_run_and_the_real_tools_imports_are_comparable(fleet, tmp_path, capsys):
    """A short goodput run (Poisson 4 req/s, as the tools ran) against the live fleet, then `compare` with the real
    inference-perf and AIPerf imports: comparable (same model, arrival, SLO, lengths within 10%), paired at rate 4."""
    from goodput.cli import main

    slo = "ttft_p95=500ms,tpot_p95=50ms"
    (tmp_path / "w.yaml").write_text(SAME_WORKLOAD)
    assert main(["loadtest", "run", "--target", fleet, "--workload", str(tmp_path / "w.yaml"), "--pattern", "poisson",
                 "--rate", "4", "--duration", "8", "--slo", slo, "--server-metrics", "none", "--seed", "3",
                 "--out", str(tmp_path / "ours")]) == run_exit(tmp_path / "ours")
    for name, source in (("ip", FIX / "inference_perf_0.7.0"), ("ap", FIX / "aiperf_0.13.0" / "profile_export.jsonl")):
        assert main(["loadtest", "import", str(source), "--slo", slo, "--out", str(tmp_path / name)]) == 0
        capsys.readouterr()
        assert main(["loadtest", "compare", str(tmp_path / "ours"), str(tmp_path / name), "--format", "json"]) == 0, name
        r = json.loads(capsys.readouterr().out)
        assert r["comparable"] and [d["field"] for d in r["differences"] if d["blocking"]] == [], r["differences"]
        assert [row["load"] for row in r["steps"]] == [{"rate": 4.0}] and r["only_in_a"] == r["only_in_b"] == []
