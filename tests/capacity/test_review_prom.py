"""The review's Prometheus client against servers that are not Prometheus: each answer it cannot use is one
``ConfigError`` naming the server and the query, never a traceback (real sockets, a real HTTP server)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from capacity.review.prom import Query, run_queries
from goodput.foundation.errors import ConfigError

ANSWERS = {
    "not json": (200, "application/json", b"{not json"),
    "a json list": (200, "application/json", b"[1, 2]"),
    "no data": (200, "application/json", b'{"status": "success"}'),
    "wrong shape": (200, "application/json", b'{"status": "success", "data": {"result": [{"metric": {}}]}}'),
    "a bad value": (200, "application/json",
                    b'{"status": "success", "data": {"result": [{"metric": {}, "values": [[1, "x"]]}]}}'),
    "an error page": (502, "text/html", b"<html>bad gateway</html>"),
}


@contextmanager
def serving(status: int, ctype: str, body: bytes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_an_answer_that_is_not_prometheus_is_one_error_naming_the_query(answer):
    with serving(*ANSWERS[answer]) as url, pytest.raises(ConfigError) as e:
        run_queries(url, [Query("demand", "up", 0.0, 600.0, 60.0)])
    assert url in str(e.value) and "demand" in str(e.value) and "\n" not in str(e.value)


def test_a_connection_reset_mid_answer_names_the_url():
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    def reset() -> None:
        for _ in range(3):  # httpx may retry once on a fresh connection
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()

    threading.Thread(target=reset, daemon=True).start()
    try:
        with pytest.raises(ConfigError) as e:
            run_queries(url, [Query("demand", "up", 0.0, 600.0, 60.0)], timeout=10.0)
    finally:
        listener.close()
    assert url in str(e.value) and "cannot reach" in str(e.value)
