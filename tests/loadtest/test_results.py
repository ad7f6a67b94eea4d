"""A run directory round-trips: requests.parquet and summary.json written, read back, checked."""

import json

import pyarrow.parquet as pq
import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.patterns import Step
from goodput.loadtest.results import SCHEMA, new_summary, read_run, records_from_table, write_run
from goodput.loadtest.slo import parse_slo
from goodput.loadtest.stats import knee, summarize
from tests.loadtest.loadtest_records import rec


def _run(tmp_path):
    slo = parse_slo("ttft_p95=0.5s")
    records = [
        rec(0, sched=0.5, ttft=0.2, e2e=1.0, out=5, itl=[0.1, 0.2, 0.2, 0.3]),
        rec(1, sched=1.5, ttft=0.9, e2e=2.0, out=1, tier="P0"),
        rec(2, sched=2.5, error="http_429", ttft=None, e2e=None, out=0),
    ]
    summary = new_summary()
    summary["slo"] = slo.to_dict()
    summary["comparability"]["slo"] = str(slo)
    summary["steps"] = summarize(records, slo, [Step(0, "rate=1", 0.0, 3.0, 0.0, 1.0, None, None)])
    summary["knee"] = knee(summary["steps"])
    write_run(tmp_path / "run", records, summary)
    return records, summary


def test_round_trip(tmp_path):
    records, summary = _run(tmp_path)
    table, back = read_run(tmp_path / "run")
    assert back == summary and back["schema"] == SCHEMA
    assert records_from_table(table) == records
    assert table.column("meets_slo").to_pylist() == [True, False, False]
    assert table.column("ttft_s").to_pylist()[:2] == pytest.approx([0.2, 0.9]) and table.column("ttft_s")[2].as_py() is None
    assert table.column("tpot_s").to_pylist() == [pytest.approx(0.2), None, None]
    assert table.column("itl_s")[0].as_py() == [0.1, 0.2, 0.2, 0.3]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["requests.parquet", "summary.json"]


def test_summary_only_run(tmp_path):
    write_run(tmp_path / "r", None, new_summary("vllm-bench"))
    table, summary = read_run(tmp_path / "r")
    assert table is None and summary["tool"] == "vllm-bench"


def test_parquet_is_readable_by_plain_pyarrow(tmp_path):
    _run(tmp_path)
    t = pq.read_table(tmp_path / "run" / "requests.parquet")
    assert t.num_rows == 3 and {"trace_id", "meets_slo", "e2e_s"} <= set(t.column_names)


@pytest.mark.parametrize(("content", "key"), [
    (None, "summary.json: not found"),
    ("{not json", "summary.json: line 1: not valid JSON"),
    ("[" * 100 + "]" * 100, "summary.json: nested deeper than the limit of 64"),
    ('{"schema": "other/2", "steps": []}', "schema"),
    ('[1, 2]', "schema"),
    (json.dumps({"schema": SCHEMA, "steps": 3}), "steps"),
])
def test_bad_run_dirs_are_one_line(tmp_path, content, key):
    run = tmp_path / "bad"
    run.mkdir()
    if content is not None:
        (run / "summary.json").write_text(content)
    with pytest.raises(ConfigError) as err:
        read_run(run)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_broken_parquet_is_one_line(tmp_path):
    _run(tmp_path)
    (tmp_path / "run" / "requests.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(ConfigError, match="requests.parquet: parquet"):
        read_run(tmp_path / "run")
