"""P/D disaggregation in the analyzer: ``llm.kv_transfer`` spans become the ``kv_transfer`` segment of the
decomposition, the regression search and triage, on DuckDB and on ClickHouse (chDB) alike. The traces are hand-written
(tests/analyzer/pd_traces.py): a disaggregated deployment whose prefill -> decode link degrades 30 minutes in, beside an
aggregated one without the span."""

from __future__ import annotations

import pytest

from goodput.analyzer.decompose import decompose
from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.analyzer.triage import triage
from tests.analyzer.pd_traces import AGGREGATED, DISAGGREGATED, write_traces
from tests.analyzer.test_review_clickhouse import _rounded
from tests.conftest import clickhouse_of


@pytest.fixture(scope="module")
def pd_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pd-run")
    written = write_traces(out / "spans.otlp.jsonl")
    con = connect(out / "db.duckdb")
    summary = ingest(con, [out / "spans.otlp.jsonl"])
    con.close()
    assert summary.requests == sum(written["requests"].values()) and not summary.quarantined
    return out, written


@pytest.fixture(scope="module")
def pd_clickhouse(pd_run, chdb):
    return clickhouse_of(chdb, pd_run[0], "pd")


@pytest.fixture(params=["duckdb", "clickhouse"])
def pd_store(request, pd_run):
    if request.param == "clickhouse":
        return request.getfixturevalue("pd_clickhouse")
    return connect(pd_run[0] / "db.duckdb", read_only=True)


@pytest.fixture(scope="module")
def triaged(pd_run, pd_clickhouse) -> dict:
    """Triage of each deployment on each backend, once (ClickHouse derives the request model per command)."""
    duck = connect(pd_run[0] / "db.duckdb", read_only=True)
    return {(name, dep): triage(store, dep) for name, store in (("duckdb", duck), ("clickhouse", pd_clickhouse))
            for dep in (DISAGGREGATED, AGGREGATED)}


def test_the_kv_transfer_is_a_segment_between_prefill_and_decode(pd_run):
    out, written = pd_run
    con = connect(out / "db.duckdb", read_only=True)
    row = con.execute(f"""
        SELECT count(*), count(kv_transfer_s), count(DISTINCT prefill_replica), max(abs(other_s)),
               max(abs(ttft_s - (gateway_s + queue_s + prefill_s + kv_transfer_s)))
        FROM requests WHERE deployment = '{DISAGGREGATED}'""").fetchone()
    n, with_kv, prefill_replicas, other, ttft_gap = row
    assert n == written["requests"][DISAGGREGATED] == with_kv and prefill_replicas == 3
    assert other < 1e-6 and ttft_gap < 1e-6  # the segments add up to E2E, and TTFT ends where decode starts
    assert con.execute(f"SELECT count(kv_transfer_s), count(prefill_replica) FROM requests "
                       f"WHERE deployment = '{AGGREGATED}'").fetchone() == (0, 0)
    # the long form has the segment in the request's order, starting where prefill ended
    order = con.execute("SELECT list(segment ORDER BY start_ns) FROM segments WHERE trace_id = "
                        f"(SELECT trace_id FROM requests WHERE deployment = '{DISAGGREGATED}' LIMIT 1) "
                        "AND segment <> 'other'").fetchone()[0]
    assert order == ["gateway", "queue", "prefill", "kv_transfer", "decode", "send"]


def test_decomposition_has_kv_transfer_and_zero_without_it(pd_store, pd_run):
    written = pd_run[1]
    recs = {r["deployment"]: r for r in decompose(pd_store, ["deployment"]).records()}
    assert recs[AGGREGATED]["kv_transfer_s"] == 0
    mean = (written["kv_mean_before_s"] * 3 + written["kv_mean_after_s"]) / 4  # a quarter of the time degraded
    assert recs[DISAGGREGATED]["kv_transfer_s"] == pytest.approx(mean, rel=0.1)
    assert list(recs[DISAGGREGATED])[list(recs[DISAGGREGATED]).index("prefill_s") + 1] == "kv_transfer_s"


@pytest.mark.parametrize("backend", ["duckdb", "clickhouse"])
def test_triage_names_the_kv_transfer_as_what_grew(triaged, backend, pd_run):
    written = pd_run[1]
    assert written["kv_mean_after_s"] > 20 * written["kv_mean_before_s"]
    t = triaged[backend, DISAGGREGATED]
    assert t.regressed
    assert t.verdict.startswith("the KV transfer from prefill to decode replicas slowed"), t.verdict
    growth = t.facts["segment_growth_s"]
    assert max(growth, key=growth.get) == "kv_transfer"
    assert growth["kv_transfer"] == pytest.approx(written["kv_mean_after_s"] - written["kv_mean_before_s"], rel=0.15)
    split = dict(t.steps)["1. latency split"]
    assert "grew most: kv_transfer" in split and "kv_transfer" in split.split("mean s:")[1]
    assert "KV transfer prefill -> decode p95" in dict(t.steps)["3. KV cache"]
    # the change points: the kv_transfer series stepped up, and E2E's step is put on it
    regs = t.facts["regressions"]
    kv = [r for r in regs if r["metric"] == "kv_transfer_s"]
    assert kv and kv[0]["change"] > 5 and "KV-transfer time per prompt token" in kv[0]["cause"]
    assert {r["segment"] for r in regs if r["metric"] in ("e2e_s", "ttft_s")} == {"kv_transfer"}


@pytest.mark.parametrize("backend", ["duckdb", "clickhouse"])
def test_the_aggregated_deployment_has_no_kv_transfer_in_triage(triaged, backend):
    t = triaged[backend, AGGREGATED]
    assert not t.regressed, t.verdict
    assert "kv_transfer" not in dict(t.steps)["1. latency split"]
    assert "KV transfer" not in dict(t.steps)["3. KV cache"]


def test_clickhouse_agrees_with_duckdb(pd_run, pd_clickhouse, triaged):
    duck = connect(pd_run[0] / "db.duckdb", read_only=True)
    for by in (["deployment"], ["deployment", "replica"]):
        assert _rounded(decompose(pd_clickhouse, by).records()) == _rounded(decompose(duck, by).records())
    a, b = triaged["clickhouse", DISAGGREGATED], triaged["duckdb", DISAGGREGATED]
    assert a.verdict == b.verdict and a.steps == b.steps
    assert a.facts["segment_growth_s"] == pytest.approx(b.facts["segment_growth_s"], rel=1e-9)  # sums in another order
