"""A slow-client (slowloris) attack for the server tests: many connections that each trickle a header line every
few seconds from a handful of loopback addresses, reconnecting whenever the server drops them."""

import selectors
import socket
import threading
import time

SOURCES = [f"127.0.0.{i}" for i in range(2, 7)]  # 60 per peer address: under the per-peer share, over the cap


class SlowLoris:
    """``n`` connections to ``addr`` from one thread, each sending ``start`` then a header line every ``trickle_s``,
    reconnecting at its next tick whenever the server closed it; counts how many are open and the reconnects."""

    def __init__(self, addr: tuple[str, int], start: bytes, n: int, trickle_s: float = 2.0) -> None:
        self.addr, self.start, self.n, self.trickle_s = addr, start, n, trickle_s
        self.stop = threading.Event()
        self.open = 0
        self.reconnects = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self, i: int) -> socket.socket | None:
        try:
            s = socket.create_connection(self.addr, timeout=2, source_address=(SOURCES[i % len(SOURCES)], 0))
            s.sendall(self.start)
            s.setblocking(False)
            return s
        except OSError:
            return None

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        socks: list[socket.socket | None] = [None] * self.n
        tick = 0
        try:
            while not self.stop.is_set() and tick < 1000:  # bounded: the test stops it long before
                for i in range(self.n):
                    s = socks[i]
                    if s is not None:
                        try:
                            s.sendall(b"X-Trickle-%d: y\r\n" % tick)
                            continue
                        except OSError:
                            sel.unregister(s)
                            s.close()
                    socks[i] = s = self._connect(i)
                    if s is not None:
                        sel.register(s, selectors.EVENT_READ, i)
                        self.reconnects += tick > 0
                self.open = sum(s is not None for s in socks)
                tick += 1
                until = time.monotonic() + self.trickle_s
                while (left := until - time.monotonic()) > 0 and not self.stop.is_set():
                    for key, _ in sel.select(min(left, 0.2)):  # the server closed it: reconnect at the next tick
                        s = key.fileobj
                        try:
                            if s.recv(4096):
                                continue
                        except BlockingIOError:
                            continue
                        except OSError:
                            pass
                        sel.unregister(s)
                        s.close()
                        socks[key.data] = None
        finally:
            for s in socks:
                if s is not None:
                    s.close()

    def __enter__(self) -> "SlowLoris":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
