"""The small HTTP face every exporter shares: ``/metrics``, ``/healthz``, extra routes, clean SIGTERM.

Binds 127.0.0.1 unless told otherwise. Handlers are plain callables returning (status, content type,
body, headers), so exporters stay testable without a server.
"""

from __future__ import annotations

import gzip
import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from goodput.foundation.errors import ConfigError

__all__ = ["METRICS_CONTENT_TYPE", "Response", "Route", "Server", "healthz", "metrics_routes", "serve_until_signal"]

# the Prometheus text exposition format, version 0.0.4
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Response = tuple[int, str, bytes, dict[str, str]]
Route = Callable[[BaseHTTPRequestHandler, bytes], Response]


def healthz(h: BaseHTTPRequestHandler, body: bytes) -> Response:
    return 200, "text/plain", b"ok\n", {}


def metrics_routes(render: Callable[[], str]) -> dict[tuple[str, str], Route]:
    """The two routes every exporter serves; ``render`` runs per scrape so each scrape sees fresh values."""
    return {("GET", "/metrics"): lambda h, b: (200, METRICS_CONTENT_TYPE, render().encode(), {}),
            ("GET", "/healthz"): healthz}


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    server_version = "goodput-exporter/0.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature of the base class
        pass

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        route = self.server.routes.get((method, path))
        if route is None:
            allowed = [m for (m, p) in self.server.routes if p == path]
            status = 405 if allowed else 404
            self._reply((status, "text/plain", f"{status} {path}\n".encode(), {}))
            return
        body = b""
        if method == "POST":
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                self._reply((400, "text/plain", b"bad Content-Length\n", {}))
                return
            if length > self.server.max_body_bytes:
                self.rfile.read(min(length, self.server.max_body_bytes))
                self._reply((413, "text/plain", f"body over {self.server.max_body_bytes} bytes\n".encode(),
                             {"Connection": "close"}))
                return
            body = self.rfile.read(length)
        try:
            self._reply(route(self, body))
        except Exception as e:  # a failing route answers 500; the server keeps serving
            self._reply((500, "text/plain", f"internal error: {type(e).__name__}: {e}\n".encode(), {}))

    def _reply(self, resp: Response) -> None:
        status, ctype, body, headers = resp
        if len(body) > 1024 and "gzip" in (self.headers.get("Accept-Encoding") or ""):
            body = gzip.compress(body, 1)
            headers = {**headers, "Content-Encoding": "gzip"}
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
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, routes: dict[tuple[str, str], Route],
                 max_body_bytes: int = 16 * 1024 * 1024) -> None:
        self.routes = routes
        self.max_body_bytes = max_body_bytes
        try:
            super().__init__((host, port), _Handler)
        except OSError as e:
            raise ConfigError(f"{host}:{port}", "", f"cannot listen: {e.strerror or e}") from None
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Server:
        self.thread = threading.Thread(target=self.serve_forever, name=f"http-{self.server_address[1]}", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
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
