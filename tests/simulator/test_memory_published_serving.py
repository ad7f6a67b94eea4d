"""The simulator against published ``benchmark_serving.py`` / ``vllm bench serve`` results
(tests/fixtures/published/vllm_serving.yaml): N random-dataset prompts sent at once or as a Poisson stream, on
A100 (TP 1 and 2) and H100. Compared: output throughput and median TPOT (goal 10%; a row missed by more carries
the bound it meets) and median TTFT (reported; bounded by a factor, since it is queueing behind the burst's
prefills). The fixed step costs were fitted on the nightly latency rows; the KV read's share of HBM bandwidth
(``EngineConfig.attention_memory_efficiency``) on the two A100 TP 1 rows marked ``role: calibration``, the TP 2
all-reduce bandwidth without GPU peer access (``tp_allreduce_gbps``) on the two TP 2 ones; every other row is
held-out.
Regenerate the table in docs/capacity.md with ``python -m tests.simulator.test_memory_published_serving``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache

import pytest
import yaml

from goodput.simulator.run import simulate
from tests.conftest import FIXTURES, make_fleet
from tests.simulator.test_memory_published import docs_table

SERVING = FIXTURES / "published" / "vllm_serving.yaml"
GOAL = 0.10
TTFT_FACTOR = 3.0  # default TTFT bound: within a factor of 3 either way, unless the row carries its own
BEGIN, END = "<!-- serving-fidelity:begin -->", "<!-- serving-fidelity:end -->"
# the bursts the batch-dependent KV term is about (A100 TP 1, utilisation 0.5: the pool never binds)
BURSTS = ("dl-a100-qwen7b-tp1-u50-n50", "dl-a100-qwen7b-tp1-u50-n100", "dl-a100-qwen7b-tp1-u50-n200")
# the TP 2 bursts without GPU peer access that fitted engine.tp_allreduce_gbps
TP2_CALIBRATION = ("dl-a100-qwen7b-tp2-u25-n50", "dl-a100-qwen7b-tp2-u25-n100")


@dataclass(frozen=True)
class Run:
    row: dict
    output_throughput: float  # generated tokens / (last completion - first arrival), as vLLM's benchmark divides
    ttft_median_ms: float
    tpot_median_ms: float  # per request (last token - first token) / (generated - 1), then the median

    def error(self, key: str) -> float:
        """Ours against theirs, relative; for TTFT the ratio minus one."""
        return getattr(self, key) / self.row["published"][key] - 1


def simulate_row(row: dict, engine: dict) -> Run:
    n_in, n_out, n = row["input_tokens"], row["output_tokens"], row["prompts"]
    eng = {"max_model_len": row["max_model_len"], "engine_version": row["engine_version"], **engine,
           **row.get("engine", {})}
    if "sampler" in row:
        eng["sampler"] = row["sampler"]
    if "gpu_memory_utilization" in row:
        eng["gpu_memory_utilization"] = row["gpu_memory_utilization"]
    dep = {"name": "bench", "model": row["model"], "gpu": row["gpu"], "tp": row["tp"], "replicas": 1, "engine": eng}
    rate = row.get("request_rate")
    arrival = ({"process": "poisson", "rate": float(rate)} if rate else
               {"process": "batch", "batches": [{"at": 0.0, "count": n}]})
    wl = {"name": "bench", "scene": "batch", "tier": "P0", "deployment": "bench", "tenants": {"bench": 1.0},
          "input_tokens": {"min": n_in, "p50": n_in, "max": n_in},
          "output_tokens": {"min": n_out, "p50": n_out, "max": n_out}, "max_tokens": n_out, "arrival": arrival}
    duration = n / rate if rate else 1.0
    done = [r for r in simulate(make_fleet(deployments=[dep], workloads=[wl]), duration, seed=1).fleet.done
            if r.generated > 1]
    assert done and all(r.generated == n_out for r in done), f"{row['id']}: requests cut short or rejected"
    span = max(r.completed for r in done) - min(r.arrival for r in done)
    return Run(row, sum(r.generated for r in done) / span,
               statistics.median(r.first_token - r.arrival for r in done) * 1000,
               statistics.median((r.last_token - r.first_token) / (r.generated - 1) for r in done) * 1000)


def fixture() -> dict:
    return yaml.safe_load(SERVING.read_text())


@cache
def runs() -> tuple[Run, ...]:
    doc = fixture()
    return tuple(simulate_row(r, doc["engine"]) for r in doc["benchmarks"])


def _setup(r: dict) -> str:
    rate = f"rate {r['request_rate']}/s" if r.get("request_rate") else "at once"
    util = f" u={r['gpu_memory_utilization']}" if "gpu_memory_utilization" in r else ""
    gbps = r.get("engine", {}).get("tp_allreduce_gbps")
    util += f" no P2P (all-reduce {gbps} GB/s)" if gbps else ""
    return (f"{r['model']} TP{r['tp']} {r['gpu']}{util}, vLLM {r['engine_version']}, {r['prompts']} x "
            f"{r['input_tokens']}/{r['output_tokens']} {rate}")


def render_table() -> str:
    lines = ["| set-up | role | output tok/s (theirs / ours) | error | TPOT ms median (theirs / ours) | error | "
             "TTFT ms median (theirs / ours) | ours / theirs |", "|---|---|---|---|---|---|---|---|"]
    for run in runs():
        p = run.row["published"]
        lines.append(
            f"| {_setup(run.row)} | {run.row.get('role', 'held-out')} | "
            f"{p['output_throughput']:,.0f} / {run.output_throughput:,.0f} | "
            f"{run.error('output_throughput'):+.1%} | {p['tpot_median_ms']:.2f} / {run.tpot_median_ms:.2f} | "
            f"{run.error('tpot_median_ms'):+.1%} | {p['ttft_median_ms']:,.0f} / {run.ttft_median_ms:,.0f} | "
            f"{run.ttft_median_ms / p['ttft_median_ms']:.2f}x |")
    return "\n".join(lines)


def test_the_fixture_names_its_sources_and_spans_gpus_and_tp():
    doc = fixture()
    rows = doc["benchmarks"]
    assert all(r["source"] in doc["sources"] for r in rows)
    assert {r["gpu"] for r in rows} >= {"A100-80GB", "H100-80GB-SXM"} and {r["tp"] for r in rows} >= {1, 2}
    assert any(r.get("request_rate") for r in rows) and any(r["prompts"] >= 200 for r in rows)


@pytest.mark.parametrize("index", range(len(fixture()["benchmarks"])), ids=[r["id"] for r in fixture()["benchmarks"]])
def test_throughput_tpot_and_ttft_within_the_documented_bounds(index):
    run = runs()[index]
    r = run.row
    bound = r.get("tolerance", GOAL)
    for key in ("output_throughput", "tpot_median_ms"):
        assert abs(run.error(key)) <= bound, (
            f"{r['id']}: {key} vLLM {r['published'][key]:.2f}, the simulator {getattr(run, key):.2f} "
            f"({run.error(key):+.1%}, bound {bound:.0%})")
    factor = r.get("ttft_factor", TTFT_FACTOR)
    ratio = run.ttft_median_ms / r["published"]["ttft_median_ms"]
    assert 1 / factor <= ratio <= factor, (
        f"{r['id']}: median TTFT vLLM {r['published']['ttft_median_ms']:.0f} ms, the simulator "
        f"{run.ttft_median_ms:.0f} ms ({ratio:.2f}x, bound {factor}x)")


def test_the_fitted_attention_efficiency_brings_the_a100_bursts_within_the_goal():
    """The record the fit rests on: with the KV cache read at the weights' share of the bandwidth (the roofline
    before the fit) the A100 TP 1 bursts of 50-200 prompts, two of them held-out, miss the goal on TPOT; with the
    fitted share every one meets it, on throughput too."""
    doc = fixture()
    bursts = [r for r in doc["benchmarks"] if r["id"] in BURSTS]
    before = [simulate_row(r, {**doc["engine"], "attention_memory_efficiency": 0.8}) for r in bursts]
    assert all(abs(run.error("tpot_median_ms")) > GOAL for run in before), [run.error("tpot_median_ms") for run in before]
    for run in (runs()[doc["benchmarks"].index(r)] for r in bursts):
        assert max(abs(run.error("output_throughput")), abs(run.error("tpot_median_ms"))) <= GOAL, run.row["id"]


def test_the_all_reduce_term_brings_the_tp2_bursts_without_p2p_within_the_goal():
    """The record ``tp_allreduce_gbps`` rests on: without it (all-reduces within the per-layer term, as NVLink's
    are) the TP 2 bursts whose GPUs lacked peer access run 1.5x too fast or more; with the fitted bandwidth the two
    calibration rows meet the goal."""
    doc = fixture()
    rows = [r for r in doc["benchmarks"] if r["id"] in TP2_CALIBRATION]
    assert all(r.get("role") == "calibration" and r["engine"]["tp_allreduce_gbps"] for r in rows)
    for r in rows:
        before = simulate_row({**r, "engine": {**r["engine"], "tp_allreduce_gbps": 0.0}}, doc["engine"])
        assert before.error("output_throughput") > 0.5 and before.error("tpot_median_ms") < -0.3, r["id"]
        run = runs()[doc["benchmarks"].index(r)]
        assert max(abs(run.error("output_throughput")), abs(run.error("tpot_median_ms"))) <= GOAL, r["id"]


def test_docs_carry_the_current_table():
    assert docs_table(BEGIN, END) == render_table(), (
        "docs/capacity.md is stale: python -m tests.simulator.test_memory_published_serving")


if __name__ == "__main__":
    print(render_table())
