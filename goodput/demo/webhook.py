"""A local Alertmanager webhook receiver: keeps what arrives per receiver path and logs pages.

The demo points Alertmanager's pager, ticket and log receivers here (rules/alertmanager.yaml defaults to
http://127.0.0.1:9095/{pager,ticket,log}); tests read ``received`` to see which alert reached which receiver.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable

from goodput.foundation.http import Server, healthz

__all__ = ["MAX_KEPT_ALERTS", "WebhookReceiver"]

MAX_KEPT_ALERTS = 10_000  # per receiver, the newest: Alertmanager repeats a firing group every repeat_interval


class WebhookReceiver:
    def __init__(self, host: str = "127.0.0.1", port: int = 9095, paths: tuple[str, ...] = ("pager", "ticket", "log"),
                 on_alert: Callable[[str, dict], None] | None = None, keep: int = MAX_KEPT_ALERTS) -> None:
        # receiver -> its newest ``keep`` alerts (Alertmanager v4 payload items): a receiver left running for days,
        # or a client posting in a loop, holds a bounded amount
        self.received: dict[str, deque[dict]] = defaultdict(lambda: deque(maxlen=keep))
        self.lock = threading.Lock()
        self.on_alert = on_alert
        routes = {("POST", f"/{p}"): self._route(p) for p in paths}
        routes[("GET", "/healthz")] = healthz
        self.server = Server(host, port, routes)

    def _route(self, receiver: str):
        def handle(h, body: bytes):
            try:
                alerts = json.loads(body)["alerts"]
            except (ValueError, KeyError, TypeError, RecursionError):
                alerts = None
            if not isinstance(alerts, list) or not all(isinstance(a, dict) for a in alerts):
                return 400, "text/plain", b"expected an Alertmanager webhook payload (an object with an alerts list)\n", {}
            with self.lock:
                self.received[receiver].extend(alerts)
            if self.on_alert is not None:
                for a in alerts:
                    self.on_alert(receiver, a)
            return 200, "text/plain", b"ok\n", {}

        return handle

    def alerts(self, receiver: str, alertname: str | None = None, status: str = "firing") -> list[dict]:
        with self.lock:
            return [a for a in self.received[receiver] if a.get("status") == status
                    and (alertname is None or (a.get("labels") or {}).get("alertname") == alertname)]

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> WebhookReceiver:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
