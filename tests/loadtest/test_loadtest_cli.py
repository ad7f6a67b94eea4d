"""`goodput loadtest run` as a user runs it: against the live fleet, bad input as one line (exit 2), Ctrl-C partial."""

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.cli import main
from goodput.loadtest.cli import EXIT_INVALID
from tests.conftest import REPO, free_port_block
from tests.loadtest.exits import run_exit
from tests.loadtest.stub_target import StubTarget


def test_run_help_lists_its_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["loadtest", "run", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--target", "--workload", "--pattern", "--slo", "--duration", "--out", "--format", "--fault",
                   "--max-in-flight", "--settle", "--steps"):
        assert option in out






def _cli(*argv, **kw):
    return subprocess.Popen([sys.executable, "-m", "goodput", "loadtest", "run", *argv], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"}, **kw)


def _successes(url):
    text = httpx.get(url + "/metrics").text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "vllm:request_success_total")


def test_a_run_against_the_live_fleet_writes_its_summary(fleet, workload, tmp_path, capsys):
    before = _successes(fleet)
    rc = main(["loadtest", "run", "--target", fleet, "--workload", workload, "--pattern", "poisson", "--rate", "4",
               "--duration", "2", "--slo", "ttft_p95=5s,tpot_p95=1s", "--out", str(tmp_path / "run"), "--format", "json",
               "--comparability", "hardware=H100-80GB-SXM", "--comparability", "tensor_parallel=2"])
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # stdout stays one JSON document; the report's path goes to stderr
    report = tmp_path / "run" / "report.html"
    assert f"report: {report}" in captured.err and "plotly" in report.read_text()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert printed == summary
    assert rc == run_exit(summary)
    (step,) = summary["steps"]
    comp = summary["comparability"]
    assert summary["complete"] and comp["model"] == "Llama-3.1-8B" and comp["framework"] == "goodput"
    assert (comp["hardware"], comp["tensor_parallel"], comp["arrival"]) == ("H100-80GB-SXM", 2, {"pattern": "poisson",
                                                                          "rate": 4.0, "settle": 0.0, "time_scale": 1.0})
    assert step["requests"] > 0 and step["errors"] == {} and step["completed"] == step["requests"]
    assert step["slo_attainment"] == 1.0 and step["slo_met"]  # a loose SLO at a low rate: every request meets it
    assert _successes(fleet) - before == step["requests"]  # the fleet served exactly what we counted
    import pyarrow.parquet as pq
    table = pq.read_table(tmp_path / "run" / "requests.parquet")
    assert table.num_rows == step["requests"] and set(table.column("tier").to_pylist()) <= {"P0", "P1"}


@pytest.mark.parametrize("args, says", [
    (["--slo", "ttft_p95=1parsec"], "goodput: error: --slo: ttft_p95=1parsec:"),
    (["--fault", "abort_rate=2"], "goodput: error: --fault: abort_rate=2: abort_rate must be a fraction"),
    (["--workload", "no-such-file.yaml"], "goodput: error: no-such-file.yaml: cannot read"),
    (["--comparability", "gpu=H100"], "goodput: error: --comparability: gpu=H100: expected KEY=VALUE with KEY one of"),
    (["--pattern", "gamma"], "goodput: error: --pattern: gamma: needs --cv"),
    (["--target", "UNREACHABLE"], "unreachable: ConnectError"),
    (["--target", "HTML"], "/v1/models: not OpenAI-compatible: answered HTTP 200 text/html"),
    (["--prometheus", "UNREACHABLE"], "goodput: error: --prometheus: http://127.0.0.1:"),
    (["--prometheus", "HTML"], "/html: not a Prometheus query API: not valid JSON"),
    (["--prometheus", "HTML", "--gpu-metrics", "HTML"], "the server's view comes from one source"),
    (["--prometheus", "HTML", "--prometheus-selector", "deployment=chat"], "expected {label="),
    (["--workload", "prompt_tokens=256"], "goodput: error: --workload: prompt_tokens=256: needs output_tokens=N"),
    (["--workload", "prompt_tokens=256,output_tokens=-1"], "output_tokens=-1: output_tokens must be a whole number"),
    (["--workload", "prompt_tokens=256,output_tokens=8,outptu_tokens_stdev=2"], "outptu_tokens_stdev=2: expected KEY"),
    (["--slo", "NONE", "--pattern", "sweep"], "goodput: error: --pattern: sweep: needs --slo TERMS"),
    (["--slo", "NONE", "--fault", "abort_rate=0.1"], "goodput: error: --fault: abort_rate=0.1: needs --slo TERMS"),
])
def test_bad_input_is_one_line_and_exit_2(fleet, workload, tmp_path, args, says):
    stub = StubTarget(free_port_block(1))
    try:
        subs = {"UNREACHABLE": f"http://127.0.0.1:{free_port_block(1)}", "HTML": stub.url + "/html"}
        defaults = {"--target": fleet, "--workload": workload, "--slo": "ttft_p95=1s", "--pattern": "poisson",
                    "--rate": "1", "--duration": "1", "--out": str(tmp_path / "run")}
        given = dict(zip(args[::2], [subs.get(a, a) for a in args[1::2]], strict=True))
        argv = [x for k, v in {**defaults, **given}.items() if v != "NONE" for x in (k, v)]
        out, err = _cli(*argv).communicate(timeout=60)
    finally:
        stub.close()
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert says in err
    assert not (tmp_path / "run").exists()  # nothing was run


def test_ctrl_c_writes_the_partial_run_marked_incomplete(fleet, workload, tmp_path):
    before = _successes(fleet)
    proc = _cli("--target", fleet, "--workload", workload, "--pattern", "concurrency", "--concurrency", "2",
                "--duration", "120", "--slo", "ttft_p95=5s", "--out", str(tmp_path / "run"))
    deadline = time.monotonic() + 60
    while _successes(fleet) - before < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "INCOMPLETE" in err and "Traceback" not in err
    assert "concurrency=2" in out and "schedule lag" in out  # the table
    report = tmp_path / "run" / "report.html"
    assert f"report: {report}" in out and "INCOMPLETE (interrupted" in report.read_text()  # a partial run's report
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["complete"] is False and summary["steps"][0]["completed"] >= 4
    assert summary["steps"][0]["errors"] == {}  # the requests cut by Ctrl-C are not held against the target


@pytest.mark.parametrize("pattern", [["--pattern", "poisson", "--rate", "4", "--duration", "2"],
                                     ["--pattern", "sweep", "--rate", "2", "--step-s", "1"]])
def test_a_run_that_prints_invalid_exits_with_its_own_code(fleet, workload, tmp_path, monkeypatch, capsys, pattern):
    """Before: "INVALID: client schedule lag p99 47.8 ms > 25 ms" and exit 0, which a script reads as a measurement.
    Any lag is too much here, so the run is invalid whatever the machine's load."""
    from goodput.loadtest import runner

    monkeypatch.setattr(runner, "MAX_LAG_P99_S", -1.0)
    rc = main(["loadtest", "run", "--target", fleet, "--workload", workload, *pattern, "--slo", "ttft_p95=5s",
               "--out", str(tmp_path / "run")])
    assert "INVALID: client schedule lag p99" in capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert not summary["valid"] and summary["complete"]
    assert any(r.startswith("client schedule lag p99") for r in summary["invalid_reasons"])
    assert rc == EXIT_INVALID == 3


def test_sweep_stops_at_the_first_step_that_misses_the_slo(fleet, workload, tmp_path, capsys):
    rc = main(["loadtest", "run", "--target", fleet, "--workload", workload, "--pattern", "sweep", "--rate", "2",
               "--step-s", "1", "--slo", "ttft_p95=1ms", "--out", str(tmp_path / "run"), "--format", "json"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rc == run_exit(summary)
    (step,) = summary["steps"]  # 2 req/s already misses a 1 ms TTFT: no doubling, no bisection
    assert (step["offered_rate"], step["slo_met"], summary["knee"]) == (2.0, False, None)
    assert step["served_rate"] is not None and step["served_rate"] >= 0  # what the target completed in the window
    assert summary["comparability"]["arrival"]["pattern"] == "sweep" and summary["complete"]


def test_the_quick_start_needs_only_the_target(fleet, tmp_path, monkeypatch, capsys):
    """`loadtest run --target URL`: the target's model, Poisson at the default rate, the inline default workload,
    no SLO (no goodput, said so), a run directory under ./loadtest-runs/; --duration only keeps the test short."""
    monkeypatch.chdir(tmp_path)
    rc = main(["loadtest", "run", "--target", fleet, "--duration", "3", "--format", "json"])
    captured = capsys.readouterr()
    (run,) = (tmp_path / "loadtest-runs").iterdir()
    assert f"writing the run to {run.relative_to(tmp_path)}" in captured.err
    summary = json.loads(captured.out)
    assert summary == json.loads((run / "summary.json").read_text())
    assert rc == run_exit(summary)
    comp = summary["comparability"]
    assert comp["model"] == "Llama-3.1-8B" and comp["workload"] == "prompt_tokens=256,output_tokens=128"
    assert comp["arrival"]["pattern"] == "poisson" and comp["arrival"]["rate"] == 2.0 and comp["slo"] == ""
    assert comp["input_tokens"]["p50"] == 256 and comp["output_tokens"]["p50"] == 128  # the fleet's own counts
    (step,) = summary["steps"]
    assert step["completed"] == step["requests"] > 0 and step["ttft_s"]["p95"] is not None
    assert (step["slo_attainment"], step["goodput_requests_per_s"], step["slo_met"], summary["knee"]) == (
        None, None, None, None)  # no SLO: nothing judged, never 100% of an empty SLO
    assert summary["slo"] is None and "no SLO given" in summary["notes"][0]
    assert "no SLO given" in (run / "report.html").read_text()
    rc = main(["loadtest", "run", "--target", fleet, "--duration", "1", "--workload",
               "prompt_tokens=64,output_tokens=8,api=completions"])
    out = capsys.readouterr().out
    assert "no SLO given: no attainment, goodput or knee" in out and "SLO :" not in out
    runs = list((tmp_path / "loadtest-runs").iterdir())
    assert len(runs) == 2  # a second start in the same second: its own dir
    (second,) = set(runs) - {run}
    assert rc == run_exit(json.loads((second / "summary.json").read_text()))
