"""Every command, fed nonsense, answers with one line naming what and where, exits 2 and starts nothing.

Runs the real ``goodput`` command (a subprocess) over a table of bad flags and bad files: values that
used to pass silently (``--duration nan``, ``--interval 0``) and ones that used to end in a traceback
(``--port 99999``, a non-UTF-8 file, ``rate: .nan``).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, fleet_data
from tests.plan.plan_fixtures import CHAT

GOOD_TARGETS = {"targets": [{"deployment": "chat", "replica": "chat-0", "url": "http://127.0.0.1:9/metrics"}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad-input")

    def write(name: str, content: str | bytes | dict) -> Path:
        p = d / name
        if isinstance(content, dict):
            content = yaml.safe_dump(content)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    nan_rate = copy.deepcopy(BASE_WORKLOAD)
    nan_rate["arrival"]["rate"] = float("nan")  # yaml writes .nan
    trace_wl = {k: v for k, v in copy.deepcopy(BASE_WORKLOAD).items() if k != "arrival"}
    trace_wl["trace"] = {"path": "latin1.csv", "format": "azure"}
    write("latin1.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
          + "# caf\xe9\n".encode("latin-1"))
    (d / "a-directory").mkdir()
    spec = yaml.safe_load((REPO / "rules" / "slos.yaml").read_text())
    spec["thresholds"]["capacity_redundancy"] = "lots"

    def spec_with(section: str, key: str, value) -> dict:
        out = yaml.safe_load((REPO / "rules" / "slos.yaml").read_text())
        out[section][key] = value
        return out

    def fleet_with(deployment: dict | None = None, arrival: dict | None = None) -> dict:
        wl = copy.deepcopy(BASE_WORKLOAD)
        wl["arrival"] = arrival or wl["arrival"]
        return fleet_data(deployments=[dict(copy.deepcopy(BASE_DEPLOYMENT), **(deployment or {}))], workloads=[wl])

    huge = d / "huge.yaml"
    with huge.open("wb") as f:
        f.truncate(200 * 2**20)  # sparse: 200 MB by its size, nothing on disk
    chat = yaml.safe_load(CHAT)["deployments"]["chat"]
    plan = {"deployments": {"chat": {"candidate": chat["candidates"][0], "streams": chat["streams"],
                                     "slos": yaml.safe_load(CHAT)["slos"], "headroom": {"base": 3},
                                     "desired_replicas": 10**9, "replica_goodput_tokens_per_second": 9000.0}}}
    return {
        "nonutf8": write("nonutf8.yaml", "name: caf\xe9\n".encode("latin-1")),
        "empty": write("empty.yaml", ""),
        "list": write("list.yaml", "- one\n- two\n"),
        "dir": d / "a-directory",
        "missing": d / "no-such-file.yaml",
        "good_fleet": write("fleet.yaml", fleet_data()),
        "nan_fleet": write("nan-fleet.yaml", fleet_data(workloads=[nan_rate])),
        "trace_fleet": write("trace-fleet.yaml", fleet_data(workloads=[trace_wl])),
        "bad_url": write("targets.yaml", {"targets": [
            *GOOD_TARGETS["targets"],
            {"deployment": "chat", "replica": "chat-1", "url": "http://127.0.0.1:194l4/metrics"}]}),
        "good_targets": write("good-targets.yaml", GOOD_TARGETS),
        "nan_plan": write("nan-plan.yaml", "deployments:\n  chat: {replica_goodput_tokens_per_second: .nan}\n"),
        "fake_high": write("fake.yaml", {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "utilization": "high"}]}),
        "fake_good": write("fake-good.yaml", {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}),
        "spec_bad": write("slos.yaml", spec),
        "deep": write("deep.yaml", "x: " + "[" * 20000 + "]" * 20000 + "\n"),
        "deep_json": write("deep.json", "[" * 20000 + "]" * 20000),
        # "billion laughs": 9 levels of 9 aliases, 1 KB that a reader walking it would expand to 387 million nodes
        "laughs": write("laughs.yaml", "l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9))),
        "huge": huge,
        "control": write("control.yaml", "name: ok\nseed: 1\x9a\n"),
        "replicas_2_63": write("replicas.yaml", fleet_with({"replicas": 2**63})),
        "rate_1e6": write("rate.yaml", fleet_with(arrival={"process": "poisson", "rate": 1000000})),
        "batch_1e8": write("batch.yaml", fleet_with(arrival={"process": "batch", "batches": [{"at": 0, "count": 10**8}]})),
        "seqs_huge": write("seqs.yaml", fleet_with({"engine": {"max_num_seqs": 10**12}})),
        "plan_1e9": write("plan-1e9.yaml", plan),
        "demand_rps": write("demand.yaml", CHAT.replace("peak_rps: 24", "peak_rps: 1000000000000")),
        "spec_js": write("slos-js.yaml", spec_with("links", "console_base", "javascript:alert(1)")),
        "spec_regex": write("slos-regex.yaml", spec_with("thresholds", "exporter_jobs", "llm-(gpu|engine")),
        "spec_lookahead": write("slos-look.yaml", spec_with("thresholds", "exporter_jobs", "llm-(?!gpu).*")),
        "spec_quote": write("slos-quote.yaml", spec_with("thresholds", "exporter_jobs", 'x"} or vector(1) or up{a="')),
        "out": d / "out",
        "db": d / "analyzer.duckdb",
    }


# (argv with {placeholders} naming `files`, fragments the one stderr line must hold)
CASES = {
    # simulate: flags
    "simulate --duration inf": ("simulate {good_fleet} --duration inf --out {out}", ["--duration", "finite"]),
    "simulate --duration nan": ("simulate {good_fleet} --duration nan --out {out}", ["--duration", "finite"]),
    "simulate --duration 0": ("simulate {good_fleet} --duration 0 --out {out}", ["--duration", "> 0"]),
    "simulate --seed -1": ("simulate {good_fleet} --duration 5 --seed -1 --out {out}", ["--seed", "0..2**64-1"]),
    "simulate --drain -5": ("simulate {good_fleet} --duration 5 --drain -5 --out {out}", ["--drain", ">= 0"]),
    "simulate --drain nan": ("simulate {good_fleet} --duration 5 --drain nan --out {out}", ["--drain", "finite"]),
    # simulate: files
    "simulate non-UTF-8 fleet": ("simulate {nonutf8} --duration 5 --out {out}", ["{nonutf8}: line 1", "not UTF-8"]),
    "simulate empty fleet": ("simulate {empty} --duration 5 --out {out}", ["{empty}", "empty"]),
    "simulate list fleet": ("simulate {list} --duration 5 --out {out}", ["{list}", "expected a mapping", "list"]),
    "simulate directory fleet": ("simulate {dir} --duration 5 --out {out}", ["{dir}", "cannot read"]),
    "simulate missing fleet": ("simulate {missing} --duration 5 --out {out}", ["{missing}", "cannot read"]),
    "simulate rate .nan": ("simulate {nan_fleet} --duration 5 --out {out}",
                           ["workloads[0].arrival.rate", "finite"]),
    "simulate non-UTF-8 trace": ("simulate {trace_fleet} --duration 5 --out {out}", ["latin1.csv", "not UTF-8"]),
    # exporter engine
    "engine --port 99999": ("exporter engine --targets {good_targets} --port 99999", ["--port", "0..65535"]),
    "engine --interval 0": ("exporter engine --targets {good_targets} --interval 0", ["--interval", "at least"]),
    "engine --timeout 0": ("exporter engine --targets {good_targets} --timeout 0", ["--timeout", "> 0"]),
    "engine --timeout nan": ("exporter engine --targets {good_targets} --timeout nan", ["--timeout", "finite"]),
    "engine --max-bytes -5": ("exporter engine --targets {good_targets} --max-bytes -5", ["--max-bytes", "> 0"]),
    "engine malformed url": ("exporter engine --targets {bad_url} --port 0", ["{bad_url}: targets[1].url", "194l4"]),
    "engine non-UTF-8 targets": ("exporter engine --targets {nonutf8} --port 0", ["{nonutf8}", "not UTF-8"]),
    "engine empty targets": ("exporter engine --targets {empty} --port 0", ["{empty}", "empty"]),
    "engine list targets": ("exporter engine --targets {list} --port 0", ["{list}", "expected a mapping"]),
    "engine directory targets": ("exporter engine --targets {dir} --port 0", ["{dir}", "cannot read"]),
    "engine missing targets": ("exporter engine --targets {missing} --port 0", ["{missing}", "cannot read"]),
    "engine non-UTF-8 plan": ("exporter engine --targets {good_targets} --plan {nonutf8} --port 0",
                              ["{nonutf8}", "not UTF-8"]),
    "engine .nan plan": ("exporter engine --targets {good_targets} --plan {nan_plan} --port 0",
                         ["{nan_plan}: deployments.chat.replica_goodput_tokens_per_second", "finite"]),
    "engine list plan": ("exporter engine --targets {good_targets} --plan {list} --port 0", ["{list}", "mapping"]),
    "engine normalize directory": ("exporter engine normalize {dir}", ["{dir}", "cannot read"]),
    # exporter gpu
    "gpu --port 99999": ("exporter gpu --fake {fake_good} --port 99999", ["--port", "0..65535"]),
    "gpu --interval 0": ("exporter gpu --fake {fake_good} --interval 0", ["--interval", "at least"]),
    "gpu utilization high": ("exporter gpu --fake {fake_high} --port 0", ["{fake_high}: gpus[0].utilization", "'high'"]),
    "gpu non-UTF-8 fake": ("exporter gpu --fake {nonutf8} --port 0", ["{nonutf8}", "not UTF-8"]),
    "gpu empty fake": ("exporter gpu --fake {empty} --port 0", ["{empty}", "empty"]),
    "gpu list fake": ("exporter gpu --fake {list} --port 0", ["{list}", "expected a mapping"]),
    "gpu directory fake": ("exporter gpu --fake {dir} --port 0", ["{dir}", "cannot read"]),
    "gpu list mapping": ("exporter gpu --fake {fake_good} --mapping {list} --port 0", ["{list}", "mapping"]),
    # exporter requests
    "requests --port 99999": ("exporter requests --store {out} --port 99999", ["--port", "0..65535"]),
    "requests --otlp-port -1": ("exporter requests --store {out} --otlp-port -1", ["--otlp-port", "0..65535"]),
    "requests --max-tenants 0": ("exporter requests --store {out} --max-tenants 0", ["--max-tenants", "> 0"]),
    "requests --flush-interval 0": ("exporter requests --store {out} --flush-interval 0",
                                    ["--flush-interval", "at least"]),
    # rules generate
    "rules non-UTF-8 spec": ("rules generate --spec {nonutf8} --out {out}", ["{nonutf8}", "not UTF-8"]),
    "rules empty spec": ("rules generate --spec {empty} --out {out}", ["{empty}", "empty"]),
    "rules list spec": ("rules generate --spec {list} --out {out}", ["{list}", "expected a mapping"]),
    "rules bad threshold": ("rules generate --spec {spec_bad} --out {out}",
                            ["{spec_bad}: thresholds.capacity_redundancy", "'lots'"]),
    "rules --scale-durations nan": ("rules generate --scale-durations nan --check", ["--scale-durations", "finite"]),
    "rules --scale-durations 1e308": ("rules generate --scale-durations 1e308 --out {out}",  # OverflowError before
                                      ["--scale-durations", "at most 100"]),
    # analyze
    "analyze non-UTF-8 releases": ("analyze regressions --db {db} --releases {nonutf8}", ["{nonutf8}", "not UTF-8"]),
    "analyze --min-change nan": ("analyze regressions --db {db} --min-change nan", ["--min-change", "relative change >= 0"]),
    # plan
    "plan autoscale --cold-start 5x": ("plan autoscale --plan {out}/plan.yaml --cold-start 5x",
                                       ["--cold-start", "not a duration", "'5x'"]),
    "plan autoscale --cold-start nan": ("plan autoscale --plan {out}/plan.yaml --cold-start nan",
                                        ["--cold-start", "finite duration"]),
    # limits before the work (issue 22): nesting, size, counts, rates, durations
    "simulate nested fleet": ("simulate {deep} --duration 5 --out {out}",
                              ["{deep}: line 1", "nested deeper than the limit of 64"]),
    "simulate 200 MB fleet": ("simulate {huge} --duration 5 --out {out}",
                              ["{huge}", "209715200 bytes is larger than the limit of 8388608 bytes"]),
    "engine nested targets": ("exporter engine --targets {deep} --port 0", ["{deep}: line 1", "nested deeper"]),
    "deploy prometheus not http": ("deploy kubernetes --out {out}/k8s --prometheus ftp://prom:9090",
                                   ["--prometheus", "not an http(s) URL with a host: 'ftp://prom:9090'"]),
    "deploy prometheus bad port": ("deploy kubernetes --out {out}/k8s --prometheus http://prom:99999",
                                   ["--prometheus", "not a valid URL"]),
    "simulate aliased fleet": ("simulate {laughs} --duration 5 --out {out}",
                               ["{laughs}: line 6", "aliases expand the document by more than the limit of 100,000"]),
    "rules aliased spec": ("rules generate --spec {laughs} --out {out}", ["{laughs}: line 6", "aliases expand"]),
    "rules nested spec": ("rules generate --spec {deep} --out {out}", ["{deep}: line 1", "nested deeper"]),
    "analyze nested releases": ("analyze regressions --db {db} --releases {deep}", ["{deep}: line 1", "nested deeper"]),
    "plan nested demand": ("plan replicas --demand {deep} --simulate --out {out}/p.yaml", ["{deep}", "nested deeper"]),
    "autoscale nested plan": ("plan autoscale --plan {deep} --cold-start 60s --out {out}", ["{deep}", "nested deeper"]),
    "loadtest nested workload": ("loadtest run --target http://127.0.0.1:9 --workload {deep} --pattern poisson "
                                 "--rate 1 --duration 1 --slo ttft_p95=1s --out {out}/r", ["{deep}", "nested deeper"]),
    "loadtest import nested json": ("loadtest import {deep_json} --slo ttft_p95=1s --out {out}/i",
                                    ["{deep_json}", "nested deeper than the limit of 64"]),
    "simulate control character": ("simulate {control} --duration 5 --out {out}",
                                   ["{control}: line 2", "not valid YAML"]),
    "simulate replicas 2**63": ("simulate {replicas_2_63} --duration 5 --out {out}",
                                ["{replicas_2_63}: deployments[0].replicas", "must be <= 1024"]),
    "simulate rate 1e6": ("simulate {rate_1e6} --duration 5 --out {out}",
                          ["{rate_1e6}: workloads[0].arrival.rate", "must be <= 10000"]),
    "simulate batch 1e8": ("simulate {batch_1e8} --duration 5 --out {out}",
                           ["{batch_1e8}: workloads[0].arrival.batches[0].count", "must be <= 1000000"]),
    "simulate max_num_seqs 1e12": ("simulate {seqs_huge} --duration 5 --out {out}",
                                   ["{seqs_huge}: deployments[0].engine.max_num_seqs", "must be <= 16777216"]),
    "simulate --duration 1e12": ("simulate {good_fleet} --duration 1e12 --out {out}",
                                 ["--duration", "must be at most 2678400 s (31 days)"]),
    "simulate too many requests": ("simulate {good_fleet} --duration 2000000 --out {out}",
                                   ["{good_fleet}: --duration", "over the limit of 2,000,000"]),
    "simulate --out under a file": ("simulate {good_fleet} --duration 5 --out {good_fleet}/x",
                                    ["--out", "cannot create directory", "is not a directory"]),
    "week --weeks-before 100000": ("week {good_fleet} --week 2026-W48 --out {out} --weeks-before 100000",
                                   ["--weeks-before", "0..52"]),
    "week --tenants 1e9": ("week {good_fleet} --week 2026-W48 --out {out} --tenants 1000000000", ["--tenants", "1..10000"]),
    "week tenants x steps": ("week {good_fleet} --week 2026-W48 --out {out} --tenants 10000 --weeks-before 52 --step 10",
                             ["--tenants", "over the limit of 20,000,000"]),
    "review --history-weeks 1000": ("review --db {db} --week 2026-W48 --out {out} --history-weeks 1000",
                                    ["--history-weeks", "1..52"]),
    "plan desired_replicas 1e9": ("plan autoscale --plan {plan_1e9} --cold-start 60s --out {out}",
                                  ["{plan_1e9}: deployments.chat.desired_replicas", "1..1024"]),
    "plan peak_rps 1e12": ("plan replicas --demand {demand_rps} --simulate --out {out}/p.yaml",
                           ["{demand_rps}: deployments.chat.streams[0].peak_rps", "<= 100000"]),
    "loadtest --rate 1e9": ("loadtest run --target http://127.0.0.1:9 --workload {good_fleet} --pattern poisson "
                            "--rate 1e9 --duration 1 --slo ttft_p95=1s --out {out}/r", ["--rate", "at most 10000"]),
    "loadtest --concurrency 1e6": ("loadtest run --target http://127.0.0.1:9 --workload {good_fleet} --pattern "
                                   "concurrency --concurrency 1000000 --duration 1 --slo ttft_p95=1s --out {out}/r",
                                   ["--concurrency", "1..10000"]),
    # rules spec: what is copied into generated rules
    "rules javascript: link": ("rules generate --spec {spec_js} --out {out}",
                               ["{spec_js}: links.console_base", "only http(s) links", "javascript"]),
    "rules invalid regex": ("rules generate --spec {spec_regex} --out {out}",
                            ["{spec_regex}: thresholds.exporter_jobs", "not a regular expression"]),
    "rules lookahead regex": ("rules generate --spec {spec_lookahead} --out {out}",
                              ["{spec_lookahead}: thresholds.exporter_jobs", "RE2"]),
    "rules quote in regex": ("rules generate --spec {spec_quote} --out {out}",
                             ["{spec_quote}: thresholds.exporter_jobs", "quote"]),
    # demo
    "demo --gpu-port 99999": ("demo --gpu-port 99999 --no-prometheus", ["--gpu-port", "1..65535"]),
    "demo --speed 0": ("demo --speed 0 --no-prometheus", ["--speed", "> 0"]),
    "demo --duration nan": ("demo --duration nan --no-prometheus", ["--duration", "finite"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2(case, files):
    argv, fragments = CASES[case]
    args = [a.format(**files) for a in argv.split()]
    try:
        r = subprocess.run([sys.executable, "-m", "goodput", *args], capture_output=True, text=True, cwd=REPO,
                           timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`goodput {argv}` did not refuse its input: it was still running after 120 s")
    err = r.stderr.strip()
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, f"exit {r.returncode}; stdout {r.stdout!r}; stderr {r.stderr!r}"
    assert len(err.splitlines()) == 1, r.stderr
    assert err.startswith("goodput: error: "), err
    for f in fragments:
        assert f.format(**files) in err, f"{f.format(**files)!r} not in {err!r}"
    assert not r.stdout.strip(), r.stdout  # refused before anything started


@pytest.mark.parametrize("command", ["rules generate --out /proc/goodput-test", "dashboards generate --out /proc/goodput-test"])
def test_an_output_path_that_cannot_be_written_is_one_line_not_a_traceback(command):
    """Paths these commands check only when they write: the failure is still one line (exit 1), not a traceback."""
    r = subprocess.run([sys.executable, "-m", "goodput", *command.split()], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert "Traceback" not in r.stderr and r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [f"goodput: error: {command.split()[-1]}: No such file or directory"]
