"""What `goodput simulate` writes: requests.parquet, OTLP JSON spans whose segments are the request's timestamps, releases."""

import json
import subprocess
import sys
from collections import defaultdict

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import REPO


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(REPO / "examples" / "fleet.yaml"),
                        "--duration", "900", "--out", str(out), "--format", "json"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout)


def test_summary_and_files(run_dir):
    out, summary = run_dir
    assert summary["requests"] > 1000
    assert set(summary["files"]) == {"requests", "spans", "releases"}
    assert sum(summary["outcomes"].values()) == summary["requests"]


def test_requests_parquet_has_one_row_per_request(run_dir):
    out, summary = run_dir
    t = pq.read_table(out / "requests.parquet")
    assert t.num_rows == summary["requests"]
    for col in ("request_id", "tenant", "tier", "scene", "route", "model", "deployment", "replica", "arrival",
                "queue_start", "scheduled", "first_token", "last_token", "completed", "input_tokens",
                "output_tokens", "cached_tokens", "preemptions", "finish_reason", "reject_reason"):
        assert col in t.column_names
    df = t.to_pandas()
    assert df["request_id"].is_unique
    assert set(df["finish_reason"]) <= {"stop", "length", "abort", "rejected", "timeout", "error"}
    assert set(df["tier"]) == {"P0", "P1", "P2"}
    ok = df[df["finish_reason"] == "stop"]
    assert (ok["first_token"] >= ok["scheduled"]).all() and (ok["completed"] >= ok["last_token"]).all()


def test_spans_tile_the_request_exactly(run_dir):
    out, _ = run_dir
    df = pq.read_table(out / "requests.parquet").to_pandas().set_index("trace_id")
    spans = defaultdict(dict)
    for line in (out / "spans.otlp.jsonl").read_text().splitlines():
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    spans[s["traceId"]][s["name"]] = s
    assert len(spans) == len(df)
    ns = lambda ts: int(ts.value)  # noqa: E731 - pandas Timestamp -> int ns
    checked = 0
    for trace_id, row in df.iterrows():
        sp = spans[trace_id]
        root = sp["llm.request"]
        assert root["kind"] == 2 and "parentSpanId" not in root
        assert int(root["startTimeUnixNano"]) == ns(row["arrival"])
        assert int(root["endTimeUnixNano"]) == ns(row["completed"])
        children = sorted((s for n, s in sp.items() if n != "llm.request"), key=lambda s: int(s["startTimeUnixNano"]))
        assert all(c["parentSpanId"] == root["spanId"] and c["kind"] == 1 for c in children)
        assert int(children[0]["startTimeUnixNano"]) == ns(row["arrival"])
        assert int(children[-1]["endTimeUnixNano"]) == ns(row["completed"])
        for a, b in zip(children, children[1:], strict=False):
            assert a["endTimeUnixNano"] == b["startTimeUnixNano"]
        if row["finish_reason"] == "stop":
            assert [c["name"] for c in children] == ["llm.gateway", "llm.queue", "llm.prefill", "llm.decode", "llm.send"]
            assert int(sp["llm.queue"]["endTimeUnixNano"]) == ns(row["scheduled"])
            assert int(sp["llm.prefill"]["endTimeUnixNano"]) == ns(row["first_token"])
            assert int(sp["llm.decode"]["endTimeUnixNano"]) == ns(row["last_token"])
            attrs = {a["key"]: a["value"] for a in root["attributes"]}
            assert attrs["llm.tenant"]["stringValue"] == row["tenant"]
            assert int(attrs["gen_ai.usage.output_tokens"]["intValue"]) == row["output_tokens"]
            checked += 1
    assert checked > 1000


def test_releases_file_in_design_format(run_dir):
    out, _ = run_dir
    rel = yaml.safe_load((out / "releases.yaml").read_text())
    assert rel and set(rel[0]) == {"time", "deployment", "kind", "from", "to", "note"}
    assert rel[0]["kind"] == "prompt_template" and rel[0]["time"] == "2026-11-23T09:20:00Z"


def test_every_command_has_help():
    for args in (["--help"], ["simulate", "--help"], ["fleet", "--help"], ["fleet", "serve", "--help"], ["demo", "--help"]):
        r = subprocess.run([sys.executable, "-m", "goodput", *args], capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 0 and "usage: goodput" in r.stdout
