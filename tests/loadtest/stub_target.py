"""A small real HTTP server for the load-test client's tests: what the simulated fleet never answers on purpose.

Its first path segment picks the behaviour, so a test's target URL is ``http://127.0.0.1:PORT/BEHAVIOUR``:
``status-429`` / ``status-503`` answer that status, ``hang`` never answers, ``trickle`` streams a chunk every
0.2 s for 6 s, ``cut`` streams one chunk then drops the connection, ``html`` is a web page (not an OpenAI
server), ``gate`` holds every answer until ``gate_open`` is set (counting how many requests it held at once),
then streams two content chunks with usage. ``tokens`` streams one content event per requested token (1 ms apart,
as vLLM does one per engine step), then usage; a client that goes away mid-way is counted in ``dropped``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    """One request to the stub: ``POST /BEHAVIOUR`` runs the method ``BEHAVIOURS`` names for it."""

    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/html"):
            self._send(200, b"<html><body>It works!</body></html>", "text/html; charset=utf-8")
        else:
            self._send(200, json.dumps({"object": "list", "data": [{"id": "stub-model"}]}).encode())

    def do_POST(self) -> None:
        stub = self.server.stub
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with stub.lock:
            stub.seen += 1
            stub.headers.append({k.lower(): v for k, v in self.headers.items()})
        kind = self.path.split("/")[1]
        if kind.startswith("status-"):
            self._send(int(kind.split("-")[1]), b'{"error": {"message": "no"}}')
        elif kind in BEHAVIOURS:
            BEHAVIOURS[kind](self, stub, body)

    def _hang(self, stub: StubTarget, body: bytes) -> None:
        stub.closing.wait(30)

    def _trickle(self, stub: StubTarget, body: bytes) -> None:
        """A chunk every 0.2 s for 6 s: no read waits long, the whole takes long."""
        self._stream_head()
        for _ in range(30):
            if stub.closing.wait(0.2):
                return
            self._event({"choices": [{"index": 0, "delta": {"content": " slow"}}]})
        self.wfile.write(b"data: [DONE]\n\n")

    def _cut(self, stub: StubTarget, body: bytes) -> None:
        self._stream_head()
        self._event({"choices": [{"index": 0, "delta": {"content": " one"}}]})
        self.wfile.flush()
        self.close_connection = True

    def _gate(self, stub: StubTarget, body: bytes) -> None:
        with stub.lock:
            stub.held += 1
            stub.max_held = max(stub.max_held, stub.held)
        stub.gate_open.wait(30)
        with stub.lock:
            stub.held -= 1
        self._stream_head()
        for word in (" one", " two"):
            self._event({"choices": [{"index": 0, "delta": {"content": word}}]})
        self._event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _tokens(self, stub: StubTarget, body: bytes) -> None:
        n = min(int(json.loads(body)["max_tokens"]), 2000)
        self._stream_head()
        try:
            for _ in range(n):
                if stub.closing.wait(0.001):
                    return
                self._event({"choices": [{"index": 0, "delta": {"content": " tok"}}]})
            self._event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": n}})
            self.wfile.write(b"data: [DONE]\n\n")
        except ConnectionError:
            with stub.lock:
                stub.dropped += 1

    def _stream_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def _event(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


BEHAVIOURS: dict[str, Callable[[_Handler, StubTarget, bytes], None]] = {
    "hang": _Handler._hang, "trickle": _Handler._trickle, "cut": _Handler._cut, "gate": _Handler._gate,
    "tokens": _Handler._tokens,
}


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # the listen backlog: many clients connect at once
    daemon_threads = True

    def __init__(self, port: int, stub: StubTarget) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.stub = stub


class StubTarget:
    def __init__(self, port: int) -> None:
        self.gate_open = threading.Event()
        self.closing = threading.Event()
        self.lock = threading.Lock()
        self.held = 0
        self.max_held = 0
        self.seen = 0
        self.dropped = 0
        self.headers: list[dict[str, str]] = []
        self.server = _Server(port, self)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.closing.set()
        self.gate_open.set()
        self.server.shutdown()
        self.server.server_close()
