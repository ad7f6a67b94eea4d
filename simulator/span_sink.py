"""Where the live fleet's request spans go: an OTLP/HTTP endpoint, a JSON lines file, or both.

A background thread batches finished requests once a second, in goodput's span shape, vLLM's or both
(``span_format``, simulator/spans.py). Sending retries on connection errors
and on 429/503 (honouring Retry-After); the buffer is bounded, and what it must give up is counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

import httpx

from goodput.foundation.errors import ConfigError
from simulator.config import FleetConfig
from simulator.records import RequestTable
from simulator.request import Request
from simulator.spans import SPAN_FORMATS, span_documents

__all__ = ["SpanSink"]

log = logging.getLogger(__name__)


class SpanSink:
    def __init__(self, cfg: FleetConfig, seed: int, endpoint: str | None, path: Path | None,
                 max_buffered_docs: int = 1000, interval_s: float = 1.0, base_ns: int | None = None,
                 span_format: str = "goodput") -> None:
        if span_format not in SPAN_FORMATS:
            raise ConfigError("--span-format", span_format, f"must be one of {', '.join(SPAN_FORMATS)}")
        self.cfg, self.seed, self.span_format = cfg, seed, span_format
        self.base_ns = base_ns if base_ns is not None else time.time_ns()  # virtual second 0 = now
        self.endpoint, self.path = endpoint, path
        self.pending: list[Request] = []
        self.docs: deque[str] = deque()
        self.max_docs = max_buffered_docs
        self.dropped_docs = 0
        self.sent_docs = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.interval = interval_s
        self.client = httpx.Client(timeout=5.0) if endpoint else None
        self.thread = threading.Thread(target=self._loop, name="span-sink", daemon=True)

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint or self.path)

    def start(self) -> None:
        if self.enabled:
            self.thread.start()

    def add(self, reqs: list[Request]) -> None:
        if self.enabled and reqs:
            with self.lock:
                self.pending.extend(reqs)

    def _render(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        if not batch:
            return
        table = RequestTable(self.cfg, batch, self.seed, base_ns=self.base_ns, run_id=str(self.base_ns))
        docs = list(span_documents(table, service="goodput-fleet", span_format=self.span_format))
        if self.path is not None:
            with open(self.path, "a") as f:
                for d in docs:
                    f.write(d + "\n")
        if self.endpoint:
            self.docs.extend(docs)
            while len(self.docs) > self.max_docs:
                self.docs.popleft()
                self.dropped_docs += 1

    def _send(self) -> None:
        while self.docs and not self.stop.is_set():
            doc = self.docs[0]
            try:
                r = self.client.post(self.endpoint, content=doc, headers={"Content-Type": "application/json"})
            except httpx.HTTPError as e:
                log.debug("span export failed: %s", e)
                return
            if r.status_code in (429, 503):
                time.sleep(min(5.0, float(r.headers.get("Retry-After", "1") or 1)))
                return
            self.docs.popleft()
            if r.status_code >= 400:
                log.warning("span export rejected (%s): %s", r.status_code, r.text[:200])
                self.dropped_docs += 1
            else:
                self.sent_docs += 1

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            self._render()
            if self.endpoint:
                self._send()

    def close(self) -> None:
        """Flush what is buffered (one last attempt) and stop. A second close flushes what was added since (a
        fleet that is stopped, then closed, hands over its last requests in between)."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        self._render()
        if self.endpoint:
            if self.client.is_closed:
                self.client = httpx.Client(timeout=5.0)
            self.stop.clear()
            self._send()
            self.client.close()
