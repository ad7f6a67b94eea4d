"""The live fleet's admin API, for fault injection in load tests: lose a replica, add one, list them.

Served on its own port (``fleet serve --admin-port``). Anyone who can reach it can take the fleet down, so
every request is checked before a handler runs:

- without a token (the default, for a fleet bound to loopback) only loopback peers are answered, and since a
  web page in a browser on this machine is a loopback peer too: a request with an ``Origin`` header that is
  not the API's own is refused (cross-origin ``fetch``, even ``mode: 'no-cors'``), a ``Host`` that is not a
  loopback name or the bind address is refused (DNS rebinding: ``evil.example`` resolving to 127.0.0.1), and a
  POST must say ``Content-Type: application/json`` (which a page cannot send without a CORS preflight, which
  is never granted);
- with a token (``--admin-token`` / ``GOODPUT_ADMIN_TOKEN``, required when bound anywhere but loopback) any
  peer may call, with ``Authorization: Bearer TOKEN``; the Origin and Content-Type checks still apply.

Fleet changes take the fleet's lock and may start a listener, so they run in a worker thread, never on the
event loop that serves the replicas.

    GET  /admin/replicas                          every replica: deployment, index, name, url, alive
    POST /admin/replicas/{deployment}/lose        ?replica=N (default: the highest-numbered alive one)
    POST /admin/replicas/{deployment}/add         ?cold_start_s=S (default: drawn from the deployment's cold_start, else 0)
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import math
from typing import Protocol

from aiohttp import web

__all__ = ["TOKEN_ENV", "AdminBackend", "AdminError", "is_loopback", "make_admin_app"]

TOKEN_ENV = "GOODPUT_ADMIN_TOKEN"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class AdminError(Exception):
    """A fleet change that cannot be made; ``status`` is the HTTP answer (404 unknown, 409 conflict)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class AdminBackend(Protocol):
    """What the admin API needs from the live fleet (the methods block; they run in a worker thread)."""

    def replicas(self) -> list[dict]: ...

    def lose_replica(self, deployment: str, index: int | None) -> dict: ...

    def add_replica(self, deployment: str, cold_start_s: float | None) -> dict: ...


def is_loopback(peer: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; False for anything else, unparsable or absent."""
    try:
        ip = ipaddress.ip_address((peer or "").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


def _host_port(value: str) -> tuple[str, int | None]:
    """``Host`` (or an origin's authority) as (lowercased name, port or None); ("", None) if unparsable."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8080
        name, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        name, _, port = value.partition(":")
    if port and not port.isdigit():
        return "", None
    return name, int(port) if port else None


def _guard(bind_host: str, token: str | None):
    allowed = LOOPBACK_NAMES | {bind_host.strip("[]").lower()}

    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
        port = sock[1] if sock else None
        if token is None:
            if not is_loopback(request.remote):
                return _error(403, f"the admin API answers loopback peers only, not {request.remote} "
                                   f"(or set a token: --admin-token / {TOKEN_ENV})")
            name, hport = _host_port(request.headers.get("Host", ""))
            if name not in allowed or hport not in (None, port):
                return _error(403, f"Host {request.headers.get('Host', '')!r} is not this admin API "
                                   f"(one of {', '.join(sorted(allowed))} on port {port})")
        elif not hmac.compare_digest(request.headers.get("Authorization", "").encode(), f"Bearer {token}".encode()):
            return _error(401, "the admin API needs Authorization: Bearer <the --admin-token>")
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"http://{request.headers.get('Host', '')}":
            return _error(403, f"cross-origin request from {origin!r} refused")
        if request.method == "POST" and request.content_type != "application/json":
            return _error(415, f"Content-Type must be application/json, not {request.content_type!r}")
        try:
            return await handler(request)
        except AdminError as e:
            return _error(e.status, str(e))

    return guard


def make_admin_app(backend: AdminBackend, bind_host: str = "127.0.0.1", token: str | None = None) -> web.Application:
    """The admin application for a fleet bound on ``bind_host``; ``token``: see the module docstring."""
    async def run(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def replicas(request: web.Request) -> web.Response:
        return web.json_response({"replicas": await run(backend.replicas)})

    async def lose(request: web.Request) -> web.Response:
        raw = request.query.get("replica")
        try:
            index = None if raw is None else int(raw)
        except ValueError:
            return _error(400, f"replica: not an integer: {raw!r}")
        return web.json_response(await run(backend.lose_replica, request.match_info["deployment"], index))

    async def add(request: web.Request) -> web.Response:
        raw = request.query.get("cold_start_s")
        try:
            cold = None if raw is None else float(raw)
        except ValueError:
            cold = math.nan
        if cold is not None and (not math.isfinite(cold) or cold < 0):
            return _error(400, f"cold_start_s: must be a number >= 0, got {raw!r}")
        return web.json_response(await run(backend.add_replica, request.match_info["deployment"], cold))

    app = web.Application(middlewares=[_guard(bind_host, token)])
    app.router.add_get("/admin/replicas", replicas)
    app.router.add_post("/admin/replicas/{deployment}/lose", lose)
    app.router.add_post("/admin/replicas/{deployment}/add", add)
    return app
