"""The OTLP receiver against hostile bodies, over real sockets: integers past Python's 4,300-digit limit and slow
uploads that would hold the shared body budget."""

import logging
import socket
import threading
import time

import httpx
import pytest

from goodput.exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server
from tests.exporters.test_slow_clients import _body


@pytest.fixture
def receiver(tmp_path):
    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=3600).start()
    otlp = Server("127.0.0.1", 0, TraceReceiver(metrics, store).routes(), max_body_bytes=OTLP_MAX_BODY_BYTES,
                  timeout_s=5).start()
    try:
        yield otlp, metrics
    finally:
        otlp.stop(drain_s=5)
        store.close()


LONG = "9" * 5000


@pytest.mark.parametrize("body", [
    '{"resourceSpans": ' + LONG + "}",  # a bare number: json.loads itself refuses it
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "a" * 32 + '", "spanId": "' + "b" * 16
    + '", "startTimeUnixNano": "' + LONG + '", "endTimeUnixNano": 1}]}]}]}',  # as the JSON mapping's string
    '{"resourceSpans": [{"resource": {"attributes": [{"key": "n", "value": {"intValue": "' + LONG + '"}}]}}]}',
])
def test_an_integer_past_the_digit_limit_is_a_400_in_one_line_without_a_traceback(receiver, body, caplog):
    otlp, metrics = receiver
    with caplog.at_level(logging.DEBUG):
        r = httpx.post(f"{otlp.url}/v1/traces", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error.startswith("bad OTLP payload: ") and "\n" not in error
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback in the exporter's log"
    assert sum(metrics.rejected_payloads.values()) == 1


class SlowUploads:
    """One thread per loopback address (127.0.0.2, ...), each declaring a ``declared``-byte body and trickling
    ``piece`` bytes every ``every_s``, reconnecting at once whenever the server drops it; counts the drops."""

    def __init__(self, addr: tuple[str, int], n: int = 4, declared: int = 32 * 2**20 - 1, piece: int = 1024,
                 every_s: float = 0.25) -> None:
        self.addr, self.declared, self.piece, self.every_s = addr, declared, piece, every_s
        self.stop = threading.Event()
        self.drops = [0] * n
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]

    def __enter__(self) -> "SlowUploads":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def _run(self, i: int) -> None:
        head = (f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                f"Content-Length: {self.declared}\r\n\r\n").encode()
        while not self.stop.is_set():
            try:
                with socket.create_connection(self.addr, timeout=2, source_address=(f"127.0.0.{2 + i}", 0)) as s:
                    s.sendall(head)
                    while not self.stop.wait(self.every_s):
                        s.sendall(b"\0" * self.piece)
            except OSError:
                pass
            if not self.stop.is_set():
                self.drops[i] += 1


def test_four_slow_32_mib_uploads_do_not_starve_legitimate_posts(receiver):
    otlp, metrics = receiver  # 32 MiB bodies, 128 MiB buffered per port, as run_request_exporter builds it
    statuses = []
    with SlowUploads(otlp.server_address[:2]) as attack, httpx.Client(timeout=10) as client:
        time.sleep(1.0)  # every uploader has declared its 32 MiB (before: all 128 MiB reserved up front)
        for i in range(10):
            statuses.append(client.post(f"{otlp.url}/v1/traces", content=_body(i),
                                        headers={"Content-Type": "application/x-protobuf"}).status_code)
            time.sleep(0.4)
        drops = list(attack.drops)
    assert statuses == [200] * 10, statuses
    # 4 KiB/s is under the 64 KiB/s floor: each upload is dropped once its 2 s grace is spent, well before the 5 s
    # request deadline (~6 s of attack: at least one drop each at the floor, none if only the deadline acted)
    assert min(drops) >= 2, drops


def test_one_peer_holds_at_most_half_the_body_budget(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def hold(h, body):
        if body.startswith(b"x"):  # the first peer's post stays in the route, its body held
            entered.set()
            release.wait(10)
        return 200, "text/plain", b"ok\n", {}

    srv = Server("127.0.0.1", 0, {("POST", "/hold"): hold}, max_body_bytes=1000, max_buffered_bytes=2000).start()
    try:
        with socket.create_connection(srv.server_address[:2], source_address=("127.0.0.2", 0)) as first:
            first.sendall(b"POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000)
            assert entered.wait(10)  # 127.0.0.2 holds its share, 1,000 of 2,000 bytes
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=5) as same_peer:
                again = same_peer.post(f"{srv.url}/hold", content=b"y" * 10)
            assert again.status_code == 503 and "this client is sending 1000 bytes" in again.text, again.text
            other = httpx.post(f"{srv.url}/hold", content=b"z" * 900, timeout=5)  # from 127.0.0.1: its own share
            release.set()
            assert other.status_code == 200
    finally:
        release.set()
        srv.stop(drain_s=5)
