"""The small HTTP face every exporter shares: ``/metrics``, ``/healthz``, extra routes, clean SIGTERM.

Binds 127.0.0.1 unless told otherwise. Handlers are plain callables returning (status, content type,
body, headers), so exporters stay testable without a server.

Hostile and unlucky clients are expected: every connection has a read timeout (a stalled upload is
dropped, not held), at most ``max_connections`` are served at once (the next ones get 503 with
Retry-After from one small refuser thread), the listen backlog takes bursts, chunked bodies are
decoded within the size limit, bad framing gets one 400 and a closed connection, and a client that
disconnects is a debug log line. ``stop`` drains: new requests get 503 with Retry-After while the ones
in flight finish, so nothing a route acknowledged is cut off by shutdown.
"""

from __future__ import annotations

import gzip
import logging
import queue
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from goodput.foundation.errors import ConfigError
from goodput.foundation.textformat import CONTENT_TYPE

__all__ = ["Response", "Route", "Server", "health_route", "healthz", "metrics_routes",
           "serve_until_signal"]

log = logging.getLogger(__name__)


Response = tuple[int, str, bytes, dict[str, str]]
Route = Callable[[BaseHTTPRequestHandler, bytes], Response]

_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_MAX_TRAILERS = 100


def healthz(h: BaseHTTPRequestHandler, body: bytes) -> Response:
    return 200, "text/plain", b"ok\n", {}


def health_route(problem: Callable[[], str | None]) -> Route:
    """``/healthz`` that answers 503 with the reason while ``problem()`` names one (a dead worker, a failing disk)."""
    def route(h: BaseHTTPRequestHandler, body: bytes) -> Response:
        reason = problem()
        if reason is None:
            return healthz(h, body)
        return 503, "text/plain", f"unhealthy: {reason}\n".encode(), {}

    return route


def metrics_routes(render: Callable[[], str],
                   problem: Callable[[], str | None] | None = None) -> dict[tuple[str, str], Route]:
    """The two routes every exporter serves; ``render`` runs per scrape so each scrape sees fresh values."""
    return {("GET", "/metrics"): lambda h, b: (200, CONTENT_TYPE, render().encode(), {}),
            ("GET", "/healthz"): healthz if problem is None else health_route(problem)}


class _Refused(Exception):
    """A request answered with ``status`` and the connection closed (bad framing, over the limit)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Gone(Exception):
    """The client went away mid-request."""


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    server_version = "goodput-exporter/0.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall

    def setup(self) -> None:
        self.timeout = self.server.timeout_s  # StreamRequestHandler applies it to the socket: reads and writes
        super().setup()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s: " + format, self.client_address[0], *args)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError, _Gone) as e:
            log.debug("client %s:%s disconnected: %s", *self.client_address[:2], str(e) or type(e).__name__)

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        route = self.server.routes.get((method, path))
        if route is None:
            allowed = [m for (m, p) in self.server.routes if p == path]
            status = 405 if allowed else 404
            # the body is not read: close rather than parse it as the next request
            self._reply((status, "text/plain", f"{status} {path}\n".encode(), {"Connection": "close"}))
            return
        if not self.server.enter():
            self._reply((503, "text/plain", b"shutting down\n",
                         {"Retry-After": str(self.server.retry_after_s), "Connection": "close"}))
            return
        try:
            try:
                body = self._body() if method == "POST" else b""
            except _Refused as e:
                self._reply((e.status, "text/plain", f"{e}\n".encode(), {"Connection": "close"}))
                return
            try:
                resp = route(self, body)
            except Exception as e:  # a failing route answers 500; the server keeps serving
                log.exception("route %s %s failed", method, path)
                resp = (500, "text/plain", f"internal error: {type(e).__name__}: {e}\n".encode(), {})
            self._reply(resp)
        finally:
            self.server.leave()

    def _body(self) -> bytes:
        """The request body, Content-Length or chunked, never more than ``max_body_bytes``."""
        limit = self.server.max_body_bytes
        codings = [c.strip().lower() for v in self.headers.get_all("Transfer-Encoding", []) for c in v.split(",")]
        lengths = self.headers.get_all("Content-Length", [])
        if codings:
            if lengths:
                raise _Refused(400, "both Transfer-Encoding and Content-Length")
            if codings != ["chunked"]:
                raise _Refused(501, f"unsupported Transfer-Encoding {', '.join(codings)!r}")
            return self._chunked(limit)
        if len(set(lengths)) > 1 or (lengths and not lengths[0].strip().isdigit()):
            raise _Refused(400, f"bad Content-Length {', '.join(lengths)!r}")
        length = int(lengths[0]) if lengths else 0
        if length > limit:
            raise _Refused(413, f"body over {limit} bytes")
        body = self.rfile.read(length)
        if len(body) < length:
            raise _Gone(f"after {len(body)} of {length} body bytes")
        return body

    def _chunked(self, limit: int) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            if not line:
                raise _Gone("in a chunked body")
            size = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not _CHUNK_SIZE.fullmatch(size):
                raise _Refused(400, "bad chunk size line")
            n = int(size, 16)
            if n == 0:
                break
            total += n
            if total > limit:
                raise _Refused(413, f"body over {limit} bytes")
            data = self.rfile.read(n)
            if len(data) < n:
                raise _Gone("in a chunk")
            parts.append(data)
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _Refused(400, "chunk data not followed by CRLF")
        for _ in range(_MAX_TRAILERS):  # trailer fields, ignored, up to the blank line
            line = self.rfile.readline(8192)
            if not line:
                raise _Gone("in the trailers")
            if line in (b"\r\n", b"\n"):
                return b"".join(parts)
        raise _Refused(400, f"more than {_MAX_TRAILERS} trailer fields")

    def _reply(self, resp: Response) -> None:
        status, ctype, body, headers = resp
        if len(body) > 1024 and "gzip" in (self.headers.get("Accept-Encoding") or ""):
            body = gzip.compress(body, 1)
            headers = {**headers, "Content-Encoding": "gzip"}
        if headers.get("Connection") == "close":
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")


class Server(ThreadingHTTPServer):
    """A threaded HTTP server with a thread per connection, up to ``max_connections``; see the module docstring."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the listen backlog: a burst of connects waits instead of being reset

    def __init__(self, host: str, port: int, routes: dict[tuple[str, str], Route],
                 max_body_bytes: int = 16 * 1024 * 1024, *, timeout_s: float = 30.0, max_connections: int = 256,
                 retry_after_s: int = 1) -> None:
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._refusals: queue.Queue[socket.socket] = queue.Queue(maxsize=max_connections)
        self._state = threading.Condition()
        self._in_flight = 0
        self.draining = False
        try:
            super().__init__((host, port), _Handler)
        except OSError as e:
            raise ConfigError(f"{host}:{port}", "", f"cannot listen: {e.strerror or e}") from None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ connections

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                self._refusals.put_nowait(request)
            except queue.Full:  # even the refuser is behind: drop without an answer
                self.shutdown_request(request)
            return
        name = f"http-{self.server_address[1]}-conn"
        threading.Thread(target=self._serve_connection, args=(request, client_address), name=name,
                         daemon=True).start()

    def _serve_connection(self, request, client_address) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse_loop(self) -> None:
        """Answer connections beyond the cap with 503, then wait (briefly) for the client to close first, so the
        answer is not lost to a reset."""
        answer = (f"HTTP/1.1 503 Service Unavailable\r\nRetry-After: {self.retry_after_s}\r\n"
                  "Content-Type: text/plain\r\nContent-Length: 21\r\nConnection: close\r\n\r\n"
                  "too many connections\n").encode()
        while (sock := self._refusals.get()) is not None:
            try:
                sock.settimeout(1.0)
                sock.sendall(answer)
                sock.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline and sock.recv(65536):
                    pass
            except OSError as e:
                log.debug("refused client disconnected: %s", e)
            finally:
                self.shutdown_request(sock)

    def handle_error(self, request, client_address) -> None:
        log.exception("connection from %s failed", client_address)

    # ------------------------------------------------------------------ drain

    def enter(self) -> bool:
        """Count a request in flight, unless draining (then the caller answers 503)."""
        with self._state:
            if self.draining:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._state:
            self._in_flight -= 1
            self._state.notify_all()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Server:
        self.thread = threading.Thread(target=self.serve_forever, name=f"http-{self.server_address[1]}", daemon=True)
        self.thread.start()
        threading.Thread(target=self._refuse_loop, name=f"http-{self.server_address[1]}-refuse", daemon=True).start()
        return self

    def stop(self, drain_s: float = 30.0) -> None:
        """Stop taking requests (503 with Retry-After), wait up to ``drain_s`` for those in flight, then close."""
        with self._state:
            self.draining = True
            if not self._state.wait_for(lambda: self._in_flight == 0, timeout=drain_s):
                log.warning("%s: %d request(s) still in flight after %.0f s", self.url, self._in_flight, drain_s)
        if self.thread is not None:
            self.shutdown()
        self._refusals.put(None)  # type: ignore[arg-type]  # ends the refuser
        self.server_close()


def serve_until_signal(stop: Callable[[], None], duration: float | None = None) -> None:
    """Block until SIGTERM, Ctrl-C or ``duration`` seconds, then call ``stop`` (which flushes and closes)."""
    done = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    deadline = time.monotonic() + duration if duration else None
    try:
        while not done.wait(0.2):
            if deadline is not None and time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop()
