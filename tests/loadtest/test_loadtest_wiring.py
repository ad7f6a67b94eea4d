"""`goodput loadtest import|compare`, and what `run` wires in: the report, the server's view, faults, longtail."""

import json

import pytest

from goodput.cli import main
from goodput.simulator.live import LiveFleet
from tests.conftest import REPO, free_port_block, make_fleet
from tests.loadtest.conftest import WORKLOAD
from tests.loadtest.exits import run_exit

FIX = REPO / "tests" / "fixtures" / "loadtest"
SLO = "ttft_p50=0.5s,e2e_p50=1s"


def _import(tmp_path, name, capsys, *extra):
    out = tmp_path / name
    rc = main(["loadtest", "import", str(FIX / f"{name}.json"), "--slo", SLO, "--out", str(out), *extra])
    return rc, out, capsys.readouterr()


def test_import_writes_the_run_dir_and_prints_its_summary(tmp_path, capsys):
    rc, out, printed = _import(tmp_path, "vllm_bench_serve_detailed", capsys, "--format", "json")
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(printed.out) == summary
    assert summary["tool"] == "vllm-bench" and summary["comparability"]["slo"] == "ttft_p50=500ms,e2e_p50=1s"
    assert (out / "requests.parquet").is_file()
    assert "Per-step distributions" in (out / "report.html").read_text()  # per-request data: the distributions too
    rc, out, printed = _import(tmp_path, "guidellm_report_constant", capsys)
    assert rc == 0 and (out / "report.html").is_file()
    assert "constant rate=4" in printed.out and f"wrote {out}" in printed.out
    assert "client:" not in printed.out  # an imported run has no client figures of ours


def test_import_without_per_request_data_prints_dashes_not_a_traceback(tmp_path, capsys):
    rc, _, printed = _import(tmp_path, "vllm_bench_serve_summary", capsys)
    assert rc == 0 and "rate=2" in printed.out and printed.err == ""


@pytest.mark.parametrize("argv, says", [
    (["import", "NOFILE", "--slo", SLO, "--out", "OUT"], "NOFILE: FILE: not found"),
    (["import", str(FIX / "mooncake_small.jsonl"), "--slo", SLO, "--out", "OUT"], "format"),
    (["import", str(FIX / "vllm_bench_serve_detailed.json"), "--slo", "ttft=1s", "--out", "OUT"], "--slo: ttft=1s"),
    (["compare", "NOFILE", "NOFILE"], "summary.json: not found"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    argv = [str(tmp_path / a) if a in ("NOFILE", "OUT") else a for a in argv]
    assert main(["loadtest", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("goodput: error: ") and says in err, err


def test_compare_exit_0_when_comparable_and_1_when_not(tmp_path, capsys):
    for name in ("vllm_bench_serve_detailed", "guidellm_report_poisson", "guidellm_report_constant"):
        assert _import(tmp_path, name, capsys)[0] == 0
    v, gp, gc = (str(tmp_path / n) for n in ("vllm_bench_serve_detailed", "guidellm_report_poisson",
                                              "guidellm_report_constant"))
    assert main(["loadtest", "compare", v, gp]) == 0
    text = capsys.readouterr().out
    assert "comparable: yes" in text and "runs: vllm-bench vs guidellm" in text
    assert main(["loadtest", "compare", v, gc, "--format", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["comparable"] is False and "arrival" in [d["field"] for d in result["differences"]]


def test_import_and_compare_have_help(capsys):
    for cmd in ("import", "compare"):
        with pytest.raises(SystemExit) as e:
            main(["loadtest", cmd, "--help"])
        assert e.value.code == 0
    assert "1 when" in capsys.readouterr().out




def _run(target, workload, out, *extra):
    return main(["loadtest", "run", "--target", target, "--workload", workload, "--pattern", "poisson", "--rate", "4",
                 "--duration", "2.5", "--slo", "ttft_p95=5s", "--out", str(out), *extra])


def test_the_server_view_of_each_target_is_in_the_steps_and_the_table(fleet, workload, tmp_path, capsys):
    assert _run(fleet, workload, tmp_path / "run") == run_exit(tmp_path / "run")  # --server-metrics auto: the target's /metrics
    out = capsys.readouterr().out
    (step,) = json.loads((tmp_path / "run" / "summary.json").read_text())["steps"]
    view = step["server"]
    assert view["scrape_rounds"] >= 1 and view["failed_scrapes"] == 0, view
    assert view["running_mean"] is not None and view["kv_usage_mean"] is not None
    assert "srv queue p95" in out and "kv mean" in out
    # 4 req/s on an idle fleet waits milliseconds, inside vLLM's first queue bucket (0-0.3 s): said as a bound in
    # the JSON, the table and the report, never interpolated to a number like 285ms
    assert view["queue_wait_p95_s"] == {"bound": "below", "value": None, "lower": 0.0, "upper": 0.3}, view
    assert "<300ms" in out.splitlines()[2], out
    report = (tmp_path / "run" / "report.html").read_text()
    assert "The server's view per step" in report and "&lt;0.3 s" in report


def test_an_unscrapable_server_is_counted_never_fatal_and_none_scrapes_nothing(fleet, workload, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port_block(1)}/metrics"
    assert _run(fleet, workload, tmp_path / "dead", "--server-metrics", dead) == run_exit(tmp_path / "dead")
    (step,) = json.loads((tmp_path / "dead" / "summary.json").read_text())["steps"]
    assert step["server"]["failed_scrapes"] == step["server"]["scrape_rounds"] >= 1
    assert step["completed"] == step["requests"] > 0  # the load went on
    capsys.readouterr()
    assert _run(fleet, workload, tmp_path / "none", "--server-metrics", "none") == run_exit(tmp_path / "none")
    (step,) = json.loads((tmp_path / "none" / "summary.json").read_text())["steps"]
    assert step["server"] == {} and "srv queue p95" not in capsys.readouterr().out


@pytest.mark.parametrize("given, says", [
    (["--server-metrics", "auto", "--server-metrics", "http://127.0.0.1:1/metrics"], "auto and none stand alone"),
    (["--server-metrics", "localhost:9/metrics"], "--server-metrics: localhost:9/metrics: expected auto, none or"),
])
def test_bad_server_metrics_are_one_line_exit_2(fleet, workload, tmp_path, capsys, given, says):
    assert _run(fleet, workload, tmp_path / "run", *given) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "run").exists()


def test_a_replica_lost_mid_run_is_fired_on_the_run_clock_and_detected(workload, tmp_path, capsys):
    base = free_port_block(4)  # two replicas, room for one added, the admin port
    lf = LiveFleet(make_fleet(), base_port=base, traffic=0.0, admin_port=base + 3)
    lf.start()
    try:
        rc = main(["loadtest", "run", "--target", f"http://127.0.0.1:{base}", "--target", f"http://127.0.0.1:{base + 1}",
                   "--workload", workload, "--pattern", "poisson", "--rate", "10", "--duration", "6",
                   "--slo", "ttft_p95=5s", "--out", str(tmp_path / "run"), "--format", "json",
                   "--fault", "replica_lost@3s", "--fault", "abort_rate=0", "--fault", "replica_added@60s",
                   "--admin-url", f"http://127.0.0.1:{base + 3}", "--fault-window", "1"])
    finally:
        lf.close()
    summary = json.loads(capsys.readouterr().out)
    assert rc == run_exit(summary)
    lost, added = summary["faults"]
    assert (lost["kind"], lost["deployment"], lost["replica"], lost["error"]) == ("replica_lost", "chat", "chat-1", "")
    assert 3.0 <= lost["fired_s"] < 6.0 and lost["window_s"] == 1.0
    # every request sent to the lost replica afterwards fails to connect: the SLO window notices within the run
    assert lost["detect_s"] is not None and 0 <= lost["detect_s"] < 3.0, lost
    # recover_s may honestly be None: the client keeps sending half its requests to the dead replica
    assert added["fired_s"] is None and added["error"].startswith("not fired") and added["detect_s"] is None
    (step,) = summary["steps"]
    assert step["errors"].get("connect", 0) > 0


@pytest.mark.parametrize("given, says", [
    (["--fault", "replica_lost@3s"], "--fault: replica_lost@3s: a replica fault needs --admin-url URL"),
    (["--fault", "replica_gone@3s"], "--fault: replica_gone@3s: expected replica_lost@SECONDS"),
    (["--fault", "replica_lost@3s", "--admin-url", "localhost:9"], "--admin-url: localhost:9: expected an http"),
])
def test_bad_faults_are_one_line_exit_2(fleet, workload, tmp_path, capsys, given, says):
    assert _run(fleet, workload, tmp_path / "run", *given) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "run").exists()


def _longtail(fleet, workload, out, *extra):
    return main(["loadtest", "run", "--target", fleet, "--workload", workload, "--pattern", "longtail", "--rate", "10",
                 "--duration", "2", "--slo", "ttft_p95=5s", "--out", str(out), "--format", "json",
                 "--server-metrics", "none", *extra])


# None: the fleet's own max_model_len; 400: below the workload's own prompts, so nearly every request needs its cap
@pytest.mark.parametrize("extra, limit", [(["--context-limit", "3000"], 3000), ([], None), (["--context-limit", "400"], 400)])
def test_longtail_sends_its_fraction_near_the_context_limit_and_every_request_fits(fleet, workload, tmp_path, capsys,
                                                                                   extra, limit):
    import httpx
    import pyarrow.parquet as pq

    limit = limit or httpx.get(fleet + "/v1/models").json()["data"][0]["max_model_len"]

    # outputs as long as the near-limit band is wide: a prompt near the limit leaves no room for them uncapped
    long_outputs = tmp_path / "long-outputs.yaml"
    long_outputs.write_text(WORKLOAD.replace("output_tokens: {p50: 20, p95: 60, max: 80}",
                                             "output_tokens: {p50: 200, p95: 280, max: 300}"))
    assert "p50: 200" in long_outputs.read_text()
    rc = _longtail(fleet, str(long_outputs), tmp_path / "run", "--longtail-fraction", "0.25", *extra)
    assert rc == run_exit(tmp_path / "run")
    summary = json.loads(capsys.readouterr().out)
    assert summary["comparability"]["arrival"]["context_limit"] == limit
    rows = pq.read_table(tmp_path / "run" / "requests.parquet").to_pylist()
    long = [r for r in rows if r["input_tokens"] >= 0.9 * (limit - 1)]
    if limit > 1000:  # above the workload's own longest prompt: exactly the fraction is near the limit
        assert len(long) == round(0.25 * len(rows)) > 0
    assert len(long) >= round(0.25 * len(rows)) > 0
    assert all(r["error"] == "" for r in rows), {r["error"] for r in rows}  # prompt + output fit: none refused
    assert all(r["input_tokens"] + r["output_tokens"] <= limit for r in rows)


def test_longtail_bad_fraction_is_one_line_exit_2(fleet, workload, tmp_path, capsys):
    assert _longtail(fleet, workload, tmp_path / "run", "--longtail-fraction", "1.5") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--longtail-fraction: 1.5: must be a fraction" in err, err


def test_abort_rate_is_reported_in_the_summary_faults_and_the_table(fleet, workload, tmp_path, capsys):
    rc = _run(fleet, workload, tmp_path / "run", "--fault", "abort_rate=0.5", "--server-metrics", "none")
    assert rc == run_exit(tmp_path / "run")
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (fault,) = summary["faults"]
    (step,) = summary["steps"]
    import pyarrow.parquet as pq
    errors = pq.read_table(tmp_path / "run" / "requests.parquet").column("error").to_pylist()
    assert fault["kind"] == "abort_rate" and fault["rate"] == 0.5 and fault["requests"] == len(errors)
    assert fault["aborted"] == errors.count("aborted") == step["errors"]["aborted"] > 0, (fault, step["errors"])
    assert fault["aborted_rate"] == fault["aborted"] / fault["requests"]
    assert f"fault abort_rate=0.5: {fault['aborted']} of {fault['requests']} streams dropped mid-way" in out
