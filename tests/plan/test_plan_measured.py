"""goodput plan replicas --demand-from: demand measured from a real Prometheus serving the backfilled simulated
weeks (the review's session fixture, which has no token histograms) and from a real VictoriaMetrics holding the
same weeks, from a real Prometheus scraping a request exporter fed OTLP spans beside an older one without them and
from the VictoriaMetrics that Prometheus remote-writes into, and from a real DuckDB store the analyzer ingested
from goodput.simulator runs; an empty window, an unreachable server and a bad source are one line and exit 2."""

from __future__ import annotations

import copy
import json
import math
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import httpx
import numpy as np
import pytest
import yaml

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.cli import main
from goodput.contracts.catalog import by_name
from goodput.demo.stack import Process
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from goodput.foundation.promendpoint import Endpoint
from goodput.plan.demand import token_mix
from goodput.plan.measured import TOKEN_HISTOGRAMS
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import BASE_WORKLOAD, free_port_block, make_fleet, needs
from tests.plan.plan_fixtures import knee_run
from tests.review.conftest import FLEET

WEEK_END = "2026-11-30T00:00:00Z"  # the end of the backfilled WEEK (tests/review/conftest.py)
TEMPLATE = """\
growth: 1.1
slos:
  P0: {ttft_s: 0.5, tpot_s: 0.05, objective: 0.95}
  P2: {ttft_s: 60, tpot_s: 0.2, objective: 0.9}
deployments:
  chat-8b-h100:
    streams:
      - {scene: chat, tier: P0, peak_rps: 1, input_tokens: {p50: 500, p95: 2000, max: 8000},
         output_tokens: {p50: 100, p95: 400, max: 900}}
      - {scene: code, tier: P0, peak_rps: 2, input_tokens: 900, output_tokens: 90}
    headroom: {tolerate: 1, cold_start_s: 0}
    candidates:
      - {name: h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1}
  batch-32b-a100:
    streams:
      - {scene: batch, tier: P2, peak_rps: 1, input_tokens: 3000, output_tokens: 250}
    headroom: {tolerate: 0, cold_start_s: 0}
    candidates:
      - {name: a100, model: Qwen2.5-32B, gpu: A100-80GB, tp: 2}
"""


def _plan(tmp_path, capsys, source, *extra, template=TEMPLATE, fmt="json"):
    (tmp_path / "demand.yaml").write_text(template)
    runs = [f"h100={knee_run(tmp_path, 'h100')}", f"a100={knee_run(tmp_path, 'a100')}"]
    rc = main(["plan", "replicas", "--demand", str(tmp_path / "demand.yaml"), "--runs", *runs, "--demand-from",
               source, "--out", str(tmp_path / "plan.yaml"), "--format", fmt, *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def _mean(quantiles: dict) -> float:
    return token_mix("test", "tokens", quantiles)[1]


@needs("prometheus", "promtool")
@pytest.mark.timeout(600)
def test_measured_from_prometheus_matches_the_simulated_weeks(week, tmp_path, capsys):
    url, truth, _ = week
    rc, out, err = _plan(tmp_path, capsys, f"prometheus:{url}", "--until", WEEK_END)
    assert rc == 0, err
    plan = json.loads(out)
    m = plan["measured_demand"]
    assert (m["source"], m["start"], m["end"], m["weeks"]) == (f"prometheus:{url}", "2026-11-02T00:00:00Z",
                                                               WEEK_END, 4)
    streams = {(s["deployment"], s["scene"], s["tier"]): s for s in m["streams"]}
    assert set(streams) == {("chat-8b-h100", "chat", "P0"), ("batch-32b-a100", "batch", "P2")}
    fleet = {w["deployment"]: w for w in yaml.safe_load(FLEET)["workloads"]}
    for (dep, _, _), s in streams.items():
        want = truth["deployments"][dep]
        # the peak hour of four growing weeks is the last week's: within a few % of the simulated arrivals
        assert s["peak_rps"] == pytest.approx(want["peak_requests_per_second"], rel=0.03), dep
        assert s["peak_hour"] == want["peak_hour"].replace("+00:00", "Z"), dep
        weekly = s["weekly_peaks"]
        assert len(weekly) == 4 and weekly == sorted(weekly) and weekly[-1] == s["peak_rps"], weekly
        assert s["input_mean"] == pytest.approx(_mean(fleet[dep]["input_tokens"]), rel=0.03), dep
        assert s["output_mean"] == pytest.approx(_mean(fleet[dep]["output_tokens"]), rel=0.03), dep
        assert m["growth_per_week"][dep] == pytest.approx(truth["growth_per_week"], abs=0.015), dep
    assert m["growth_applied"] == 1.1 and m["growth_from"].endswith("demand.yaml")
    assert m["from_template"] == ["chat-8b-h100/code/P0"]
    # the backfill writes no per-request token histogram: the file's shape, scaled to the measured means
    assert all(s["token_quantiles"] == "none" and s["input_tokens"] is None for s in streams.values())
    # the plan is sized on the measured peak and its token mix, times the growth applied
    chat = plan["deployments"]["chat-8b-h100"]
    (measured_chat,) = [s for s in chat["streams"] if s["scene"] == "chat"]
    assert measured_chat["peak_rps"] == streams[("chat-8b-h100", "chat", "P0")]["peak_rps"]
    s = streams[("chat-8b-h100", "chat", "P0")]
    assert chat["peak_tokens_per_second"] == pytest.approx(
        s["peak_rps"] * (s["input_mean"] + s["output_mean"]) + 2 * (900 + 90), rel=0.001)
    assert "measured_demand" in (tmp_path / "plan.yaml").read_text()

    rc, out, _ = _plan(tmp_path, capsys, f"prometheus:{url}", "--until", WEEK_END, "--growth", "1.3", fmt="table")
    assert rc == 0
    head = out.split("\n\n")[0]
    assert f"Measured demand from prometheus:{url}, 2026-11-02T00:00:00Z to {WEEK_END} (4 weeks)" in head
    assert "growth applied x1.3 (from --growth); the data shows " in head and "chat-8b-h100 +6." in head
    assert "not measured, figures from the demand file: chat-8b-h100/code/P0" in head
    assert "no per-request token histogram (llm_gateway_request_input_tokens, llm_gateway_request_output_tokens: an " \
           "exporter older than them), so the demand file's quantile shape scaled to the measured means: " \
           "batch-32b-a100/batch/P2, chat-8b-h100/chat/P0" in head
    assert all(f"wk{i}" in head for i in (1, 2, 3, 4))


# per stream: (input median, sigma), (output median, sigma) of lognormal token counts. chat-8b-h100's gateway has
# a request exporter with the token histograms; batch-32b-a100's an older one (the same counters, no histograms)
FED = {("chat-8b-h100", "chat", "P0"): ((700, 0.9), (130, 0.7)),
       ("chat-8b-h100", "code", "P0"): ((2500, 0.6), (300, 0.5)),
       ("batch-32b-a100", "batch", "P2"): ((3000, 0.5), (250, 0.4))}
OLDER = "batch-32b-a100"
N_FED = 1500  # requests a stream


def _span(i: int, key: tuple[str, str, str], tin: int, tout: int) -> dict:
    dep, route, tier = key
    attrs = {"llm.deployment": dep, "llm.route": route, "llm.tier": tier, "llm.tenant": "acme", "llm.outcome": "ok",
             "gen_ai.usage.input_tokens": tin, "gen_ai.usage.output_tokens": tout}
    return {"traceId": f"{i:032x}", "spanId": f"{i + 1:016x}", "name": "llm.request", "kind": 2,
            "startTimeUnixNano": str(time.time_ns()), "endTimeUnixNano": str(time.time_ns() + 10**9),
            "attributes": [{"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}}
                           for k, v in attrs.items()]}


def _otlp(spans: list[dict]) -> bytes:
    """An OTLP/JSON export request of root spans."""
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def _prom_value(url: str, q: str, auth: tuple[str, str] | None = None) -> float | None:
    try:
        r = httpx.get(f"{url}/api/v1/query", params={"query": q}, timeout=5, auth=auth).json()["data"]["result"]
    except (httpx.HTTPError, KeyError):  # Prometheus still starting
        return None
    return float(r[0]["value"][1]) if r else None


def _until(url: str, q: str, want: float, timeout: float = 60.0, auth: tuple[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while (got := _prom_value(url, q, auth)) != want:
        assert time.monotonic() < deadline, f"{q} is {got}, never {want}"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory, request):
    """A real Prometheus scraping (every second) a request exporter fed OTLP spans of two chat-8b-h100 streams and
    an older exporter's metrics for batch-32b-a100 (the same counters, without the token histograms): one warm-up
    request a stream first, so the series exist before the measured ones, then N_FED a stream. Where
    VictoriaMetrics is installed, the Prometheus remote-writes all it scrapes into the session's. Yields (URL, the
    fed token counts per stream, the VictoriaMetrics or None)."""
    from tests import victoria

    vm = request.getfixturevalue("victoria_metrics") if shutil.which(victoria.BINARY) else None
    out = tmp_path_factory.mktemp("scraped")
    rng = np.random.default_rng(5)
    fed = {k: tuple(np.clip(np.round(rng.lognormal(math.log(med), sig, N_FED)), 1, 100_000).astype(int)
                    for med, sig in sides) for k, sides in FED.items()}
    new, old = RequestMetrics(), RequestMetrics()
    store = TraceStore(out / "store").start()
    otlp = Server("127.0.0.1", 0, TraceReceiver(new, store).routes()).start()
    hist = tuple(TOKEN_HISTOGRAMS.values())
    servers = [otlp, Server("127.0.0.1", 0, metrics_routes(new.render)).start(),
               Server("127.0.0.1", 0, metrics_routes(lambda: "".join(  # an exporter older than the histograms
                   line for line in old.render().splitlines(keepends=True) if not any(h in line for h in hist)))).start()]
    old_recv = TraceReceiver(old, TraceStore(out / "old-store").start())
    port = free_port_block(1)
    targets = ", ".join(f"'{s.url.removeprefix('http://')}'" for s in servers[1:])
    (out / "prometheus.yml").write_text(f"global: {{scrape_interval: 1s}}\nscrape_configs:\n"
                                        f"  - {{job_name: requests, static_configs: [{{targets: [{targets}]}}]}}\n"
                                        + (yaml.safe_dump({"remote_write": [victoria.remote_write_config(vm)]})
                                           if vm else ""))
    url = f"http://127.0.0.1:{port}"
    log = out / "prometheus.log"
    # ready before the first query: until its TSDB is open, Prometheus answers 503 "Service Unavailable" in plain text
    prom = Process("prometheus", url, subprocess.Popen(
        ["prometheus", f"--config.file={out / 'prometheus.yml'}", f"--storage.tsdb.path={out / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log.open("w")), log)

    def post(batch: list[tuple[tuple[str, str, str], int, int]], first_id: int) -> None:
        for recv_old in (True, False):
            spans = [_span(first_id + i, k, tin, tout) for i, (k, tin, tout) in enumerate(batch)
                     if (k[0] == OLDER) == recv_old]
            if recv_old:
                assert old_recv.handle("application/json", "", _otlp(spans))[0] == 200
            else:
                for j in range(0, len(spans), 500):
                    r = httpx.post(f"{otlp.url}/v1/traces", content=_otlp(spans[j:j + 500]),
                                   headers={"Content-Type": "application/json"})
                    assert r.status_code == 200, r.text

    try:
        prom.ready("/-/ready")
        post([(k, 1, 1) for k in FED], 1)  # warm-up: 1 token each, in the first bucket of every series
        _until(url, f"sum({hist[0]}_count)", 2.0)
        _until(url, f'sum({by_name("llm_gateway_requests_total").name}{{deployment="{OLDER}"}})', 1.0)
        post([(k, int(fed[k][0][i]), int(fed[k][1][i])) for k in FED for i in range(N_FED)], 100)
        _until(url, f"sum({hist[1]}_count)", 2.0 + 2 * N_FED)
        _until(url, f'sum({by_name("llm_gateway_requests_total").name}{{deployment="{OLDER}"}})', 1.0 + N_FED)
        assert _prom_value(url, f'count({hist[0]}_count{{deployment="{OLDER}"}})') is None  # really without them
        yield url, fed, vm
    finally:
        prom.stop()
        for srv in servers:
            srv.stop()
        store.close()
        old_recv.store.close()


def _next_hour() -> str:
    """--until the end of this hour: the window then holds what was scraped a moment ago."""
    t = (math.floor(time.time() / 3600) + 1) * 3600
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@needs("prometheus")
def test_token_quantiles_from_the_histograms_land_within_a_bucket_of_the_requests(scraped, tmp_path, capsys):
    url, fed, _ = scraped
    rc, out, err = _plan(tmp_path, capsys, f"prometheus:{url}", "--weeks", "1", "--until", _next_hour())
    assert rc == 0, err
    plan = json.loads(out)
    streams = {(s["deployment"], s["scene"], s["tier"]): s for s in plan["measured_demand"]["streams"]}
    assert set(streams) == set(FED)
    for key, (tin, tout) in fed.items():
        s = streams[key]
        assert s["input_mean"] == pytest.approx(tin.mean(), rel=0.01), key  # the counters: exact up to extrapolation
        assert s["output_mean"] == pytest.approx(tout.mean(), rel=0.01), key
        if key[0] == OLDER:
            assert (s["token_quantiles"], s["input_tokens"], s["output_tokens"]) == ("none", None, None)
            continue
        assert s["token_quantiles"] == "histogram", key
        for side, fed_tokens in (("input_tokens", tin), ("output_tokens", tout)):
            for q, level in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
                truth = float(np.quantile(fed_tokens, level))
                # interpolated inside a bucket whose bounds are a factor 2 apart: within one bucket of the truth
                assert truth / 2 <= s[side][q] <= truth * 2, (key, side, q, s[side][q], truth)
            # max: the top of the highest bucket that has a request, at most twice the longest one
            assert fed_tokens.max() <= s[side]["max"] <= 2 * fed_tokens.max(), (key, side)
    # the plan is sized on the histogram quantiles where there are some, on the file's shape elsewhere
    planned = {(d, s["scene"]): s for d, dep in plan["deployments"].items() for s in dep["streams"]}
    chat = streams[("chat-8b-h100", "chat", "P0")]
    assert planned[("chat-8b-h100", "chat")]["input_tokens"] == {k: round(v, 1) for k, v in chat["input_tokens"].items()}
    assert set(planned[("batch-32b-a100", "batch")]["input_tokens"]) == {"p50", "max"}  # the file's: a number

    rc, out, _ = _plan(tmp_path, capsys, f"prometheus:{url}", "--weeks", "1", "--until", _next_hour(), fmt="table")
    head = out.split("\n\n")[0]
    assert rc == 0 and "peak hourly req/s and token quantiles where the source has them;" in head
    assert "no per-request token histogram (llm_gateway_request_input_tokens, llm_gateway_request_output_tokens: " \
           "an exporter older than them), so the demand file's quantile shape scaled to the measured means: " \
           "batch-32b-a100/batch/P2" in head
    assert "token quantiles" in head and "histogram" in head and "file's shape" in head


def _measured_from_both(tmp_path, capsys, prometheus: str, vm: Endpoint, *extra: str) -> tuple[dict, dict]:
    """The measured demand from ``prometheus`` and from the VictoriaMetrics at ``vm`` (its /prometheus prefix, basic
    auth from a password file, given as a user gives them: flags), each with ``extra``."""
    got = []
    for source, auth in ((prometheus, ()), (vm.url, ("--prometheus-user", vm.user, "--prometheus-password-file",
                                                     str(vm.secret.file)))):
        rc, out, err = _plan(tmp_path, capsys, f"prometheus:{source}", *extra, *auth)
        assert rc == 0, err
        got.append(json.loads(out)["measured_demand"])
    return got[0], got[1]


def _same_streams(prom: dict, vm: dict, rel: float, peaks: bool = True) -> None:
    assert [(s["deployment"], s["scene"], s["tier"]) for s in vm["streams"]] == \
           [(s["deployment"], s["scene"], s["tier"]) for s in prom["streams"]]
    for p, v in zip(prom["streams"], vm["streams"], strict=True):
        assert v["peak_hour"] == p["peak_hour"] and v["token_quantiles"] == p["token_quantiles"]
        for k in ("peak_rps", "input_mean", "output_mean") if peaks else ("input_mean", "output_mean"):
            assert v[k] == pytest.approx(p[k], rel=rel), (p["deployment"], k)
        if peaks:
            assert v["weekly_peaks"] == pytest.approx(p["weekly_peaks"], rel=rel)
        for side in ("input_tokens", "output_tokens"):
            assert (v[side] is None) == (p[side] is None)
            if p[side] is not None:
                assert v[side] == pytest.approx(p[side], rel=rel), (p["deployment"], side)


@needs("prometheus", "promtool", "victoria-metrics")
@pytest.mark.timeout(600)
def test_measured_from_victoriametrics_holding_the_weeks_equals_prometheus(week, vm_week, tmp_path, capsys):
    prom, got = _measured_from_both(tmp_path, capsys, week[0], vm_week, "--until", WEEK_END)
    _same_streams(prom, got, rel=0.001)
    assert got["growth_per_week"] == pytest.approx(prom["growth_per_week"], abs=0.001)
    assert got["source"] == f"prometheus:{vm_week.url}"


@needs("prometheus", "victoria-metrics")
def test_measured_from_what_prometheus_remote_wrote_to_victoriametrics(scraped, tmp_path, capsys):
    """Live: the Prometheus scraping the exporters remote-writes every sample into VictoriaMetrics; the plan reads
    the same token means and quantiles (``histogram_quantile`` over the buckets' increase) from both. The peak
    hour's req/s is where the engines part on series seconds old: MetricsQL's ``increase`` is the requests
    counted, PromQL's extrapolates half a scrape past the last sample of a series that lived a few seconds
    (docs/metrics-stores.md); over a store's weeks-old series the two agree (the test above)."""
    from tests.victoria import PASSWORD, USER

    url, _, vm = scraped
    hist = tuple(TOKEN_HISTOGRAMS.values())
    for q in (f"sum({hist[1]}_count)", f'sum({by_name("llm_gateway_requests_total").name}{{deployment="{OLDER}"}})'):
        _until(vm.url, q, _prom_value(url, q), auth=(USER, PASSWORD))  # everything Prometheus holds has arrived
    prom, got = _measured_from_both(tmp_path, capsys, url, vm.endpoint, "--weeks", "1", "--until", _next_hour())
    _same_streams(prom, got, rel=0.001, peaks=False)
    for p, v in zip(prom["streams"], got["streams"], strict=True):
        assert v["peak_rps"] == pytest.approx((1 + N_FED) / 3600, rel=1e-6)  # the warm-up and the fed requests
        assert p["peak_rps"] > v["peak_rps"]


@needs("prometheus", "promtool")
def test_a_window_without_data_is_one_line_and_exit_2(week, tmp_path, capsys):
    rc, out, err = _plan(tmp_path, capsys, f"prometheus:{week[0]}", "--until", "2026-06-01T00:00:00Z", "--weeks", "2")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--weeks: no requests between 2026-05-18T00:00:00Z and 2026-06-01T00:00:00Z" in err


def test_an_unreachable_prometheus_is_one_line_with_its_url_and_exit_2(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as s:
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    (tmp_path / "demand.yaml").write_text(TEMPLATE)
    done = subprocess.run([sys.executable, "-m", "goodput", "plan", "replicas", "--demand", str(tmp_path / "demand.yaml"),
                           "--simulate", "--demand-from", f"prometheus:{url}", "--out", str(tmp_path / "p.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"goodput: error: {url}: --demand-from: cannot reach Prometheus (ConnectError")
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("source, says", [
    ("influx:http://x", "--demand-from: influx:http://x: expected prometheus:http(s)://HOST:PORT or duckdb:"),
    ("duckdb:nope.duckdb", "nope.duckdb: --db: no such database"),
    ("duckdb:x.duckdb --weeks 53", "--weeks: 53: at most 52"),
    ("duckdb:x.duckdb --until 30.11.2026", "--until: 30.11.2026: expected an ISO time"),
])
def test_a_bad_source_is_one_line(tmp_path, capsys, source, says):
    rc, out, err = _plan(tmp_path, capsys, *source.split())
    assert rc == 2 and says in err and err.count("\n") == 1


def test_growth_overrides_the_demand_file_without_a_measurement(tmp_path, capsys):
    (tmp_path / "demand.yaml").write_text(TEMPLATE)
    runs = [f"h100={knee_run(tmp_path, 'h100')}", f"a100={knee_run(tmp_path, 'a100')}"]
    argv = ["plan", "replicas", "--demand", str(tmp_path / "demand.yaml"), "--runs", *runs, "--out",
            str(tmp_path / "plan.yaml"), "--format", "json"]
    assert main(argv) == 0
    file_growth = json.loads(capsys.readouterr().out)
    assert main([*argv, "--growth", "2"]) == 0
    flag_growth = json.loads(capsys.readouterr().out)
    assert file_growth["deployments"]["chat-8b-h100"]["growth"] == 1.1 and "measured_demand" not in file_growth
    assert flag_growth["deployments"]["chat-8b-h100"]["growth"] == 2.0


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two simulated hours a week apart (09:00-10:00 UTC, 4 then 5 req/s of BASE_WORKLOAD), each written by the
    simulator and ingested by the analyzer into one DuckDB file."""
    out = tmp_path_factory.mktemp("measured-store")
    con = connect(out / "traces.duckdb")
    try:
        for i, (start, rate) in enumerate((("2026-11-16T09:00:00Z", 4.0), ("2026-11-23T09:00:00Z", 5.0))):
            wl = copy.deepcopy(BASE_WORKLOAD)
            wl["arrival"]["rate"] = rate
            res = simulate(make_fleet(workloads=[wl], start_time=start, seed=11 + i), 3600.0)
            write_outputs(res, out / f"run{i}")
            ingest(con, [out / f"run{i}" / "requests.parquet"])
        counts = con.execute("SELECT count(*) FROM requests GROUP BY date_trunc('week', ts) ORDER BY 1").fetchall()
    finally:
        con.close()
    return out / "traces.duckdb", [c for (c,) in counts]


def test_measured_from_the_trace_store(store, tmp_path, capsys):
    db, counts = store
    template = TEMPLATE.replace("chat-8b-h100", "chat")
    rc, out, err = _plan(tmp_path, capsys, f"duckdb:{db}", "--until", WEEK_END, "--weeks", "2", template=template)
    assert rc == 0, err
    m = json.loads(out)["measured_demand"]
    (s,) = m["streams"]
    assert (s["deployment"], s["scene"], s["tier"]) == ("chat", "chat", "P0")
    # every arrival of an hour in one bucket: the peak is that hour's count, the weeks' peaks the two hours'
    assert s["weekly_peaks"] == [pytest.approx(c / 3600) for c in sorted(counts)]
    assert s["peak_rps"] == pytest.approx(5.0, rel=0.03) and s["peak_hour"] == "2026-11-23T09:00:00Z"
    assert s["weekly_peaks"][0] == pytest.approx(4.0, rel=0.03)
    # real quantiles from the requests, near the workload's (BASE_WORKLOAD: p50 500 / 100, p95 2000 / 400)
    assert s["input_tokens"]["p50"] == pytest.approx(500, rel=0.05)
    assert s["input_tokens"]["p95"] == pytest.approx(2000, rel=0.1)
    assert s["output_tokens"]["p50"] == pytest.approx(100, rel=0.05)
    assert m["growth_per_week"] == {"chat": None}  # two hours are not a week of hours: no trend claimed
    assert m["not_in_template"] == [] and "chat/code/P0" in m["from_template"]
    rc, out, _ = _plan(tmp_path, capsys, f"duckdb:{db}", "--until", WEEK_END, "--weeks", "2", template=template,
                       fmt="table")
    assert rc == 0 and "token quantiles measured" in out and "the data shows chat n/a" in out
    rc, _, err = _plan(tmp_path, capsys, f"duckdb:{db}", "--until", "2026-11-16T00:00:00Z", "--weeks", "1",
                       template=template)
    assert rc == 2 and "--weeks: no requests between 2026-11-09T00:00:00Z and 2026-11-16T00:00:00Z" in err


def test_help_names_the_measured_demand_flags(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "replicas", "--help"])
    out = capsys.readouterr().out
    assert all(f in out for f in ("--demand-from", "--weeks", "--until", "--growth"))
