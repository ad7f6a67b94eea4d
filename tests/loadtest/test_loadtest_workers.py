"""The client's byte scan of SSE chunks against a real server's odd streams, and the schedule sharded over worker
processes (``--workers``) against the live fleet: every request once, shares adding up, Ctrl-C leaving nothing behind."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from goodput.cli import main
from goodput.loadtest import patterns
from goodput.loadtest.client import Client, ClientOptions, _decode, content_pieces
from goodput.loadtest.patterns import Step
from goodput.loadtest.workers import auto_workers, shares
from goodput.loadtest.workload import RequestSpec
from tests.conftest import REPO, fleet_serve, free_port_block
from tests.loadtest.exits import run_exit

SPEC = RequestSpec(50, 4, "lt", "P1", "chat", 0)
HEAD = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def _chunk(delta: dict | None = None, **extra) -> dict:
    return {**HEAD, "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}], **extra}


# (what the server streams, as SSE data payloads; the content pieces the client must count)
STREAMS = {
    # the role chunk has empty content; quotes, backslashes and unicode (escaped and raw) are content like any other
    "odd": ([_chunk({"role": "assistant", "content": ""}), _chunk({"content": 'say "content": "x"'}),
             _chunk({"content": "caf\u00e9 \\ \u2603"}), _chunk({"content": None}), _chunk({"content": "\"error\""}),
             _chunk({"content": "end"}, usage=None),
             _chunk(None, usage={"prompt_tokens": 11, "completion_tokens": 4})], 4),
    # vLLM's error event after the 200: the stream ends with it; the request is an error, not a success
    "error": ([_chunk({"content": "a"}), {"error": {"object": "error", "message": "boom", "type": "InternalServerError",
                                                     "code": 500}}], 1),
    "error-429": ([_chunk({"content": "a"}), {"error": {"message": "slow down", "code": 429}}], 1),
}


@pytest.fixture(scope="module")
def odd_server():
    """A real aiohttp server streaming STREAMS[name] at /NAME/v1/chat/completions, 0.3 s before the first content
    piece (after the role chunk), then [DONE] unless the stream is an error one."""
    port = free_port_block(1)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def stream(request):
        name = request.match_info["name"]
        events, _ = STREAMS[name]
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i, event in enumerate(events):
            if i == 1:
                await asyncio.sleep(0.3)
            text = json.dumps(event, separators=(",", ":") if i % 2 else (", ", ": "), ensure_ascii=bool(i % 3))
            await resp.write(b"data: " + text.encode() + b"\n\n")
        if not name.startswith("error"):
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def start():
        app = web.Application()
        app.router.add_post("/{name}/v1/chat/completions", stream)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        return runner

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    yield f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _send(url):
    async def go():
        client = Client([url], ClientOptions(model="m", timeout_s=30.0), 4)
        client.start_clock()
        try:
            return await client.send(client.record(0, 0, 0.0, SPEC), SPEC)
        finally:
            await client.aclose()
    return asyncio.run(go())


def test_odd_content_is_timed_from_the_first_content_piece_and_counted_exactly(odd_server):
    rec = _send(odd_server + "/odd")
    assert (rec.status, rec.error) == (200, "")
    assert rec.ttft_s >= 0.3  # the role chunk (empty content) came at once: the first token is the first content
    assert len(rec.itl_s) == STREAMS["odd"][1] - 1  # every gap between content pieces, no more
    assert (rec.input_tokens, rec.output_tokens) == (11, 4)  # from the usage chunk
    assert rec.done_s is not None


@pytest.mark.parametrize("name, error", [("error", "http_5xx"), ("error-429", "http_429")])
def test_an_error_event_mid_stream_is_the_request_s_error(odd_server, name, error):
    rec = _send(odd_server + "/" + name)
    assert (rec.status, rec.error, rec.output_tokens) == (200, error, 1)


def test_the_scan_agrees_with_json_whenever_it_answers():
    """Every payload the scan answers, it answers as the JSON decode would; the rest (usage, error, [DONE], several
    choices, odd values) it leaves to the decode."""
    payloads = [json.dumps(e, separators=sep, ensure_ascii=ascii_).encode()
                for events, _ in STREAMS.values() for e in events
                for sep in ((",", ":"), (", ", ": ")) for ascii_ in (True, False)]
    payloads += [b"[DONE]", b'{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}',
                 b'{"choices":[{"delta":{"content":1}}]}', b'{"choices":[{"message":{"content":"x"}}]}',
                 b'{"choices":[{"delta":{}}]}', b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":1}}']
    answered = 0
    for data in payloads:
        fast = content_pieces(data, True)
        if fast is not None:
            answered += 1
            assert fast == _decode(data, True)[0], data
    assert answered >= 8
    assert content_pieces(b'{"choices":[{"index":0,"text":" hi"}]}', False) == 1
    assert content_pieces(b'{"choices":[{"index":0,"text":""}]}', False) == 0
    for needs_json in (b"[DONE]", b'{"error":{"code":500}}', b'{"usage":{"completion_tokens":3},"choices":[]}'):
        assert content_pieces(needs_json, True) is None


def _step(index, start, end, concurrency=None, arrivals=None):
    return Step(index, f"s{index}", start, end, 0.0, None, concurrency, arrivals)


def test_shares_deal_arrivals_in_turn_and_split_concurrency():
    steps = [_step(0, 0, 5, arrivals=np.arange(5.0)), _step(1, 5, 9, arrivals=5 + np.arange(4.0)),
             _step(2, 9, 10, concurrency=5)]
    parts = shares(steps, 3)
    # arrival i of the whole plan goes to worker i mod 3, across the step boundary
    assert [p[0].arrivals_s.tolist() for p in parts] == [[0, 3], [1, 4], [2]]
    assert [p[1].arrivals_s.tolist() for p in parts] == [[6], [7], [5, 8]]
    assert [p[2].concurrency for p in parts] == [2, 2, 1] and all(p[2].arrivals_s is None for p in parts)


def test_auto_workers_follows_the_peak_token_rate_and_the_cpus():
    def specs(_i):
        return RequestSpec(100, 128, "t", "P1", "chat", 0)
    steady = [_step(0, 0, 10, arrivals=np.arange(5000) / 500)]  # 500/s x 128 tokens = 64,000 tokens/s
    assert auto_workers(steady, specs, cpus=64) == 4 and auto_workers(steady, specs, cpus=2) == 2
    assert auto_workers([_step(0, 0, 10, arrivals=np.arange(100) / 10)], specs, cpus=64) == 1
    burst = [_step(0, 0, 10, arrivals=np.sort(np.r_[np.arange(50) / 5, np.full(400, 3.5)]))]  # 400 due at once
    assert auto_workers(burst, specs, cpus=64) == 3
    assert auto_workers([_step(0, 0, 1, concurrency=2000)], specs, cpus=64) == 4


def test_run_help_states_the_workers_rule(capsys):
    with pytest.raises(SystemExit):
        main(["loadtest", "run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--workers auto|N" in out and "20,000 tokens/s" in out and "1 runs in this process" in out


@pytest.mark.parametrize("given", ["0", "two", "-1"])
def test_bad_workers_is_one_line_exit_2(capsys, given):
    with pytest.raises(SystemExit) as e:
        main(["loadtest", "run", "--target", "http://127.0.0.1:9", "--workload", "w.yaml", "--pattern", "poisson",
              "--slo", "ttft_p95=1s", "--out", "x", "--workers", given])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--workers" in err and "Traceback" not in err


WORKLOAD = "api: chat\ninput_tokens: {p50: 60, p95: 100, max: 120}\noutput_tokens: {p50: 6, p95: 10, max: 12}\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """``goodput fleet serve`` as a real process: the live fleet the workers send to."""
    tmp = tmp_path_factory.mktemp("ltworkers")
    base = free_port_block(10)
    with fleet_serve(tmp, base) as (proc, lines):
        yield f"http://127.0.0.1:{base}", tmp
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_a_sharded_run_records_every_scheduled_request_once(fleet, tmp_path, capsys):
    url, _ = fleet
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    argv = ["--target", url, "--workload", str(tmp_path / "w.yaml"), "--pattern", "poisson", "--rate", "15",
            "--duration", "2", "--seed", "3", "--slo", "ttft_p95=10s", "--format", "json", "--workers", "3"]
    rc = main(["loadtest", "run", *argv, "--out", str(tmp_path / "run")])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rc == run_exit(summary), capsys.readouterr().err
    table = pq.read_table(tmp_path / "run" / "requests.parquet").to_pydict()
    scheduled = patterns.schedule("poisson", duration_s=2, rate=15, seed=3).steps[0].arrivals_s
    n = len(scheduled)
    assert n >= 10 and len(table["index"]) == n
    assert table["index"] == list(range(n))  # every scheduled request once, in the schedule's order
    assert table["scheduled_s"] == pytest.approx(list(scheduled), abs=1e-9)
    assert len(set(table["trace_id"])) == n
    assert all(s is not None and s >= d for s, d in zip(table["sent_s"], table["scheduled_s"], strict=True))
    assert set(table["error"]) == {""}
    client = summary["client"]
    assert summary["complete"] and client["workers"] == 3
    per = summary["client_workers"]
    assert [w["worker"] for w in per] == [0, 1, 2]
    assert sum(w["requests"] for w in per) == n and all(w["requests"] in (n // 3, n // 3 + 1) for w in per)
    assert sum(w["output_tokens"] for w in per) == sum(table["output_tokens"])
    assert client["cpu_s"] == pytest.approx(sum(w["cpu_s"] for w in per))
    lags = sorted(s - d for s, d in zip(table["sent_s"], table["scheduled_s"], strict=True))
    assert client["schedule_lag_p50_s"] == pytest.approx(float(np.percentile(lags, 50)))  # over every worker's
    # the same run in one process sends the same requests: the specs follow each arrival's place in the schedule
    rc = main(["loadtest", "run", *argv[:-2], "--workers", "1", "--out", str(tmp_path / "one")])
    one = pq.read_table(tmp_path / "one" / "requests.parquet").to_pydict()
    assert rc == run_exit(tmp_path / "one")
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["client"]["workers"] == 1
    assert [(one["tier"][i], one["output_tokens"][i]) for i in range(n)] == \
           [(table["tier"][i], table["output_tokens"][i]) for i in range(n)]


def _successes(url):
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "vllm:request_success_total")


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _start_with_workers(url, tmp_path):
    """``goodput loadtest run --workers 2`` as a process, once its two workers exist and the fleet answers them:
    (the process, the workers' pids)."""
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    proc = subprocess.Popen([sys.executable, "-m", "goodput", "loadtest", "run", "--target", url, "--workload",
                             str(tmp_path / "w.yaml"), "--pattern", "poisson", "--rate", "10", "--duration", "120",
                             "--slo", "ttft_p95=10s", "--workers", "2", "--out", str(tmp_path / "run")],
                            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "200"})
    workers: set[int] = set()
    deadline = time.monotonic() + 90
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        workers = {p for p in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()}
        time.sleep(0.2)
    assert len(workers) == 2 and proc.poll() is None, proc.communicate()
    before = _successes(url)
    while _successes(url) - before < 6 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)  # the workers send and the fleet answers: the run is under way
    assert proc.poll() is None, proc.communicate()
    return proc, sorted(workers)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_with_workers_writes_the_partial_run_and_leaves_no_worker(fleet, tmp_path, sig):
    """Ctrl-C, or a SIGTERM from a service manager, mid-load: the same partial run, and no worker left."""
    url, _ = fleet
    out = tmp_path / "run"
    proc, workers = _start_with_workers(url, tmp_path)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, stderr
    assert "INCOMPLETE" in stderr and "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["client"]["workers"] == 2
    table = pq.read_table(out / "requests.parquet").to_pydict()
    assert len(table["index"]) == sum(w["requests"] for w in summary["client_workers"]) >= 6
    assert {w["worker"] for w in summary["client_workers"]} == {0, 1}
    assert all(not Path(f"/proc/{p}").exists() for p in workers), "a worker process outlived the run"


def test_a_worker_that_dies_is_named_and_the_others_measurements_kept(fleet, tmp_path):
    url, _ = fleet
    proc, workers = _start_with_workers(url, tmp_path)
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1, stderr
    assert "goodput: error: load-test worker" in stderr and f"(pid {workers[0]}) died" in stderr, stderr
    assert "killed by signal 9" in stderr and "Traceback" not in stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["complete"] is False and len(summary["client_failures"]) == 1
    (kept,) = summary["client_workers"]  # the survivor, stopped and kept
    table = pq.read_table(tmp_path / "run" / "requests.parquet").to_pydict()
    assert len(table["index"]) == kept["requests"] >= 3
    assert all(not Path(f"/proc/{p}").exists() for p in workers)


def test_a_sweep_runs_its_steps_over_workers(fleet, tmp_path, capsys):
    url, _ = fleet
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    rc = main(["loadtest", "run", "--target", url, "--workload", str(tmp_path / "w.yaml"), "--pattern", "sweep",
               "--rate", "4", "--step-s", "1", "--slo", "ttft_p95=1ms", "--workers", "2", "--out", str(tmp_path / "run"),
               "--format", "json"])
    assert rc == run_exit(tmp_path / "run"), capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (step,) = summary["steps"]
    assert summary["complete"] and summary["client"]["workers"] == 2 and step["requests"] >= 1
    assert len(pq.read_table(tmp_path / "run" / "requests.parquet")) == step["requests"]
