"""The Prometheus client against servers that stall, trickle and flood (real sockets on 127.0.0.1, one thread per
connection, every loop bounded): each ends in one error within the client's limits, never a hang or gigabytes.

Before: the timeout was httpx's per-read one, so a server that sent a byte faster than it held the client for as long
as it liked, and the whole body was read into memory whatever its size (a 50 MB answer drove ``review`` to 2.7 GB).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from goodput.foundation.promapi import Client, Malformed, Query, TooLarge, Unreachable, run_queries

QUERY = Query("demand", "sum(up)", 0.0, 600.0, 60.0)
ANSWER = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"deployment": "chat"}, "values": [[60.0 * i, "1"] for i in range(11)]}]}}).encode()
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
CAP = 2**20  # the tests' size cap: small, so a flood is quick to send
DEADLINE_S = 1.5


@contextmanager
def raw_server(behave: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A TCP server on a free loopback port that reads each request's head and then does ``behave`` with the
    connection; ``stop`` ends every behaviour's loop."""
    stop = threading.Event()
    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.settimeout(0.2)

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                data = b""
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    data += conn.recv(4096)
                behave(conn, stop)
            except OSError:
                pass  # the client gave up: what these tests want

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{lsock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        lsock.close()


def stall(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(30)  # accepts, reads the request, never answers


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    """A whole valid answer, a byte every 0.1 s: each read is quick, the exchange is not (~40 s)."""
    msg = HEAD + f"content-length: {len(ANSWER)}\r\n\r\n".encode() + ANSWER
    for b in msg:
        if stop.wait(0.1):
            return
        conn.sendall(bytes([b]))


def flood(conn: socket.socket, stop: threading.Event) -> None:
    """A body without a length that never ends (bounded here at 64 MiB): the connection's close would end it."""
    conn.sendall(HEAD + b"connection: close\r\n\r\n" + b'{"status": "success", "data": {"x": "')
    chunk = b"x" * 65536
    for _ in range(1024):
        if stop.is_set():
            return
        conn.sendall(chunk)


def declared(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(HEAD + f"content-length: {50 * 2**20}\r\n\r\n".encode() + b"{")
    stop.wait(30)


BOMB = gzip.compress(b'{"status": "success", "data": "' + b" " * (64 * 2**20) + b'"}')  # 64 MiB in ~64 KB


def gzip_bomb(conn: socket.socket, stop: threading.Event) -> None:
    """A small body that decodes to 64 MiB, sent though the client asked for identity."""
    conn.sendall(HEAD + f"content-encoding: gzip\r\ncontent-length: {len(BOMB)}\r\n\r\n".encode() + BOMB)


def nested(conn: socket.socket, stop: threading.Event) -> None:
    body = b"[" * 20000 + b"]" * 20000
    conn.sendall(HEAD + f"content-length: {len(body)}\r\n\r\n".encode() + body)


def _sync(url: str):
    with Client(url, DEADLINE_S, max_bytes=CAP) as c:
        return c.run(QUERY)


def _async(url: str):
    return run_queries(url, [QUERY], timeout=DEADLINE_S, max_bytes=CAP)[QUERY.key]


TRANSPORTS = pytest.mark.parametrize("ask", [_sync, _async], ids=["sync", "async"])


def _bounded(ask, url: str, limit_s: float = 20.0):
    """``ask(url)`` in a thread, so that a client that hangs fails the test instead of holding it."""
    out: dict = {}

    def go() -> None:
        try:
            out["value"] = ask(url)
        except Exception as e:  # noqa: BLE001 (handed to the test)
            out["error"] = e
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"the client was still waiting after {limit_s} s"
    return out


@TRANSPORTS
@pytest.mark.parametrize("behave", [stall, trickle], ids=["stall", "trickle"])
def test_a_server_that_stalls_or_trickles_is_cut_off_at_the_deadline(ask, behave):
    with raw_server(behave) as url:
        out = _bounded(ask, url)
    e = out.get("error")
    assert isinstance(e, Unreachable), out
    assert str(e) == f"{url}: demand: cannot reach Prometheus (no whole answer within {DEADLINE_S:g} s)"


def _with_peak(ask, behave) -> tuple[dict, int]:
    """What ``ask`` got from a server that does ``behave``, and tracemalloc's peak meanwhile."""
    tracemalloc.start()
    try:
        with raw_server(behave) as url:
            out = _bounded(ask, url)
        return out | {"url": url}, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@TRANSPORTS
@pytest.mark.parametrize("behave", [flood, declared], ids=["endless", "declared"])
def test_an_answer_over_the_size_cap_is_refused_while_it_streams(ask, behave):
    out, peak = _with_peak(ask, behave)
    e = out.get("error")
    assert isinstance(e, TooLarge), out
    assert str(e) == f"{out['url']}: demand: answer larger than the limit of {CAP} bytes"
    assert peak < 8 * CAP, f"peak {peak} bytes for a cap of {CAP}"


@TRANSPORTS
def test_a_compressed_answer_is_refused_before_it_is_decoded(ask):
    out, peak = _with_peak(ask, gzip_bomb)
    e = out.get("error")
    assert isinstance(e, Malformed) and "content-encoding 'gzip'" in str(e), out
    assert peak < 8 * CAP, f"peak {peak} bytes for a cap of {CAP}"


@TRANSPORTS
def test_a_deeply_nested_answer_is_malformed_not_a_recursion_error(ask):
    with raw_server(nested) as url:
        out = _bounded(ask, url)
    e = out.get("error")
    assert isinstance(e, Malformed), out
    assert "nested deeper than the limit of 64" in str(e) and "\n" not in str(e)


def test_the_sync_client_keeps_its_deadline_when_called_from_a_running_event_loop():
    import asyncio

    async def inside() -> dict:
        return _bounded(_sync, url)

    with raw_server(stall) as url:
        out = asyncio.run(inside())
    assert isinstance(out.get("error"), Unreachable), out


def test_a_quick_answer_still_parses():
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(HEAD + f"content-length: {len(ANSWER)}\r\n\r\n".encode() + ANSWER)

    with raw_server(answer) as url:
        (s,) = _sync(url)
        (a,) = _async(url)
    assert s.labels == a.labels == {"deployment": "chat"} and len(s.values) == 11
