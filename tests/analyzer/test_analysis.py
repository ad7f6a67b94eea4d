"""Decomposition, change points, regressions and triage against the simulator's injected ground truth."""

import json
import subprocess
import sys
from datetime import UTC, datetime

import numpy as np
import pytest

from goodput.analyzer.changepoint import detect
from goodput.analyzer.decompose import decompose
from goodput.analyzer.regressions import find_regressions
from goodput.analyzer.releases import load_releases
from goodput.analyzer.store import connect
from goodput.analyzer.triage import triage
from goodput.foundation.errors import ConfigError
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # long (the ClickHouse copy of the regression run): dealt out first (tests/conftest.py)


def at(hh, mm):
    return datetime(2026, 11, 23, hh, mm, tzinfo=UTC)


def test_change_points_on_hand_made_series():
    rng = np.random.default_rng(0)
    step = np.concatenate([np.full(100, 1.0), np.full(100, 1.25)]) * np.exp(rng.normal(0, 0.03, 200))
    (cp,) = detect(step)
    assert abs(cp.index - 100) <= 1 and cp.change == pytest.approx(0.25, abs=0.03)
    assert detect(np.exp(rng.normal(0, 0.05, 300))) == []
    spike = np.concatenate([np.full(40, 1.0), np.full(5, 4.0), np.full(40, 1.0)]) * np.exp(rng.normal(0, 0.03, 85))
    assert [c.index for c in detect(spike)] == [40, 45]
    assert detect(np.array([1.0, 2.0, 3.0])) == []


def test_decomposition_percentiles_match_numpy(regression_run, regression_store):
    con = connect(regression_run / "db.duckdb", read_only=True)  # the ground truth: the simulator's own requests
    d = decompose(regression_store, ["deployment", "tier"], percentiles=[0.5, 0.99]).records()
    rag = next(r for r in d if r["deployment"] == "rag")
    e2e = np.array([x for (x,) in con.execute("SELECT e2e_s FROM requests WHERE deployment = 'rag' AND outcome = 'ok'")
                    .fetchall()])
    assert rag["e2e_p50_s"] == pytest.approx(np.percentile(e2e, 50), rel=1e-9)
    assert rag["e2e_p99_s"] == pytest.approx(np.percentile(e2e, 99), rel=1e-9)
    assert rag["requests"] == len(e2e)
    # the segments add up: mean E2E = sum of mean segments (other is zero for simulator data)
    assert abs(rag["other_s"]) < 1e-9  # simulator segments tile each request: nothing left over
    seg = sum(rag[f"{s}_s"] for s in ("gateway", "queue", "prefill", "decode", "send"))
    assert seg == pytest.approx(e2e.mean(), rel=1e-9)
    chat = next(r for r in d if r["deployment"] == "chat")
    assert chat["e2e_p99_top_segment"] == "queue"  # the burst's queue dominates chat's tail
    assert rag["ttft_p99_top_segment"] == "prefill"
    burst = decompose(regression_store, ["deployment"], since=at(9, 32), until=at(9, 40)).records()
    assert next(r for r in burst if r["deployment"] == "chat")["e2e_p95_top_segment"] == "queue"
    with pytest.raises(ConfigError, match="unknown dimension"):
        decompose(regression_store, ["deployment; DROP TABLE requests"])


def test_injected_regressions_are_found_and_attributed(regression_run, regression_store):
    regs = find_regressions(regression_store, load_releases(regression_run / "releases.yaml"))
    blamed = [r for r in regs if r.blamed]
    rag = [r for r in blamed if r.deployment == "rag" and r.metric in ("ttft_s", "prefill_s")]
    assert rag and all(r.release == "prompt_template rag-v1 -> rag-v2" and r.segment == "prefill" for r in rag)
    assert all(abs((r.time - at(9, 0)).total_seconds()) <= 600 for r in rag)
    assert all("input length" in r.cause and r.evidence["input_tokens_change"] > 0.8 for r in rag)
    chat = [r for r in blamed if r.deployment == "chat" and r.metric in ("decode_s", "tpot_s")]
    assert chat and all(r.release == "framework vllm-0.10.1 -> vllm-0.10.2" and r.segment == "decode" for r in chat)
    assert all(0.1 < r.evidence["per_token_cost_change"] < 0.3 for r in chat)  # decode slowed by 20%
    assert set(chat[0].evidence["tenants"]) == {"acme", "globex"} and chat[0].evidence["routes"] == ["chat"]
    # the burst: found, called a workload shift, and blamed on nothing
    burst = [r for r in regs if r.deployment == "chat" and at(9, 25) <= r.time <= at(9, 45) and r.metric == "queue_s"]
    assert burst and all(r.cause == "workload shift: arrival rate changed" and not r.blamed and r.release is None
                         for r in burst)
    assert not any(r.blamed and r.deployment == "chat" and r.time < at(9, 55) for r in regs)


def test_without_releases_nothing_is_blamed(regression_store):
    regs = find_regressions(regression_store, [])
    assert regs and not any(r.blamed for r in regs)


def test_triage_names_the_release(regression_run, regression_store):
    t = triage(regression_store, "rag", releases=load_releases(regression_run / "releases.yaml"))
    assert [s for s, _ in t.steps] == ["0. in flight", "1. latency split", "2. workload", "3. KV cache", "4. routing and cache",
                                       "5. releases"]
    assert "prompt_template rag-v1 -> rag-v2" in t.verdict
    with pytest.raises(ConfigError, match="no requests"):
        triage(regression_store, "nope")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "goodput", "analyze", *args], capture_output=True, text=True, cwd=REPO)


def test_cli_reports_in_every_format(regression_run):
    db = str(regression_run / "db.duckdb")
    r = _cli("decompose", "--db", db, "--by", "deployment,tenant", "--format", "json")
    rows = json.loads(r.stdout)
    assert r.returncode == 0 and {(x["deployment"], x["tenant"]) for x in rows} >= {("chat", "acme"), ("rag", "hooli")}
    r = _cli("regressions", "--db", db, "--releases", str(regression_run / "releases.yaml"), "--format", "csv")
    assert r.returncode == 0 and r.stdout.startswith("time,deployment,tier,metric,direction,change")
    r = _cli("triage", "--db", db, "--deployment", "chat", "--releases", str(regression_run / "releases.yaml"))
    assert r.returncode == 0 and "most likely:" in r.stdout and "framework" in r.stdout
    r = _cli("decompose", "--db", db, "--by", "colour")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = _cli("triage", "--db", str(regression_run / "missing.duckdb"), "--deployment", "chat")
    assert r.returncode == 2 and "missing.duckdb" in r.stderr


def test_releases_files(tmp_path):
    y = tmp_path / "r.yaml"
    y.write_text("- {time: '2026-11-23T09:00:00Z', deployment: '*', kind: config, from: a, to: b, note: n}\n")
    c = tmp_path / "r.csv"
    c.write_text("time,deployment,kind,from,to,note\n2026-11-23T09:00:00Z,chat,framework,0.1,0.2,\n")
    assert load_releases(y)[0].deployment == "*" and load_releases(c)[0].kind == "framework"
    c.write_text("time,deployment,kind\n2026-11-23T09:00:00Z,chat,hotfix\n")
    with pytest.raises(ConfigError, match=r"\[0\].kind"):
        load_releases(c)


def test_triage_of_a_healthy_run_names_no_cause(healthy_run, healthy_store):
    t = triage(healthy_store, "chat")
    assert not t.regressed and t.verdict.startswith("no regression")
    assert "checked latency split, workload, KV cache, routing and cache, releases" in t.verdict
    assert len(t.steps) == 6 and abs(t.facts["e2e_p95_change"]) < 0.1 and not t.left_out
    e2e, ttft = (f"{round(t.facts[k] * 100):+d}%" for k in ("e2e_p95_change", "ttft_p95_change"))
    assert f"recent p95 E2E {e2e}, TTFT {ttft} against" in t.verdict
    assert "0.035" in t.steps[3][1]  # it preempts steadily: not a regression, so not a cause


def test_the_cli_says_a_healthy_run_did_not_regress(healthy_run):
    r = _cli("triage", "--db", str(healthy_run / "db.duckdb"), "--deployment", "chat")
    assert r.returncode == 0 and "no regression" in r.stdout and "most likely" not in r.stdout
    assert "-0.000" not in r.stdout
    r = _cli("regressions", "--db", str(healthy_run / "db.duckdb"))
    assert r.returncode == 0 and r.stdout.startswith("no regression or improvement: searched 8 series")
    assert "chat/P0" in r.stdout and "60 buckets of 1m (chosen for the window)" in r.stdout  # an hour: 1m buckets
    r = _cli("regressions", "--db", str(healthy_run / "db.duckdb"), "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [] and "no regression" in r.stderr


def test_decompose_table_is_readable_and_complete_in_json(healthy_run):
    db = str(healthy_run / "db.duckdb")
    r = _cli("decompose", "--db", db, "--by", "deployment,tenant")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and max(map(len, lines)) <= 140, r.stdout
    head = lines[1].split()
    assert head[:3] == ["deployment", "tenant", "requests"] and "queue" in head and "p95" in head
    rows = [line.split() for line in lines[2:]]
    assert {row[1] for row in rows} == {"acme", "globex"}
    at = lines[1].index(" other") + 1  # numbers are right-aligned under their header
    assert {line[at:at + 5].strip() for line in lines[2:]} == {"0"}  # |other| < 1 ns prints as 0
    full = json.loads(_cli("decompose", "--db", db, "--by", "deployment,tenant", "--format", "json").stdout)
    assert {"ttft_p99_top_segment", "gaps", "overlaps", "all_requests", "ttft_p50_s"} <= set(full[0])
    r = _cli("decompose", "--db", db, "--since", "2030-01-01T00:00:00Z")
    assert r.returncode == 1 and "no requests in the window 2030-01-01T00:00:00Z" in r.stderr and not r.stdout


@pytest.mark.parametrize("args", [
    ("regressions", "--bucket", "0m"), ("regressions", "--bucket", "nanm"), ("regressions", "--bucket", "infh"),
    ("regressions", "--bucket=-5m"), ("regressions", "--window", "5x"), ("regressions", "--min-change", "nan"),
    ("decompose", "--bucket", "7m"), ("decompose", "--percentiles", "0,50"), ("decompose", "--since", "yesterday"),
    ("triage", "--deployment", "chat", "--since", "2026-11-23T10:00:00Z", "--until", "2026-11-23T09:00:00Z"),
])
def test_bad_values_get_one_line_and_exit_2(healthy_run, args):
    r = _cli(*args, "--db", str(healthy_run / "db.duckdb"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("goodput: error: ")
    assert args[-1].split("=")[0] in r.stderr or args[-2] in r.stderr
    assert "Traceback" not in r.stderr


def test_ingest_cli_counts_files_and_says_when_nothing_is_usable(healthy_run, tmp_path):
    r = _cli("ingest", str(healthy_run), "--db", str(tmp_path / "db.duckdb"))
    assert r.returncode == 0 and "read 2 file(s), 2 skipped (not a trace format)" in r.stdout
    r = _cli("ingest", str(REPO / "tests" / "fixtures" / "otlp" / "otlp_proto_examples_trace.json"),
             "--db", str(tmp_path / "other.duckdb"))
    assert r.returncode == 1 and "nothing usable" in r.stderr and "ignored 1: no LLM request in the trace" in r.stdout
