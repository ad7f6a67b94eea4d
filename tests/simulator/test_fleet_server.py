"""The live fleet's HTTP servers under load and misbehaving clients: hundreds of concurrent streams, resets,
stalled clients, W3C trace context, and `goodput fleet serve` as a real process stopped by SIGTERM or Ctrl-C."""

import asyncio
import copy
import json
import logging
import signal
import socket
import struct
import threading
import time

import aiohttp
import httpx
import pytest

from goodput.simulator.http_host import HttpHost
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, fleet_serve, free_port_block, make_fleet

MODEL = "Llama-3.1-8B"
STREAMS = 500


class RecordingSink(SpanSink):
    """Keeps the finished requests themselves (their ``meta``), instead of writing spans."""

    def __init__(self, cfg):
        super().__init__(cfg, 1, None, None)
        self.requests = []

    def add(self, reqs):
        self.requests.extend(reqs)


def _one_replica(http: HttpHost):
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(replicas=1, engine={"max_num_seqs": 1024, "max_num_batched_tokens": 16384, "max_model_len": 4096})
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    sink = RecordingSink(cfg)
    base = free_port_block(1)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0, sink=sink, http=http)
    lf.start()
    return lf, base, sink


@pytest.fixture
def one_replica():
    """A 1 s idle timeout and small send buffers, so that stalled clients show quickly."""
    lf, base, sink = _one_replica(HttpHost(idle_timeout_s=1.0, send_buffer_bytes=16384))
    yield lf, base, sink
    lf.close()


@pytest.fixture
def one_replica_default_http():
    """The server as `fleet serve` runs it: 500 connections opened at once by a client sharing this process's
    GIL can take longer than a 1 s idle timeout to send their first byte, and are then rightly closed."""
    lf, base, sink = _one_replica(HttpHost())
    yield lf, base, sink
    lf.close()


async def _stream(session, url, i):
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"stream {i}"}], "max_tokens": 16,
            "stream": True, "ignore_eos": True}
    tokens, done = 0, False
    async with session.post(url, json=body) as r:
        if r.status != 200:
            return r.status, 0, False
        async for line in r.content:
            if line.startswith(b"data: [DONE]"):
                done = True
            elif line.startswith(b"data: "):
                for c in json.loads(line[6:])["choices"]:
                    tokens += len(c["delta"].get("content", "").split())
    return 200, tokens, done


def test_hundreds_of_concurrent_streams_none_refused(one_replica_default_http):
    lf, base, _ = one_replica_default_http

    async def run():
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            url = f"http://127.0.0.1:{base}/v1/chat/completions"
            return await asyncio.gather(*(_stream(session, url, i) for i in range(STREAMS)), return_exceptions=True)

    results = asyncio.run(asyncio.wait_for(run(), 150))
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {STREAMS} streams failed at the connection, e.g. {errors[0]!r}"
    assert [r for r in results if r != (200, 16, True)] == []


def _raw_stream_request(base: int, max_tokens: int) -> socket.socket:
    body = json.dumps({"model": MODEL, "prompt": "reset me", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", base), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"x-tenant: resetter\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def test_reset_mid_stream_aborts_the_request_quietly(one_replica, caplog, capfd):
    lf, base, sink = one_replica
    caplog.set_level(logging.DEBUG)
    s = _raw_stream_request(base, 3000)  # ~25 s of decoding if nobody aborts it
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # RST
    deadline = time.monotonic() + 10
    while not [r for r in sink.requests if r.meta and r.meta["tenant"] == "resetter"] and time.monotonic() < deadline:
        time.sleep(0.05)
    (req,) = [r for r in sink.requests if r.meta and r.meta["tenant"] == "resetter"]
    assert req.finish_reason == "abort" and 0 < req.generated < 3000
    assert lf.servers[0].vllm.finished["abort"] == 1
    assert any("client went away" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
    assert "Traceback" not in capfd.readouterr().err
    assert httpx.get(f"http://127.0.0.1:{base}/health").status_code == 200


def test_stalled_clients_are_let_go(one_replica):
    """Slowloris: connections that never finish their headers are closed after the idle timeout (1 s here)."""
    lf, base, _ = one_replica
    stalled = []
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", base), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        stalled.append(s)
    assert httpx.get(f"http://127.0.0.1:{base}/health").status_code == 200  # others are served meanwhile
    for s in stalled:
        assert s.recv(1024) == b"", "the server kept a stalled connection open"  # recv times out (10 s) otherwise
        s.close()


def test_a_client_that_stops_reading_is_dropped(one_replica, monkeypatch):
    """The stream's socket backs up; after STALL_S (0.2 s here) the server lets the client go and aborts."""
    import goodput.simulator.openai_api as api

    monkeypatch.setattr(api, "STALL_S", 0.2)
    lf, base, sink = one_replica
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.settimeout(10)
    s.connect(("127.0.0.1", base))
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 4000, "stream": True, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nx-tenant: sleeper\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    deadline = time.monotonic() + 30
    while not [r for r in sink.requests if r.meta and r.meta["tenant"] == "sleeper"] and time.monotonic() < deadline:
        time.sleep(0.05)
    (req,) = [r for r in sink.requests if r.meta and r.meta["tenant"] == "sleeper"]
    assert req.finish_reason == "abort" and req.generated < 4000, "the server waited for the client to read"
    s.close()


def test_a_body_that_never_arrives_gets_408(one_replica, monkeypatch):
    import goodput.simulator.openai_api as api

    monkeypatch.setattr(api, "BODY_TIMEOUT_S", 0.3)
    lf, base, _ = one_replica
    with socket.create_connection(("127.0.0.1", base), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408 ") and b'"code": 408' in answer


def test_an_oversize_chunked_body_gets_413(one_replica):
    lf, base, _ = one_replica

    def chunks():
        for _ in range(5):
            yield b"x" * (1024 * 1024)

    r = httpx.post(f"http://127.0.0.1:{base}/v1/completions", content=chunks(), timeout=10)
    assert r.status_code == 413 and r.json()["error"]["code"] == 413


def test_traceparent_reaches_the_request_meta(one_replica):
    lf, base, sink = one_replica
    trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    url = f"http://127.0.0.1:{base}/v1/completions"
    for tenant, header in (("tp-valid", f"00-{trace}-{parent}-01"), ("tp-invalid", f"00-{'0' * 32}-{parent}-01")):
        r = httpx.post(url, json={"model": MODEL, "prompt": "hi", "max_tokens": 2},
                       headers={"traceparent": header, "x-tenant": tenant})
        assert r.status_code == 200
    deadline = time.monotonic() + 10
    while len({r.meta["tenant"] for r in sink.requests if r.meta}) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    meta = {r.meta["tenant"]: r.meta for r in sink.requests if r.meta}
    assert meta["tp-valid"]["traceparent"] == (trace, parent)
    assert "traceparent" not in meta["tp-invalid"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_fleet_serve_process_answers_and_stops_on_a_signal(tmp_path, sig):
    base = free_port_block(12)
    with fleet_serve(tmp_path, base) as (proc, _):
        r = httpx.post(f"http://127.0.0.1:{base}/v1/chat/completions", timeout=30,
                       json={"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3
        assert httpx.get(f"http://127.0.0.1:{base}/metrics").text.count("vllm:num_requests_running") >= 1
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "goodput fleet stopped." in out
    assert "Traceback" not in err, err
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{base}/health", timeout=2)


@pytest.mark.parametrize("endpoint", ["not-a-url", "127.0.0.1:4318/v1/traces", "http://u:hunter2@127.0.0.1:99999/v1/traces"])
def test_fleet_serve_refuses_an_otlp_endpoint_that_is_not_a_url_in_one_line(capsys, endpoint):
    from goodput.cli import main
    from tests.conftest import REPO

    with pytest.raises(SystemExit) as e:
        main(["fleet", "serve", str(REPO / "examples" / "fleet.yaml"), "--otlp-endpoint", endpoint, "--duration", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--otlp-endpoint" in err and err.count("\n") == 1, err
    assert "hunter2" not in err


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_deeply_nested_json_body_is_a_400_in_openais_error_shape(one_replica, path):
    lf, base, _ = one_replica
    body = b'{"model": "x", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # 200 kB, under the body limit
    r = httpx.post(f"http://127.0.0.1:{base}{path}", content=body, headers={"Content-Type": "application/json"},
                   timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and "nested more than" in err["message"], err
    assert httpx.get(f"http://127.0.0.1:{base}/health", timeout=10).status_code == 200


def test_health_metrics_and_completions_are_served_while_300_slow_clients_trickle_headers(one_replica):
    """Header lines every 0.4 s never finish a request: each connection is closed at the 1 s idle timeout from
    its opening (not renewed by the bytes it trickles), while the replica answers everyone else."""
    from tests.slow_clients import SlowLoris

    lf, base, _ = one_replica
    url = f"http://127.0.0.1:{base}"
    with SlowLoris(("127.0.0.1", base), b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", 300, trickle_s=0.4) as loris:
        deadline = time.monotonic() + 30
        while loris.open < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        statuses = []
        with httpx.Client(timeout=20) as c:
            for _ in range(5):
                statuses += [c.get(f"{url}/health").status_code, c.get(f"{url}/metrics").status_code,
                             c.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2}
                                    ).status_code]
                time.sleep(0.4)
        assert statuses == [200] * 15
        deadline = time.monotonic() + 30
        while loris.reconnects < 300 and time.monotonic() < deadline:  # every one dropped at least once
            time.sleep(0.1)
        assert loris.reconnects >= 300, f"only {loris.reconnects} of 300 trickling connections were ever dropped"


def _stream_until_end(url: str, first: threading.Event, ends: list) -> None:
    """One long stream: sets ``first`` at its first token and records how it ended (its last finish_reason)."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    finish = None
    try:
        with httpx.stream("POST", url, json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    first.set()
                    finish = json.loads(line[6:])["choices"][0]["finish_reason"] or finish
    except httpx.HTTPError as e:
        finish = f"error: {e!r}"
    first.set()
    ends.append(finish)


def test_sigterm_drains_then_aborts_what_is_in_flight_and_exports_every_final_span(tmp_path):
    """Issue 35 item 8: streams in flight at SIGTERM used to keep only their early spans (no root, no outcome) for
    ever. Now the process stops taking requests, gives those in flight --drain seconds, aborts the rest and exports
    each one's root span with finish_reason abort (outcome cancelled); the clients' streams end with finish_reason abort."""
    import threading

    base, spans, n = free_port_block(12), tmp_path / "spans.jsonl", 24
    with fleet_serve(tmp_path, base, "--spans-file", str(spans), "--drain", "1") as (proc, _):
        url = f"http://127.0.0.1:{base}/v1/completions"
        ends: list = []
        firsts = [threading.Event() for _ in range(n)]
        threads = [threading.Thread(target=_stream_until_end, args=(url, f, ends), daemon=True) for f in firsts]
        for t in threads:
            t.start()
        assert all(f.wait(60) for f in firsts), ends
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        for t in threads:
            t.join(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert f"{n} request(s) still in flight were aborted" in out, out
    by_trace: dict = {}
    for line in spans.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    by_trace.setdefault(s["traceId"], []).append(s)
    assert len(by_trace) == n
    for trace, ss in by_trace.items():
        roots = [s for s in ss if s["name"] == "llm.request"]
        assert len(roots) == 1, (trace, [s["name"] for s in ss])  # before: llm.gateway and llm.queue only
        attrs = {a["key"]: next(iter(a["value"].values())) for a in roots[0]["attributes"]}
        assert (attrs["llm.finish_reason"], attrs["llm.outcome"]) == ("abort", "cancelled"), attrs
    assert ends == ["abort"] * n, ends  # 3,000 tokens do not finish in a 1 s drain: every stream ends, as aborted
