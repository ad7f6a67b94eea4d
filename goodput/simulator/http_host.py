"""One asyncio event loop in one thread that serves every replica's aiohttp application on its own port.

Listening sockets get a real backlog (``BACKLOG``) and HTTP/1.1 keep-alive. A connection that sends no
complete request within ``idle_timeout_s`` is closed (aiohttp's keep-alive timer starts when the
connection opens), so stalled clients cannot pile up; handlers are cancelled when their client goes away.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
from collections.abc import Coroutine

from aiohttp import web

from goodput.foundation.errors import ConfigError

__all__ = ["BACKLOG", "HttpHost", "Site"]

log = logging.getLogger(__name__)

BACKLOG = 4096


class Site:
    """One listening application; ``HttpHost.remove`` stops it."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self.runner, self.host, self.port = runner, host, port


class HttpHost:
    def __init__(self, idle_timeout_s: float = 15.0, shutdown_timeout_s: float = 1.0,
                 send_buffer_bytes: int | None = None) -> None:
        """``send_buffer_bytes``: the kernel send buffer of every connection (default: the kernel's autotuning)."""
        self.idle_timeout_s = idle_timeout_s
        self.send_buffer_bytes = send_buffer_bytes
        self.shutdown_timeout_s = shutdown_timeout_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="http", daemon=True)
        self.sites: list[Site] = []
        self.removing: list[concurrent.futures.Future] = []

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        self.thread.start()

    def call(self, coro: Coroutine, timeout: float = 10.0):
        """Run ``coro`` on the loop from another thread and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _add(self, app: web.Application, host: str, port: int) -> Site:
        runner = web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=self.idle_timeout_s,
                               shutdown_timeout=self.shutdown_timeout_s, handler_cancellation=True)
        await runner.setup()
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.send_buffer_bytes:  # accepted connections inherit it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            sock.bind((host, port))
            await web.SockSite(runner, sock, backlog=BACKLOG).start()
        except (OSError, OverflowError) as e:  # in use, not ours to bind, beyond 65535, not an address
            sock.close()
            await runner.cleanup()
            raise ConfigError(f"{host}:{port}", "", f"cannot listen: {getattr(e, 'strerror', None) or e}") from None
        return Site(runner, host, port)

    def add(self, app: web.Application, host: str, port: int) -> Site:
        """Serve ``app`` on ``host:port`` (ConfigError when the port cannot be had)."""
        site = self.call(self._add(app, host, port))
        self.sites.append(site)
        return site

    def remove(self, site: Site) -> None:
        """Stop listening and close the site's connections, in the background (the caller may hold a lock that
        the site's handlers need); ``settle`` waits for it."""
        if site in self.sites:
            self.sites.remove(site)
            self.removing = [f for f in self.removing if not f.done()]
            self.removing.append(asyncio.run_coroutine_threadsafe(site.runner.cleanup(), self.loop))

    def settle(self) -> None:
        """Wait until every removed site has stopped listening and closed its connections, so that whoever lost
        a replica finds its port closed (call it without holding a lock the handlers need)."""
        pending, self.removing = self.removing, []
        for f in pending:
            try:
                f.result(self.shutdown_timeout_s + 5)
            # the future re-raises whatever aiohttp's cleanup raised: one that failed or hung still leaves the fleet serving
            except Exception as e:  # noqa: BLE001 - any error of a background cleanup is logged, never the caller's
                log.debug("http host remove: %s", e)

    async def _close_all(self) -> None:
        sites, self.sites = self.sites, []
        await asyncio.gather(*(s.runner.cleanup() for s in sites), return_exceptions=True)

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        try:
            self.call(self._close_all(), timeout=self.shutdown_timeout_s + 5)
        except (TimeoutError, RuntimeError) as e:
            log.debug("http host close: %s", e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
