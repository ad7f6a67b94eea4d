"""The live fleet's admin API, for fault injection in load tests: lose a replica, add one, list them.

Served on its own port (``fleet serve --admin-port``) and answered only for loopback peers: anyone who
can reach it can take the fleet down, so a peer that is not this machine gets 403 whatever the bind
address. Fleet changes take the fleet's lock and may start a listener, so they run in a worker thread,
never on the event loop that serves the replicas.

    GET  /admin/replicas                          every replica: deployment, index, name, url, alive
    POST /admin/replicas/{deployment}/lose        ?replica=N (default: the highest-numbered alive one)
    POST /admin/replicas/{deployment}/add         ?cold_start_s=S (default 0)
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
from typing import Protocol

from aiohttp import web

__all__ = ["AdminBackend", "AdminError", "is_loopback", "make_admin_app"]


class AdminError(Exception):
    """A fleet change that cannot be made; ``status`` is the HTTP answer (404 unknown, 409 conflict)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class AdminBackend(Protocol):
    """What the admin API needs from the live fleet (the methods block; they run in a worker thread)."""

    def replicas(self) -> list[dict]: ...

    def lose_replica(self, deployment: str, index: int | None) -> dict: ...

    def add_replica(self, deployment: str, cold_start_s: float) -> dict: ...


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


@web.middleware
async def _loopback_only(request: web.Request, handler) -> web.StreamResponse:
    if not is_loopback(request.remote):
        return _error(403, f"the admin API answers loopback peers only, not {request.remote}")
    try:
        return await handler(request)
    except AdminError as e:
        return _error(e.status, str(e))


def make_admin_app(backend: AdminBackend) -> web.Application:
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
        raw = request.query.get("cold_start_s", "0")
        try:
            cold = float(raw)
        except ValueError:
            cold = math.nan
        if not math.isfinite(cold) or cold < 0:
            return _error(400, f"cold_start_s: must be a number >= 0, got {raw!r}")
        return web.json_response(await run(backend.add_replica, request.match_info["deployment"], cold))

    app = web.Application(middlewares=[_loopback_only])
    app.router.add_get("/admin/replicas", replicas)
    app.router.add_post("/admin/replicas/{deployment}/lose", lose)
    app.router.add_post("/admin/replicas/{deployment}/add", add)
    return app
