"""Import of GuideLLM and vLLM bench results: the numbers the samples contain, converted to goodput's definitions.

The samples (tests/fixtures/loadtest/, see SOURCES.md) follow each tool's own output code; the expected figures
below are worked out by hand from the sample's per-request values."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.compare import compare
from goodput.loadtest.imports import error_class, import_run
from goodput.loadtest.results import read_run, records_from_table
from goodput.loadtest.slo import parse_slo
from tests.conftest import REPO

FIX = REPO / "tests" / "fixtures" / "loadtest"


def test_vllm_detailed_gives_its_own_figures_and_our_goodput(tmp_path):
    src = json.loads((FIX / "vllm_bench_serve_detailed.json").read_text())
    summary = import_run(FIX / "vllm_bench_serve_detailed.json", tmp_path / "run", parse_slo("ttft_p50=0.5s,e2e_p50=1s"))
    [s] = summary["steps"]
    assert summary["tool"] == "vllm-bench" and summary["comparability"]["model"] == "sim-llama-8b"
    assert summary["source"]["token_counts"] == "tool"  # one count, as vLLM recorded it
    assert summary["comparability"]["arrival"] == {"pattern": "poisson", "rate": 2.0, "cv": 1.0}
    # vLLM's TTFT, TPOT, ITL and E2E are ours already: its aggregates come back unchanged
    assert s["achieved_rate"] == pytest.approx(src["request_throughput"])
    assert s["output_tokens_per_s"] == pytest.approx(src["output_throughput"])
    assert s["ttft_s"]["p50"] == pytest.approx(src["median_ttft_ms"] / 1000)
    assert s["tpot_s"]["p99"] == pytest.approx(src["p99_tpot_ms"] / 1000)
    assert s["tpot_s"]["mean"] == pytest.approx(src["mean_tpot_ms"] / 1000)
    assert s["itl_s"]["mean"] == pytest.approx(src["mean_itl_ms"] / 1000)
    assert s["e2e_s"]["p99"] == pytest.approx(src["p99_e2el_ms"] / 1000)
    assert (s["requests"], s["completed"], s["errors"]) == (6, 5, {"http_5xx": 1})  # "Service Unavailable" is a 503
    # four of six meet both terms (request 3 has TTFT 0.9 s; request 4 failed): 4 req / 4 s
    assert s["slo_attainment"] == pytest.approx(4 / 6)
    assert s["goodput_requests_per_s"] == pytest.approx(1.0)
    assert s["goodput_tokens_per_s"] == pytest.approx((4 + 5 + 3 + 4) / 4)
    assert s["slo_met"] and summary["knee"]["offered_rate"] == 2.0
    table, back = read_run(tmp_path / "run")
    assert back == summary and table.num_rows == 6
    assert table.column("meets_slo").to_pylist() == [True, True, True, False, False, True]
    assert records_from_table(table)[1].itl_s == [0.03, 0.03, 0.03, 0.03]


def test_vllm_without_details_keeps_its_aggregates_and_says_goodput_is_unknown(tmp_path):
    src = json.loads((FIX / "vllm_bench_serve_summary.json").read_text())
    summary = import_run(FIX / "vllm_bench_serve_summary.json", tmp_path / "run", parse_slo("ttft_p50=0.5s"))
    [s] = summary["steps"]
    assert s["ttft_s"]["p50"] == pytest.approx(src["median_ttft_ms"] / 1000)
    assert s["e2e_s"]["p99"] == pytest.approx(src["p99_e2el_ms"] / 1000)
    assert s["achieved_rate"] == 1.25 and s["requests"] == 6
    assert s["goodput_requests_per_s"] is None and s["slo_met"] is None and summary["knee"] is None
    assert any("--save-detailed" in r for r in summary["invalid_reasons"])
    table, _ = read_run(tmp_path / "run")
    assert table is None


def test_guidellm_converted_to_our_definitions(tmp_path):
    summary = import_run(FIX / "guidellm_report_constant.json", tmp_path / "run", parse_slo("ttft_p50=0.5s"))
    a, b = summary["steps"]
    assert summary["tool"] == "guidellm" and summary["comparability"]["model"] == "sim-llama-8b"
    # GuideLLM's evenly spaced "constant" arrivals are, in our words, gamma arrivals with cv 0
    assert summary["comparability"]["arrival"] == {"pattern": "gamma", "cv": 0.0, "rates": [1.0, 4.0],
                                                   "tool_pattern": "constant"}
    assert (a["offered_rate"], a["measured_s"]) == (1.0, pytest.approx(4.0))
    assert (b["offered_rate"], b["measured_s"]) == (4.0, pytest.approx(2.0))
    # the cancelled ("incomplete") request is left out, the errored one counts
    assert (a["requests"], a["completed"], a["errors"]) == (4, 3, {"http_5xx": 1})
    assert a["ttft_s"]["p50"] == pytest.approx(0.2)
    # our TPOT = (E2E - TTFT) / (n - 1): request a is (0.45 - 0.1) / 3, where GuideLLM's TPOT says 100 ms
    assert a["tpot_s"]["mean"] == pytest.approx((0.35 / 3 + 0.1 + 0.1) / 3, rel=1e-6)
    assert a["itl_s"]["mean"] == pytest.approx(0.1, rel=1e-6) and a["itl_s"]["count"] == 3 + 4 + 2
    assert a["slo_attainment"] == pytest.approx(0.5)
    assert a["goodput_requests_per_s"] == pytest.approx(0.5, rel=1e-6)
    assert a["goodput_tokens_per_s"] == pytest.approx((4 + 5) / 4, rel=1e-6)
    assert a["slo_met"]
    # step b kept 2 of its 4 successful requests: rates are scaled up to the totals and say so
    assert b["sampled"] == {"kept": 2, "total": 4}
    assert b["achieved_rate"] == pytest.approx(2.0, rel=1e-6) and b["goodput_tokens_per_s"] == pytest.approx(6.0, rel=1e-6)
    assert summary["knee"]["step"] == 1 and summary["knee"]["offered_rate"] == 4.0
    table, _ = read_run(tmp_path / "run")
    assert table.num_rows == 6


@pytest.mark.parametrize(("text", "cls"), [
    ("", ""), (None, ""), ("Too Many Requests", "http_429"), ("Bad Gateway", "http_5xx"), ("Not Found", "http_4xx"),
    ("HTTPStatusError: Client error '429 Too Many Requests' for url", "http_429"),
    ("Traceback ...\nasyncio.exceptions.TimeoutError", "timeout"),
    ("aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected", "disconnect"),
    ("aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host", "connect"),
    ("Never received a valid chunk to calculate TTFT.", "other"),
])
def test_error_classes(text, cls):
    assert error_class(text) == cls


@pytest.mark.parametrize(("content", "key"), [
    ("{not json", "json"),
    ('{"hello": 1}', "format"),
    ('{"metadata": {"request_start_ns": 1}, "metrics": {"time_to_first_token": {"value": 5, "unit": "furlong"}}}',
     "time_to_first_token"),
    ('{"request_throughput": {"unit": "requests/sec", "avg": 1.0}}', "benchmark_duration"),
    ('{"metadata": {}, "benchmarks": []}', "benchmarks"),
    ('{"duration": 1, "completed": 1, "request_throughput": 1, "start_times": [1], "ttfts": [0.1, 0.2], "itls": [[]], '
     '"latencies": [1], "input_lens": [1], "output_lens": [1], "errors": [""]}', "ttfts"),
])
def test_bad_files_are_one_line(tmp_path, content, key):
    f = tmp_path / "in.json"
    f.write_text(content)
    with pytest.raises(ConfigError) as err:
        import_run(f, tmp_path / "out", parse_slo("ttft_p50=1s"))
    assert str(err.value).startswith(str(f)) and key in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("fixture", "path", "value", "key"), [
    ("vllm_bench_serve_detailed.json", ("burstiness",), -1, "burstiness"),  # cv = 1/sqrt(burstiness): complex
    ("vllm_bench_serve_detailed.json", ("ttfts", 0), "nan", "request 0"),
    ("guidellm_report_poisson.json", ("benchmarks", 0, "config", "strategy", "rate"), "nan", "content"),
    ("guidellm_report_poisson.json", ("benchmarks", 0, "scheduler_metrics", "measure_end_time"), "Infinity", "content"),
])
def test_numbers_that_are_not_finite_are_one_line(tmp_path, fixture, path, value, key):
    """Found by mutating the fixtures: a NaN or a negative burstiness went through to the summary and the writer
    raised a traceback; each is now the file, the key and the value."""
    assert key in _refused_once_changed(tmp_path, fixture, path, value)


def _refused_once_changed(tmp_path, fixture: str, path: tuple, value) -> str:
    """The one-line error importing ``fixture`` with the value at ``path`` set to ``value`` gives; nothing written."""
    data = json.loads((FIX / fixture).read_text())
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    f = tmp_path / "in.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as err:
        import_run(f, tmp_path / "out", parse_slo("ttft_p50=1s"))
    assert str(err.value).startswith(str(f)) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
    return str(err.value)


_FIRST_TOKEN = ("benchmarks", 0, "requests", "successful", 0, "info", "timings", "first_output_token_iteration")
_MEASURED = ("benchmarks", 0, "scheduler_metrics")


@pytest.mark.parametrize(("fixture", "path", "value", "says"), [
    ("vllm_bench_serve_detailed.json", ("ttfts", 0), -0.1, "request 0: time to first token -0.1 s is negative"),
    ("vllm_bench_serve_detailed.json", ("latencies", 0), -0.16, "request 0: end-to-end latency -0.16 s is negative"),
    ("vllm_bench_serve_detailed.json", ("itls", 0, 0), -0.02, "request 0: itl"),
    ("vllm_bench_serve_detailed.json", ("output_lens", 0), -4, "request 0: output_tokens: -4 is outside"),
    ("vllm_bench_serve_detailed.json", ("start_times", 0), 1e30, "request 0: scheduled_s: 1e+30 s is not a time"),
    ("vllm_bench_serve_detailed.json", ("duration",), 0, "step 0: lasts 0 s"),
    ("vllm_bench_serve_detailed.json", ("duration",), -4.0, "step 0: lasts -4 s"),
    ("vllm_bench_serve_detailed.json", ("duration",), 10**400, "(401 digits) is too large"),  # OverflowError before
    ("vllm_bench_serve_summary.json", ("completed",), 10**400, "step 0: requests: 100000000000… (401 digits)"),
    ("guidellm_report_constant.json", _FIRST_TOKEN, 1699999999.0, "request 0: time to first token"),
    ("guidellm_report_constant.json", (*_MEASURED, "measure_end_time"), 1e30, "end_s: 1e+30 s is not a time"),
    ("guidellm_report_constant.json", (*_MEASURED, "measure_end_time"), 1700000000.0, "step 0: lasts 0 s"),
])
def test_values_no_tool_could_measure_are_one_line_and_write_nothing(tmp_path, fixture, path, value, says):
    """Each imported with exit 0 and a report before: negative latencies, steps of no length, clocks of 1e30 s,
    counts of 401 digits. Now one line naming the request or step, and no run directory."""
    assert says in _refused_once_changed(tmp_path, fixture, path, value)


def test_more_steps_than_any_run_has_are_refused_before_anything_is_written(tmp_path):
    report = json.loads((FIX / "guidellm_report_constant.json").read_text())
    f = tmp_path / "in.json"
    f.write_text(json.dumps({**report, "benchmarks": report["benchmarks"][:1] * 2000}))
    with pytest.raises(ConfigError, match="2000 steps .* more than the limit of 256"):
        import_run(f, tmp_path / "out", parse_slo("ttft_p50=1s"))
    assert not (tmp_path / "out").exists()


def test_a_malformed_guidellm_benchmark_is_one_line(tmp_path):
    report = json.loads((FIX / "guidellm_report_constant.json").read_text())
    report["benchmarks"][1]["config"]["strategy"]["rate"] = "fast"
    report["benchmarks"][0]["requests"]["successful"][0] = 7
    for n, broken in enumerate((report, {**report, "benchmarks": [{"scheduler_metrics": {}}]})):
        f = tmp_path / f"bad{n}.json"
        f.write_text(json.dumps(broken))
        with pytest.raises(ConfigError) as err:
            import_run(f, tmp_path / "out", parse_slo("ttft_p50=1s"))
        assert str(err.value).startswith(str(f)) and "\n" not in str(err.value)


@pytest.mark.parametrize(("strategy", "ours", "comparable"), [
    ({"type_": "constant", "rate": 4.0}, {"pattern": "gamma", "rate": 4.0, "cv": 0.01}, True),
    ({"type_": "poisson", "rate": 4.0}, {"pattern": "poisson", "rate": 4.0}, True),
    ({"type_": "concurrent", "streams": 8}, {"pattern": "concurrency", "concurrency": 8}, True),
    ({"type_": "synchronous"}, {"pattern": "concurrency", "concurrency": 1}, True),
    ({"type_": "constant", "rate": 4.0}, {"pattern": "poisson", "rate": 4.0}, False),
    ({"type_": "concurrent", "streams": 8}, {"pattern": "concurrency", "concurrency": 4}, False),
])
def test_guidellm_strategies_compare_with_the_goodput_run_of_the_same_arrivals(tmp_path, strategy, ours, comparable):
    """GuideLLM's strategy names are converted into our arrival patterns, so a GuideLLM run and a goodput run of
    the same arrivals are comparable in ``compare``, and different arrivals still are not."""
    report = json.loads((FIX / "guidellm_report_constant.json").read_text())
    report["benchmarks"] = report["benchmarks"][1:]
    report["benchmarks"][0]["config"]["strategy"] = strategy
    (tmp_path / "g.json").write_text(json.dumps(report))
    theirs = import_run(tmp_path / "g.json", tmp_path / "g", parse_slo("ttft_p50=1s"))
    mine = json.loads(json.dumps(theirs))  # the same requests, as a goodput run of ``ours`` would describe them
    mine["tool"] = "goodput"
    mine["comparability"]["arrival"] = ours
    mine["comparability"]["concurrency_steps"] = [ours["concurrency"]] if "concurrency" in ours else []
    result = compare(theirs, mine)
    assert result["comparable"] is comparable, result["differences"]
    assert result["comparable"] or {d["field"] for d in result["differences"]} <= {"arrival", "concurrency_steps"}


def test_a_guidellm_targeted_start_off_the_report_clock_is_taken_as_unknown(tmp_path):
    """GuideLLM 0.8.1 writes a relative ``targeted_start`` (0.32, -0.98) for some Poisson requests; read as a unix
    time it made the request 56 years late. Such a one is unknown: scheduled when it was sent, lag 0."""
    report = json.loads((FIX / "guidellm_report_constant.json").read_text())
    good, bad = report["benchmarks"][0]["requests"]["successful"][:2]
    bad["info"]["timings"]["targeted_start"] = 0.32
    lag_good = good["info"]["timings"]["request_start"] - good["info"]["timings"]["targeted_start"]
    (tmp_path / "g.json").write_text(json.dumps(report))
    import_run(tmp_path / "g.json", tmp_path / "run", parse_slo("ttft_p50=1s"))
    table, _ = read_run(tmp_path / "run")
    records = {r.index: r for r in records_from_table(table)}
    assert records[1].sent_s - records[1].scheduled_s == 0.0
    assert records[0].sent_s - records[0].scheduled_s == pytest.approx(lag_good)


def test_a_guidellm_request_scheduled_before_the_window_counts_as_guidellm_counts_it(tmp_path):
    """GuideLLM 0.8.1 schedules its first request a few ms before ``measure_start_time`` and counts it in every figure
    it reports; cut by the window, the slowest request here went missing and TTFT p95 read low (a real run: 54.4 ms
    where GuideLLM reported 64.9). Checked against the figures GuideLLM stored in the report itself: its count and
    mean, and its percentiles (the inverted CDF, ``guidellm/schemas/statistics.py``) over the records we kept."""
    report = json.loads((FIX / "guidellm_report_constant.json").read_text())
    bench = report["benchmarks"][0]
    slow = max(bench["requests"]["successful"], key=lambda r: r["time_to_first_token_ms"])
    t = slow["info"]["timings"]
    shift = bench["scheduler_metrics"]["measure_start_time"] - 0.0056 - t["targeted_start"]
    slow["info"]["timings"] = {k: v + shift if isinstance(v, float) else v for k, v in t.items()}
    (tmp_path / "g.json").write_text(json.dumps(report))
    summary = import_run(tmp_path / "g.json", tmp_path / "run", parse_slo("ttft_p95=0.5s"))
    theirs = bench["metrics"]["time_to_first_token_ms"]["successful"]
    ours = summary["steps"][0]["ttft_s"]
    assert ours["count"] == theirs["count"]
    assert ours["mean"] * 1000 == pytest.approx(theirs["mean"])
    assert summary["steps"][0]["slo_met"] is False  # the 600 ms request is GuideLLM's p95, over 0.5 s
    table, _ = read_run(tmp_path / "run")
    ttfts = [r.ttft_s * 1000 for r in records_from_table(table) if r.step == 0 and r.ttft_s is not None]
    for p in (50, 90, 95, 99):
        assert np.percentile(ttfts, p, method="inverted_cdf") == pytest.approx(theirs["percentiles"][f"p{p}"])


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        import_run(tmp_path / "nope.json", tmp_path / "out", parse_slo("ttft_p50=1s"))


def test_a_copy_anywhere_imports_the_same(tmp_path):
    shutil.copy(FIX / "vllm_bench_serve_detailed.json", tmp_path / "x.json")
    a = import_run(tmp_path / "x.json", tmp_path / "a", parse_slo("ttft_p50=1s"))
    b = import_run(FIX / "vllm_bench_serve_detailed.json", tmp_path / "b", parse_slo("ttft_p50=1s"))
    assert a["steps"] == b["steps"]


def _sweep(tmp_path):
    """A vLLM ``--append-result`` file of two results (rates 2 and 4, the second 1 s slower)."""
    one = json.loads((FIX / "vllm_bench_serve_detailed.json").read_text())
    two = {**one, "request_rate": 4.0, "ttfts": [t + 1.0 for t in one["ttfts"]],
           "latencies": [x + 1.0 for x in one["latencies"]], "start_times": [t + 500.0 for t in one["start_times"]]}
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps(one) + "\n" + json.dumps(two) + "\n")
    return f


def test_vllm_append_result_lines_are_steps_end_to_end(tmp_path):
    """``--append-result`` writes one result per line: a rate sweep, imported as steps laid one after the other."""
    f = _sweep(tmp_path)
    one = json.loads((FIX / "vllm_bench_serve_detailed.json").read_text())
    summary = import_run(f, tmp_path / "run", parse_slo("ttft_p50=0.5s,e2e_p50=1s"))
    a, b = summary["steps"]
    assert (a["start_s"], a["end_s"], b["start_s"], b["end_s"]) == (0.0, 4.0, 4.0, 8.0)
    assert a["slo_met"] and not b["slo_met"] and b["goodput_requests_per_s"] == 0.0
    assert summary["comparability"]["arrival"] == {"pattern": "poisson", "cv": 1.0, "rates": [2.0, 4.0]}
    assert summary["knee"]["offered_rate"] == 2.0
    table, _ = read_run(tmp_path / "run")
    records = records_from_table(table)
    assert [r.index for r in records] == list(range(12)) and [r.step for r in records] == [0] * 6 + [1] * 6
    assert records[6].sent_s == pytest.approx(4.0)
    f.write_text(json.dumps(one) + "\n" + '{"hello": 1}\n')
    with pytest.raises(ConfigError, match="format"):
        import_run(f, tmp_path / "bad", parse_slo("ttft_p50=1s"))
    f.write_text(json.dumps(one) + "\n{broken\n")
    with pytest.raises(ConfigError, match="line 2"):
        import_run(f, tmp_path / "bad", parse_slo("ttft_p50=1s"))


def test_aiperf_records_give_its_own_figures_and_our_goodput(tmp_path):
    """profile_export.jsonl: AIPerf's per-request TTFT, chunk gaps and lengths become records; its own aggregates
    (the fixture's profile_export_aiperf.json, worked out from the same requests) come back, and goodput agrees."""
    agg = json.loads((FIX / "aiperf_profile_export_aiperf.json").read_text())
    summary = import_run(FIX / "aiperf_profile_export.jsonl", tmp_path / "run", parse_slo("ttft_p90=1s,tpot_p95=35ms"))
    [s] = summary["steps"]
    assert summary["tool"] == "aiperf" and (tmp_path / "run" / "requests.parquet").is_file()
    assert (s["requests"], s["completed"]) == (6, 4)
    assert s["errors"] == {"aborted": 1, "http_5xx": 1}  # --request-cancellation-rate's 499, a 503
    assert s["measured_s"] == pytest.approx(agg["benchmark_duration"]["avg"])  # first start to last response
    assert s["achieved_rate"] == pytest.approx(agg["request_throughput"]["avg"])
    assert s["ttft_s"]["p50"] == pytest.approx(agg["time_to_first_token"]["p50"] / 1000)
    assert s["e2e_s"]["p90"] == pytest.approx(agg["request_latency"]["p90"] / 1000, abs=1e-6)
    assert s["tpot_s"]["p50"] == pytest.approx(agg["inter_token_latency"]["p50"] / 1000)  # AIPerf's ITL is our TPOT
    assert s["itl_s"]["count"] == 16 and s["itl_s"]["p50"] == pytest.approx(0.0235)  # its chunk gaps are our ITL
    # every completed request meets TPOT (<= 35 ms); TTFT p90 over six with two failed (+inf) misses 1 s
    assert s["slo_attainment"] == pytest.approx(4 / 6) and not s["slo_met"]
    assert s["goodput_requests_per_s"] == pytest.approx(4 / 2.8)


@pytest.mark.parametrize("name", ["aiperf_profile_export_aiperf.json", "aiperf_profile_export_aiperf.csv"])
def test_aiperf_aggregates_keep_its_figures_and_say_goodput_is_unknown(tmp_path, name):
    agg = json.loads((FIX / "aiperf_profile_export_aiperf.json").read_text())
    summary = import_run(FIX / name, tmp_path / "run", parse_slo("ttft_p95=1s"))
    [s] = summary["steps"]
    assert summary["tool"] == "aiperf" and not (tmp_path / "run" / "requests.parquet").exists()
    assert (s["requests"], s["completed"], s["error_rate"]) == (6, 4, pytest.approx(2 / 6))
    assert s["achieved_rate"] == pytest.approx(agg["request_throughput"]["avg"], abs=0.01)  # the CSV has 2 decimals
    assert s["ttft_s"]["p95"] == pytest.approx(agg["time_to_first_token"]["p95"] / 1000, abs=1e-5)
    assert s["tpot_s"]["p50"] == pytest.approx(agg["inter_token_latency"]["p50"] / 1000, abs=1e-5)
    assert s["e2e_s"]["mean"] == pytest.approx(agg["request_latency"]["avg"] / 1000, abs=1e-5)
    assert s["goodput_requests_per_s"] is None and s["tool_goodput_requests_per_s"] == pytest.approx(3 / 2.8, abs=0.01)
    assert "no per-request data" in summary["invalid_reasons"][0]
    assert (tmp_path / "run" / "report.html").is_file()


# ---- the real tools' files (made by benchmarks/third_party_clients.py against the live fleet; SOURCES.md) ----

IP = FIX / "inference_perf_0.7.0"


def _theirs(block: dict) -> dict:
    """An inference-perf latency summary in our keys (its ``median`` is our p50)."""
    return {"p50": block["median"], "p90": block["p90"], "p99": block["p99"], "mean": block["mean"]}


def test_inference_perf_report_directory_gives_its_own_figures_and_our_goodput(tmp_path):
    """A real inference-perf 0.7.0 report (Poisson 4 req/s x 30 s against the live fleet): its TTFT and E2E
    percentiles come back as ours, TPOT within 2% (it ends TPOT at the last token, we at the response's end), the
    server's 128 output tokens (not its tokenizer's 209), its goodput and attainment kept beside ours."""
    theirs = json.loads((IP / "summary_lifecycle_metrics.json").read_text())["successes"]
    summary = import_run(IP, tmp_path / "run", parse_slo("ttft_p95=0.5s,tpot_p95=50ms"))
    [s] = summary["steps"]
    assert summary["tool"] == "inference-perf" and summary["source"]["token_counts"] == "server"
    assert summary["comparability"]["model"] == "Llama-3.1-8B"
    assert summary["comparability"]["arrival"] == {"pattern": "poisson", "rate": 4.0, "tool_pattern": "poisson"}
    assert summary["comparability"]["output_tokens"]["p50"] == theirs["output_tokens"]["median"] == 128
    assert summary["comparability"]["input_tokens"]["mean"] == pytest.approx(theirs["prompt_tokens"]["mean"])
    for ours, name in (("ttft_s", "time_to_first_token"), ("e2e_s", "request_latency")):
        for p, value in _theirs(theirs["latency"][name]).items():
            assert s[ours][p] == pytest.approx(value, rel=1e-9), (ours, p)
    tpot = theirs["latency"]["time_per_output_token"]
    assert s["tpot_s"]["p50"] == pytest.approx(tpot["median"], rel=0.02)
    assert s["tpot_s"]["p50"] > tpot["median"]  # the response's tail after its last token is in ours
    assert s["achieved_rate"] == pytest.approx(theirs["throughput"]["requests_per_sec"], rel=1e-9)
    assert s["offered_rate"] == 4.0 and s["requests"] == theirs["count"] == 120
    assert s["tool_goodput"] == theirs["goodput_metrics"]  # its goodput_percentage, ttft/tpot attainment
    assert s["tool_goodput_requests_per_s"] == theirs["goodput_metrics"]["request_goodput"]
    assert s["slo_met"] and summary["valid"] and summary["invalid_reasons"] == []
    assert summary["knee"]["step"] == 0 and summary["knee"]["offered_rate"] == 4.0


@pytest.mark.parametrize("name", ["summary_lifecycle_metrics.json", "stage_0_lifecycle_metrics.json",
                                  "per_request_lifecycle_metrics.json"])
def test_any_inference_perf_file_imports_its_whole_report(tmp_path, name):
    whole = import_run(IP, tmp_path / "dir", parse_slo("ttft_p95=0.5s"))
    one = import_run(IP / name, tmp_path / "one", parse_slo("ttft_p95=0.5s"))
    assert one["steps"] == whole["steps"] and one["source"]["file"] == name


def test_inference_perf_without_per_request_data_keeps_its_aggregates_unjudged(tmp_path):
    """The summary and stage files alone: inference-perf's own figures (median as p50, seconds), the step left
    unjudged, and the run never valid while it lists why."""
    copy = tmp_path / "report"
    copy.mkdir()
    for name in ("summary_lifecycle_metrics.json", "stage_0_lifecycle_metrics.json", "config.yaml"):
        shutil.copy(IP / name, copy / name)
    stage = json.loads((IP / "stage_0_lifecycle_metrics.json").read_text())
    summary = import_run(copy, tmp_path / "run", parse_slo("ttft_p95=0.5s"))
    [s] = summary["steps"]
    assert s["ttft_s"]["p50"] == stage["successes"]["latency"]["time_to_first_token"]["median"]
    assert s["tpot_s"]["p90"] == stage["successes"]["latency"]["time_per_output_token"]["p90"]
    assert s["achieved_rate"] == stage["successes"]["throughput"]["requests_per_sec"]
    assert s["offered_rate"] == stage["load_summary"]["requested_rate"] == 4.0
    assert s["slo_met"] is None and summary["knee"] is None and s["tool_goodput"]["goodput_percentage"] == 100.0
    assert not summary["valid"] and "per_request" in summary["invalid_reasons"][0]
    assert summary["source"]["token_counts"] == "server"  # its config asked for use_server_output_tokens


AP = FIX / "aiperf_0.13.0"


def test_aiperf_0_13_records_give_its_own_figures_with_its_configuration(tmp_path):
    """A real AIPerf 0.13.0 run (Poisson 4 req/s x 30 s; on this 2-core box its own workers lagged, TTFT p90 2.9 s):
    its per-request records reproduce its medians, and the offered rate, pattern and model are read from
    0.13's input_config in the profile_export_aiperf.json beside the JSONL (the step is judged, not skipped)."""
    agg = json.loads((AP / "profile_export_aiperf.json").read_text())
    summary = import_run(AP / "profile_export.jsonl", tmp_path / "run", parse_slo("ttft_p95=0.5s,tpot_p95=50ms"))
    [s] = summary["steps"]
    comp = summary["comparability"]
    assert comp["model"] == "Llama-3.1-8B" and comp["tool_version"] == "0.13.0"
    assert comp["arrival"] == {"pattern": "poisson", "rate": 4.0, "tool_pattern": "poisson"}
    assert s["offered_rate"] == 4.0 and s["requests"] == agg["request_count"]["avg"] == 111
    for ours, name in (("ttft_s", "time_to_first_token"), ("e2e_s", "request_latency"), ("tpot_s", "inter_token_latency")):
        for p in ("p50", "p90", "p99"):
            assert s[ours][p] == pytest.approx(agg[name][p] / 1000, rel=0.02), (ours, p)
    assert s["measured_s"] == pytest.approx(agg["benchmark_duration"]["avg"], rel=0.02)
    assert summary["source"]["token_counts"] == "server" and comp["output_tokens"]["p50"] == 128
    assert comp["input_tokens"]["mean"] == pytest.approx(agg["usage_prompt_tokens"]["avg"])
    assert s["slo_met"] is False and summary["knee"] is None and summary["valid"]
    assert 0 < s["slo_attainment"] < 1
    table, _ = read_run(tmp_path / "run")
    lag = [r.sent_s - r.scheduled_s for r in records_from_table(table)]
    assert max(lag) > 0.1  # its credit_issued_ns: AIPerf's own lag is schedule lag, not the target's latency


def test_the_servers_output_tokens_are_preferred_over_aiperfs_tokenizer(tmp_path):
    """Without --use-server-token-count AIPerf's output_sequence_length is its tokenizer's count (209 BPE tokens for
    the fleet's 128): the record's usage_completion_tokens wins, so TPOT is the fleet's pace."""
    lines = [json.loads(x) for x in (AP / "profile_export.jsonl").read_text().splitlines()]
    for x in lines:
        x["metrics"]["output_sequence_length"]["value"] = 209
    (tmp_path / "profile_export.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    server = import_run(AP / "profile_export.jsonl", tmp_path / "a", parse_slo("ttft_p95=1s"))
    client = import_run(tmp_path / "profile_export.jsonl", tmp_path / "b", parse_slo("ttft_p95=1s"))
    assert client["comparability"]["output_tokens"]["p50"] == 128 and client["source"]["token_counts"] == "server"
    assert client["steps"][0]["tpot_s"] == server["steps"][0]["tpot_s"]
    for x in lines:
        del x["metrics"]["usage_completion_tokens"]
    (tmp_path / "profile_export.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    theirs = import_run(tmp_path / "profile_export.jsonl", tmp_path / "c", parse_slo("ttft_p95=1s"))
    assert theirs["source"]["token_counts"] == "client" and theirs["comparability"]["output_tokens"]["p50"] == 209


@pytest.mark.parametrize("name", ["profile_export_aiperf.json", "profile_export_aiperf.csv"])
def test_aiperf_0_13_aggregates_read_its_configuration_and_say_they_are_not_judged(tmp_path, name):
    summary = import_run(AP / name, tmp_path / "run", parse_slo("ttft_p95=0.5s"))
    [s] = summary["steps"]
    assert summary["comparability"]["arrival"]["rate"] == 4.0 and summary["comparability"]["model"] == "Llama-3.1-8B"
    assert s["slo_met"] is None and summary["knee"] is None
    assert not summary["valid"] and summary["invalid_reasons"]  # never valid: true beside a reason


def test_the_earlier_aiperf_input_config_layout_is_read_too(tmp_path):
    summary = import_run(FIX / "aiperf_profile_export_aiperf.json", tmp_path / "run", parse_slo("ttft_p95=1s"))
    assert summary["comparability"]["arrival"] == {"pattern": "poisson", "rate": 2.0, "tool_pattern": "poisson"}
    assert summary["comparability"]["model"] == "Llama-3.1-8B" and summary["steps"][0]["offered_rate"] == 2.0


# ---- llm-d benchmark report v0.2 ----

# the unit rules schema_v0_2.py's validators add to its JSON schema (UNITS_TIME, UNITS_GEN_LATENCY, ...)
_LLMD_UNITS = {"time_to_first_token": {"ms", "s"}, "request_latency": {"ms", "s"},
               "time_per_output_token": {"ms/token", "s/token"}, "inter_token_latency": {"ms/token", "s/token"},
               "normalized_time_per_output_token": {"ms/token", "s/token"}, "input_token_rate": {"tokens/s"},
               "output_token_rate": {"tokens/s"}, "total_token_rate": {"tokens/s"}, "request_rate": {"queries/s"},
               "input_length": {"count"}, "output_length": {"count"}}


def _llmd_errors(report: dict) -> list[str]:
    """What llm-d-benchmark's BenchmarkReportV02 would refuse: its JSON schema, then its unit validators."""
    from jsonschema import Draft202012Validator

    schema = json.loads((FIX / "llmd_br_v0_2_json_schema.json").read_text())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft202012Validator(schema).iter_errors(report)]
    agg = report["results"]["request_performance"]["aggregate"]
    for section in ("requests", "latency", "throughput"):
        for name, stats in (agg.get(section) or {}).items():
            if isinstance(stats, dict) and stats.get("units") not in _LLMD_UNITS.get(name, {stats.get("units")}):
                errors.append(f"{section}.{name}: units {stats.get('units')!r}")
    return errors


def test_llmd_export_is_valid_v0_2_and_imports_back_as_the_run(tmp_path, capsys):
    from goodput.cli import main

    import_run(_sweep(tmp_path), tmp_path / "run", parse_slo("ttft_p50=0.5s,e2e_p50=1s"))
    _, run = read_run(tmp_path / "run")
    assert main(["loadtest", "export", "--format", "llmd-v0.2", str(tmp_path / "run"), "--out", str(tmp_path / "llmd")]) == 0
    paths = sorted((tmp_path / "llmd").iterdir())
    assert capsys.readouterr().out.split() == [str(p) for p in paths] and len(paths) == 2
    for p in paths:
        assert _llmd_errors(json.loads(p.read_text())) == [], p
    back = import_run(tmp_path / "llmd", tmp_path / "back", parse_slo("ttft_p99=9s"))
    assert back["tool"] == "llmd-v0.2" and back["comparability"] == run["comparability"]
    assert back["slo"] == run["slo"]  # judged against the SLO it was measured with, which the report carries
    for a, b in zip(run["steps"], back["steps"], strict=True):
        for key in ("offered_rate", "achieved_rate", "slo_attainment", "slo_met", "goodput_requests_per_s",
                    "output_tokens_per_s", "requests", "completed", "errors", "label", "measured_s"):
            assert b[key] == a[key], key
        for lat in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
            assert {p: b[lat][p] for p in ("p50", "p90", "p95", "p99", "mean")} == \
                   {p: a[lat][p] for p in ("p50", "p90", "p95", "p99", "mean")}
    assert back["knee"]["offered_rate"] == run["knee"]["offered_rate"] == 2.0
    # one report alone is one step; a report broken against the schema's units is one line
    [one] = import_run(paths[1], tmp_path / "one", parse_slo("ttft_p99=9s"))["steps"]
    assert one["offered_rate"] == 4.0
    bad = json.loads(paths[0].read_text())
    bad["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "minutes"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="time_to_first_token.*units 'minutes'"):
        import_run(tmp_path / "bad.json", tmp_path / "bad", parse_slo("ttft_p99=9s"))


def test_llmd_example_report_imports_its_aggregates_unjudged(tmp_path):
    """llm-d-benchmark's own v0.2 example (an inference-perf stage at 10 QPS on Qwen3-0.6B)."""
    summary = import_run(FIX / "llmd_br_v0_2_example.yaml", tmp_path / "run", parse_slo("ttft_p95=1s"))
    [s] = summary["steps"]
    assert summary["comparability"]["model"] == "Qwen/Qwen3-0.6B" and s["offered_rate"] == 10
    assert s["ttft_s"]["p50"] == pytest.approx(0.03622930939309299) and s["ttft_s"]["p99"] == pytest.approx(0.05029489721637218)
    assert s["tpot_s"]["mean"] == pytest.approx(0.0368578234128654) and s["requests"] == 500
    assert s["slo_met"] is None and summary["knee"] is None and not summary["valid"]


def _cut(text: str, how: str) -> str:
    """The example report cut short: at half or a third of its bytes or lines, or just before its latencies."""
    lines = text.splitlines(keepends=True)
    if how == "before latency":
        return "".join(lines[:next(i for i, line in enumerate(lines) if line == "      latency:\n")])
    kind, part = how.split()
    return text[:len(text) // int(part)] if kind == "bytes" else "".join(lines[:len(lines) // int(part)])


@pytest.mark.parametrize(("how", "missing"), [
    ("bytes 2", "results.observability.components[1].aggregate.cpu_utilization: no max"),
    ("bytes 3", "results.request_performance.aggregate.latency.time_to_first_token: no max"),
    ("lines 3", "results.request_performance.aggregate.latency.time_to_first_token: no max"),
    ("lines 4", "results.request_performance.aggregate.requests.output_length: no max"),
    ("before latency", "results.request_performance.aggregate.latency: missing"),
    ("lines 8", "results.request_performance.aggregate: missing"),
])
def test_a_truncated_llmd_report_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, how, missing):
    from goodput.cli import main

    cut = tmp_path / "report.yaml"
    cut.write_text(_cut((FIX / "llmd_br_v0_2_example.yaml").read_text(), how))
    out = tmp_path / "run"
    assert main(["loadtest", "import", str(cut), "--slo", "ttft_p95=1s", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{cut}: {missing}" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize(("argv", "says"), [
    (["loadtest", "export", "{tmp}/nothing"], "summary.json: not found"),
    (["loadtest", "import", "{tmp}", "--slo", "ttft_p95=1s", "--out", "{tmp}/o"], "holds no result goodput reads"),
    (["loadtest", "import", "{tmp}/x.json", "--slo", "ttft_p95=1s", "--out", "{tmp}/o"], "not found"),
])
def test_export_and_import_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, says):
    from goodput.cli import main

    (tmp_path / "empty.txt").write_text("")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_inference_perf_file_copied_out_under_another_name_is_read_alone(tmp_path):
    shutil.copy(IP / "per_request_lifecycle_metrics.json", tmp_path / "requests-monday.json")
    shutil.copy(IP / "stage_0_lifecycle_metrics.json", tmp_path / "stage-monday.json")
    [s] = import_run(tmp_path / "requests-monday.json", tmp_path / "a", parse_slo("ttft_p95=0.5s"))["steps"]
    assert s["requests"] == 120 and s["slo_met"] and s["offered_rate"] is None  # no config.yaml beside it
    alone = import_run(tmp_path / "stage-monday.json", tmp_path / "b", parse_slo("ttft_p95=0.5s"))
    assert alone["steps"][0]["requests"] == 120 and alone["steps"][0]["slo_met"] is None and alone["knee"] is None


def test_inference_perf_stages_become_steps_in_start_order(tmp_path):
    """Two stages (the real report's stage file split in two, 60 requests each, at rates 2 and 4): the per-request
    file's requests go to the stages in start order, as many as each stage's load_summary.count."""
    report = tmp_path / "report"
    report.mkdir()
    shutil.copy(IP / "per_request_lifecycle_metrics.json", report / "per_request_lifecycle_metrics.json")
    stage = json.loads((IP / "stage_0_lifecycle_metrics.json").read_text())
    for i, rate in enumerate((2.0, 4.0)):
        stage["load_summary"].update(count=60, requested_rate=rate)
        (report / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps(stage))
    summary = import_run(report, tmp_path / "run", parse_slo("ttft_p95=0.5s"))
    a, b = summary["steps"]
    assert (a["requests"], b["requests"], a["offered_rate"], b["offered_rate"]) == (60, 60, 2.0, 4.0)
    starts = sorted(e["start_time"] for e in json.loads((IP / "per_request_lifecycle_metrics.json").read_text()))
    assert b["start_s"] == pytest.approx(starts[60] - starts[0]) and a["end_s"] > a["start_s"] == 0.0
    assert summary["knee"]["offered_rate"] == 4.0


def test_a_one_record_aiperf_directory_imports_as_the_same_file_named_directly(tmp_path):
    """A profile_export.jsonl of one line parses as that line's document: found in a directory it is one record, as
    it is when the file is named."""
    first = (AP / "profile_export.jsonl").read_text().splitlines()[0]
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "profile_export.jsonl").write_text(first + "\n")
    named = import_run(tmp_path / "export" / "profile_export.jsonl", tmp_path / "a", parse_slo("ttft_p95=1s"))
    found = import_run(tmp_path / "export", tmp_path / "b", parse_slo("ttft_p95=1s"))
    assert named["steps"][0]["requests"] == found["steps"][0]["requests"] == 1


@pytest.mark.parametrize("where", [("successes", "throughput", "input_tokens_per_sec"),
                                   ("successes", "goodput_metrics", "request_goodput")])
def test_a_nan_in_an_inference_perf_stage_is_a_malformed_report_not_a_traceback(tmp_path, where):
    """Python's json writes NaN and reads it back: a stage figure goodput would write on (a throughput, the tool's
    own goodput) that is NaN is one line naming the file, exit 2, no run directory — never a ValueError from the
    run's JSON writer."""
    copy = tmp_path / "report"
    copy.mkdir()
    for name in ("summary_lifecycle_metrics.json", "stage_0_lifecycle_metrics.json", "config.yaml"):
        shutil.copy(IP / name, copy / name)
    stage = json.loads((copy / "stage_0_lifecycle_metrics.json").read_text())
    node = stage
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = float("nan")
    (copy / "stage_0_lifecycle_metrics.json").write_text(json.dumps(stage))
    r = subprocess.run([sys.executable, "-m", "goodput", "loadtest", "import", str(copy), "--out",
                        str(tmp_path / "run"), "--slo", "ttft_p95=0.5s"], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 2 and "nan" in r.stderr.lower() and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "run").exists()
