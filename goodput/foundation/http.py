"""The small HTTP face every exporter shares: ``/metrics``, ``/healthz``, extra routes, clean SIGTERM.

Binds 127.0.0.1 unless told otherwise. Handlers are plain callables returning (status, content type,
body, headers), so exporters stay testable without a server.

Hostile and unlucky clients are expected. Each request (its line, headers and body, and the keep-alive wait
before it) must arrive whole within ``timeout_s`` of the connection starting to wait for it: the deadline is
for the request, not per read, so a client that trickles a header line every few seconds is dropped all the
same. At most ``max_connections`` connections are held, and at most ``max_connections_per_client`` from one
peer address; a connection beyond either cap evicts the one (of that peer, or of all) that has waited longest
for its request, so a well-behaved client (a scrape, a health check, a post sent at once) is served while
slow ones are stalled; only when every held connection is busy in a route is the new one answered 503 with
Retry-After (from one small refuser thread). Bodies buffered at once are capped at ``max_buffered_bytes``
across all connections and at ``max_buffered_per_client`` (half of it) from one peer address, counted as the bytes
arrive, not as a Content-Length declares them (a 32 MiB upload that trickles holds what it sent, not 32 MiB);
beyond either cap the request gets 503 with Retry-After. A body must also keep arriving at ``min_body_rate``
bytes/s on average after a ``BODY_GRACE_S`` start, or the connection is dropped: slow uploads cannot sit on the
budget or a connection for the whole deadline. The listen backlog takes
bursts, chunked bodies are decoded within the size limit, bad framing gets one 400 and a closed connection,
and a client that disconnects is a debug log line. ``stop`` drains: new requests get 503 with Retry-After
while the ones in flight finish, so nothing a route acknowledged is cut off by shutdown.

A thread per connection, not an event loop: routes are plain blocking callables (a Parquet write, a render
under a lock), the caps bound the threads, and eviction plus the deadline bound what slow clients can hold.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import math
import queue
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from goodput.foundation.errors import ConfigError
from goodput.foundation.textformat import CONTENT_TYPE

__all__ = ["Response", "Route", "Server", "Sigterm", "health_route", "healthz", "http_url_problem",
           "metrics_routes", "redact_url", "serve_until_signal"]

log = logging.getLogger(__name__)


Response = tuple[int, str, bytes, dict[str, str]]
Route = Callable[[BaseHTTPRequestHandler, bytes], Response]

_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_PASSWORD = re.compile(r"(?<=//)([^/?#@]*?):[^/?#@]*@")  # the password of a URL's user-info part


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info replaced by ``***``, for error messages and logs."""
    return _PASSWORD.sub(r"\1:***@", url)


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL with a host and a port in 1..65535 that a client can request; None if
    it is. The message quotes the URL with its password redacted."""
    shown = redact_url(url)
    try:
        u = httpx.URL(url)
        if u.port is not None and not 0 < u.port < 65536:
            raise ValueError(f"port {u.port} is not in 1..65535")
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        return f"not a valid URL {shown!r}: {redact_url(str(e))}"
    if u.scheme not in ("http", "https") or not u.host:
        return f"not an http(s) URL with a host: {shown!r}"
    return None
_MAX_TRAILERS = 100
BODY_GRACE_S = 2.0  # a body's first bytes may take this long (a client's TLS / window ramp-up) before its rate counts
MIN_BODY_RATE = 64 * 1024  # bytes/s: a 32 MiB body needs ~8.5 min at this rate, so the deadline binds first for it
_READ = 64 * 1024  # body bytes reserved and read at a time
DRAIN_S = 5.0  # ``Server.stop``'s default wait for the requests in flight: a small part of Kubernetes' 30 s grace


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


class _DeadlineReader(io.RawIOBase):
    """The socket's reads, each given only the time left until ``deadline`` (monotonic): a deadline for the whole
    request, which a per-read timeout is not (a byte every 29 s would renew a 30 s one forever). While a body is
    read (``body_rate`` set), also a rate floor: by ``BODY_GRACE_S + n / rate`` seconds after the body began, more
    than ``n`` of its bytes must have arrived."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline = math.inf
        self.body_rate = 0.0  # bytes/s a body must keep up; 0 between bodies
        self.body_start = 0.0
        self.body_received = 0

    def readable(self) -> bool:
        return True

    def start_body(self, rate: float) -> None:
        self.body_rate, self.body_start, self.body_received = rate, time.monotonic(), 0

    def readinto(self, b) -> int:
        now = time.monotonic()
        left = self.deadline - now
        if left <= 0:
            raise TimeoutError("request not received whole within the deadline")
        if self.body_rate:
            by = self.body_start + BODY_GRACE_S + self.body_received / self.body_rate - now
            if by <= 0:
                raise TimeoutError(f"body arriving slower than {self.body_rate:.0f} bytes/s")
            left = min(left, by)
        self.sock.settimeout(left)
        try:
            n = self.sock.recv_into(b)
        except TimeoutError:
            if self.body_rate and time.monotonic() < self.deadline:
                raise TimeoutError(f"body arriving slower than {self.body_rate:.0f} bytes/s") from None
            raise
        self.body_received += n
        return n


class _Conn:
    """One held connection: its peer, and since when it has waited for a request (None while a route runs)."""

    __slots__ = ("client", "evicted", "sock", "waiting_since")

    def __init__(self, sock: socket.socket, client: str) -> None:
        self.sock, self.client = sock, client
        self.waiting_since: float | None = time.monotonic()
        self.evicted = False


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    server_version = "goodput-exporter/0.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall

    def setup(self) -> None:
        self.request.settimeout(self.server.timeout_s)  # writes keep it; reads go through the deadline below
        super().setup()
        self.rfile.close()  # reads go through the request deadline instead
        self.reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self.reader)
        self.conn: _Conn = self.server.conn_of(self.connection)
        self.reserved = 0

    def handle_one_request(self) -> None:
        self.reader.deadline = self.server.waiting(self.conn) + self.server.timeout_s
        super().handle_one_request()

    def log_message(self, format: str, *args) -> None:  # signature of the base class
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
                retry = {"Retry-After": str(self.server.retry_after_s)} if e.status == 503 else {}
                self._reply((e.status, "text/plain", f"{e}\n".encode(), {"Connection": "close", **retry}))
                return
            finally:
                self.reader.body_rate = 0.0
            if not self.server.busy(self.conn):
                raise _Gone("evicted while its request was still arriving")
            try:
                resp = route(self, body)
            except Exception as e:  # a failing route answers 500; the server keeps serving
                log.exception("route %s %s failed", method, path)
                resp = (500, "text/plain", f"internal error: {type(e).__name__}: {e}\n".encode(), {})
            self._release_body()  # before the reply: a client that has its answer may find the budget back
            self._reply(resp)
        finally:
            self._release_body()
            self.server.leave()

    def _release_body(self) -> None:
        self.server.unreserve(self.reserved, self.conn.client)
        self.reserved = 0

    def _read_body(self, n: int) -> list[bytes]:
        """``n`` body bytes as they arrive, each piece counted against the buffer caps before it is read (503 when
        a cap is reached); fewer only when the client went away."""
        parts = []
        while n > 0:
            step = min(n, _READ)
            refusal = self.server.reserve(step, self.conn.client)
            if refusal:
                raise _Refused(503, f"{refusal}; retry later")
            self.reserved += step
            data = self.rfile.read(step)
            parts.append(data)
            if len(data) < step:
                break
            n -= step
        return parts

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
        self.reader.start_body(self.server.min_body_rate)
        body = b"".join(self._read_body(length))
        if len(body) < length:
            raise _Gone(f"after {len(body)} of {length} body bytes")
        return body

    def _chunked(self, limit: int) -> bytes:
        parts, total = [], 0
        self.reader.start_body(self.server.min_body_rate)
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
            data = self._read_body(n)
            if sum(map(len, data)) < n:
                raise _Gone("in a chunk")
            parts += data
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
        self.connection.settimeout(self.server.timeout_s)  # the whole answer is sent within it (sendall)
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
                 max_connections_per_client: int = 64, max_buffered_bytes: int | None = None,
                 max_buffered_per_client: int | None = None, min_body_rate: float = MIN_BODY_RATE,
                 retry_after_s: int = 1) -> None:
        """``timeout_s``: the whole-request deadline (and the time one answer may take to send);
        ``max_buffered_bytes``: request bodies held at once across connections (default 4 x ``max_body_bytes``);
        ``max_buffered_per_client``: ... from one peer address (default half that); ``min_body_rate``: bytes/s a
        body must keep up after ``BODY_GRACE_S``."""
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        self.max_buffered_bytes = 4 * max_body_bytes if max_buffered_bytes is None else max_buffered_bytes
        self.max_buffered_per_client = (self.max_buffered_bytes // 2 if max_buffered_per_client is None
                                        else max_buffered_per_client)
        self.min_body_rate = min_body_rate
        self._buffered_of: dict[str, int] = {}
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self._conns: dict[socket.socket, _Conn] = {}
        self._per_client: dict[str, int] = {}
        self._buffered = 0
        self._lock = threading.Lock()
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
        host, port = self.socket.getsockname()[:2]  # server_address, typed for any address family
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ connections

    def process_request(self, request, client_address) -> None:
        client = str(client_address[0])
        with self._lock:
            if self._per_client.get(client, 0) >= self.max_connections_per_client:
                room = self._evict(c for c in self._conns.values() if c.client == client)
            elif len(self._conns) >= self.max_connections:
                room = self._evict(self._conns.values())
            else:
                room = True
            if room:
                self._conns[request] = _Conn(request, client)
                self._per_client[client] = self._per_client.get(client, 0) + 1
        if not room:
            try:
                self._refusals.put_nowait(request)
            except queue.Full:  # even the refuser is behind: drop without an answer
                self.shutdown_request(request)
            return
        name = f"http-{self.server_address[1]}-conn"
        threading.Thread(target=self._serve_connection, args=(request, client_address), name=name,
                         daemon=True).start()

    def _evict(self, conns) -> bool:
        """Close the connection of ``conns`` that has waited longest for its request (under ``_lock``); False
        when every one is busy in a route."""
        waiting = [c for c in conns if c.waiting_since is not None]
        if not waiting:
            return False
        victim = min(waiting, key=lambda c: c.waiting_since)
        self._drop(victim)
        victim.evicted = True
        with contextlib.suppress(OSError):  # its thread's read returns at once and the thread ends
            victim.sock.shutdown(socket.SHUT_RDWR)
        log.debug("evicted %s: waited %.1f s for its request", victim.client, time.monotonic() - victim.waiting_since)
        return True

    def _drop(self, conn: _Conn) -> None:
        del self._conns[conn.sock]
        left = self._per_client[conn.client] - 1
        if left:
            self._per_client[conn.client] = left
        else:
            del self._per_client[conn.client]

    def conn_of(self, sock: socket.socket) -> _Conn:
        with self._lock:
            return self._conns.get(sock) or _Conn(sock, "?")  # absent only once already evicted

    def waiting(self, conn: _Conn) -> float:
        """Mark ``conn`` waiting for a request (evictable); the time it began waiting."""
        with self._lock:
            if conn.waiting_since is None:
                conn.waiting_since = time.monotonic()
            return conn.waiting_since

    def busy(self, conn: _Conn) -> bool:
        """Mark ``conn``'s request received whole (no longer evictable); False if it was evicted meanwhile."""
        with self._lock:
            conn.waiting_since = None
            return not conn.evicted

    def reserve(self, n: int, client: str) -> str | None:
        """Count ``n`` body bytes from ``client`` as buffered; why not (a cap reached), or None."""
        with self._lock:
            mine = self._buffered_of.get(client, 0)
            if mine + n > self.max_buffered_per_client:
                return f"this client is sending {self.max_buffered_per_client} bytes of request bodies already"
            if self._buffered + n > self.max_buffered_bytes:
                return f"the server is buffering {self.max_buffered_bytes} bytes of request bodies already"
            self._buffered += n
            self._buffered_of[client] = mine + n
            return None

    def unreserve(self, n: int, client: str) -> None:
        if not n:
            return
        with self._lock:
            self._buffered -= n
            left = self._buffered_of[client] - n
            if left:
                self._buffered_of[client] = left
            else:
                del self._buffered_of[client]

    def _serve_connection(self, request, client_address) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                if request in self._conns:  # not evicted (an evicted one was dropped then)
                    self._drop(self._conns[request])

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

    def stop(self, drain_s: float = DRAIN_S) -> None:
        """Stop taking requests (503 with Retry-After), wait up to ``drain_s`` for those in flight, then close."""
        with self._state:
            self.draining = True
            if not self._state.wait_for(lambda: self._in_flight == 0, timeout=drain_s):
                log.warning("%s: %d request(s) still in flight after %.0f s", self.url, self._in_flight, drain_s)
        if self.thread is not None:
            self.shutdown()
        self._refusals.put(None)  # type: ignore[arg-type]  # ends the refuser
        self.server_close()


class Sigterm:
    """SIGTERM caught from the moment this is made, so a process told to stop during its start-up (its log open, its
    sockets bound) still drains instead of dying by the default action: make it first thing, before anything that
    must be drained, and hand it to ``serve_until_signal``. ``at`` is when the signal came (monotonic): a shutdown's
    grace counts from then, start-up included."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.at: float | None = None
        self.previous = signal.signal(signal.SIGTERM, self._caught)

    def _caught(self, *_) -> None:
        if self.at is None:
            self.at = time.monotonic()
        self.event.set()

    def deadline(self, grace_s: float) -> float:
        """When a shutdown with ``grace_s`` must be over (``time.monotonic``): ``grace_s`` after the signal, or
        after now when the stop has another cause (Ctrl-C, ``duration``)."""
        return (time.monotonic() if self.at is None else self.at) + grace_s

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)


def serve_until_signal(stop: Callable[[], None], duration: float | None = None,
                       sigterm: Sigterm | None = None) -> None:
    """Block until SIGTERM (caught by ``sigterm`` from its making, or from now), Ctrl-C or ``duration`` seconds, then
    call ``stop`` (which flushes and closes)."""
    term = Sigterm() if sigterm is None else sigterm
    deadline = time.monotonic() + duration if duration else None
    try:
        while not term.event.wait(0.2):
            if deadline is not None and time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        pass
    finally:
        try:
            stop()  # a second SIGTERM meanwhile is caught too: the drain goes on
        finally:
            term.restore()
